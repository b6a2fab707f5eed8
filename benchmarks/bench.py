"""How fast trainlint is, as ratios against its budgets (docs/architecture.md, "Speed budget").

    python benchmarks/bench.py                 # a corpus generated from fixtures/ and examples/
    python benchmarks/bench.py PATH --repeat 5 # any folder of training code
    python benchmarks/bench.py --json          # the same numbers as JSON (for notes and CI logs)

One run measures, on the same files, `--repeat` times (interleaved, so a noisy neighbour hits
every measurement alike), and reports medians:

(a) parse floor   `libcst.parse_module` of every file, in this process, text already in memory.
(b) cold          `trainlint check --select ALL` with no cache (`--no-cache` and `-j1` when the CLI
                  has them), in a fresh process per run, timed around `trainlint.cli.main` (so the
                  interpreter's start is not counted; the import of the rules is). Budget: cold is
                  at most 1.5x the parse floor. Also measured with the default `-j` (the CPU
                  count), the command as a user types it; its ratio is reported beside the
                  one-process one, which is the fair comparison with the one-process floor.
(c) warm          the same with the cache on, after one run that fills it. Budget: at most 5 % of
                  cold. "n/a: no cache" while the CLI has no `--no-cache`.
(d) single file   `trainlint check --force-exclude FILE` as the pre-commit hook calls it (plus
                  `--no-cache`, so it is the uncached worst case), wall time of the whole process,
                  interpreter start included. Budget: at most 0.5 s. FILE: the largest file.
(e) TorchFix      `torchfix --select ALL -j 1` over the same folder, whole process, against the
                  whole `trainlint` process of (b). Budget: trainlint at least 10x faster. Runs
                  when `torchfix` is importable here, or with `--torchfix EXECUTABLE` (TorchFix
                  pins an old libcst, so it is best kept in a virtual environment of its own).

trainlint's modules are byte-compiled before measuring, and the runs may write bytecode even where
PYTHONDONTWRITEBYTECODE is set: an installed trainlint (pip, pre-commit) has its bytecode, and
compiling ~60 modules from source on every run would add ~0.2 s to each measurement.

Wall times are `time.perf_counter`; CPU times are the process's own (`time.process_time`) for
(a) and the in-process (b)/(c), and the child's user+system time for whole processes. Ratios are
of wall-time medians; cold / floor is also given in CPU time, which other load on a shared
machine distorts less.

The generated corpus copies every `.py` file of fixtures/rules, fixtures/clean and examples/
`--copies` times under varied names, each copy with a different trailing comment so no two files
have the same content (a content-hash cache cannot share entries between them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
CORPUS_SOURCES = ("fixtures/rules", "fixtures/clean", "examples")

BUDGET_COLD_OVER_FLOOR = 1.5
BUDGET_WARM_OVER_COLD = 0.05
BUDGET_SINGLE_FILE_S = 0.5
BUDGET_TORCHFIX_OVER_TRAINLINT = 10.0

# Runs in a fresh interpreter: times `trainlint.cli.main` alone and prints the times as JSON.
# The findings go to a buffer, so the terminal's speed is not measured.
IN_PROCESS_DRIVER = """
import contextlib, io, json, sys, time
from trainlint.cli import main
wall, cpu = time.perf_counter(), time.process_time()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "exit": code}))
"""


# -- the corpus -------------------------------------------------------------------------------


def generate_corpus(target: Path, copies: int) -> int:
    """Copies of the repository's own training code under varied names; returns the file count."""
    count = 0
    for top in CORPUS_SOURCES:
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO / top)
            # fixtures/rules/TRL101/dict_batch.unsafe.py -> rules/trl101/dict_batch_unsafe_c1.py
            folder = target / Path(top).name / relative.parent.as_posix().lower()
            folder.mkdir(parents=True, exist_ok=True)
            stem = path.name[: -len(".py")].replace(".", "_")
            text = path.read_text(encoding="utf-8")
            if not text.endswith("\n"):
                text += "\n"
            for copy in range(copies):
                marker = f"# corpus copy {copy} of {top}/{relative.as_posix()}\n"
                (folder / f"{stem}_c{copy}.py").write_text(text + marker, encoding="utf-8")
                count += 1
    # The corpus is its own project: the project phase resolves imports against this folder.
    (target / "pyproject.toml").write_text("[tool.trainlint]\n", encoding="utf-8")
    return count


def files_of(folder: Path) -> List[Path]:
    """The files `trainlint check FOLDER` looks at (its own discovery, so excludes agree)."""
    from trainlint.config import load_settings
    from trainlint.files import discover
    from trainlint.rules import rule_names

    settings = load_settings([folder], rule_names())
    return [path for path, _display in discover([folder], settings).files]


def texts_of(files: Sequence[Path]) -> List[str]:
    """The text trainlint parses for each file (a notebook's code cells joined), when it can be
    parsed safely: libcst's native parser must not see what trainlint's guard keeps from it."""
    from trainlint.parse_guard import precheck
    from trainlint.source import Source, SourceError

    texts = []
    for path in files:
        try:
            source = Source.from_bytes(str(path), path.read_bytes())
        except (OSError, SourceError):
            continue
        if precheck(source.text).problem is None:
            texts.append(source.text)
    return texts


# -- measurements -----------------------------------------------------------------------------


class Sample:
    __slots__ = ("wall", "cpu")

    def __init__(self, wall: float, cpu: float) -> None:
        self.wall = wall
        self.cpu = cpu


def parse_floor(texts: Sequence[str]) -> Sample:
    import libcst

    wall, cpu = time.perf_counter(), time.process_time()
    for text in texts:
        try:
            libcst.parse_module(text)
        except Exception:  # a file trainlint reports as TRL001 costs its failed parse here too
            pass
    return Sample(time.perf_counter() - wall, time.process_time() - cpu)


def byte_compile_trainlint() -> None:
    """Compile trainlint's modules to bytecode, as installing it does."""
    import compileall

    spec = importlib.util.find_spec("trainlint")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def child_environment() -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_process(command: Sequence[str], cwd: Path) -> Tuple[Sample, subprocess.CompletedProcess]:
    """Wall time of a whole process and its CPU time (user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, env=child_environment()
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(wall, cpu), done


def run_in_process(arguments: Sequence[str], cwd: Path) -> Tuple[Sample, Sample]:
    """(time inside `cli.main`, time of the whole process) for one trainlint run."""
    whole, done = run_process([sys.executable, "-c", IN_PROCESS_DRIVER, *arguments], cwd)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"trainlint {' '.join(arguments)} failed:\n{done.stderr[-2000:]}")
    inner = json.loads(lines[-1])
    if inner["exit"] not in (0, 1):
        raise SystemExit(f"trainlint {' '.join(arguments)} exited {inner['exit']}:\n{done.stderr}")
    return Sample(inner["wall"], inner["cpu"]), whole


def trainlint_flags() -> Dict[str, bool]:
    """Which of the cache and worker options this trainlint's CLI has."""
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--help"], capture_output=True, text=True
    )
    return {
        "no_cache": "--no-cache" in done.stdout,
        "jobs": "--jobs" in done.stdout or "-j " in done.stdout,
    }


def torchfix_command(executable: Optional[str]) -> Optional[List[str]]:
    if executable:
        found = shutil.which(executable)
        if found is None:
            raise SystemExit(f"--torchfix {executable}: no such executable")
        return [os.path.abspath(found)]
    if importlib.util.find_spec("torchfix") is not None:
        return [sys.executable, "-m", "torchfix"]
    return None


def trainlint_executable() -> List[str]:
    script = Path(sys.executable).parent / "trainlint"
    if script.exists():
        return [str(script)]
    found = shutil.which("trainlint")
    return [found] if found else [sys.executable, "-m", "trainlint"]


# -- the run ----------------------------------------------------------------------------------


def median(samples: List[Sample]) -> Dict[str, float]:
    return {
        "wall": statistics.median(s.wall for s in samples),
        "cpu": statistics.median(s.cpu for s in samples),
        "runs": len(samples),
    }


def measure(folder: Path, repeat: int, torchfix: Optional[List[str]], single: Path) -> dict:
    flags = trainlint_flags()
    byte_compile_trainlint()
    files = files_of(folder)
    texts = texts_of(files)
    common = ["check", "--select", "ALL", "--output-format", "json", "--exit-zero", "--no-progress"]
    cold_args = common + (["--no-cache"] if flags["no_cache"] else [])
    cold_jobs_args = list(cold_args)  # the default -j: the CPU count
    cold_args += ["-j1"] if flags["jobs"] else []
    warm_args = common + (["-j1"] if flags["jobs"] else [])
    single_command = trainlint_executable() + ["check", "--force-exclude"]
    single_command += (["--no-cache"] if flags["no_cache"] else []) + [str(single)]

    samples: Dict[str, List[Sample]] = {
        name: []
        for name in (
            "floor", "cold", "cold_process", "cold_jobs", "warm", "warm_process", "single",
            "torchfix",
        )
    }
    steps: List[Tuple[str, Callable[[], None]]] = []

    def cold() -> None:
        inner, whole = run_in_process(cold_args + ["."], folder)
        samples["cold"].append(inner)
        samples["cold_process"].append(whole)

    def cold_jobs() -> None:
        inner, _whole = run_in_process(cold_jobs_args + ["."], folder)
        samples["cold_jobs"].append(inner)

    def warm() -> None:
        inner, whole = run_in_process(warm_args + ["."], folder)
        samples["warm"].append(inner)
        samples["warm_process"].append(whole)

    def single_file() -> None:
        sample, done = run_process(single_command, folder)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(single_command)} failed:\n{done.stderr[-2000:]}")
        samples["single"].append(sample)

    def torchfix_run() -> None:
        sample, done = run_process(torchfix + ["--select", "ALL", "-j", "1", "."], folder)
        if done.returncode not in (0, 1):
            raise SystemExit(f"torchfix failed:\n{done.stderr[-2000:]}")
        samples["torchfix"].append(sample)

    steps.append(("floor", lambda: samples["floor"].append(parse_floor(texts))))
    steps.append(("cold", cold))
    if flags["jobs"]:
        steps.append(("cold_jobs", cold_jobs))
    if flags["no_cache"]:
        run_in_process(warm_args + ["."], folder)  # fills the cache
        steps.append(("warm", warm))
    steps.append(("single", single_file))
    if torchfix is not None:
        steps.append(("torchfix", torchfix_run))
    for _ in range(repeat):
        for _name, step in steps:
            step()

    medians = {name: median(found) for name, found in samples.items() if found}
    ratios = []

    def ratio(name: str, value: Optional[float], budget: float, kind: str, note: str) -> None:
        if value is None:
            ratios.append({"name": name, "value": None, "budget": budget, "met": None,
                           "note": note})
            return
        met = value <= budget if kind == "max" else value >= budget
        ratios.append({"name": name, "value": value, "budget": budget, "kind": kind, "met": met,
                       "note": note})

    floor = medians["floor"]["wall"]
    ratio("cold / parse floor", medians["cold"]["wall"] / floor, BUDGET_COLD_OVER_FLOOR, "max",
          "trainlint.cli.main, every rule, no cache, one process")
    # CPU time is what a busy machine distorts least: both sides are CPU-bound in one process.
    ratio("  the same in CPU time", medians["cold"]["cpu"] / medians["floor"]["cpu"],
          BUDGET_COLD_OVER_FLOOR, "max", "less sensitive to other load on the machine")
    if "cold_jobs" in medians:
        ratio("  default -j, wall", medians["cold_jobs"]["wall"] / floor, BUDGET_COLD_OVER_FLOOR,
              "max", f"as typed: {os.cpu_count()} worker processes against a one-process floor")
    if "warm" in medians:
        ratio("warm / cold", medians["warm"]["wall"] / medians["cold"]["wall"],
              BUDGET_WARM_OVER_COLD, "max", "trainlint.cli.main, cache hit vs no cache")
    else:
        ratio("warm / cold", None, BUDGET_WARM_OVER_COLD, "max", "n/a: no cache")
    ratio("single file (s)", medians["single"]["wall"], BUDGET_SINGLE_FILE_S, "max",
          "whole process, as the pre-commit hook runs it")
    if "torchfix" in medians:
        ratio("torchfix / trainlint", medians["torchfix"]["wall"] / medians["cold_process"]["wall"],
              BUDGET_TORCHFIX_OVER_TRAINLINT, "min", "whole processes, every rule, one worker")
    else:
        ratio("torchfix / trainlint", None, BUDGET_TORCHFIX_OVER_TRAINLINT, "min",
              "n/a: torchfix is not importable (see --torchfix)")
    return {
        "folder": str(folder),
        "files": len(files),
        "parsed_for_floor": len(texts),
        "lines": sum(text.count("\n") for text in texts),
        "single_file": str(single),
        "repeat": repeat,
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "libcst": _version("libcst"),
        "trainlint": _version("trainlint"),
        "cache_option": flags["no_cache"],
        "jobs_option": flags["jobs"],
        "medians": medians,
        "ratios": ratios,
    }


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


MEASUREMENTS = (
    ("floor", "(a) libcst parse floor, in process"),
    ("cold", "(b) trainlint cold, in cli.main"),
    ("cold_process", "    trainlint cold, whole process"),
    ("cold_jobs", "    trainlint cold, default -j, cli.main"),
    ("warm", "(c) trainlint warm, in cli.main"),
    ("warm_process", "    trainlint warm, whole process"),
    ("single", "(d) one file, whole process"),
    ("torchfix", "(e) TorchFix, whole process"),
)


def render(report: dict) -> str:
    lines = [
        f"{report['files']} files ({report['lines']} lines) in {report['folder']}; "
        f"median of {report['repeat']} runs; {report['cpu_count']} CPUs; Python "
        f"{report['python']}, libcst {report['libcst']}, trainlint {report['trainlint']}",
        "",
        f"{'measurement':<40} {'wall s':>8} {'cpu s':>8}",
    ]
    for name, label in MEASUREMENTS:
        found = report["medians"].get(name)
        if found is not None:
            lines.append(f"{label:<40} {found['wall']:>8.3f} {found['cpu']:>8.3f}")
        elif name in ("warm", "torchfix"):
            lines.append(f"{label:<40} {'n/a':>8}")
    lines += ["", f"{'ratio':<24} {'measured':>9} {'budget':>9}  verdict"]
    for item in report["ratios"]:
        sign = "<=" if item.get("kind", "max") == "max" else ">="
        budget = f"{sign} {item['budget']:g}"
        if item["value"] is None:
            lines.append(f"{item['name']:<24} {'n/a':>9} {budget:>9}  {item['note']}")
            continue
        verdict = "met" if item["met"] else "MISSED"
        lines.append(
            f"{item['name']:<24} {item['value']:>9.3f} {budget:>9}  {verdict} ({item['note']})"
        )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path,
                        help="training code to measure (default: a generated corpus)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--copies", type=int, default=2,
                        help="copies of each source file in the generated corpus")
    parser.add_argument("--single", type=Path, help="the file for (d) (default: the largest)")
    parser.add_argument("--torchfix", metavar="EXECUTABLE",
                        help="a torchfix executable (when torchfix is not importable here)")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    temporary = None
    if args.folder is None:
        temporary = Path(tempfile.mkdtemp(prefix="trainlint-bench-"))
        generate_corpus(temporary, args.copies)
        folder = temporary
    else:
        folder = args.folder.resolve()
    try:
        single = args.single.resolve() if args.single else max(
            (p for p in files_of(folder) if p.suffix == ".py"), key=lambda p: p.stat().st_size
        )
        report = measure(folder, args.repeat, torchfix_command(args.torchfix), single)
    finally:
        if temporary is not None and not args.keep:
            shutil.rmtree(temporary, ignore_errors=True)
        elif temporary is not None:
            print(f"corpus kept in {temporary}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
