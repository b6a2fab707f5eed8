"""The dev / holdout split of the precision corpus, redrawn from repos.toml.

    python benchmarks/precision/draw_split.py           # print the holdout the draw gives
    python benchmarks/precision/draw_split.py --check   # exit 1 if repos.toml's splits differ

Each repository falls in one stratum, the first of its categories that names one: "notebooks"
(notebook-heavy courses and tutorials), then "pre-2021" (the pinned snapshot's HEAD is older than
2021-03-01), else "other" (research and framework code since then). From each stratum a seeded
random draw over the sorted names takes HOLDOUT_PER_STRATUM of them (a third, rounded), so the
held-back repositories are as mixed as the whole set. The seed and the counts are fixed here; the
split is recorded in repos.toml and this script only re-derives it.

Repositories added later with `split = "holdout2"` … `"holdout90"` are further
held-back sets, each pinned and never opened while the rules it measures were changed (holdout2:
the recall work after the first holdout was labelled; holdout3: the fixes after holdout2 was
opened; holdout4: pinned once those fixes were done; holdout5: pinned at the start of the next
session, before any rule change; holdout6: pinned once holdout5's fixes were done; holdout7:
the same after holdout6; holdout8: after holdout7 and the preview demotions; holdout9: at the
start of the next session; holdout10: after holdout9's fix; holdout11: after holdout10's
fixes; holdout12: at the start of the next session; holdout13: after holdout12's fixes;
holdout14: after holdout13's; holdout15: at the start of the next session; holdout16: after
holdout15's fixes; holdout17: after holdout16's; holdout18: at the start of the next
session; holdout19: after holdout18's fixes; holdout20: after holdout19's first look and one
more fix; holdout21: after one fix at the start of the next session; holdout22: right after
holdout21's first look; holdout23: after holdout22's fixes; holdout24: after holdout23's;
holdout25: at the start of the next session, after one preview fix; holdout26: after
holdout25's fixes; holdout27: after one fix at the start of the next session; holdout28:
after holdout27's fixes; holdout29: after holdout28's;
holdout30: at the start of the next session, before any rule change; holdout31: right after
holdout30's first look; holdout32: after holdout30's preview fixes; holdout33: after holdout32's;
holdout34: after holdout33's; holdout35: after the session's last mend; holdout36: at the start of
the next session, before any rule change; holdout37: right after holdout36's first look;
holdout38: after holdout36's fixes; holdout39: after holdout38's fix;
holdout40: after holdout39's fix; holdout41: after holdout40's fixes; holdout42: at the start
of the next session, before any rule change; holdout43: after holdout42's fix;
holdout44: after holdout43's fixes; holdout45: after one fix at the start of the next
session; holdout46: after holdout45's fixes; holdout47: after holdout46's; holdout48: after
one preview fix at the start of the next session; holdout49: after holdout48's fixes;
holdout50: after holdout49's; holdout51: after two fixes at the start of the next session;
holdout52: after holdout51's fixes; holdout53: after holdout52's; holdout54: at the start of
the next session, before any rule change; holdout55: after holdout54's two fixes;
holdout56: after holdout55's TRL103 and TRL105 fixes; holdout57: after holdout56's;
holdout58: at the start of the next session, before any rule change; holdout59: the same;
holdout60: after the TRL303 and TRL203 fixes that followed; holdout61 and holdout62: after
holdout60's TRL301 fix; holdout63: after their TRL203 fix; holdout64 and holdout65: at the
start of the next session, after one TRL203 fix; holdout66: after their TRL203 fix;
holdout67: at the start of the next session, after two TRL203 fixes; holdout68: after
holdout67's TRL101 fix; holdout69: at the start of the next session, before any rule
change; holdout70: after holdout69's TRL101, Names and TRL203 fixes; holdout71: at the
start of the next session, before any rule change; holdout72: after holdout71's fixes;
holdout73: at the start of the next session, before any rule change; holdout74: after
holdout73's fixes; holdout75: at the start of the next session, after one TRL405 change;
holdout76: after holdout75's fixes; holdout77: after holdout76's fixes;
holdout78: after holdout77's fixes; holdout79: at the start of the next session, after
one TRL405 change; holdout80: after holdout79's fixes; holdout81: at the start of the
next session, before any rule change; holdout82: at the start of the next session, before
any rule change; holdout83: after holdout82, with one change to worker processes only;
holdout84: after holdout83's fix, which was to file discovery only; holdout85: at the start
of the next session, before any rule change; holdout86: after holdout85's fixes;
holdout87: at the start of the next session, before any rule change; holdout88: pinned
with holdout87, and first run once holdout87's first look had needed no fix; holdout89: pinned
once holdout88 was labelled, and first run with the same rules; holdout90: after holdout89's
first look, and first run after its fixes).
They are outside this draw: all of them are held back.
"""

from __future__ import annotations

import argparse
import random
import sys
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the same parser, packaged for older Pythons
    import tomli as tomllib
from pathlib import Path
from typing import Dict, List

REPOS_TOML = Path(__file__).resolve().parent / "repos.toml"
SEED = 16
STRATA = ("notebooks", "pre-2021")
HOLDOUT_PER_STRATUM = {"notebooks": 4, "pre-2021": 5, "other": 5}


def stratum(categories: List[str]) -> str:
    for name in STRATA:
        if name in categories:
            return name
    return "other"


def draw(repos: List[dict]) -> Dict[str, str]:
    """Name -> "dev" | "holdout" for every repository."""
    by_stratum: Dict[str, List[str]] = {}
    for repo in repos:
        by_stratum.setdefault(stratum(repo["categories"]), []).append(repo["name"])
    rng = random.Random(SEED)
    split = {repo["name"]: "dev" for repo in repos}
    for name in sorted(by_stratum):
        for held in rng.sample(sorted(by_stratum[name]), HOLDOUT_PER_STRATUM[name]):
            split[held] = "holdout"
    return split


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with repos.toml's splits")
    args = parser.parse_args(argv)
    repos = tomllib.loads(REPOS_TOML.read_text())["repo"]
    repos = [r for r in repos if r["split"] in ("dev", "holdout")]
    split = draw(repos)
    if args.check:
        wrong = [r["name"] for r in repos if r["split"] != split[r["name"]]]
        for name in wrong:
            print(f"{name}: repos.toml says {dict((r['name'], r['split']) for r in repos)[name]}, "
                  f"the draw says {split[name]}")
        return 1 if wrong else 0
    for repo in repos:
        if split[repo["name"]] == "holdout":
            print(f"{stratum(repo['categories']):10} {repo['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
