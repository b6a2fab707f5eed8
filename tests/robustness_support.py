"""Shared by the robustness, fix-safety and no-execution tests: what "trainlint handled this
file" means, checked the same way for every generated, mutated and pathological input.

Everything here is driven by the registry and the fixture folders: a rule added with fixtures is
covered with no change to the tests.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from fixture_support import FIXTURES, REPO
from trainlint import cli
from trainlint.config import Settings
from trainlint.files import discover
from trainlint.rules import all_rules

# A TRL001 on a file that Python itself accepts must say why trainlint did not analyse it (too
# deep, too large, a parser failure).
NOT_ANALYSED = ("nested", "trainlint's parser", "skipped:")


def registry_codes() -> frozenset:
    return frozenset(all_rules())


def marker_header() -> str:
    """Lines that make every rule's cheap pre-parse filter (`Rule.markers`) match, so that
    generated code reaches the parser and every rule instead of being skipped as irrelevant."""
    markers = sorted({m for rule in all_rules().values() for m in rule.markers})
    return "import torch\n" + "".join(f"# {m}\n" for m in markers if "\n" not in m)


def fixture_files() -> List[Path]:
    """Every file trainlint would check under fixtures/ and examples/ (whatever suffixes the file
    discovery accepts: .py now, notebooks as soon as they are analysed)."""
    settings = Settings(root=REPO)
    settings.respect_gitignore = False  # type: ignore[attr-defined]
    found = discover([FIXTURES, REPO / "examples"], settings)
    return sorted(path.resolve() for path, _ in found.files)


def fixture_id(path: Path) -> str:
    return str(path.relative_to(REPO))


# -- time limits ---------------------------------------------------------------------------------


class Hang(AssertionError):
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than `seconds`."""
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - Windows: no in-process limit
        yield
        return

    def expired(signum, frame):
        raise Hang(f"{what}: still running after {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- running trainlint ---------------------------------------------------------------------------


def run_main(args: Sequence[str], cwd: Path, seconds: float = 60) -> Tuple[int, str, str]:
    """`trainlint ARGS` in this process: (exit code, stdout, stderr). Any exception escaping
    `main` is a failure of the test (a user would see a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with time_limit(seconds, f"trainlint {' '.join(args)}"):
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(list(args))
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


def run_subprocess(
    args: Sequence[str], cwd: Path, seconds: float = 300, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """`python -m trainlint ARGS` in a child process, killed after `seconds` (a hang fails the
    test with a clear message instead of blocking the suite)."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    try:
        return subprocess.run(
            [sys.executable, "-m", "trainlint", *map(str, args)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=seconds,
            env=full_env,
        )
    except subprocess.TimeoutExpired as exc:
        raise Hang(f"trainlint {' '.join(map(str, args))}: no answer after {seconds}s") from exc


# -- what a correct outcome looks like -----------------------------------------------------------


def python_verdict(data: bytes, suffix: str = ".py") -> Optional[str]:
    """None when Python accepts these bytes as a module (encoding included), else why not.
    Only meaningful for .py files."""
    if suffix != ".py":
        return None
    try:
        compile(data, "<case>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def strictly_decodable(data: bytes) -> bool:
    """The bytes decode without error in the encoding Python detects (BOM, cookie, UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return False
    return True


def assert_clean_outcome(
    code: int, out: str, err: str, data: bytes, suffix: str, what: str
) -> List[dict]:
    """The checks every case must pass, whatever the input: exit code 0 or 1 that agrees with
    the findings, nothing on stderr (no traceback, no internal error), only registered codes,
    positions inside the file, and TRL001 exactly when Python rejects the file (or a message
    that says why trainlint did not analyse a file Python accepts)."""
    assert "Traceback" not in err and "Traceback" not in out, f"{what}: traceback\n{err}"
    assert err == "", f"{what}: unexpected stderr (exit {code}):\n{err[-3000:]}"
    assert code in (0, 1), f"{what}: exit code {code}"
    findings = json.loads(out)
    assert (code == 1) == bool(findings), f"{what}: exit {code} with {len(findings)} findings"
    codes = registry_codes()
    rows = data.count(b"\n") + data.count(b"\r") + 2
    for finding in findings:
        assert finding["code"] in codes, finding
        assert isinstance(finding["message"], str) and finding["message"].strip(), finding
        loc, end = finding["location"], finding["end_location"]
        assert loc["row"] >= 1 and loc["column"] >= 1, finding
        if suffix == ".py":
            assert loc["row"] <= rows, (rows, finding)
        assert (end["row"], end["column"]) >= (loc["row"], loc["column"]) or finding[
            "code"
        ] == "TRL001", finding
    syntax = [f for f in findings if f["code"] == "TRL001"]
    if suffix == ".py":
        rejected = python_verdict(data, suffix)
        if rejected is not None:
            assert syntax, f"{what}: Python rejects the file ({rejected}) but no TRL001"
        else:
            allowed = NOT_ANALYSED
            if not strictly_decodable(data):
                # CPython (3.11) skips comments without decoding them, so a stray invalid byte in
                # a comment runs; trainlint reads the whole file as text and says it cannot.
                allowed = allowed + ("cannot decode",)
            for finding in syntax:
                assert any(
                    word in finding["message"] for word in allowed
                ), f"{what}: TRL001 on a file Python accepts: {finding['message']}"
    return findings


def check_bytes(
    directory: Path,
    name: str,
    data: bytes,
    *,
    fix: bool = False,
    seconds: float = 60,
    max_file_size: Optional[int] = None,
) -> List[dict]:
    """Write `data` as `name` in `directory`, run `trainlint --select ALL` on it (and with
    `--fix --unsafe-fixes` when `fix`), and assert a clean outcome. Returns the findings.
    `max_file_size`: the setting to run with (None: no configuration, the default)."""
    path = directory / name
    path.write_bytes(data)
    suffix = path.suffix
    if max_file_size is None:
        configuration = ["--isolated"]
    else:
        (directory / "limits.toml").write_text(f"max-file-size = {max_file_size}\n")
        configuration = ["--config", str(directory / "limits.toml")]
    args = [*configuration, "--select", "ALL", "--output-format", "json", name]
    code, out, err = run_main(args, directory, seconds)
    findings = assert_clean_outcome(code, out, err, data, suffix, f"{name} ({len(data)} bytes)")
    if fix:
        code, out, err = run_main(["--fix", "--unsafe-fixes", *args], directory, seconds)
        fixed = path.read_bytes()
        what = f"{name} after --fix"
        assert "rolled back" not in err, f"{what}: a fix broke the file:\n{err}"
        assert_clean_outcome(code, out, err, fixed, suffix, what)
        if python_verdict(data, suffix) is None:
            assert python_verdict(fixed, suffix) is None, f"{what}: no longer parses"
        elif fixed != data:
            raise AssertionError(f"{what}: a file Python rejects was changed")
    return findings
