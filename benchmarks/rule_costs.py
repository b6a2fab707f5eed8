"""Where a cold run's time goes: each stage of the engine, and each rule alone, over one corpus.

    python benchmarks/rule_costs.py            # the corpus bench.py generates
    python benchmarks/rule_costs.py PATH       # any folder
    python benchmarks/rule_costs.py --repeat 3 --top 10

Every file is read and parsed once; then each stage is timed over all files: Python's parse and
nesting check (parse_guard), libcst's parse, the engine's tree walk (walk.Tree), every rule
together, and each rule alone on a fresh FileContext (so it pays for the analyses it asks for,
which together are shared). Rules run as `check` runs them: after the walk, only on files that
have their markers, positions of their reports included. In one process, CPU time
(`time.process_time`), median of `--repeat` runs. A rule alone costing much more than its share
of "all rules" means it builds an analysis the others do not need.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import files_of, generate_corpus  # noqa: E402


def timed(work: Callable[[], None], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        cpu = time.process_time()
        work()
        samples.append(time.process_time() - cpu)
    return statistics.median(samples)


def load(folder: Path):
    """(source, libcst module, Python's tree) for each file trainlint would analyse."""
    import libcst as cst

    from trainlint.parse_guard import precheck
    from trainlint.source import Source, SourceError

    loaded = []
    for path in files_of(folder):
        try:
            source = Source.from_bytes(str(path), path.read_bytes())
        except (OSError, SourceError):
            continue
        verdict = precheck(source.text)
        if verdict.problem is not None:
            continue
        try:
            module = cst.parse_module(source.text)
        except Exception:
            continue
        loaded.append((source, module, verdict.tree))
    return loaded


def costs(folder: Path, repeat: int) -> List[Tuple[str, float]]:
    import libcst as cst

    from trainlint import engine
    from trainlint.config import Settings
    from trainlint.context import FileContext
    from trainlint.diagnostics import FileResult
    from trainlint.parse_guard import precheck
    from trainlint.rules import all_rules
    from trainlint.walk import Tree

    loaded = load(folder)
    settings = Settings(root=folder, select=["ALL"])
    rules = [rule for code, rule in all_rules().items() if code != engine.SYNTAX_ERROR]

    def run(rule_classes: Sequence[type]) -> Callable[[], None]:
        def work() -> None:
            for source, module, ast_tree in loaded:
                # The tree is built here, as `check` builds it right before the rules: the walk
                # remembers the children of the latest tree only.
                ctx = FileContext(source, module, Tree(module), settings)
                ctx.positions.ast_tree = ast_tree
                to_run = engine.rules_to_run(source.text, rule_classes)
                engine.run_rules(ctx, to_run, FileResult(path=source.path))

        return work

    rows = [
        ("parse_guard (ast.parse + depth)", timed(lambda: [precheck(s.text) for s, _, _ in loaded],
                                                  repeat)),
        ("libcst.parse_module", timed(lambda: [cst.parse_module(s.text) for s, _, _ in loaded],
                                      repeat)),
        ("walk.Tree", timed(lambda: [Tree(m) for _, m, _ in loaded], repeat)),
        ("walk.Tree + all rules together", timed(run(rules), repeat)),
    ]
    for rule in rules:
        rows.append((f"{rule.code} alone", timed(run([rule]), repeat)))
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, help="default: a generated corpus")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--top", type=int, default=0, help="only the N costliest rules")
    args = parser.parse_args(argv)
    temporary = None
    folder = args.folder
    if folder is None:
        temporary = folder = Path(tempfile.mkdtemp(prefix="trainlint-costs-"))
        generate_corpus(folder, args.copies)
    try:
        rows = costs(folder.resolve(), args.repeat)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    stages, per_rule = rows[:4], sorted(rows[4:], key=lambda row: -row[1])  # rules: costliest first
    if args.top:
        per_rule = per_rule[: args.top]
    parse = stages[1][1]
    print(f"{'stage':<34} {'cpu s':>7} {'x parse':>8}")
    for name, seconds in stages + per_rule:
        print(f"{name:<34} {seconds:>7.3f} {seconds / parse:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
