"""How the project phase grows with the project (issue 21): time and peak memory per file.

    python benchmarks/project_scaling.py                     # 500, 2,000 and 5,000 files
    python benchmarks/project_scaling.py --sizes 500 20000   # any sizes

Each size is a generated project in a temporary folder: packages of model files, each a small
family of `nn.Module` classes deriving from a shared base of its package (imported through the
package's `__init__.py`, whose parameter only the subclasses read, so that every family is
asked for across files), registering parameters and reading them in `forward`, and one
DDP training script per package importing its models. trainlint checks the whole project in one
process without cache (`runner.run`, jobs=1, the default rules); the time spent in
`run_project_phase` (the joins across files) is measured apart from the whole run, and reported
per file, with the process's peak memory (ru_maxrss, which only grows: sizes run in ascending
order). The issue's target: project-phase time per file at 5,000 files within 2x of its value at
500, at 20,000 within 3x.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

FILES_PER_PACKAGE = 10  # nine model files and one training script

BASE = '''import torch
import torch.nn as nn


class BaseHead{p}(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        # Read only by the subclasses (in other files): the project phase asks for the family.
        self.scale = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return self.norm(self.project(x))
'''

MODEL = '''import torch
import torch.nn as nn

from . import BaseHead{p}


class Head{p}_{m}(BaseHead{p}):
    def __init__(self, width=32):
        super().__init__(width)
        self.weight = nn.Parameter(torch.zeros(width, width))
        self.bias = nn.Parameter(torch.zeros(width))

    def project(self, x):
        return (x @ self.weight + self.bias) * self.scale


class DeepHead{p}_{m}(Head{p}_{m}):
    def __init__(self, width=32):
        super().__init__(width)
        self.extra = nn.Linear(width, width)

    def project(self, x):
        return self.extra(super().project(x))
'''

TRAIN = '''import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from {package}.m0 import DeepHead{p}_0


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(DeepHead{p}_0().cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        loss = model(torch.randn(8, 32, device=local_rank)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
'''


def generate(root: Path, files: int) -> int:
    """A project of about `files` Python files under `root`; returns how many it wrote."""
    written = 0
    for p in range(max(1, files // FILES_PER_PACKAGE)):
        package = root / f"pkg{p}"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(BASE.format(p=p))
        for m in range(FILES_PER_PACKAGE - 2):
            (package / f"m{m}.py").write_text(MODEL.format(p=p, m=m))
        (root / f"train{p}.py").write_text(TRAIN.format(p=p, package=f"pkg{p}"))
        written += FILES_PER_PACKAGE
    (root / "pyproject.toml").write_text("[project]\nname = 'scaling'\n")
    return written


def measure(files: int) -> Dict[str, float]:
    from trainlint import project as project_module
    from trainlint import runner
    from trainlint.config import Settings
    from trainlint.files import discover
    from trainlint.selection import Selection

    spent: List[float] = []
    real = project_module.run_project_phase

    def timed_phase(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    runner.run_project_phase = timed_phase  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            count = generate(root, files)
            settings = Settings(root=root)
            found = discover([root], settings)
            start = time.perf_counter()
            runner.run(found.files, Selection.of(settings), cache=None, jobs=1, whole_project=True)
            total = time.perf_counter() - start
    finally:
        runner.run_project_phase = real  # type: ignore[assignment]
    phase = sum(spent)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"files": count, "total": total, "phase": phase, "peak_mb": peak_mb}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2000, 5000])
    args = parser.parse_args(argv)
    rows = [measure(size) for size in sorted(args.sizes)]
    first = rows[0]["phase"] / rows[0]["files"]
    print(f"{'files':>7} {'run s':>8} {'phase s':>8} {'phase ms/file':>14} {'x smallest':>10} "
          f"{'peak MB':>8}")
    for row in rows:
        per_file = row["phase"] / row["files"]
        print(f"{row['files']:>7} {row['total']:>8.1f} {row['phase']:>8.2f} "
              f"{per_file * 1000:>14.3f} {per_file / first if first else 0:>10.2f} "
              f"{row['peak_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
