"""`trainlint check --show-settings`: the settings a check would run with, and where each came
from (a configuration file, a command-line option, or the default), as TOML a user can paste
into `[tool.trainlint]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, TextIO

from ..config import Settings
from .options import EXIT_CLEAN, CheckOptions, settings_for

# The keys of [tool.trainlint] and the Settings attribute each is read into.
_FIELDS = (
    ("select", "select"),
    ("extend-select", "extend_select"),
    ("ignore", "ignore"),
    ("per-file-ignores", "per_file_ignores"),
    ("exclude", "exclude"),
    ("extend-exclude", "extend_exclude"),
    ("force-exclude", "force_exclude"),
    ("respect-gitignore", "respect_gitignore"),
    ("unsafe-fixes", "unsafe_fixes"),
    ("preview", "preview"),
    ("max-file-size", "max_file_size"),
    ("per-file-timeout", "per_file_timeout"),
    ("python", "python"),
)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def settings_lines(settings: Settings) -> List[str]:
    from ..selection import Selection

    found = settings.config_path
    lines = [
        f"# configuration: {found if found is not None else 'none found (defaults)'}",
        f"# project root: {settings.root}",
    ]
    for key, attribute in _FIELDS:
        value = getattr(settings, attribute)
        origin = settings.origins.get(key, "default")
        if value is None and key == "python":
            lines.append("# python: not set ($VIRTUAL_ENV, else the interpreter running trainlint)")
            continue
        if value is None:  # select not given: the default set
            lines.append(f"# {key}: not set, so the rules that are on by default  # {origin}")
            continue
        lines.append(f"{key} = {toml_value(value)}  # {origin}")
    for key, value in sorted(settings.options.items()):
        lines.append(f"{key} = {toml_value(value)}  # {settings.origins.get(key, 'default')}")
    enabled = sorted(Selection.of(settings).enabled)
    lines.append(f"# rules enabled ({len(enabled)}): {' '.join(enabled) or 'none'}")
    lines.extend(environment_lines(settings))
    return lines


def environment_lines(settings: Settings) -> List[str]:
    """Which environment's installed packages the project rules read, and which of the
    frameworks they reason about it has (environment.py; nothing is imported)."""
    from ..environment import ModuleFinder, find_environment

    origin = settings.origins.get("python", "python setting")
    environment = find_environment(settings.python, origin)
    lines = [f"# installed packages read from: {environment.describe()}"]
    if environment.problem:
        return lines
    found = ModuleFinder(environment).frameworks()
    names = ", ".join(f"{name} {version or '(version unknown)'}" for name, version in found)
    lines.append(f"# frameworks visible: {names or 'none'}")
    return lines


def show_settings(options: CheckOptions, out: TextIO) -> int:
    paths = [Path(p) for p in options.paths if p != "-"] or [Path(".")]
    if options.stdin_filename:
        paths = [Path(options.stdin_filename)]
    for line in settings_lines(settings_for(options, paths)):
        print(line, file=out)
    return EXIT_CLEAN
