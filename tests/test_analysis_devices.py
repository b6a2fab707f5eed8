"""analysis/device/expressions.py: what an expression denotes as a device."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.device.expressions import Device, Devices
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def device_at_last_line(code: str) -> Device:
    """What the expression on the file's last line denotes."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    last = module.body[-1].body[0].value  # type: ignore[attr-defined]
    found = ctx.analysis(Devices).device_of(last)
    assert found is not None
    return found


@pytest.mark.parametrize(
    "assignments, kind, origin, index_text",
    [
        # built from one index chosen at run time: that device, with the index's text
        (['opt.device = torch.device("cuda:{}".format(opt.gpus[0]))'], "cuda", "user",
         "opt.gpus[0]"),
        (['self.device = torch.device(f"cuda:{args.gpu}")'], "cuda", "user", "args.gpu"),
        (['opt.device = "cuda:%d" % opt.gpu', 'opt.device = "cuda:%d" % opt.gpu'], "cuda",
         "user", "opt.gpu"),
        # two different indices, a literal, the current device: the option as before (unknown)
        (['opt.device = "cuda:{}".format(opt.gpus[0])', 'opt.device = f"cuda:{opt.gpu}"'],
         "unknown", "user", None),
        (['opt.device = "cuda:1"'], "unknown", "user", None),
        (['opt.device = torch.device("cuda")'], "unknown", "user", None),
        ([], "unknown", "user", None),
    ],
)
def test_an_options_device_is_what_the_file_assigns_it(assignments, kind, origin, index_text):
    target = assignments[0].split(" = ")[0] if assignments else "opt.device"
    code = "import torch\n" + "".join(line + "\n" for line in assignments) + target + "\n"
    found = device_at_last_line(code)
    assert (found.kind, found.origin, found.index_text) == (kind, origin, index_text)
