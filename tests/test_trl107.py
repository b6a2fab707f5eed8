"""TRL107 beyond the fixtures: the device choices `MixedPlacements` recognises, and what the
project phase decides for a `device` parameter that another file passes."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from fixture_support import RULE_FIXTURES, lint
from trainlint.analysis.device.mixed import MixedPlacements
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


def origins(code: str):
    """(device expression, origin) of every chosen placement in `code`."""
    ctx = context(code)
    return [(ctx.code(c.expr), c.origin) for c in ctx.analysis(MixedPlacements).chosen()]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("import torch\nx = torch.zeros(1).to(args.device)", [("args.device", "option")]),
        ("import torch\nd = torch.device(cfg.train.device)\nm.to(d)", [("d", "option")]),
        ("def f(m, device):\n    m.to(device)", [("device", "parameter")]),
        # the rank's GPU, a bare GPU, another tensor's device, an accelerator's device
        ("import torch\nm.to(torch.device('cuda', local_rank))", []),
        ("import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\nm.to(d)", []),
        ("def f(m, x):\n    m.to(x.device)", []),
        ("m.to(accelerator.device)", []),
        # a literal other GPU placed directly is TRL102's; a checkpoint's map_location is copied
        ("m.to('cuda:1')", []),
        ("def f(m, device):\n    m.load_state_dict(torch.load('p', map_location=device))", []),
        # every call passes the bare GPU / a literal other GPU
        (
            "def f(m, device):\n    m.to(device)\n"
            "def main(m):\n    f(m, torch.device('cuda'))",
            [],
        ),
        (
            "def f(m, device):\n    m.to(device)\n"
            "def main(m):\n    f(m, device='cuda:1')",
            [("device", "parameter")],
        ),
        # an option the script overwrites with a bare device
        (
            "import torch\nargs.device = torch.device('cuda')\nm.to(args.device)",
            [],
        ),
    ],
)
def test_device_choices(code, expected):
    assert origins(code) == expected


def test_self_device_set_from_a_constructor_parameter():
    code = """
        class Trainer:
            def __init__(self, model, device):
                self.device = device
                self.model = model.to(self.device)
    """
    assert origins(code) == [("self.device", "attribute")]


ENGINE = RULE_FIXTURES / "TRL107" / "project_engine_device"
ENGINE_SET = RULE_FIXTURES / "TRL107" / "project_engine_set_device"


def test_a_parameter_passed_from_another_file_is_decided_there():
    # The whole project: train.py passes `--device` and never sets the current device.
    found = lint([ENGINE], ["TRL107"], root=ENGINE).diagnostics
    assert [(d.path.rsplit("/", 1)[-1], d.row) for d in found] == [("engine.py", 10)]
    # engine.py alone: train.py is read for its facts, and the answer is the same.
    alone = lint([ENGINE / "engine.py"], ["TRL107"], root=ENGINE).diagnostics
    assert [(d.path.rsplit("/", 1)[-1], d.row) for d in alone] == [("engine.py", 10)]
    # The importer sets the current device: `.cuda()` is the chosen GPU.
    assert lint([ENGINE_SET], ["TRL107"], root=ENGINE_SET).diagnostics == []
    assert lint([ENGINE_SET / "engine.py"], ["TRL107"], root=ENGINE_SET).diagnostics == []
