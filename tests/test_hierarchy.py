"""Class families across files (analysis/project/hierarchy.py): builtin and typing bases are
known, names resolve through star re-exports (honouring `__all__`, chains bounded, cycles cut),
seen through TRL301, whose findings need a complete family; and the function a read sits in,
told by indentation."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest

from fixture_support import lint, project_tree

TRAIN = (
    "import os\n"
    "import torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
    "from models import Head\n\n"
    "dist.init_process_group('nccl')\n"
    "model = DDP(Head().cuda(), device_ids=[int(os.environ['LOCAL_RANK'])])\n"
)
HEAD = (
    "import torch\n"
    "import torch.nn as nn\n\n"
    "from {base_module} import {base}\n\n\n"
    "class Head({base}):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.fc = nn.Linear(8, 2)\n"
    "        self.unused = nn.Parameter(torch.zeros(8))\n\n"
    "    def forward(self, x):\n"
    "        return self.fc(x)\n"
)


def _findings(root: Path) -> List[Tuple[str, int, str]]:
    result = lint([root], ["TRL301"], root=root)
    assert not result.crashes, [c.describe() for c in result.crashes]
    return sorted(
        (Path(d.path).resolve().relative_to(root.resolve()).as_posix(), d.row, d.severity.value)
        for d in result.diagnostics
    )


def _base_file(bases: str, imports: str = "import torch.nn as nn\n") -> str:
    return f"{imports}\n\nclass Base({bases}):\n    pass\n"


@pytest.mark.parametrize(
    "imports, bases",
    [
        ("import torch.nn as nn\n", "nn.Module, object"),
        ("import abc\nimport torch.nn as nn\n", "nn.Module, abc.ABC"),
        ("from typing import Generic, TypeVar\nimport torch.nn as nn\nT = TypeVar('T')\n",
         "nn.Module, Generic[T]"),
        ("from typing import Protocol\nimport torch.nn as nn\n", "nn.Module, Protocol"),
        ("import torch\n", "torch.nn.Module"),
    ],
)
def test_builtin_and_typing_bases_are_known(tmp_path, imports, bases):
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .head import Head\n",
            "models/base.py": _base_file(bases, imports),
            "models/head.py": HEAD.format(base_module=".base", base="Base"),
        },
    )
    assert _findings(root) == [("models/head.py", 11, "error")]


def test_a_rebound_builtin_name_is_not_the_builtin(tmp_path):
    # `object` bound to a library class in the file: unknown, so the family is incomplete.
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .head import Head\n",
            "models/base.py": _base_file(
                "nn.Module, object",
                "import torch.nn as nn\nfrom mmcv import BaseModule as object\n",
            ),
            "models/head.py": HEAD.format(base_module=".base", base="Base"),
        },
    )
    assert _findings(root) == []


def test_chained_star_re_exports_resolve(tmp_path):
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .heads import *\n",
            "models/heads/__init__.py": "from .dense import *\nfrom .head import *\n",
            "models/heads/dense/__init__.py": "from .base import *\n",
            "models/heads/dense/base.py": "__all__ = ['Base']\n" + _base_file("nn.Module"),
            "models/heads/head.py": "__all__ = ['Head']\n"
            + HEAD.format(base_module="..heads", base="Base"),
        },
    )
    assert _findings(root) == [("models/heads/head.py", 12, "error")]


def test_a_name_left_out_of_all_is_not_re_exported(tmp_path):
    # `from .base import *` does not bind Base (not in __all__): the parent is unknown.
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .head import Head\nfrom .base import *\n",
            "models/base.py": "__all__ = ['helper']\n" + _base_file("nn.Module")
            + "\ndef helper():\n    pass\n",
            "models/head.py": HEAD.format(base_module="models", base="Base"),
        },
    )
    assert _findings(root) == []


def test_a_private_name_is_not_star_exported_without_all(tmp_path):
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .head import Head\nfrom .base import *\n",
            "models/base.py": _base_file("nn.Module").replace("class Base", "class _Base"),
            "models/head.py": HEAD.format(base_module="models", base="_Base"),
        },
    )
    assert _findings(root) == []


def test_star_import_cycles_end(tmp_path):
    root = project_tree(
        tmp_path,
        {
            "train.py": TRAIN,
            "models/__init__.py": "from .head import Head\nfrom .a import *\n",
            "models/a.py": "from .b import *\n",
            "models/b.py": "from .a import *\n",
            "models/head.py": HEAD.format(base_module="models", base="Base"),
        },
    )
    assert _findings(root) == []


def test_a_long_star_chain_is_bounded(tmp_path):
    # 80 modules each re-exporting the next, more than the resolver's step budget: it gives up
    # (unknown, so quiet) without recursing.
    files = {"train.py": TRAIN, "models/__init__.py": "from .head import Head\nfrom .m0 import *\n"}
    for i in range(80):
        files[f"models/m{i}.py"] = f"from .m{i + 1} import *\n"
    files["models/m80.py"] = _base_file("nn.Module")
    files["models/head.py"] = HEAD.format(base_module="models", base="Base")
    root = project_tree(tmp_path, files)
    assert _findings(root) == []


# -- which files can build a class: Hierarchy.may_build_from, seen through TRL203 -----------------

_COUNTER = (
    "import torch.nn as nn\n\n\n"
    "class Counter(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.calls = 0\n"
    "        self.fc = nn.Linear(4, 4)\n\n"
    "    def forward(self, x):\n"
    "        self.calls += 1\n"
    "        return self.fc(x)\n"
)


def _dynamic_wrap(load: str) -> str:
    return (
        "import importlib\n"
        "import torch.nn as nn\n\n"
        f"net = nn.DataParallel({load}.build())\n"
        "print(net.module.calls)\n"
    )


@pytest.mark.parametrize(
    "load, reported",
    [
        ('importlib.import_module("nets." + NAME)', False),  # another package
        ('importlib.import_module("extras." + NAME)', True),  # the class's package
        ('importlib.import_module(f"extras.{NAME}")', True),
        ('importlib.import_module("extras.counter")', True),  # the class's module itself
        ('importlib.import_module("nets.plain")', False),
        ("importlib.import_module(NAME)", True),  # a name nobody can tell: may be anything
    ],
)
def test_a_dynamic_import_reaches_the_packages_it_names(tmp_path, load, reported):
    root = project_tree(
        tmp_path,
        {
            "train.py": "NAME = 'plain'\n" + _dynamic_wrap(load),
            "nets/__init__.py": "",
            "nets/plain.py": (
                "import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(4, 4)\n"
            ),
            "extras/__init__.py": "",
            "extras/counter.py": _COUNTER + "\n\ndef build():\n    return Counter()\n",
        },
    )
    result = lint([root], ["TRL203"], root=root)
    assert not result.crashes, [c.describe() for c in result.crashes]
    found = [Path(d.path).name for d in result.diagnostics]
    assert found == (["counter.py"] if reported else [])


ENCLOSING = '''\
class Board:
    names = [m.logits for m in ()]

    def collect(self, model):
        out = []
        for name in self.names:
            out.append(model.get_submodule(name).logits)
        return out

    async def clear(self, model):
        def one(name):
            model.get_submodule(name).logits = None
        return one

top = board.logits
'''


@pytest.mark.parametrize(
    "needle, expected",
    [
        ("m.logits", None),  # a class body
        ("(name).logits)", "collect"),
        ("(name).logits = None", "one"),  # the innermost function
        ("board.logits", None),  # module level
    ],
)
def test_enclosing_def_reads_the_function_by_indentation(needle, expected):
    from trainlint.analysis.project.hierarchy import _enclosing_def

    offset = ENCLOSING.index(needle) + needle.index(".logits")
    assert _enclosing_def(ENCLOSING, offset) == expected
