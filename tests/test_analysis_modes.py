"""analysis/loop/modes.py: which torch layers behave differently in train and eval mode, and
base/callgraph.py's member_kind (a bound method reached through an attribute is not a module)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.callgraph import CallGraph
from trainlint.analysis.loop.modes import (
    eval_mode_returners,
    eval_mode_returns,
    imported_model_class,
    mode_dependent_layer,
    mode_free_classes,
    mode_free_model,
    model_classes,
    plain_function,
)
from trainlint.analysis.loop.steps import TrainingSteps
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


@pytest.mark.parametrize(
    "layer, dependent",
    [
        ("nn.Linear(784, 10)", False),
        ("nn.Conv2d(3, 16, 3, padding=1)", False),
        ("nn.Embedding(1000, 64)", False),
        ("nn.LayerNorm(64)", False),
        ("nn.LSTM(28, 128, 2, batch_first=True)", False),
        ("nn.LSTM(28, 128, dropout=0.5)", False),  # one layer: PyTorch applies no dropout
        ("nn.GRU(28, 128, num_layers=3, dropout=0.0)", False),
        ("nn.LSTM(28, 128, num_layers=2, dropout=0.2)", True),
        ("nn.LSTM(28, 128, 2, True, True, 0.1)", True),
        ("nn.RNN(28, 128, 2, 'tanh', True, True, 0.1)", True),
        ("nn.RNN(28, 128, 2, 'tanh', True, True, 0)", False),
        ("nn.GRU(28, 128, num_layers=layers, dropout=p)", True),  # configured: assume dropout
        ("nn.LSTM(*sizes, **options)", True),
        ("nn.Dropout(0.1)", True),
        ("nn.BatchNorm1d(64)", True),
        ("nn.RReLU()", True),
        ("nn.TransformerEncoderLayer(64, 4)", True),
        ("nn.MultiheadAttention(64, 4)", True),
        ("nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))", False),
        ("nn.Sequential(nn.Linear(2, 8), nn.Sequential(nn.Dropout(), nn.ReLU()))", True),
        ("nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])", True),  # not written out
        ("nn.ModuleList([nn.Linear(8, 8), nn.Tanh()])", False),
        # the `training` flag decides, not the module's mode: only a flag that follows the
        # mode makes it mode-dependent (without one, F.dropout always drops)
        ("F.dropout(x, 0.5, self.training)", True),
        ("F.dropout(x, training=self.training)", True),
        ("F.dropout(x, 0.5)", False),
        ("F.dropout(x, training=True)", False),
        ("F.batch_norm(x, mean, var, training=False)", False),
        ("F.batch_norm(x, mean, var, None, None, self.training)", True),
        ("F.relu(x)", False),
        ("make_layer(64)", None),
    ],
)
def test_mode_dependent_layer(layer, dependent):
    ctx = context(f"import torch.nn as nn\nimport torch.nn.functional as F\nlayer = {layer}\n")
    steps = ctx.analysis(TrainingSteps)
    call = next(a.value for a in ctx.nodes(cst.Assign))
    assert mode_dependent_layer(steps, call) is dependent


@pytest.mark.parametrize(
    "body, free",
    [
        ("self.lstm = nn.LSTM(28, 64, 2)\n                self.fc = nn.Linear(64, 10)", True),
        (
            "self.lstm = nn.LSTM(28, 64, 2, dropout=0.2)\n"
            "                self.fc = nn.Linear(64, 10)",
            False,
        ),
        ("self.lstm = rnn_factory(28, 64)\n                self.fc = nn.Linear(64, 10)", False),
        ("self.lstm = nn.LSTM(28, 64, 2)\n                self.drop = nn.Dropout(0.1)", False),
    ],
)
def test_mode_free_class_with_recurrent_layers(body, free):
    ctx = context(
        f"""
        import torch.nn as nn

        class Reader(nn.Module):
            def __init__(self):
                super().__init__()
                {body}

            def forward(self, x):
                lstm_out, _ = self.lstm(x)
                return self.fc(lstm_out[:, -1])

        model = Reader()
        """
    )
    steps = ctx.analysis(TrainingSteps)
    assert mode_free_model(steps, "model", ctx.module.body[-1]) is free


def test_mode_free_class_reading_self_training_is_not_free():
    ctx = context(
        """
        import torch.nn as nn
        import torch.nn.functional as F

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                return F.dropout(self.fc(x), 0.2, training=self.training)

        model = Net()
        """
    )
    steps = ctx.analysis(TrainingSteps)
    assert not mode_free_model(steps, "model", ctx.module.body[-1])


@pytest.mark.parametrize(
    "member, kind",
    [
        ("run_model", "method"),
        ("encoder", "attribute"),
        ("features", "attribute"),  # a @property returns whatever it returns
        ("head", "attribute"),  # assigned in a same-file base class
        ("helper", "method"),  # defined in a same-file base class
        ("backbone", "unknown"),  # neither: inherited from a class outside the file
    ],
)
def test_member_kind_through_the_class(member, kind):
    ctx = context(
        f"""
        import torch.nn as nn
        from timm.models import VisionTransformer

        class Base(VisionTransformer):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(8, 2)

            def helper(self, x):
                return x

        class Learner(Base):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Linear(8, 8)

            def run_model(self, net, x):
                return net(x)

            @property
            def features(self):
                return self.encoder

        learner = Learner().cuda()
        learner.{member}(x)
        """
    )
    call = ctx.module.body[-1].body[0].value
    assert ctx.analysis(CallGraph).member_kind(call.func) == kind


def test_member_kind_of_an_unknown_receiver_is_none():
    ctx = context("def evaluate(model, x):\n    return model.encoder(x)\n")
    call = next(iter(ctx.nodes(cst.Call)))
    assert ctx.analysis(CallGraph).member_kind(call.func) is None


def test_nested_evaluation_loops_give_one_loop_per_model_call():
    ctx = context(
        """
        import torch
        val_loader = torch.utils.data.DataLoader(range(4))
        test_loader = torch.utils.data.DataLoader(range(4))

        def evaluate(model):
            for a in val_loader:
                for x in test_loader:
                    model(x)
        """
    )
    loops = ctx.analysis(TrainingSteps).eval_loops()
    assert len(loops) == 1
    assert loops[0][0].iter.value == "val_loader"


# What CPU PyTorch shows about the layers above: a layer called mode-free computes the same in
# train and eval mode; a mode-dependent one (with dropout or batch statistics) does not.
RUNNABLE = {
    "nn.Linear(784, 10)": (4, 784),
    "nn.Conv2d(3, 16, 3, padding=1)": (2, 3, 8, 8),
    "nn.LayerNorm(64)": (4, 64),
    "nn.LSTM(28, 128, 2, batch_first=True)": (4, 5, 28),
    "nn.LSTM(28, 128, dropout=0.5)": (5, 4, 28),
    "nn.GRU(28, 128, num_layers=3, dropout=0.0)": (5, 4, 28),
    "nn.LSTM(28, 128, num_layers=2, dropout=0.2)": (5, 4, 28),
    "nn.LSTM(28, 128, 2, True, True, 0.1)": (4, 5, 28),
    "nn.RNN(28, 128, 2, 'tanh', True, True, 0.1)": (4, 5, 28),
    "nn.RNN(28, 128, 2, 'tanh', True, True, 0)": (4, 5, 28),
    "nn.Dropout(0.1)": (4, 64),
    "nn.BatchNorm1d(64)": (4, 64),
    "nn.RReLU()": (4, 64),
    "nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))": (4, 2),
    "nn.Sequential(nn.Linear(2, 8), nn.Sequential(nn.Dropout(), nn.ReLU()))": (4, 2),
}


@pytest.mark.parametrize("layer", sorted(RUNNABLE))
def test_mode_free_layers_compute_the_same_in_both_modes(layer):
    torch = pytest.importorskip("torch")
    from torch import nn

    ctx = context(f"import torch.nn as nn\nlayer = {layer}\n")
    call = next(a.value for a in ctx.nodes(cst.Assign))
    dependent = mode_dependent_layer(ctx.analysis(TrainingSteps), call)
    torch.manual_seed(0)
    module = eval(layer, {"nn": nn})  # the test's own literal, not analysed code
    x = torch.randn(*RUNNABLE[layer]) * 3
    with torch.no_grad():
        outputs = []
        for train in (True, False):
            module.train(train)
            y = module(x)
            outputs.append(y[0] if isinstance(y, tuple) else y)
    assert torch.equal(outputs[0], outputs[1]) is (not dependent)


def test_functional_calls_still_read_what_they_are_given():
    ctx = context(
        """
        import torch.nn as nn
        import torch.nn.functional as F

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                return F.relu(F.dropout(self.fc(x), 0.2, self.training))

        model = Net()
        """
    )
    steps = ctx.analysis(TrainingSteps)
    assert not mode_free_model(steps, "model", ctx.module.body[-1])


@pytest.mark.parametrize(
    "code, expected",
    [
        ("from model import Net\nmodel = Net(3)\n", "model.Net"),
        ("from model import Net\nmodel = Net(3).to(device).cuda()\n", "model.Net"),
        ("import model as M\nmodel = M.Net()\nmodel = nn.DataParallel(model)\n", "model.Net"),
        ("from .nets import Net\nmodel = torch.nn.DataParallel(Net())\n", ".nets.Net"),
        ("import torch\nmodel = torch.nn.Linear(2, 2)\n", None),  # torch's own: known here
        ("class Net:\n    pass\nmodel = Net()\n", None),  # same file: mode_free_model knows
        ("from a import A\nfrom b import B\nmodel = A()\nif x:\n    model = B()\n", None),
        ("from model import build\nmodel = build(cfg)['net']\n", None),
    ],
)
def test_imported_model_class(code, expected):
    ctx = context(code + "model\n")
    steps = ctx.analysis(TrainingSteps)
    use = ctx.module.body[-1].body[0].value
    assert imported_model_class(steps, "model", use) == expected


def test_mode_free_classes_are_the_module_classes_without_mode_dependent_layers():
    ctx = context("""
        import torch.nn as nn
        class Upscale(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(1, 4, 3)
                self.shuffle = nn.PixelShuffle(2)
            def forward(self, x):
                return self.shuffle(self.conv(x))
        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.1)
            def forward(self, x):
                return self.drop(x)
        class Config:
            pass
        """)
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == ["Upscale"]


# A small class with one linear layer; `{extra}` adds a line to `__init__`, `{after}` code after
# `forward` and `{use}` what the module does with the instance before the last line reads it.
_NET_TEMPLATE = """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        {extra}
    def forward(self, x):
        return self.fc(x)
{after}
model = Net()
{use}
model
"""


def assert_free_unless_dropout(after: str = "", use: str = "") -> None:
    """The class is mode-free with a plain setting added, and not with a Dropout added."""
    for extra, free in (("self.drop = nn.Dropout(0.5)", False), ("self.scale = 2", True)):
        ctx = context(_NET_TEMPLATE.format(extra=extra, after=after, use=use))
        read = ctx.module.body[-1].body[0].value
        assert mode_free_model(ctx.analysis(TrainingSteps), "model", read) is free


def test_a_data_parallel_wrapper_is_judged_by_the_model_it_wraps():
    assert_free_unless_dropout(use="model = nn.DataParallel(model)")


def test_functions_that_return_a_model_in_eval_mode():
    code = textwrap.dedent(
        """
        def get_model(path, train=False):
            model = Net()
            if train:
                model.train()
                return model, opt
            model.eval()
            return model

        def build(path):
            model = Net()
            model.eval()
            model.train()
            return model

        def frozen_teacher():
            teacher = Net().eval()
            return teacher

        def untouched():
            return Net()
        """
    )
    steps = context(code).analysis(TrainingSteps)
    assert eval_mode_returners(steps) == ["get_model", "frozen_teacher"]


def test_what_a_function_hands_back_in_eval_mode():
    code = textwrap.dedent(
        """
        def load_pair(path):
            encoder, decoder = Encoder(), Decoder()
            encoder.cuda().eval()
            decoder.cuda().eval()
            return encoder, decoder

        def load_one_of_two(path):
            encoder, decoder = Encoder(), Decoder()
            encoder.eval()
            return encoder, decoder

        def early_return_on_gpu(path):
            model = Net()
            if torch.cuda.is_available():
                return model.cuda()
            model.eval()
            return model

        def training_or_evaluation(path, train=False):
            model = Net()
            if train:
                model.train()
                return model, optimizer
            model.eval()
            return model

        def nothing_on_one_path(path):
            model = Net()
            if not path:
                return
            model.eval()
            return model
        """
    )
    steps = context(code).analysis(TrainingSteps)
    returns = {
        f.name.value: eval_mode_returns(steps, f)
        for f in steps.ctx.module.body
        if type(f) is cst.FunctionDef
    }
    assert returns == {
        "load_pair": {(2, 0), (2, 1)},
        "load_one_of_two": {(2, 0)},
        "early_return_on_gpu": set(),
        "training_or_evaluation": {(None, None)},
        "nothing_on_one_path": set(),
    }


_POOL = """
    import torch
    import torch.nn as nn
    class AttentionPool(nn.Module):
        def __init__(self, size, attention_size):
            super().__init__()
            self.attention_size = attention_size
            self.weight = nn.Linear(size, attention_size)
            self.context = nn.Linear(attention_size, 1){extra_init}
        def forward(self, x):
            w = torch.softmax(self.context(torch.tanh(self.weight(x))), dim=1){extra_forward}
            return (w * x).sum(1)
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(300, 128, 2, batch_first=True)
            self.attention = AttentionPool(128, 64)
            self.out = nn.Linear(128, 1)
        def forward(self, x):
            return self.forward_with_attention(x)
        def forward_with_attention(self, x):
            outputs, _ = self.lstm(x)
            return self.out(self.attention(outputs))
    """


@pytest.mark.parametrize(
    "extra_init, extra_forward, free",
    [
        ("", "", ["AttentionPool", "Classifier"]),
        # a dropout in the submodule class makes both mode-dependent
        ("\n        self.drop = nn.Dropout(0.1)", "\n        w = self.drop(w)", []),
        # a setting named like a layer that the class calls is a layer after all
        ("", "\n        w = self.attention_size(w)", []),
    ],
)
def test_a_class_is_judged_with_the_classes_of_the_file_it_builds(extra_init, extra_forward, free):
    code = textwrap.dedent(_POOL).format(extra_init=extra_init, extra_forward=extra_forward)
    ctx = context(code)
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == free


def test_a_class_that_builds_itself_is_not_followed_forever():
    ctx = context("""
        import torch.nn as nn
        class Tree(nn.Module):
            def __init__(self, depth):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.child = Tree(depth - 1) if depth else None
            def forward(self, x):
                return self.fc(x) if self.child is None else self.child(self.fc(x))
        """)
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == []


@pytest.mark.parametrize(
    "binding, plain",
    [
        ("def inferer(x):\n    return net(x)", True),
        ("inferer = lambda x: net(x)", True),
        ("inferer = partial(sliding_window_inference, predictor=net)", True),
        ("inferer = functools.partial(net, scale=2)", True),
        ("inferer = Net()", False),
        ("inferer = make_inferer(net)", False),
    ],
)
def test_plain_functions_have_no_modes(binding, plain):
    ctx = context(
        "import functools\nfrom functools import partial\n" + binding + "\ninferer\n"
    )
    use = ctx.module.body[-1].body[0].value
    assert plain_function(ctx.analysis(TrainingSteps), "inferer", use) is plain


def test_builtins_in_a_weight_init_method_build_no_layer():
    assert_free_unless_dropout(after="""
    def initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d) or hasattr(m, "bias"):
                print(len(list(m.parameters())))
""")


# A spiking layer whose forward hands its linear layer to a module-level helper; the helper
# fires through a custom autograd function. `{helper_extra}` adds a line to the helper,
# `{passed}` is what the forward hands it and `{spike_extra}` adds a line to the function.
_SPIKING = """
import torch
import torch.nn as nn
import torch.nn.functional as F
class Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v){spike_extra}
        return v.gt(0.5).float()
    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad * (abs(v - 0.5) < 0.5).float()
fire = Spike.apply
def update(layer, x, v):
    v = 0.2 * v + layer(x){helper_extra}
    return v, fire(v)
class SpikingLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.other = nn.Linear(8, 8)
    def forward(self, x, v):
        return update({passed})
"""


@pytest.mark.parametrize(
    "helper_extra, passed, spike_extra, free",
    [
        ("", "self.fc, x, v", "", True),
        ("", "x=x, v=v, layer=self.fc", "", True),
        ("", "F.relu, x, v", "", True),
        # the helper drops, or the spike function does: the class depends on the mode
        ("\n    v = F.dropout(v, 0.1, layer.training)", "self.fc, x, v", "", False),
        ("", "self.fc, x, v", "\n        v = F.dropout(v, training=ctx.training)", False),
        # a helper that runs what it is handed runs an unknown module when handed one
        ("", "make_layer(), x, v", "", False),
        ("", "nn.Dropout(0.5), x, v", "", False),
        # a helper that calls a module-level model of the file: unknown
        ("\n    v = v + net(x)", "self.fc, x, v", "", False),
    ],
)
def test_helpers_and_autograd_functions_a_class_calls(helper_extra, passed, spike_extra, free):
    code = _SPIKING.format(helper_extra=helper_extra, passed=passed, spike_extra=spike_extra)
    ctx = context(code)
    expected = ["SpikingLayer"] if free else []
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == expected


def test_a_helper_that_calls_itself_is_not_followed_forever():
    ctx = context("""
        import torch.nn as nn
        def unroll(layer, x, steps):
            return x if steps == 0 else unroll(layer, layer(x), steps - 1)
        class Loop(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
            def forward(self, x):
                return unroll(self.fc, x, 3)
        """)
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == []


@pytest.mark.parametrize(
    "assigned, free",
    [
        ("nn.Linear(8, 8)", True),
        ("nn.Linear(8, 8) if deep else nn.Identity()", True),
        ("None", True),  # `self.downsample = None`, called behind a test
        ("backbone", False),  # handed in: what it is is decided outside the class
        ("backbone.features", False),
        ("layers[0]", False),
    ],
)
def test_a_submodule_handed_in_from_outside_is_unknown(assigned, free):
    ctx = context(f"""
        import torch.nn as nn
        class Head(nn.Module):
            def __init__(self, backbone, layers, deep=True):
                super().__init__()
                self.body = {assigned}
                self.fc = nn.Linear(8, 2)
            def forward(self, x):
                return self.fc(self.body(x) if self.body is not None else x)
        """)
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == (["Head"] if free else [])


def test_a_plain_class_is_judged_by_its_code():
    ctx = context("""
        import torch.nn as nn
        import torch.nn.functional as F
        class Crop:
            def __init__(self, size):
                self.size = size
            def __call__(self, x):
                return F.avg_pool2d(x[..., : self.size, : self.size], 1)
        class Dropper:
            def __call__(self, x):
                return F.dropout(x, 0.5, self.training)
        class Net(nn.Module):
            def __init__(self, crop):
                super().__init__()
                self.crop = {0}
                self.fc = nn.Linear(8, 2)
            def forward(self, x):
                return self.fc(self.crop(x))
        """.format("Crop(4)"))
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == ["Net"]
    ctx = context(textwrap.dedent(ctx.source.text).replace("Crop(4)", "Dropper()"))
    assert mode_free_classes(ctx.analysis(TrainingSteps)) == []


@pytest.mark.parametrize(
    "code, expected",
    [
        ("from m import Net\nmodel = Net().cuda()\n", [{"m.Net"}]),
        # continuing from a whole pickled model: the class the other binding builds
        (
            "import torch\nfrom m import Net\nmodel = Net().cuda()\n"
            "if resume:\n    model = torch.load(path)\n",
            [{"m.Net"}],
        ),
        ("import torch\nmodel = torch.load(path)\n", None),  # alone: unknown
        ("from m import build\nmodel = build(cfg)\n", [{"m.build"}]),
    ],
)
def test_model_classes_of_a_name(code, expected):
    ctx = context(code + "model\n")
    steps = ctx.analysis(TrainingSteps)
    use = ctx.module.body[-1].body[0].value
    found = model_classes(steps, "model", use)
    assert (found if found is None else [set(names) for names in found]) == expected


def test_model_classes_of_a_trainer_attribute():
    ctx = context(
        """
        from nets import Forecaster
        import torch

        class Trainer:
            def __init__(self, device):
                network = Forecaster(order=3)
                self.network = network.to(device)
                self.optimizer = torch.optim.Adam(self.network.parameters())

            def step(self, frames):
                return self.network(frames)
        """
    )
    steps = ctx.analysis(TrainingSteps)
    step = ctx.module.body[-1].body.body[1]
    use = step.body.body[0].body[0].value
    assert model_classes(steps, "self.network", use) is None  # names only, unless asked
    assert model_classes(steps, "self.network", use, attributes=True) == [
        frozenset({"nets.Forecaster"})
    ]
