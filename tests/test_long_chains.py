"""Long but legal chains never reach Python's recursion limit (issue 21).

Summaries, name resolution and call-graph walks recurse along chains the analysed file builds:
`d1 = d0; d2 = d1; ...`, a DataParallel model aliased again and again, f0 calling f1 calling f2,
mutually recursive pairs. Before they were bounded, 250 to 500 links ended in RecursionError
(an internal error, exit 2). Each shape here is generated at 10,000 links, next to the same shape
with one link: the long chain is checked without an internal error, and it reports nothing the
short one does not (a link past a depth bound is unknown, hence quiet). Where the chain is
followed by memoised summaries (`analysis/base/memo.py`) the answer is exact: the same findings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Set

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from robustness_support import run_main
from trainlint.rules import all_rules

LONG = 10_000

TRAIN_LOOP = "for x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n"


def alias_device(n: int) -> str:
    links = "".join(f"d{i + 1} = d{i}\n" for i in range(n))
    return (
        f"import torch\nd0 = torch.device('cuda')\n{links}"
        f"model = torch.nn.Linear(2, 2).to(d{n})\n{TRAIN_LOOP}"
    )


def alias_model(n: int) -> str:
    links = "".join(f"m{i + 1} = m{i}\n" for i in range(n))
    return (
        f"import torch\nimport torch.nn as nn\nm0 = nn.Linear(2, 2)\n{links}m{n}.cuda()\n"
        f"opt = torch.optim.SGD(m{n}.parameters(), lr=0.1)\n"
        f"for x, y in loader:\n    loss = m{n}(x).sum()\n    loss.backward()\n    opt.step()\n"
    )


def data_parallel_alias(n: int) -> str:
    links = "".join(f"m{i + 1} = m{i}\n" for i in range(1, n))
    return (
        "import torch\nimport torch.nn as nn\nm0 = nn.Linear(2, 2)\nm1 = nn.DataParallel(m0)\n"
        f"{links}m{n}.module.weight\nm{n}.cuda()\ntorch.save(m{n}.state_dict(), 'x.pt')\n"
        f"for x in loader:\n    m{n}(x).sum().backward()\n"
    )


def call_chain(n: int) -> str:
    functions = "".join(f"def f{i}(x):\n    return f{i + 1}(x)\n" for i in range(n))
    return (
        f"import torch\n{functions}def f{n}(x):\n    return x.cuda()\n"
        "model = torch.nn.Linear(2, 2)\n"
        "for x, y in loader:\n    loss = model(f0(x)).sum()\n    loss.backward()\n"
    )


def call_chain_to_wrapper(n: int) -> str:
    functions = "".join(f"def f{i}(m):\n    return f{i + 1}(m)\n" for i in range(n))
    return (
        f"import torch\n{functions}"
        f"def f{n}(m):\n    return torch.nn.DataParallel(m.cuda())\n"
        f"model = f0(torch.nn.Linear(2, 2))\n{TRAIN_LOOP}"
        "torch.save(model.state_dict(), 'm.pt')\n"
    )


def mutual_recursion(n: int) -> str:
    pairs = "".join(
        f"def g{i}(x):\n    if x:\n        return h{i}(x)\n    return g{i + 1}(x)\n"
        f"def h{i}(x):\n    return g{i}(x.cuda())\n"
        for i in range(max(n // 2, 1))
    )
    return (
        f"import torch\n{pairs}def g{max(n // 2, 1)}(x):\n    return x\n"
        "model = torch.nn.Linear(2, 2)\n"
        "for x, y in loader:\n    loss = g0(model(x))\n    loss.backward()\n"
    )


def method_chain(n: int) -> str:
    methods = "".join(
        f"    def f{i}(self, x):\n        return self.f{i + 1}(x)\n" for i in range(n)
    )
    return (
        "import torch\nclass Trainer:\n    def __init__(self):\n"
        f"        self.model = torch.nn.Linear(2, 2)\n{methods}"
        f"    def f{n}(self, x):\n        return self.model(x.cuda())\n"
        "    def fit(self, loader):\n        for x in loader:\n"
        "            loss = self.f0(x).sum()\n            loss.backward()\n"
    )


def factory_chain(n: int) -> str:
    functions = "".join(f"def make{i}():\n    return make{i + 1}()\n" for i in range(n))
    return (
        f"import torch\n{functions}def make{n}():\n    return torch.nn.Linear(2, 2)\n"
        "model = torch.nn.DataParallel(make0())\n"
        "for x in loader:\n    model(x).sum().backward()\n"
    )


def rank_alias(n: int) -> str:
    links = "".join(f"r{i + 1} = r{i}\n" for i in range(n))
    return (
        "import argparse\nimport torch\nimport torch.distributed as dist\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--local_rank', type=int)\n"
        f"r0 = parser.parse_args().local_rank\n{links}dist.init_process_group('nccl')\n"
        f"torch.cuda.set_device(r{n})\n"
        "model = torch.nn.parallel.DistributedDataParallel(\n"
        f"    torch.nn.Linear(2, 2).cuda(r{n}), device_ids=[r{n}]\n)\n"
    )


def literal_device_alias(n: int) -> str:
    links = "".join(f"d{i + 1} = d{i}\n" for i in range(n))
    return (
        f"import torch\nd0 = 'cuda:1'\n{links}"
        f"encoder = torch.nn.Linear(2, 2).to(d{n})\n"
        "decoder = torch.nn.Linear(2, 2).cuda()\n"
        f"x = torch.zeros(2, device=d{n})\n"
    )


def class_chain(n: int) -> str:
    classes = "".join(f"class C{i + 1}(C{i}):\n    pass\n" for i in range(n))
    return (
        "import torch\nimport torch.nn as nn\nclass C0(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        f"        self.p = nn.Parameter(torch.zeros(1))\n{classes}"
        f"model = nn.parallel.DistributedDataParallel(C{n}())\n"
    )


def loader_wrap_chain(n: int) -> str:
    # Each wrapper of the loader is assigned to the next (`w2 = iter(w1)`): where the loader is
    # iterated is found through the whole chain (TRL303 follows it to the epoch loop).
    links = "".join(f"w{i + 1} = iter(w{i})\n" for i in range(n))
    return (
        "import torch\nimport torch.distributed as dist\n"
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "dist.init_process_group('nccl')\nsampler = DistributedSampler(ds)\n"
        f"w0 = DataLoader(ds, sampler=sampler)\n{links}"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())\n"
        f"for epoch in range(3):\n    for x in w{n}:\n        model(x.cuda()).sum().backward()\n"
    )


# Shapes followed through memoised summaries or name resolution: the long chain's findings are
# exactly the short one's. The others may cross an explicit depth bound and go quiet.
EXACT: Dict[str, Callable[[int], str]] = {
    "alias_device": alias_device,
    "alias_model": alias_model,
    "data_parallel_alias": data_parallel_alias,
    "call_chain_to_wrapper": call_chain_to_wrapper,
    "factory_chain": factory_chain,
    "rank_alias": rank_alias,
    "loader_wrap_chain": loader_wrap_chain,
}
BOUNDED: Dict[str, Callable[[int], str]] = {
    "call_chain": call_chain,
    "mutual_recursion": mutual_recursion,
    "method_chain": method_chain,
    "class_chain": class_chain,
    "literal_device_alias": literal_device_alias,
}


def _check(directory: Path, files: Dict[str, str]) -> Dict[str, Counter]:
    """Run `trainlint check --select ALL --preview` on the files; no internal error; codes per
    file."""
    for name, text in files.items():
        (directory / name).write_text(text)
    # Chains of 10,000 links are 140-540 kB, over the default `max-file-size`: lift it, so that
    # they are analysed (the configuration file also keeps the repository's own out).
    (directory / "limits.toml").write_text("max-file-size = 0\n")
    # `--preview`: the preview rules' analyses must not recurse along a chain either.
    args = ["--config", "limits.toml", "--no-cache", "--select", "ALL", "--preview"]
    args += ["--output-format", "json"]
    args += list(files)
    code, out, err = run_main(args, directory, seconds=600)
    assert "RecursionError" not in err + out, err[-3000:]
    assert err == "", err[-3000:]
    findings = json.loads(out)
    assert code == (1 if findings else 0), (code, len(findings))
    found: Dict[str, Counter] = {name: Counter() for name in files}
    for finding in findings:
        found[Path(finding["filename"]).name][finding["code"]] += 1
    return found


# Every shape at 10,000 links takes minutes on two cores: the default run keeps one shape per
# kind of walk (name resolution, a call-graph walk, the class hierarchy); `-m fuzz` runs all.
# loader_wrap_chain (the wrappers a loader is assigned to) takes about 7 s.
IN_DEFAULT_RUN = {
    "alias_device",
    "data_parallel_alias",
    "call_chain",
    "class_chain",
    "loader_wrap_chain",
    "literal_device_alias",
}


@pytest.mark.parametrize(
    "shape",
    [
        shape if shape in IN_DEFAULT_RUN else pytest.param(shape, marks=pytest.mark.fuzz)
        for shape in sorted(EXACT) + sorted(BOUNDED)
    ],
)
def test_ten_thousand_links(tmp_path, shape):
    make = EXACT.get(shape) or BOUNDED[shape]
    found = _check(tmp_path, {"short.py": make(1), "long.py": make(LONG)})
    short, long = found["short.py"], found["long.py"]
    if shape in EXACT:
        # Exact for the default set; preview rules follow chains of their own, within bounds.
        preview = {code for code, rule in all_rules().items() if rule.preview}
        assert _without(long, preview) == _without(short, preview)
        assert not (long - short), f"the long chain reports what the short one does not: {long}"
    else:
        assert not (long - short), f"the long chain reports what the short one does not: {long}"


def _without(found: Counter, codes: Set[str]) -> Counter:
    return Counter({code: n for code, n in found.items() if code not in codes})


def test_flake8_plugin_on_a_long_chain(tmp_path):
    (tmp_path / "long.py").write_text(data_parallel_alias(LONG))
    (tmp_path / "trainlint.toml").write_text("max-file-size = 0\n")  # 138 kB: over the default
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "TRL", "long.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "RecursionError" not in proc.stdout + proc.stderr
    assert "TRL000" not in proc.stdout, proc.stdout  # trainlint's own failure
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "TRL502" in proc.stdout


# -- generated chains: links of every kind, interleaved ---------------------------------------

# Each link continues the chain from `v{i}` to `v{i+1}`; every kind keeps the value a module.
LINK_KINDS = {
    "alias": "v{j} = v{i}\n",
    "wrap": "v{j} = nn.DataParallel(v{i})\n",
    "helper": "def pass{i}(m):\n    return m\nv{j} = pass{i}(v{i})\n",
    "moved": "v{j} = v{i}.cuda()\n",
    "tuple": "v{j}, k{i} = v{i}, {i}\n",
}


def _chain(kinds: List[str], called: bool) -> str:
    """A chain of the given link kinds; with `called`, each link lives in a function calling
    the next one, so the call graph is as deep as the chain is long."""
    if not called:
        links = "".join(LINK_KINDS[kind].format(i=i, j=i + 1) for i, kind in enumerate(kinds))
        body = f"v0 = nn.Linear(2, 2)\n{links}model = v{len(kinds)}\n"
    else:
        functions = "".join(
            f"def step{i}(v{i}):\n"
            + "".join(
                "    " + line + "\n"
                for line in LINK_KINDS[kind].format(i=i, j=i + 1).splitlines()
            )
            + f"    return step{i + 1}(v{i + 1})\n"
            for i, kind in enumerate(kinds)
        )
        last = f"def step{len(kinds)}(m):\n    return m\n"
        body = f"{functions}{last}model = step0(nn.Linear(2, 2))\n"
    return (
        f"import torch\nimport torch.nn as nn\n{body}"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
        "torch.save(model.state_dict(), 'm.pt')\n"
    )


@pytest.mark.fuzz
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(st.sampled_from(sorted(LINK_KINDS)), min_size=1, max_size=8).map(
        # A short pattern of kinds repeated to 1,500 links: four times the depth at which the
        # unbounded walks failed, small enough to run several examples.
        lambda pattern: (pattern * (1_500 // len(pattern) + 1))[:1_500]
    ),
    called=st.booleans(),
)
def test_generated_long_chains(tmp_path, kinds, called):
    _check(tmp_path, {"chain.py": _chain(kinds, called)})


# -- chains across the files of a project ------------------------------------------------------

PROJECT_LINKS = 300  # files: each link is a module (about 10 s for both shapes)


def _project_chain(tmp_path: Path, files: Dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\n")
    code, out, err = run_main(["--no-cache", "--select", "ALL", "--preview", "."], tmp_path, 600)
    assert "RecursionError" not in err + out and "internal error" not in err, err[-3000:]
    assert code in (0, 1), err[-3000:]


def test_a_class_chain_across_modules(tmp_path):
    """Class C{k} in module m{k} derives from C{k-1} of m{k-1}: the hierarchy resolves bases
    through imports within a fixed number of steps."""
    files = {
        "m0.py": "import torch.nn as nn\nclass C0(nn.Module):\n    pass\n",
        "train.py": (
            f"import torch\nfrom m{PROJECT_LINKS} import C{PROJECT_LINKS}\n"
            f"model = torch.nn.parallel.DistributedDataParallel(C{PROJECT_LINKS}())\n"
        ),
    }
    for k in range(1, PROJECT_LINKS + 1):
        files[f"m{k}.py"] = f"from m{k - 1} import C{k - 1}\nclass C{k}(C{k - 1}):\n    pass\n"
    _project_chain(tmp_path, files)


def test_a_star_reexport_chain_across_packages(tmp_path):
    """`from .p{k+1} import *` in package p{k}'s __init__.py, 300 packages deep."""
    files = {}
    path = ""
    for k in range(PROJECT_LINKS):
        path += f"p{k}/"
        files[f"{path}__init__.py"] = f"from .p{k + 1} import *\n"
    path += f"p{PROJECT_LINKS}/"
    files[f"{path}__init__.py"] = (
        "import torch\nimport torch.nn as nn\nclass Head(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.unused = nn.Parameter(torch.zeros(1))\n"
        "    def forward(self, x):\n        return x\n"
    )
    files["train.py"] = (
        "import torch\nfrom p0 import Head\n"
        "model = torch.nn.parallel.DistributedDataParallel(Head())\n"
    )
    _project_chain(tmp_path, files)
