"""Which classes the code around a DataParallel wrap may build (analysis/project/mentions.py
records what each top-level definition names; construction.py follows it across files), seen
through TRL203's warning about a model the analysis cannot name: a class nothing on the way
names is quiet; helpers, registries filled by decorators or module-level statements, modules
named as a whole, and packages importing their own submodules are followed; code that looks
names up at run time makes every class possible again."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

import libcst as cst
import pytest

from fixture_support import lint, project_tree
from trainlint.analysis.project.mentions import MODULE_CODE, Mentions
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree

# A layer that keeps a value on the module in forward, read by its own method afterwards.
LAYER = """
import torch.nn as nn


class Tap(nn.Module):
    def forward(self, x):
        self.last = x.detach()
        return x

    def value(self):
        return self.last
"""
TRAIN = """
import torch.nn as nn
{imports}

model = nn.DataParallel({build}).cuda()
"""


def _project(tmp_path: Path, files: Dict[str, str]) -> Path:
    return project_tree(tmp_path, {name: textwrap.dedent(text) for name, text in files.items()})


def _reported(root: Path) -> List[str]:
    result = lint([root], ["TRL203"], root=root)
    assert not result.crashes, [c.describe() for c in result.crashes]
    return sorted(Path(d.path).name for d in result.diagnostics)


def _train(imports: str, build: str) -> str:
    return TRAIN.format(imports=imports, build=build)


def test_a_layer_nothing_on_the_way_names_is_quiet(tmp_path):
    root = _project(tmp_path, {
        "train.py": _train("import nets", "getattr(nets, 'Plain')()"),
        "nets/__init__.py": "from .plain import Plain\n",
        "nets/plain.py": "import torch.nn as nn\nfrom .tap import Tap\n\n"
                         "class Plain(nn.Module):\n    def forward(self, x):\n        return x\n",
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == []


def test_a_layer_a_helper_builds_is_reported(tmp_path):
    root = _project(tmp_path, {
        "train.py": _train("import nets", "getattr(nets, 'Tapped')()"),
        "nets/__init__.py": "from .tapped import Tapped\n",
        "nets/tapped.py": "import torch.nn as nn\nfrom .tap import Tap\n\n"
                          "def taps(n):\n    return [Tap() for _ in range(n)]\n\n"
                          "class Tapped(nn.Module):\n    def __init__(self):\n"
                          "        super().__init__()\n"
                          "        self.taps = nn.Sequential(*taps(2))\n",
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == ["tap.py"]


@pytest.mark.parametrize(
    "registry",
    [
        # a module-level statement puts the class into the dict the builder reads
        "from .tap import Tap\nMODELS = {}\nMODELS['tap'] = Tap\n",
        # a decorator of a library may register it anywhere
        "from .tap import *\nMODELS = {}\n",
    ],
)
def test_registries_reach_what_was_put_into_them(tmp_path, registry):
    layer = LAYER
    if "import *" in registry:
        layer = LAYER.replace("class Tap", "import mmengine\n\n@mmengine.register\nclass Tap")
    root = _project(tmp_path, {
        "train.py": _train("from nets import MODELS", "MODELS['tap']()"),
        "nets/__init__.py": registry,
        "nets/tap.py": layer,
    })  # fmt: skip
    assert _reported(root) == ["tap.py"]


@pytest.mark.parametrize("global_name", ["__name__", "__file__", "__doc__"])
def test_a_star_import_does_not_bind_the_scripts_own_module_globals(tmp_path, global_name):
    # `if __name__ == "__main__":` under `from nets import *`: `__name__` is the script's own,
    # not the package named whole, so the layer only an import line names stays out of reach.
    train = _train("from nets import *", "build()") + f"print({global_name})\n"
    root = _project(tmp_path, {
        "train.py": train,
        "nets/__init__.py": "from .plain import *\n",
        "nets/plain.py": "import torch.nn as nn\nfrom .tap import Tap\n\n"
                         "class Plain(nn.Module):\n    def forward(self, x):\n        return x\n\n"
                         "def build():\n    return Plain()\n",
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == []


PLAIN = (
    "import torch.nn as nn\n\n"
    "class Plain(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "NETS = {'plain': Plain}\n"
)


@pytest.mark.parametrize(
    "body, reported",
    [
        # the tap is a loss beside the model: the slice of the wrapped value leaves it out
        ("model = NETS[name]()\n    model = nn.DataParallel(model).cuda()\n"
         "    tap = Tap()\n    return tap(model(x))\n", []),
        # set on the model before the wrap: part of what the replicas run
        ("model = NETS[name]()\n    model.head = Tap()\n"
         "    model = nn.DataParallel(model).cuda()\n    return model(x)\n", ["tap.py"]),
        # added through a module method
        ("model = NETS[name]()\n    model.add_module('tap', Tap())\n"
         "    return nn.DataParallel(model)(x)\n", ["tap.py"]),
        # handed to a helper of the project, whose code builds it
        ("model = NETS[name]()\n    attach(model)\n    return nn.DataParallel(model)(x)\n",
         ["tap.py"]),
        # a model from the caller: the whole file and its importers count
        ("return nn.DataParallel(name)(Tap()(x))\n", ["tap.py"]),
        # the model leaves the function: whoever gets it may change it
        ("model = NETS[name]()\n    tap = Tap()\n    return nn.DataParallel(model), tap\n",
         ["tap.py"]),
    ],
)
def test_the_wrapped_value_is_followed_not_the_whole_file(tmp_path, body, reported):
    train = (
        "import torch.nn as nn\nfrom nets.plain import NETS\nfrom nets.tap import Tap\n"
        "from nets.helpers import attach\n\n\ndef run(name, x):\n    " + body
    )
    root = _project(tmp_path, {
        "train.py": train,
        "nets/__init__.py": "",
        "nets/plain.py": PLAIN,
        "nets/helpers.py": "from .tap import Tap\n\ndef attach(model):\n    model.tap = Tap()\n",
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == reported


def test_a_package_importing_its_submodules_by_name_binds_their_names(tmp_path):
    walker = (
        "import importlib\nimport pkgutil\n\n"
        "for _, name, _ in pkgutil.walk_packages(__path__):\n"
        "    module = importlib.import_module('.' + name, package=__name__)\n"
        "    globals().update({k: getattr(module, k) for k in dir(module)})\n"
    )
    root = _project(tmp_path, {
        "train.py": _train("from nets.factory import build", "build()"),
        "nets/factory.py": "from nets import Tap\n\ndef build():\n    return Tap()\n",
        "nets/__init__.py": walker,
        "nets/tap.py": LAYER,
        "nets/idle.py": LAYER.replace("Tap", "Idle"),
    })  # fmt: skip
    assert _reported(root) == ["tap.py"]


def test_a_lookup_by_computed_name_may_build_anything(tmp_path):
    root = _project(tmp_path, {
        "train.py": _train("from nets.plain import Plain\nimport nets.tap",
                           "globals()[input()]()"),
        "nets/__init__.py": "",
        "nets/plain.py": "import torch.nn as nn\n\n"
                         "class Plain(nn.Module):\n    def forward(self, x):\n        return x\n",
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == ["tap.py"]


def _facts(code: str, path: str = "t.py") -> dict:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path=path, text=code), module, Tree(module), Settings())
    return ctx.analysis(Mentions).facts()


def test_mentions_record_names_decorators_links_and_lookups():
    facts = _facts("""
        import torch.nn as nn
        from .layers import Block
        from .registry import register

        TABLE = {"block": Block}
        register_all(TABLE, Extra)

        @register("net")
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = make_body(Block)

        def make_body(kind):
            return nn.Sequential(kind(), kind())

        def pick(name):
            return globals()[name]()
    """)
    assert facts["mentions"]["Net"] == [".layers.Block", "<local>.make_body"]
    assert facts["mentions"]["TABLE"] == [".layers.Block"]
    assert facts["decorated"] == {"Net": [".registry.register"]}
    assert facts["dynamic"] == ["pick"]
    assert facts["imports_submodules"] is False
    assert MODULE_CODE not in facts["dynamic"]


def test_globals_outside_a_package_walker_is_a_run_time_lookup():
    facts = _facts("for name in NAMES:\n    globals()[name] = make(name)\n", "pkg/__init__.py")
    assert facts["dynamic"] == [MODULE_CODE]


TAPPED = (
    "import torch.nn as nn\nfrom .tap import Tap\n{decorator}\n"
    "class Tapped(nn.Module):\n    def __init__(self, in_dim, hidden=8):\n"
    "        super().__init__()\n        self.tap = Tap()\n"
)


@pytest.mark.parametrize(
    "call, decorator, reported",
    [
        ("getattr(nets, name)(channels=3)", "", []),  # Tapped takes no `channels`
        ("getattr(nets, name)(in_dim=3)", "", ["tap.py"]),
        ("getattr(nets, name)(3, 8)", "", ["tap.py"]),
        ("getattr(nets, name)(3, 8, 1)", "", []),  # one positional argument too many
        ("getattr(nets, name)(hidden=3)", "", []),  # `in_dim` missing
        ("getattr(nets, name)(**options)", "", ["tap.py"]),
        # a decorator that hands back what it is given keeps the signature; another may not
        ("getattr(nets, name)(channels=3)", "from .marks import keep\n@keep", []),
        ("getattr(nets, name)(channels=3)", "from .marks import wrap\n@wrap", ["tap.py"]),
    ],
)
def test_a_class_picked_by_name_must_accept_the_call(tmp_path, call, decorator, reported):
    marks = (
        "import functools\n\n"
        "def keep(cls):\n    cls.marked = True\n    return cls\n\n"
        "def wrap(cls):\n    return lambda *a, **k: cls()\n"
    )
    root = _project(tmp_path, {
        "train.py": _train("import nets\nname, options = input(), {}", call),
        "nets/__init__.py": "from .tapped import Tapped\nfrom .plain import Plain\n",
        "nets/plain.py": "import torch.nn as nn\n\nclass Plain(nn.Module):\n"
                         "    def __init__(self, channels=3):\n        super().__init__()\n",
        "nets/marks.py": marks,
        "nets/tapped.py": TAPPED.format(decorator=decorator),
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == reported


def test_a_picked_name_handed_on_may_be_called_with_anything(tmp_path):
    root = _project(tmp_path, {
        "train.py": _train("import nets\nfrom build import build",
                           "build(getattr(nets, input()))"),
        "build.py": "def build(kind):\n    return kind(channels=3, extra=1)\n",
        "nets/__init__.py": "from .tapped import Tapped\n",
        "nets/tapped.py": TAPPED.format(decorator=""),
        "nets/tap.py": LAYER,
    })  # fmt: skip
    assert _reported(root) == ["tap.py"]
