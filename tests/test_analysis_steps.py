"""analysis/loop/steps.py: events, flows through if/try/helpers/loops, grad mode, owned code."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.dataflow import Repeat, events_of, own_events, run
from trainlint.analysis.base.names import dotted_name as dotted
from trainlint.analysis.loop.modes import mode_free_model
from trainlint.analysis.loop.steps import TrainingSteps
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def steps_for(code: str):
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    return ctx, ctx.analysis(TrainingSteps)


def first_loop(ctx, steps):
    return steps.all_loops()[0]


def state_events(flow):
    """The events that change training state (forward events are tested on their own)."""
    return [e for e in events_of(flow) if e.kind != "forward"]


def kinds(steps, loop):
    return [(e.kind, e.receiver) for e in state_events(steps.flow(loop))]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("loss.backward()", ("backward", "loss")),
        ("scaler.scale(loss).backward()", ("backward", None)),
        ("torch.autograd.backward(loss)", ("backward", None)),
        ("optimizer.step()", ("step", "optimizer")),
        ("self.optim.step()", ("step", "self.optim")),
        ("optD.step()", ("step", "optD")),
        ("scaler.step(optimizer)", ("step", "optimizer")),
        ("lr_scheduler.step()", None),
        ("scheduler.step()", None),
        ("env.step(action)", None),
        ("optimizer.zero_grad(set_to_none=True)", ("zero", "optimizer")),
        ("model.zero_grad()", ("zero", "model")),
        ("p.grad = None", ("zero", "p")),
        ("p.grad.zero_()", ("zero", "p")),
        ("model.eval()", ("eval", "model")),
        ("model.train(False)", ("eval", "model")),
        ("model.train()", ("train", "model")),
        ("p.grad = p.grad / world_size", None),
        ("p.grad = accelerator.reduce(p.grad, reduction='mean')", None),
        ("p.grad = torch.zeros_like(p)", ("zero", "p")),
        ("model = model.to(device)", None),
        ("model = DDP(model)", None),
        ("model = pretrain(model, loader)", None),
        ("loss = criterion(out, y)", None),
        ("net = Net().eval()", ("eval", "net")),
    ],
)
def test_events(line, expected):
    ctx, steps = steps_for(f"import torch\nfor batch in loader:\n    {line}\n")
    found = kinds(steps, first_loop(ctx, steps))
    if expected is None:
        assert found == []
    else:
        assert found == [expected]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("model = build_model(args)", [("fresh", "model")]),
        ("self.model = Net(cfg)", [("fresh", "self.model")]),
        ("model = model.to(device)", []),
        ("model = pretrain(model, loader)", []),
        ("other = build_model(args)", []),  # nothing sets the mode of `other`
    ],
)
def test_a_module_rebound_to_a_new_object_is_fresh(line, expected):
    ctx, steps = steps_for(
        f"for seed in seeds:\n    {line}\n    model.eval()\n    self.model.module.train()\n"
    )
    found = [k for k in kinds(steps, first_loop(ctx, steps)) if k[0] == "fresh"]
    assert found == expected


def test_an_optimizer_handed_to_a_helper_holds_what_the_caller_built_it_over():
    ctx, steps = steps_for("""
        import torch

        def train_step(loader, net, sampler, opt):
            for x in loader:
                sampler.eval()
                loss = net(x, sampler()).mean()
                loss.backward()
                opt.step()

        def train_both(loader, net, sampler, opt):
            for x in loader:
                opt.step()

        shared = Net()
        controller = Controller()
        optimizer = torch.optim.SGD(shared.parameters(), lr=0.1)
        both = torch.optim.SGD(list(shared.parameters()) + list(controller.parameters()))
        for epoch in range(3):
            train_step(loader, shared, controller, optimizer)
            train_both(loader, shared, controller, both)
            train_both(loader, shared, controller, make_optimizer(shared))
        """)
    functions = {f.name.value: f for f in ctx.module.body if type(f) is cst.FunctionDef}
    step = next(
        e for e in state_events(steps.flow(steps.all_loops()[0])) if e.kind == "step"
    )
    # `net` is what the caller's `shared` arrives in; `shared` is also a global it could read
    assert steps.stepped_modules("opt", step.node) == {"net", "shared"}
    inner = functions["train_both"].body.body[0]
    call = next(n for n in ctx.tree.descendants(inner) if type(n) is cst.Call)
    assert steps.stepped_modules("opt", call) is None  # one caller hands in an unknown one


def test_step_bound_to_an_optimizer_constructor_whatever_its_name():
    ctx, steps = steps_for(
        "import torch\no = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in loader:\n    o.step()\n"
    )
    assert kinds(steps, first_loop(ctx, steps)) == [("step", "o")]
    assert steps.optimizer_modules("o") == {"model"}


def test_closure_steps_are_marked():
    ctx, steps = steps_for("for _ in range(20):\n    optimizer.step(closure)\n")
    (event,) = state_events(steps.flow(first_loop(ctx, steps)))
    assert event.closure


def test_zeroing_inside_a_parameters_loop_is_a_full_reset():
    ctx, steps = steps_for(
        "for x in loader:\n    for p in model.parameters():\n        p.grad = None\n"
        "    model.head.weight.grad = None\n"
    )
    found = [(e.receiver, e.full) for e in state_events(steps.flow(first_loop(ctx, steps)))]
    assert found == [("model", True), ("model.head.weight", False)]


def test_helpers_are_followed_and_parameters_mapped():
    ctx, steps = steps_for("""
        def evaluate(model, loader):
            model.eval()
            helper(model)

        def helper(net):
            net.train()

        for epoch in range(3):
            evaluate(my_model, val_loader)
        """)
    loop = first_loop(ctx, steps)
    assert kinds(steps, loop) == [("eval", "my_model"), ("train", "my_model")]
    events = state_events(steps.flow(loop))
    assert all(
        isinstance(e.site, cst.Call) and ctx.code(e.site).startswith("evaluate") for e in events
    )


def test_flow_paths_through_if_try_and_continue():
    ctx, steps = steps_for("""
        for i, (x, y) in enumerate(loader):
            loss = model(x).sum()
            try:
                loss.backward()
            except RuntimeError:
                optimizer.zero_grad()
                continue
            if (i + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()
        """)
    loop = first_loop(ctx, steps)
    seen = []

    def transfer(event, state):
        if event.kind == "step":
            seen.append(state)
        if event.kind == "backward":
            return ("grads",)
        if event.kind == "zero":
            return ("zeroed-after-backward",) if state == "grads" else (state,)
        return (state,)

    run(Repeat(steps.flow(loop), loop), {"clean"}, transfer)
    # The except path zeroes and continues: it never reaches the step.
    assert set(seen) == {"grads"}


def test_a_branch_on_a_module_mode_starts_with_that_mode():
    ctx, steps = steps_for("""
        def run_epoch(net, loader):
            for x, y in loader:
                loss = crit(net(x), y)
                if net.training:
                    loss.backward()
                    opt.step()
                elif not self.training:
                    pass

        for epoch in range(3):
            run_epoch(model, train_loader)
        """)
    loop = steps.all_loops()[1]  # the epoch loop: the helper's body is followed
    assert kinds(steps, loop)[:4] == [
        ("in_train_mode", "model"), ("backward", "loss"), ("step", "opt"),
        ("in_eval_mode", "model"),
    ]
    assert ("in_eval_mode", "self") in kinds(steps, loop)


def test_own_events_skip_nested_loops():
    ctx, steps = steps_for("""
        for epoch in range(3):
            for x in loader:
                model(x).sum().backward()
            print(epoch)
        """)
    outer, inner = steps.all_loops()
    assert steps.has_backward(outer) and not steps.is_step_loop(outer)
    assert steps.is_step_loop(inner)
    assert not [e for e in own_events(steps.flow(outer)) if e.kind != "forward"]


def test_forward_events_name_what_may_run_in_evaluation_order():
    ctx, steps = steps_for("""
        import torch
        import torch.nn.functional as F
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            out = data_parallel_helper(net.module, x)
            head.forward(x)
            with torch.no_grad():
                ema(x)
        """)
    found = [(e.kind, e.runs) for e in events_of(steps.flow(first_loop(ctx, steps)))]
    assert found == [
        ("forward", ("model", "x")),  # the module call runs first, then the loss, then backward
        ("forward", ("y",)),  # an imported function runs nothing of its own; its arguments may
        ("backward", ()),
        ("forward", ("data_parallel_helper", "net.module", "x")),
        ("forward", ("head", "x")),
    ]  # under no_grad() nothing is recorded for a backward: no forward event


def test_a_followed_helper_forwards_through_its_own_body_not_its_arguments():
    ctx, steps = steps_for("""
        def run_step(net, batch):
            return net(batch).sum()

        for batch in loader:
            run_step(model, batch).backward()
        """)
    found = [(e.kind, e.runs) for e in events_of(steps.flow(first_loop(ctx, steps)))]
    assert found == [
        ("forward", ("run_step",)),
        ("forward", ("model", "batch")),
        ("backward", ()),
    ]


@pytest.mark.parametrize(
    "code, disabled",
    [
        ("import torch\nwith torch.no_grad():\n    y = model(x)\n", True),
        ("import torch\n@torch.inference_mode()\ndef f():\n    y = model(x)\n", True),
        ("from utils import *\nwith torch.no_grad():\n    y = model(x)\n", True),
        ("import torch\ntorch.set_grad_enabled(False)\ny = model(x)\n", True),
        ("import torch\nwith torch.set_grad_enabled(train):\n    y = model(x)\n", False),
        (
            "import torch\ndef f():\n    y = model(x)\n"
            "with torch.no_grad():\n    f()\nwith torch.no_grad():\n    f()\n",
            True,
        ),
        ("import torch\ndef f():\n    y = model(x)\nwith torch.no_grad():\n    f()\nf()\n", False),
        ("import torch\ndef f():\n    y = model(x)\n", False),
    ],
)
def test_grad_disabled(code, disabled):
    ctx, steps = steps_for(code)
    call = next(c for c in ctx.nodes(cst.Call) if ctx.code(c) == "model(x)")
    assert steps.grad_disabled(call) is disabled


def test_graph_names_follow_losses_not_detached_values():
    ctx, steps = steps_for("""
        for x, y in loader:
            out = model(x)
            loss = criterion(out, y)
            scaled = loss / 4
            value = loss.item()
            aux = out.aux_loss
            scaled.backward()
        """)
    names = steps.graph_names(first_loop(ctx, steps))
    assert {"loss", "scaled", "aux"} <= names
    assert "value" not in names and "out" not in names


def test_library_owned_code():
    ctx, steps = steps_for("""
        import lightning as L
        from accelerate import Accelerator

        class Lit(L.LightningModule):
            def validation_step(self, batch, batch_idx):
                return self(batch)

        def train(model, loader):
            accelerator = Accelerator()
            model, loader = accelerator.prepare(model, loader)
            for batch in loader:
                accelerator.backward(model(batch))
        """)
    lit_call = next(c for c in ctx.nodes(cst.Call) if ctx.code(c) == "self(batch)")
    loop = first_loop(ctx, steps)
    assert steps.library_owned(lit_call) == "lightning"
    assert steps.library_owned(loop) is None  # Accelerate runs the user's own loop


def test_eval_loops():
    ctx, steps = steps_for("""
        def validate(model, val_loader):
            for x, y in val_loader:
                out = model(x)

        def train(model, train_loader):
            for x, y in train_loader:
                model(x).sum().backward()

        def show(images):
            for image in images:
                plot(image)
        """)
    found = [(ctx.code(loop.iter), ctx.code(call)) for loop, call in steps.eval_loops()]
    assert found == [("val_loader", "model(x)")]


@pytest.mark.parametrize(
    "layers, forward, expected",
    [
        ("self.fc = nn.Linear(4, 2)\n        self.pool = nn.MaxPool2d(2)", "self.fc(x)", True),
        ("self.fc = nn.Linear(4, 2)\n        self.drop = nn.Dropout(0.1)", "self.fc(x)", False),
        ("self.fc = nn.Linear(4, 2)\n        self.bn = nn.BatchNorm1d(2)", "self.fc(x)", False),
        ("self.fc = nn.Linear(4, 2)", "F.dropout(self.fc(x), 0.1, self.training)", False),
        ("self.fc = Block(4, 2)", "self.fc(x)", False),  # a class of the file holds a Dropout
        # An RNN's dropout runs between stacked layers, in train mode only.
        ("self.rnn = nn.LSTM(4, 2, num_layers=2, dropout=0.1)", "self.rnn(x)[0]", False),
        ("self.rnn = nn.LSTM(4, 2)", "self.rnn(x)[0]", True),
    ],
)
def test_mode_free_model(layers, forward, expected):
    code = f"""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.fc = nn.Linear(n_in, n_out)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            return self.drop(self.fc(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            {layers}

        def forward(self, x):
            return {forward}

    net = Net().to("cuda")
    for x in loader:
        net(x)
    """
    ctx, steps = steps_for(code)
    loop = first_loop(ctx, steps)
    assert mode_free_model(steps, "net", loop) is expected
    assert mode_free_model(steps, "other", loop) is False


@pytest.mark.parametrize(
    "body, expected",
    [
        # Only scoring: backward() fills a mask's gradient, summed into another tensor.
        ("loss.backward()\nscores += mask.grad.abs()", False),
        ("model = Encoder.from_pretrained('ckpt')\nmodel(x).sum().backward()", False),
        ("with torch.no_grad():\n    total += model(x).sum()", False),
        # Anything that can change weights.
        ("optimizer.step()", True),
        ("scaler.step(opt)", True),
        ("opt = torch.optim.SGD(model.parameters(), lr=0.1)", True),
        ("build(model, optim_cfg)", True),
        ("pruner.train_step(x, y)", True),
        ("agent.update(batch)", True),
        ("learner.fitOneCycle(5)", True),
        ("for p in model.parameters():\n    p.data -= lr * p.grad", True),
        ("w -= lr * w.grad", True),
        ("w.sub_(lr * w.grad)", True),
        ("p.data.add_(p.grad, alpha=-lr)", True),
    ],
)
def test_file_may_update_weights(body, expected):
    ctx, steps = steps_for(body + "\n")
    assert steps.file_may_update_weights() is expected


def _train_calls(ctx):
    return [
        call
        for call in ctx.nodes(cst.Call)
        if type(call.func) is cst.Attribute and call.func.attr.value == "train"
    ]


@pytest.mark.parametrize(
    "body",
    [
        "was = model.training\nmodel.eval()\nmodel.train(was)\n",
        "was = model.training\nmodel.eval()\nmodel.train(mode=was)\n",
        "t = self.net.training\nself.net.eval()\nif t:\n    self.net.train()\n",
    ],
)
def test_a_train_call_that_puts_back_a_saved_mode_is_a_restore(body):
    code = "def helper(self, model):\n" + textwrap.indent(body, "    ")
    ctx, steps = steps_for(code)
    (call,) = _train_calls(ctx)
    saved = steps.saved_mode(call)
    assert saved is not None and type(saved[0]) is cst.Assign
    assert steps.event(call).kind == "restore"


@pytest.mark.parametrize(
    "body",
    [
        "model.eval()\nmodel.train()\n",  # nothing saved
        "was = other.training\nmodel.eval()\nmodel.train(was)\n",  # another module's mode
        "was = model.training\nwas = True\nmodel.train(was)\n",  # rebound
        "was = model.training\nif was:\n    pass\nelse:\n    model.train()\n",  # else side
        "was = model.training\nif was:\n    if other:\n        model.train()\n",  # nested test
    ],
)
def test_a_train_call_without_a_saved_mode_is_no_restore(body):
    code = "def helper(self, model):\n" + textwrap.indent(body, "    ")
    ctx, steps = steps_for(code)
    for call in _train_calls(ctx):
        assert steps.saved_mode(call) is None
        event = steps.event(call)
        assert event is None or event.kind != "restore"


@pytest.mark.parametrize(
    "construct, expected",
    [
        ("opt = torch.optim.Adam(model.parameters())", {"model"}),
        ("opt = torch.optim.Adam([latent])", set()),
        ("opt = torch.optim.Adam([latent] + list(decoder.parameters()))", {"decoder"}),
        (
            "opt = torch.optim.SGD([{'params': net.backbone.parameters(), 'lr': 1e-3},"
            " {'params': head.parameters()}], lr=0.1)",
            {"net.backbone", "head"},
        ),
        ("opt = torch.optim.Adam(itertools.chain(g.parameters(), e.parameters()))", {"g", "e"}),
        ("opt = torch.optim.Adam(filter(lambda p: p.requires_grad, net.parameters()))", {"net"}),
        ("opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad])", {"net"}),
        ("opt = torch.optim.Adam(params)", None),  # what `params` holds is not read
        ("opt = torch.optim.Adam([latent, group])", None),  # `group` is no tensor of torch's
        ("opt = make_optimizer(model)", None),
    ],
)
def test_stepped_modules(construct, expected):
    code = (
        "import itertools\nimport torch\n"
        "latent = torch.ones(1, 8).normal_().cuda()\n"
        "group = build_group()\n"
        f"{construct}\n"
        "opt.step()\n"
    )
    ctx, steps = steps_for(code)
    step = [c for c in ctx.nodes(cst.Call) if dotted(c.func) == "opt.step"][0]
    assert steps.stepped_modules("opt", step) == expected


def test_stepped_modules_reads_the_optimizer_of_the_function():
    code = (
        "import torch\n"
        "def fit_latent(decoder, latent):\n"
        "    optimizer = torch.optim.Adam([latent])\n"
        "    optimizer.step()\n"
        "def train(decoder):\n"
        "    optimizer = torch.optim.Adam(decoder.parameters())\n"
        "    optimizer.step()\n"
    )
    ctx, steps = steps_for(code)
    first, second = [c for c in ctx.nodes(cst.Call) if dotted(c.func) == "optimizer.step"]
    assert steps.stepped_modules("optimizer", first) is None  # `latent` is a parameter
    assert steps.stepped_modules("optimizer", second) == {"decoder"}


def test_an_evaluation_loop_over_a_name_nothing_binds_is_none():
    code = (
        "import torch\n"
        "val_loader = make_loader()\n"
        "def test(model):\n"
        "    for x, y in testing_loader:\n"
        "        model(x)\n"
        "def validate(model):\n"
        "    for x, y in val_loader:\n"
        "        model(x)\n"
    )
    ctx, steps = steps_for(code)
    loops = list(ctx.nodes(cst.For))
    assert steps.eval_loop_model_call(loops[0]) is None
    assert steps.eval_loop_model_call(loops[1]) is not None


def test_a_name_rebound_many_times_is_followed_once_per_binding_and_depth():
    """`img = aug(img)` under a hundred `if`s: looking for a `volatile=True` Variable behind the
    model's input (there is none) reads each binding once per depth, not once per path (there
    are about 100 ** 5 of them). A lookup budget stands in for a clock: the exponential search
    fails it."""
    augment = "".join(f"    if random() < 0.5:\n        img = aug{i}(img)\n" for i in range(100))
    code = (
        "import torch\n"
        "from torch.autograd import Variable\n"
        "def test(net, img):\n"
        "    img = Variable(img)\n"
        f"{augment}"
        "    return net(img).data[0]\n"
    )
    ctx, steps = steps_for(code)
    calls = 0
    lookup = steps.scopes.lookup

    def counted(name, at):
        nonlocal calls
        calls += 1
        if calls > 50_000:
            raise AssertionError("the search for a volatile input fans out")
        return lookup(name, at)

    steps.scopes.lookup = counted  # type: ignore[method-assign]
    call = next(c for c in ctx.nodes(cst.Call) if dotted(c.func) == "net")
    assert not steps._volatile_input(call)
    assert calls < 5_000


def test_a_mode_call_guarded_by_isinstance_module_is_on_the_path_taken():
    ctx, steps = steps_for("""
        import torch
        from torch import nn

        for epoch in range(3):
            if isinstance(net, nn.Module):
                net.train()
            if isinstance(net, torch.nn.Module):
                pass
            else:
                net.eval()  # only a plain function would get here: no module to set
        """)
    assert kinds(steps, first_loop(ctx, steps)) == [("train", "net")]
