"""How often trainlint's default findings are right, on code it was never tuned on (issue 16).

    python benchmarks/precision.py --sources DIR                    # the dev split
    python benchmarks/precision.py --sources DIR --split holdout    # the final check
    python benchmarks/precision.py --sources DIR --split holdout2   # a later held-back set (N >= 2)
    python benchmarks/precision.py --sources DIR --json             # the same report as JSON
    python benchmarks/precision.py --sources DIR --unlabelled-out todo.json
    python benchmarks/precision.py --sources DIR --unlabelled-dir todo/   # one file per repo
    python benchmarks/precision.py --merge todo.json                # add filled labels

The corpus is benchmarks/precision/repos.toml: public repositories, each pinned to a commit and
put in the "dev" or the "holdout" split (benchmarks/precision/draw_split.py re-derives the split).
DIR holds one checkout per repository, named <owner>+<name> and at its pinned commit:

    git clone https://github.com/<owner>/<name> DIR/<owner>+<name>
    git -C DIR/<owner>+<name> checkout <commit>

(A tree without .git, such as an export of the commit's files, is accepted too; only a git
checkout can be checked against the pin, and one at another commit is refused.)

trainlint runs once per repository, from the repository's folder, as
`trainlint check --output-format json --no-cache --isolated --exit-zero --no-progress .`, with
`--select`/`--preview` passed on when given. `--isolated`: the measure is of trainlint's own
default selection as a new user meets it, the same on every repository; a repository's own
configuration (none of these has one for trainlint) must not change what is measured, and a
pinned commit that gained one later could not silently move the numbers. `--no-cache`: every
run analyses every file with the trainlint under test. .gitignore files are respected, as on a
user's machine. Only error and warning findings are kept (info-level rules are off by default).

Every kept finding has a key that does not depend on its wording:
`owner/name::relative/path.py::L<line>::<code>`, with `cell<N>:` before the line for a notebook
(N counts all cells from 1, the line is within the cell), and `#2`, `#3`... after the code for a
second and later finding of the same code on the same line (in column order).
benchmarks/precision/labels.json maps keys to {"label": "TP" | "FP" | "debatable", "reason":
one line, "message": the headline when it was labelled}. The report gives, per rule and overall,
the TP / FP / debatable / unlabelled counts and the strict precision TP / (TP + FP), the share of
debatable findings among all findings, the findings not labelled yet, and the labels whose
finding no longer appears in the repositories that ran: a fixed false positive, or a lost true
positive (listed first, since a precision gain must not cost one).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the same parser, packaged for older Pythons
    import tomli as tomllib
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPOS_TOML = HERE / "precision" / "repos.toml"
LABELS_JSON = HERE / "precision" / "labels.json"
LABELS = ("TP", "FP", "debatable")
KEPT_SEVERITIES = ("error", "warning")
RUN_OPTIONS = ("--output-format", "json", "--no-cache", "--isolated", "--exit-zero",
               "--no-progress")


@dataclass(frozen=True)
class Finding:
    key: str
    repo: str
    path: str
    cell: Optional[int]
    line: int
    code: str
    severity: str
    headline: str


def headline(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else ""


def split_name(text: str) -> str:
    """An argparse type: the splits repos.toml can name (a held-back set is pinned as holdoutN)."""
    if text in ("dev", "holdout", "all") or re.fullmatch(r"holdout([2-9]|[1-9][0-9]+)", text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected dev, holdout, holdoutN (N >= 2) or all")


def load_repos(path: Path, split: str) -> List[dict]:
    repos = tomllib.loads(path.read_text())["repo"]
    return [repo for repo in repos if split == "all" or repo["split"] == split]


def checkout_dir(sources: Path, name: str) -> Path:
    return sources / name.replace("/", "+")


def pin_problem(folder: Path, commit: str) -> Optional[str]:
    """Why the checkout cannot be measured at its pin, or None."""
    if not folder.is_dir():
        return "missing"
    if not (folder / ".git").exists():
        return None
    head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    return None if head == commit else f"checked out at {head or '?'}, pinned at {commit}"


def run_trainlint(command: Sequence[str], folder: Path, extra: Sequence[str]) -> List[dict]:
    done = subprocess.run([*command, "check", *RUN_OPTIONS, *extra, "."], cwd=folder,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"trainlint failed in {folder} (exit {done.returncode}):\n"
                           f"{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout or "[]")


def findings_of(repo: str, folder: Path, raw: List[dict]) -> List[Finding]:
    """The kept findings of one repository, keyed; duplicates on a line numbered by column."""
    kept = [item for item in raw if item["severity"] in KEPT_SEVERITIES]
    placed: List[Tuple[Tuple, dict]] = []
    for item in kept:
        path = (folder / item["filename"]).resolve().relative_to(folder.resolve())
        spot = (path.as_posix(), item.get("cell"), item["location"]["row"], item["code"])
        placed.append((spot, item))
    placed.sort(key=lambda pair: (pair[0][0], pair[0][1] or 0, pair[0][2], pair[0][3],
                                  pair[1]["location"]["column"]))
    seen: Counter = Counter()
    findings = []
    for (path, cell, line, code), item in placed:
        seen[(path, cell, line, code)] += 1
        findings.append(Finding(
            key=finding_key(repo, path, cell, line, code, seen[(path, cell, line, code)]),
            repo=repo, path=path, cell=cell, line=line, code=code, severity=item["severity"],
            headline=headline(item["message"])))
    return findings


def finding_key(repo: str, path: str, cell: Optional[int], line: int, code: str,
                occurrence: int = 1) -> str:
    where = f"cell{cell}:L{line}" if cell is not None else f"L{line}"
    suffix = f"#{occurrence}" if occurrence > 1 else ""
    return f"{repo}::{path}::{where}::{code}{suffix}"


def key_parts(key: str) -> Tuple[str, str]:
    """(repo, code) of a key."""
    parts = key.split("::")
    if len(parts) != 4:
        raise ValueError(f"not a finding key: {key!r}")
    return parts[0], parts[3].split("#")[0]


def selected(code: str, select: Optional[str]) -> bool:
    """Whether `--select` (codes or prefixes, or ALL) covers the code; None: the default set."""
    if select is None:
        return True
    wanted = [part.strip() for part in select.split(",") if part.strip()]
    return any(part == "ALL" or code.startswith(part) for part in wanted)


def preview_codes(select: Optional[str]) -> List[str]:
    """Preview rules a run without `--preview` leaves off: all of them, except those whose exact
    code `--select` names (as in trainlint itself)."""
    from trainlint.rules import all_rules  # the trainlint under test, in this interpreter

    named = {part.strip() for part in (select or "").split(",")}
    return [code for code, rule in all_rules().items() if rule.preview and code not in named]


def precision(tp: int, fp: int) -> Optional[float]:
    return tp / (tp + fp) if tp + fp else None


def join(findings: List[Finding], labels: Dict[str, dict], repos_run: Sequence[str],
         select: Optional[str] = None, not_run: Sequence[str] = ()) -> dict:
    """The report: per-rule and overall counts, unlabelled findings, labels no longer found
    (`not_run`: codes the run could not report, such as preview rules without `--preview`,
    whose labels are not "gone")."""
    per_rule: Dict[str, Counter] = defaultdict(Counter)
    unlabelled = []
    for finding in findings:
        label = labels.get(finding.key, {}).get("label")
        per_rule[finding.code][label if label in LABELS else "unlabelled"] += 1
        if label not in LABELS:
            unlabelled.append(finding)
    found = {finding.key for finding in findings}
    ran = set(repos_run)
    gone = []
    for key, entry in sorted(labels.items()):
        repo, code = key_parts(key)
        if repo in ran and key not in found and selected(code, select) and code not in not_run:
            gone.append({"key": key, "label": entry.get("label"),
                         "message": entry.get("message", ""), "reason": entry.get("reason", "")})
    total: Counter = Counter()
    for counts in per_rule.values():
        total.update(counts)
    all_findings = sum(total.values())
    return {
        "rules": {code: _row(per_rule[code]) for code in sorted(per_rule)},
        "overall": _row(total),
        "debatable_share": total["debatable"] / all_findings if all_findings else None,
        "unlabelled": [asdict(finding) for finding in unlabelled],
        "lost_true_positives": [entry for entry in gone if entry["label"] == "TP"],
        "gone_other_labels": [entry for entry in gone if entry["label"] != "TP"],
        "repos": list(repos_run),
    }


def _row(counts: Counter) -> dict:
    row = {name: counts[name] for name in (*LABELS, "unlabelled")}
    row["findings"] = sum(row.values())
    row["precision"] = precision(counts["TP"], counts["FP"])
    return row


def skeleton(unlabelled: List[dict]) -> Dict[str, dict]:
    return {item["key"]: {"label": "", "reason": "", "message": item["headline"]}
            for item in unlabelled}


def merge(labels: Dict[str, dict],
          filled: Dict[str, dict]) -> Tuple[Dict[str, dict], List[str], int]:
    """labels with the filled entries added; the refusals; how many were left unfilled."""
    merged = dict(labels)
    refused, unfilled = [], 0
    for key, entry in filled.items():
        label, reason = entry.get("label", ""), str(entry.get("reason", "")).strip()
        if label == "" and reason == "":
            unfilled += 1
            continue
        try:
            key_parts(key)
        except ValueError as error:
            refused.append(str(error))
            continue
        if label not in LABELS:
            refused.append(f"{key}: label {label!r} is not one of {', '.join(LABELS)}")
        elif not reason:
            refused.append(f"{key}: no reason")
        elif "\n" in reason:
            refused.append(f"{key}: the reason must be one line")
        else:
            merged[key] = {"label": label, "reason": reason, "message": entry.get("message", "")}
    return merged, refused, unfilled


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def print_report(report: dict) -> None:
    def pct(value):
        return "   -" if value is None else f"{value * 100:5.1f} %"

    print(f"{len(report['repos'])} repositories")
    print(f"{'rule':8} {'TP':>5} {'FP':>5} {'deb':>5} {'unlab':>6} {'precision':>10}")
    for code, row in [*report["rules"].items(), ("overall", report["overall"])]:
        print(f"{code:8} {row['TP']:5} {row['FP']:5} {row['debatable']:5} {row['unlabelled']:6} "
              f"{pct(row['precision']):>10}")
    print(f"debatable share of all findings: {pct(report['debatable_share'])}")
    lost = report["lost_true_positives"]
    print(f"\nLOST TRUE POSITIVES ({len(lost)}): labelled TP, no longer reported")
    for entry in lost:
        print(f"  {entry['key']}  {entry['message']}")
    other = report["gone_other_labels"]
    print(f"\nlabels whose finding is gone ({len(other)}; FP: fixed)")
    for entry in other:
        print(f"  [{entry['label']}] {entry['key']}")
    print(f"\nunlabelled findings ({len(report['unlabelled'])})")
    for item in report["unlabelled"]:
        print(f"  {item['key']}  {item['headline']}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, help="folder of <owner>+<name> checkouts")
    parser.add_argument(
        "--split",
        type=split_name,
        default="dev",
        help="dev, holdout, holdoutN (a later held-back set, N >= 2) or all",
    )
    parser.add_argument("--select", help="passed on to trainlint (codes or prefixes, or ALL)")
    parser.add_argument("--preview", action="store_true", help="passed on to trainlint")
    parser.add_argument("--trainlint", default=f"{shlex.quote(sys.executable)} -m trainlint",
                        help="the command that runs trainlint (default: this Python's)")
    parser.add_argument("--repos", type=Path, default=REPOS_TOML)
    parser.add_argument("--labels", type=Path, default=LABELS_JSON)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--unlabelled-out", type=Path, metavar="FILE",
                        help="write the unlabelled findings as a skeleton to fill in")
    parser.add_argument("--unlabelled-dir", type=Path, metavar="DIR",
                        help="the same skeleton split by repository: DIR/<owner>+<name>.json")
    parser.add_argument("--merge", type=Path, metavar="FILE",
                        help="merge a filled skeleton into the labels, and stop")
    args = parser.parse_args(argv)
    labels = json.loads(args.labels.read_text()) if args.labels.exists() else {}
    if args.merge:
        merged, refused, unfilled = merge(labels, json.loads(args.merge.read_text()))
        for problem in refused:
            print(f"refused: {problem}", file=sys.stderr)
        write_json(args.labels, merged)
        print(f"{len(merged) - len(labels)} new, {len(refused)} refused, {unfilled} left unfilled; "
              f"{len(merged)} labels in {args.labels}")
        return 1 if refused else 0
    if args.sources is None:
        parser.error("--sources is required (unless --merge)")
    repos = load_repos(args.repos, args.split)
    if not repos:
        print(f"{args.repos} has no repository in the split {args.split!r}", file=sys.stderr)
        return 2
    problems = [(repo["name"], pin_problem(checkout_dir(args.sources, repo["name"]),
                                           repo["commit"])) for repo in repos]
    problems = [(name, why) for name, why in problems if why]
    if problems:
        for name, why in problems:
            print(f"{name}: {why} ({checkout_dir(args.sources, name)})", file=sys.stderr)
        return 2
    extra = ([f"--select={args.select}"] if args.select else []) + (
        ["--preview"] if args.preview else [])
    command = shlex.split(args.trainlint)
    findings: List[Finding] = []
    for repo in repos:
        folder = checkout_dir(args.sources, repo["name"])
        findings += findings_of(repo["name"], folder, run_trainlint(command, folder, extra))
    not_run = [] if args.preview else preview_codes(args.select)
    report = join(findings, labels, [repo["name"] for repo in repos], args.select, not_run)
    if args.unlabelled_out:
        write_json(args.unlabelled_out, skeleton(report["unlabelled"]))
    if args.unlabelled_dir:
        args.unlabelled_dir.mkdir(parents=True, exist_ok=True)
        for repo in report["repos"]:
            mine = [item for item in report["unlabelled"] if item["repo"] == repo]
            if mine:
                write_json(args.unlabelled_dir / f"{repo.replace('/', '+')}.json",
                           skeleton(mine))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
