"""Arguments a `forward` uses only on the host (analysis/device/host_side.py): lengths it packs
a sequence with, values it turns into Python numbers, through methods that keep the tensor
where it is and through a submodule of the same file; not an argument that meets other tensors,
or one rebound where the analysis cannot tell which value a later read sees. A parameter the
body never names counts too: it meets nothing."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.nodes import own_method
from trainlint.analysis.device.host_side import HostSide
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree

HEADER = """
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence as pack


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True)
"""


def _host(body: str, extra: str = "") -> set:
    code = textwrap.dedent(HEADER) + textwrap.indent(textwrap.dedent(body), "    ") + extra
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="m.py", text=code), module, Tree(module), Settings())
    model = next(s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == "Model")
    forward = own_method(model, "forward")
    assert forward is not None
    return set(ctx.analysis(HostSide).host_params(forward))


@pytest.mark.parametrize(
    "body, expected",
    [
        ("def forward(self, x, lengths):\n    return self.rnn(pack(x, lengths))\n", {2}),
        ("def forward(self, x, n):\n    return self.rnn(pack(x, lengths=n))\n", {2}),
        ("def forward(self, x, lens):\n    return x[:, : int(lens.max().item())]\n", set()),
        ("def forward(self, x, lens):\n    return x[:, : max(lens.tolist())]\n", {2}),
        # through methods that keep the tensor where it is, then to the host
        ("def forward(self, x, lens):\n    lens = lens.clamp(max=x.shape[1]).cpu()\n"
         "    return self.rnn(pack(x, lens))\n", {2}),
        # never read at all: what it is given meets nothing (unless the body may reach it
        # through `locals()`)
        ("def forward(self, x, lengths=None):\n    return self.rnn(x)[0]\n", {2}),
        ("def forward(self, x, lengths=None):\n    return self.rnn(x, **locals())[0]\n", set()),
        # rebound at the top of the body: later reads are of another value
        ("def forward(self, x, lens):\n    out = self.rnn(pack(x, lens))[0]\n"
         "    lens = torch.arange(3)\n    return out * lens.cuda()\n", {2}),
        # rebound on one branch only: which value a later read sees is not known
        ("def forward(self, x, lens):\n    if x.dim() > 2:\n        lens = lens * 2\n"
         "    return self.rnn(pack(x, lens))\n", set()),
        # meets a tensor of the model's device
        ("def forward(self, x, lens):\n"
         "    mask = torch.arange(x.shape[1], device=x.device) < lens[:, None]\n"
         "    return x * mask\n", set()),
        # through a name bound to the same values at the top of the body
        ("def forward(self, x, lens):\n    clamped = lens.clamp(max=x.shape[1])\n"
         "    return self.rnn(pack(x, clamped))\n", {2}),
        ("def forward(self, x, lens):\n    clamped = lens.clamp(max=x.shape[1])\n"
         "    return x[:, :, None] * clamped\n", set()),
    ],
)
def test_host_params(body, expected):
    assert _host(body) == expected


def test_a_submodule_of_the_same_file_that_packs_its_lengths():
    extra = textwrap.dedent(
        """

        class Encoder(nn.Module):
            def forward(self, x, lens):
                return pack(x, lens)
        """
    )
    body = (
        "def __init__(self):\n    super().__init__()\n    self.encoder = Encoder()\n\n"
        "def forward(self, x, lx):\n    return self.encoder(x, lx)\n"
    )
    assert _host(body, extra) == {2}
