"""Proof by execution for fixes: the fixture scripts, run before and after `--fix` (and
`--fix --unsafe-fixes`) with every rule selected, must not fail in a new way.

- The cases are every fixture that has a fix: fixtures/rules/<CODE>/<name>.py (and .ipynb) with
  a golden beside it, and fixtures/oracle/<CODE>/{bad,good}.py. A case whose fixes change
  nothing is skipped at run time.
- Each script runs in a child forked from one server process per test process
  (fix_execution_runner/cuda_standin.py: torch is imported once), under two configurations:
  `cpu` (plain CPU PyTorch, as on a machine without a GPU) and `cuda2` (the CUDA stand-in with
  two devices). The environment is a torchrun launch of world size 1 (RANK=0, WORLD_SIZE=1,
  LOCAL_RANK=0, MASTER_ADDR=127.0.0.1, a free MASTER_PORT); the network is refused except
  loopback; each run has a time limit.
- Verdict (`new_failure`): the fixed script fails where the original did not, or fails with an
  error of another type or message class (first message line, addresses and the run's folder
  made constant). Running into the same error as the original is no new failure.
- A configuration is *executable* when the original reaches its end or a failure that is not
  one of the reasons in `not_executable` (a module that is neither installed nor shipped with
  the fixture, a data file or folder it does not ship, the network, the time limit). The run
  also records which lines of the fixed script ran: a fix is *reached* when every changed hunk
  has a line that ran.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fixture_support import ORACLE, RULE_FIXTURES, golden_for, lint
from trainlint.rules import all_rules
from trainlint.source import Source

RUNNER_DIR = Path(__file__).resolve().parent / "fix_execution_runner"
RUNNER = RUNNER_DIR / "cuda_standin.py"
TIME_LIMIT = 15.0  # seconds a script may run (a fixture that trains for real is not executable)
CONFIGS = {"cpu": (0, {}), "cuda2": (2, {})}
VARIANTS = ("safe", "unsafe")
# `# fix-execution: gpus=2 LOCAL_RANK=3` in a fixture adds a configuration: that many stand-in
# GPUs and those environment variables (a process the launcher started beyond the GPU count).
# Any such line (`# fix-execution: run` adds no configuration) also makes the fixture a case when
# it has no golden: a script whose fix is withheld still runs, to show it runs.
DIRECTIVE = re.compile(r"^#\s*fix-execution:\s*(?P<settings>.+?)\s*$", re.MULTILINE)


def configurations(text: str) -> Dict[str, Tuple[int, Dict[str, str]]]:
    found = dict(CONFIGS)
    for match in DIRECTIVE.finditer(text):
        gpus, env = 0, {}
        if match.group("settings") == "run":
            continue
        for item in match.group("settings").split():
            key, _, value = item.partition("=")
            if key == "gpus":
                gpus = int(value)
            else:
                env[key] = value
        found[match.group("settings")] = (gpus, env)
    return found


@dataclass(frozen=True)
class FixCase:
    """A fixture that fixes may change: one script, or a project folder (its top-level scripts
    are run, with the folder on the import path)."""

    code: str  # the rule folder it lives in (fixtures/rules/<CODE> or fixtures/oracle/<CODE>)
    path: Path

    @property
    def id(self) -> str:
        kind = "oracle" if ORACLE in self.path.parents else "rules"
        return f"{kind}/{self.code}/{self.path.name}"

    @property
    def opted_in(self) -> bool:
        """Marked to run even when no fix changes it (`# fix-execution:`)."""
        if self.path.is_dir() or self.path.suffix != ".py":
            return False
        return bool(DIRECTIVE.search(self.path.read_text(encoding="utf-8")))

    def files(self) -> Dict[str, Path]:
        """What is copied to run it: relative name -> file."""
        if self.path.is_dir():
            return {
                str(p.relative_to(self.path)): p
                for p in sorted(self.path.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts
            }
        if ORACLE in self.path.parents:  # an oracle folder ships its helper modules
            return {p.name: p for p in sorted(self.path.parent.iterdir()) if p.is_file()}
        return {self.path.name: self.path}

    def scripts(self) -> List[str]:
        """The relative names of the files run as scripts."""
        if self.path.is_dir():
            return sorted(p.name for p in self.path.glob("*.py"))
        return [self.path.name]


def fix_cases() -> List[FixCase]:
    cases: List[FixCase] = []
    if RULE_FIXTURES.is_dir():
        for code_dir in sorted(p for p in RULE_FIXTURES.iterdir() if p.is_dir()):
            for path in sorted(code_dir.iterdir()):
                if path.is_dir() and not path.name.startswith((".", "__")):
                    cases.append(FixCase(code_dir.name, path))
                    continue
                if not path.is_file() or path.suffix not in (".py", ".ipynb"):
                    continue
                if path.name.endswith((".fixed.py", ".unsafe.py", ".fixed.ipynb", ".unsafe.ipynb")):
                    continue
                case = FixCase(code_dir.name, path)
                if golden_for(path, False).exists() or golden_for(path, True).exists():
                    cases.append(case)
                elif case.opted_in:
                    cases.append(case)
    if ORACLE.is_dir():
        for case_dir in sorted(p for p in ORACLE.iterdir() if p.is_dir()):
            for name in ("bad.py", "good.py"):
                if (case_dir / name).is_file():
                    cases.append(FixCase(case_dir.name, case_dir / name))
    return cases


@dataclass
class Fixed:
    """The texts fixes of one variant changed (relative name -> text as run), and the codes
    whose fixes were applied."""

    texts: Dict[str, str]
    codes: Tuple[str, ...]


def script_text(path: Path, data: bytes) -> str:
    """What runs: the file's text, or a notebook's code cells joined (magics masked)."""
    return Source.from_bytes(path.name, data).text


def runnable_name(name: str) -> str:
    """A notebook runs as the .py file of its code cells."""
    return name[: -len(".ipynb")] + ".py" if name.endswith(".ipynb") else name


def apply_all_fixes(case: FixCase, unsafe: bool) -> Fixed:
    """Every rule selected, fixes applied in memory (nothing is written)."""
    root = case.path if case.path.is_dir() else case.path.parent
    result = lint([case.path], sorted(all_rules()), root=root, fix=True, unsafe=unsafe, diff=True)
    assert not result.errors, result.errors
    assert not result.crashes, [c.describe() for c in result.crashes]
    changed = {display: new for display, _, new in result.changed}
    texts: Dict[str, str] = {}
    codes = set()
    for display, state in result.states.items():
        if display not in changed:
            continue
        name = str(state.path.relative_to(root)) if case.path.is_dir() else state.path.name
        texts[runnable_name(name)] = script_text(state.path, changed[display].encode("utf-8"))
        codes.update(d.code for d in state.applied)
    return Fixed(texts, tuple(sorted(codes)))


def rows_in_original(old: str, new: str) -> Dict[int, int]:
    """Row of the new text -> the row of the old text it stands for (a changed row: the first
    row of the old lines it replaced, or the row before an insertion)."""
    mapping: Dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            mapping[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else (i1 + 1 if i2 > i1 else i1)
    return mapping


def changed_hunks(old: str, new: str) -> List[List[int]]:
    """For each changed hunk, the 1-based rows of the new text it wrote (code rows only)."""
    new_lines = new.splitlines()
    hunks: List[List[int]] = []
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new_lines, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            rows = [
                j + 1
                for j in range(j1, j2)
                if new_lines[j].strip() and not new_lines[j].strip().startswith("#")
            ]
            if rows:
                hunks.append(rows)
    return hunks


# -- running ------------------------------------------------------------------------------------


@dataclass
class Run:
    outcome: str  # ok | error | exit | timeout
    type: str
    message: str
    row: int
    lines: Dict[str, List[int]]  # relative file name -> rows that ran
    log: str

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"

    def describe(self) -> str:
        if self.outcome == "ok":
            return "ran to the end"
        if self.outcome == "timeout":
            return f"did not finish within {self.message}"
        where = f" (line {self.row})" if self.row else ""
        return f"{self.type}: {self.message}{where}"

    @property
    def failure_class(self) -> Tuple[str, str]:
        """(type, message class). On CPU PyTorch every CUDA call fails, with an AssertionError
        ("Torch not compiled with CUDA enabled"), an AttributeError (a missing `torch._C._cuda_*`
        hook) or, for the NCCL backend, a RuntimeError, depending on the call: one class, "this
        torch has no CUDA"."""
        if any(p.search(f"{self.type}: {self.message}") for p in _NO_CUDA):
            return ("no CUDA", "")
        return (self.type, self.message)

    def same_failure(self, original: "Run", row_in_original: Dict[int, int]) -> bool:
        """The original's failure again: the same type with the same message class, or the same
        type raised by the same statement (its message may name what the fix changed there)."""
        if self.outcome != original.outcome:
            return False
        if self.failure_class == original.failure_class:
            return True
        if self.type != original.type:
            return False
        return bool(self.row) and row_in_original.get(self.row) == original.row


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptRunner:
    """One fork server (a subprocess that imported torch) for this test process."""

    _lock = threading.Lock()
    _server: Optional[subprocess.Popen] = None
    _count = 0

    @classmethod
    def _start(cls) -> subprocess.Popen:
        env = dict(os.environ)
        env["OMP_NUM_THREADS"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
        return subprocess.Popen(
            [sys.executable, "-u", str(RUNNER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    @classmethod
    def run(
        cls,
        script: Path,
        gpus: int,
        extra_env: Optional[Dict[str, str]] = None,
        time_limit: float = TIME_LIMIT,
    ) -> Run:
        env = {
            "PYTHONHASHSEED": "0",
            "PYTHONPATH": os.pathsep.join([str(RUNNER_DIR), str(script.parent)]),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "CUDA_VISIBLE_DEVICES": "",
            "TRAINLINT_FIX_EXEC_GPUS": str(gpus) if gpus else "",
            **(extra_env or {}),
        }
        request = {
            "script": str(script),
            "cwd": str(script.parent),
            "argv": [],
            "env": env,
            "gpus": gpus,
            "timeout": time_limit,
        }
        with cls._lock:
            cls._count += 1
            request["log"] = str(script.with_suffix(f".run{cls._count}.log"))
            if cls._server is None or cls._server.poll() is not None:
                cls._server = cls._start()
            server = cls._server
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            answer = server.stdout.readline()
        if not answer:
            raise RuntimeError("the fix-execution server stopped")
        data = json.loads(answer)
        return Run(
            data["outcome"], data["type"], data["message"], data["row"], data["lines"], data["log"]
        )

    @classmethod
    def stop(cls) -> None:
        with cls._lock:
            if cls._server is not None:
                cls._server.stdin.close()  # type: ignore[union-attr]
                cls._server.wait(timeout=30)
                cls._server = None


_NO_CUDA = (
    re.compile(r"^AssertionError: Torch not compiled with CUDA enabled"),
    re.compile(r"^AttributeError: module 'torch._C' has no attribute '_cuda_"),
    re.compile(r"^RuntimeError: Found no NVIDIA driver"),
    re.compile(r"^RuntimeError: Distributed package doesn't have NCCL built in"),
)
_NETWORK_MESSAGES = ("network access refused", "no internet connection", "urlopen error")
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def not_executable(run: Run) -> Optional[str]:
    """Why the original's run says nothing about the fixes (None: it does)."""
    if run.outcome == "timeout":
        return f"does not finish within {TIME_LIMIT:g} s"
    if run.type == "ModuleNotFoundError":
        match = _MISSING_MODULE.search(run.message)
        name = match.group(1) if match else run.message
        return f"imports {name}, which is neither installed nor part of the fixture"
    if run.type in ("FileNotFoundError", "IsADirectoryError", "NotADirectoryError"):
        return f"reads data the fixture does not ship ({run.message})"
    if any(text in run.message for text in _NETWORK_MESSAGES):
        return "needs the network"
    return None


# -- one case -----------------------------------------------------------------------------------


@dataclass
class ConfigResult:
    """One script of a case under one configuration."""

    config: str  # the configuration, and the script for a project folder
    original: Run
    fixed: Dict[str, Run] = field(default_factory=dict)  # variant -> run of the fixed text
    rows: Dict[str, Dict[int, int]] = field(default_factory=dict)  # variant -> rows_in_original
    reached: Dict[str, bool] = field(default_factory=dict)  # variant -> every hunk ran

    @property
    def reason_not_executable(self) -> Optional[str]:
        return not_executable(self.original)

    def new_failures(self) -> List[str]:
        out = []
        for variant, run in self.fixed.items():
            if run.failed and not run.same_failure(self.original, self.rows[variant]):
                out.append(
                    f"[{self.config}, {variant} fixes] the original {self.original.describe()}; "
                    f"the fixed script {run.describe()}\n{run.log[-1500:]}"
                )
        return out


@dataclass
class CaseResult:
    case: FixCase
    fixed: Dict[str, Fixed]  # variant -> what the fixes changed
    configs: List[ConfigResult]

    @property
    def has_fix(self) -> bool:
        return any(f.codes for f in self.fixed.values())

    def new_failures(self) -> List[str]:
        return [f for c in self.configs for f in c.new_failures()]

    def original_failures(self) -> List[str]:
        """Configurations where the original does not run to its end."""
        return [
            f"[{c.config}] the original {c.original.describe()}\n{c.original.log[-1500:]}"
            for c in self.configs
            if c.original.failed
        ]


_results: Dict[FixCase, CaseResult] = {}
_results_lock = threading.Lock()


def _materialize(case: FixCase, folder: Path, texts: Dict[str, str]) -> None:
    for name, path in case.files().items():
        target = folder / runnable_name(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if name in texts or runnable_name(name) in texts:
            target.write_text(texts[runnable_name(name)], encoding="utf-8")
        elif path.suffix == ".ipynb":
            target.write_text(script_text(path, path.read_bytes()), encoding="utf-8")
        else:
            shutil.copy2(path, target)


def execute(case: FixCase, workdir: Path) -> CaseResult:
    """Fix the case both ways and run the original and fixed scripts under every configuration
    (the result is kept for this test process: the table test reuses it)."""
    with _results_lock:
        if case in _results:
            return _results[case]
    fixed = {v: apply_all_fixes(case, unsafe=(v == "unsafe")) for v in VARIANTS}
    result = CaseResult(case, fixed, [])
    if result.has_fix or case.opted_in:
        originals = {
            runnable_name(name): script_text(path, path.read_bytes())
            for name, path in case.files().items()
            if path.suffix in (".py", ".ipynb")
        }
        variants = [v for v in VARIANTS if fixed[v].codes]
        if variants == ["safe", "unsafe"] and fixed["unsafe"].texts == fixed["safe"].texts:
            variants = ["safe"]  # the same text: one run stands for both
        folders = {"original": workdir / "original"}
        folders.update({v: workdir / v for v in variants})
        _materialize(case, folders["original"], {})
        for variant in variants:
            _materialize(case, folders[variant], fixed[variant].texts)
        for script in map(runnable_name, case.scripts()):
            text = originals[script]
            for config, (gpus, env) in configurations(text).items():
                label = f"{config} {script}" if case.path.is_dir() else config
                original_run = ScriptRunner.run(folders["original"] / script, gpus, env)
                config_result = ConfigResult(label, original_run)
                result.configs.append(config_result)
                if config_result.reason_not_executable is not None:
                    continue
                for variant in variants:
                    texts = fixed[variant].texts
                    rows = rows_in_original(text, texts.get(script, text))
                    run = ScriptRunner.run(folders[variant] / script, gpus, env)
                    if run.failed and not run.same_failure(original_run, rows):
                        # Once more, with time to spare: a busy machine (other test processes)
                        # must not pass for a fix that breaks the script. A real break repeats.
                        run = ScriptRunner.run(folders[variant] / script, gpus, env, 4 * TIME_LIMIT)
                    names = ("safe", "unsafe") if len(variants) == 1 and variant == "safe" and (
                        fixed["unsafe"].codes
                    ) else (variant,)
                    for name in names:
                        config_result.fixed[name] = run
                        config_result.rows[name] = rows
                        config_result.reached[name] = all(
                            set(run.lines.get(changed, ())).intersection(hunk)
                            for changed, new in texts.items()
                            for hunk in changed_hunks(originals[changed], new)
                        )
    with _results_lock:
        _results[case] = result
    return result


def _not_reached(run: Run) -> str:
    if run.outcome == "ok":
        return "ran to the end without running the changed lines (they are not called)"
    return f"stops before the changed lines: {run.describe()}"


# -- the table ----------------------------------------------------------------------------------


def fixable_codes() -> List[str]:
    """Rules that offer a fix (their docs say `Fix: safe/unsafe/sometimes`)."""
    return sorted(code for code, rule in all_rules().items() if (rule.fix or "none") != "none")


# Rules with a fix that no fixture can show running, and why.
NO_EXECUTION = {
    "TRL002": "its fix only deletes codes from a `# noqa` comment (nothing that runs changes); "
    "tests/test_input_habits.py checks it",
}


def executed_rules(results: Sequence[CaseResult]) -> Dict[str, List[str]]:
    """Rule -> the cases where its fix was applied and every changed line ran."""
    found: Dict[str, List[str]] = {}
    for result in results:
        for config in result.configs:
            if config.reason_not_executable is not None:
                continue
            for variant, reached in config.reached.items():
                if reached:
                    for code in result.fixed[variant].codes:
                        found.setdefault(code, [])
                        if result.case.id not in found[code]:
                            found[code].append(result.case.id)
    return found


def table(results: Sequence[CaseResult]) -> str:
    """Per rule with a fix: the cases where its fix was applied and reached at run time, and why
    the others are not executable."""
    per_rule: Dict[str, Dict[str, List[str]]] = {
        code: {"executed": [], "not reached": [], "not executable": []} for code in fixable_codes()
    }
    for result in results:
        codes = sorted({c for f in result.fixed.values() for c in f.codes})
        for code in codes:
            if code not in per_rule:
                continue
            executed = [
                c.config
                for c in result.configs
                if c.reason_not_executable is None
                and any(
                    c.reached.get(v) and code in result.fixed[v].codes for v in c.fixed
                )
            ]
            if executed:
                per_rule[code]["executed"].append(f"{result.case.id} ({', '.join(executed)})")
            elif all(c.reason_not_executable for c in result.configs):
                reasons = sorted({c.reason_not_executable or "" for c in result.configs})
                per_rule[code]["not executable"].append(f"{result.case.id}: {'; '.join(reasons)}")
            else:
                per_rule[code]["not reached"].append(
                    f"{result.case.id}: "
                    + "; ".join(
                        f"{c.config}: "
                        + (c.reason_not_executable or _not_reached(c.original))
                        for c in result.configs
                    )
                )
    lines = [
        "| rule | fix | executed (fix reached at run time) | ran, fix not reached "
        "| not executable |",
        "|---|---|---|---|---|",
    ]
    rules = all_rules()
    for code, groups in per_rule.items():
        if code in NO_EXECUTION:
            groups["not executable"].append(NO_EXECUTION[code])
        elif not any(groups.values()):
            groups["not executable"].append("no fixture has this fix")
        cells = [
            "<br>".join(groups[k]) or "-" for k in ("executed", "not reached", "not executable")
        ]
        lines.append(f"| {code} | {rules[code].fix} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
