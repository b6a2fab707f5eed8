"""TRL101 beyond the fixtures: the analyses it is built on (devices.Moves, loops.BatchFlow),
the `device-movers` option, and what the project phase and flake8 each report."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import libcst as cst
import pytest

from fixture_support import RULE_FIXTURES, lint
from trainlint.analysis.device.moves import MOVED, Moves, UNPLACED, WRAPPED
from trainlint.analysis.loop.batchflow import BatchFlow
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.flake8_plugin import TrainlintChecker
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str, **options) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    settings = Settings()
    settings.options.update(options)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), settings)


def expr(ctx: FileContext, text: str) -> cst.CSTNode:
    """The last node in the file whose code is `text`."""
    found = [n for n in ctx.tree.order if ctx.code(n) == text]
    assert found, text
    return found[-1]


# -- devices.Moves --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, moved",
    [
        ("x.to(device)", True),
        ("x.to(device, non_blocking=True)", True),
        ("x.cuda()", True),
        ("x.cuda(args.gpu, non_blocking=True)", True),
        ("x.type_as(out)", True),
        ("x.to(out.device)", True),
        ("torch.as_tensor(x, device=device)", True),
        ("x.to(torch.float16)", False),
        ("x.to(dtype=torch.float16)", False),
        ("x.to(self.dtype)", False),
        ('x.to("cpu")', False),
        ("x.cpu()", False),
        ("x.float().to(device)", True),
        ("x.to(device).float()", True),
        ("x.to(device).cpu()", False),
        ("{k: v.to(device) for k, v in batch.items()}", True),
        ("[{k: v.to(device) for k, v in t.items()} for t in targets]", True),
        ("tuple(t.to(device) for t in batch)", True),
        ("list(map(lambda t: t.cuda(), batch))", True),
        ("send_to_device(batch, device)", True),
        ("recursive_to(batch, device)", True),
        ("(x.to(device), y.to(device))", True),
        ("(x.to(device), y)", False),
    ],
)
def test_is_moved(text, moved):
    ctx = context(f"import torch\ndevice = torch.device('cuda')\nresult = {text}\n")
    moves = ctx.analysis(Moves)
    node = ctx.module.body[-1].body[0].value
    assert moves.is_moved(node) is moved


def test_function_summaries():
    ctx = context("""
        def to_device(obj, device):
            if isinstance(obj, dict):
                return {k: to_device(v, device) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return type(obj)(to_device(v, device) for v in obj)
            return obj.to(device)

        def in_place(batch, device):
            for key, value in batch.items():
                batch[key] = value.cuda(non_blocking=True)

        def mapped(items, device):
            return list(map(lambda t: t.to(device), items))

        def step(model, x, y, device):
            x = x.to(device)
            return model(x), y

        def log(batch):
            print(batch["image"].shape)
        """)
    moves = ctx.analysis(Moves)
    summaries = {f.name.value: moves.moved_params(f) for f in ctx.nodes(cst.FunctionDef)}
    assert summaries == {
        "to_device": {0},
        "in_place": {0},
        "mapped": {0},
        "step": {1},
        "log": frozenset(),
    }


def test_summaries_follow_submodules_and_source_order():
    ctx = context("""
        import torch
        from torch import nn

        class Tokens(nn.Module):
            def encode(self, sentences):
                rows = []
                for s in sentences:
                    rows.append(torch.tensor([ord(c) for c in s]))
                return torch.stack(rows).cuda()

            def forward(self, sentences):
                return self.encode(sentences)

        class Wrapper(nn.Module):
            def __init__(self):
                super().__init__()
                self.tokens = Tokens()

            def forward(self, x, mask, extra):
                x = self.tokens(x)
                x = x * mask
                return x, self.tokens(extra)

        class Unbuilt(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)
        """)
    moves = ctx.analysis(Moves)
    summaries = {}
    for cls in ctx.nodes(cst.ClassDef):
        for f in cls.body.body:
            if isinstance(f, cst.FunctionDef):
                summaries[f"{cls.name.value}.{f.name.value}"] = moves.moved_params(f)
    # the list filled from `sentences` is moved; the wrapper's `x` and `extra` reach the
    # submodule that moves them, while the mask joins `x` only after the move
    assert summaries["Tokens.encode"] == {1}
    assert summaries["Tokens.forward"] == {1}
    assert summaries["Wrapper.forward"] == {1, 3}
    assert summaries["Unbuilt.forward"] == frozenset()


def test_placement_follows_parameters_to_call_sites():
    ctx = context("""
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(model, loader):
            for x in loader:
                model(x)

        def evaluate(net, loader):
            for x in loader:
                net(x)

        def main(args):
            device = torch.device(args.device)
            model = build().to(device)
            if args.distributed:
                model = DDP(model, device_ids=[args.gpu])
            train(model, loader)
            cpu_model = build()
            evaluate(cpu_model, loader)
            wrapped = torch.nn.DataParallel(build().cuda())
            evaluate(wrapped, loader)
        """)
    moves = ctx.analysis(Moves)
    assert moves.placement(expr(ctx, "model")) == {MOVED, WRAPPED}
    assert moves.placement(expr(ctx, "net")) == {UNPLACED, WRAPPED}


def test_in_place_module_moves_are_ordered():
    ctx = context("""
        def predict(trained_model, loader):
            trained_model.cpu()
            x = next(iter(loader))
            out = trained_model(x)
            trained_model.to(orig_device)

        def train(model, loader):
            model.cuda()
            y = model(x)
        """)
    moves = ctx.analysis(Moves)
    assert moves.placement(expr(ctx, "trained_model(x)").func) == {UNPLACED}
    assert moves.placement(expr(ctx, "model(x)").func) == {MOVED}


# -- loops.BatchFlow --------------------------------------------------------------------------


def findings(code: str, **options):
    ctx = context(code, **options)
    out = []
    for flow in ctx.analysis(BatchFlow).flows():
        if flow.quiet is None:
            out.extend((f.element.name, f.kind) for f in flow.findings)
    return out


LOOP = """
    import torch
    import torch.nn.functional as F

    def train(model, loader, device):
        model.to(device)
        for images, labels in loader:
            {body}
"""


@pytest.mark.parametrize(
    "body, expected",
    [
        ("loss = F.cross_entropy(model(images.to(device)), labels)", [("labels", "loss")]),
        # Nothing of the batch is moved, and nothing in the file makes `loader`: a loop that
        # fails on its first batch, or batches already on the device (see below).
        ("out = model(images)", []),
        (
            "out = model(images.to(device))\n            acc = (out.argmax(1) == labels)",
            [("labels", "comparison")],
        ),
        ("out = model(images.to(device))\n            acc = out.argmax(1).cpu() == labels", []),
        # One element of each (zero-dim tensors: a CPU one may meet a CUDA one) ...
        (
            "out = model(images.to(device))\n"
            "            hits = [out[j] == labels[j] for j in range(len(labels))]",
            [],
        ),
        ("out = model(images.to(device))\n            first = out[0] - labels[-1]", []),
        # ... but an index that may be a tensor of indices keeps a dimension.
        (
            "out = model(images.to(device))\n            picked = out[keep] == labels[keep]",
            [("labels", "comparison")],
        ),
        (
            "out = model(images.to(device))\n            x = torch.cat([out, labels])",
            [("labels", "cat")],
        ),
        (
            "y = labels.long().unsqueeze(1)\n            out = model(images.to(device)) - y",
            [("y", "arithmetic")],
        ),
        (
            "labels = labels.to(device)\n            F.mse_loss(model(images.to(device)), labels)",
            [],
        ),
        (
            "if True:\n                labels = labels.cuda()\n"
            "            F.l1_loss(model(images.cuda()), labels)",
            [],
        ),
    ],
)
def test_batch_flow(body, expected):
    assert findings(LOOP.format(body=body)) == expected


UNMOVED_LOOP = """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    class Mixed:
        def __init__(self, loader):
            self.loader = loader

        def __iter__(self):
            for images, labels in self.loader:
                yield images * 0.5, labels

    def train(model, loader, device):
        model.to(device)
        for images, labels in loader:
            F.cross_entropy(model(images), labels)

    {call}
"""


BOTH_UNMOVED = [("images", "model"), ("labels", "loss")]


@pytest.mark.parametrize(
    "call, expected",
    [
        # A loader nobody in the file makes (a parameter; imported; from an unknown call).
        ("", []),
        ("from data import test_loader\n    train(net, test_loader, 'cuda')", []),
        ("train(net, project.make_loader(), 'cuda')", []),
        # Made by torch in the file, also through a wrapper class of the file.
        ("train(net, DataLoader(dataset, batch_size=8), 'cuda')", BOTH_UNMOVED),
        ("train(net, Mixed(DataLoader(dataset)), 'cuda')", BOTH_UNMOVED),
        # A DataLoader made here around a dataset the file is only handed (a parameter no
        # call of the file passes one for, also split on the way): what it holds is decided
        # elsewhere.
        ("def run(net, data):\n        train(net, DataLoader(data), 'cuda')", []),
        (
            "from torch.utils.data import random_split\n"
            "    def run(net, data):\n"
            "        part, rest = random_split(data, [8, 2])\n"
            "        train(net, DataLoader(part), 'cuda')",
            [],
        ),
        # ... unless a call of the file hands it a dataset made here.
        (
            "from torch.utils.data import TensorDataset\n"
            "    def run(net, data):\n"
            "        train(net, DataLoader(data), 'cuda')\n"
            "    run(net, TensorDataset(x, y))",
            BOTH_UNMOVED,
        ),
    ],
)
def test_a_loop_that_moves_nothing_needs_a_loader_the_file_makes(call, expected):
    assert sorted(findings(UNMOVED_LOOP.format(call=call))) == expected


def test_dict_batches_and_keys():
    code = """
        import torch.nn.functional as F

        def train(model, loader, device):
            model.to(device)
            for batch in loader:
                batch["image"] = batch["image"].to(device)
                out = model(batch["image"])
                loss = F.cross_entropy(out, batch["label"])
    """
    assert findings(code) == [('batch["label"]', "loss")]


def test_device_movers_option_names_more_helpers():
    code = """
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader

        def train(model, path, shipper, device):
            model.to(device)
            for batch in DataLoader(torch.load(path), batch_size=8):
                shipper.ship(batch)
                loss = F.cross_entropy(model(batch["x"]), batch["y"])
    """
    assert sorted(findings(code)) == [('batch["x"]', "model"), ('batch["y"]', "loss")]
    assert findings(code, **{"device-movers": ["ship"]}) == []
    assert findings(code, **{"device-movers": ["shipper.ship"]}) == []


# -- configuration, project phase, flake8 ----------------------------------------------------

CONFIGURED = """\
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


def train(model, path, shipper, device):
    model.to(device)
    for batch in DataLoader(torch.load(path), batch_size=8):
        shipper.ship(batch)
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
"""


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "trainlint", "--output-format", "concise", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def test_device_movers_is_read_from_pyproject(tmp_path):
    (tmp_path / "train.py").write_text(CONFIGURED)
    before = run_cli("--select", "TRL101", "train.py", cwd=tmp_path)
    assert before.returncode == 1 and before.stdout.count("TRL101") == 2, before.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.trainlint]\ndevice-movers = ["ship"]\n')
    after = run_cli("--select", "TRL101", "train.py", cwd=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.trainlint]\ndevice-movers = "ship"\n')
    wrong = run_cli("--select", "TRL101", "train.py", cwd=tmp_path)
    assert wrong.returncode == 2 and "device-movers" in wrong.stderr


def test_project_helpers_decide_in_the_project_phase():
    keeps = RULE_FIXTURES / "TRL101" / "project_helper_keeps_cpu"
    moves = RULE_FIXTURES / "TRL101" / "project_helper_moves"
    # The whole project: the helper is read, it moves nothing, the finding stands.
    found = lint([keeps], ["TRL101"], root=keeps).diagnostics
    assert [(d.path.rsplit("/", 1)[-1], d.row) for d in found] == [("train.py", 12)]
    # The fix copies the device expression of the sibling move `batch["image"].to(device)`.
    assert found[0].fix.edits[0].content.strip() == 'batch["label"] = batch["label"].to(device)'
    # Only train.py in the run (the helper's file unknown): quiet, never a guess.
    alone = lint([keeps / "train.py"], ["TRL101"], root=keeps).diagnostics
    assert alone == []
    # A helper that moves the batch in place: quiet.
    assert lint([moves], ["TRL101"], root=moves).diagnostics == []


def test_flake8_sees_one_file_and_stays_quiet_on_project_helpers():
    train = RULE_FIXTURES / "TRL101" / "project_helper_keeps_cpu" / "train.py"
    lines = train.read_text().splitlines(True)
    found = list(TrainlintChecker(None, lines, str(train)).run())
    assert not [f for f in found if f[2].startswith("TRL101")]
    # ... but reports what one file shows.
    bad = RULE_FIXTURES / "TRL101" / "finetune_tags.py"
    found = list(TrainlintChecker(None, bad.read_text().splitlines(True), str(bad)).run())
    assert sorted({row for row, _, text, _ in found if text.startswith("TRL101")}) == [33, 54]


def test_module_level_global_statement_does_not_hang_name_lookup():
    # `global dist` at module level is legal Python; name lookups used to loop forever on it.
    ctx = context("""
        import torch
        global dist

        def init():
            global dist
            import torch.distributed as dist
            dist.init_process_group("nccl")
        """)
    call = expr(ctx, 'dist.init_process_group("nccl")')
    assert isinstance(ctx.names.qualified(call.func), frozenset)


# -- what session 2 added (each found on real code) -------------------------------------------


def test_loss_objects_are_recognised_by_their_class_name():
    code = """
        import segmentation_models_pytorch as smp
        import torch.nn.functional as F

        def train(model, loader, device):
            model.to(device)
            dice = smp.losses.DiceLoss(mode="binary")
            for images, masks in loader:
                logits = model(images.to(device))
                loss = dice(logits, masks) + F.binary_cross_entropy_with_logits(logits, masks)
    """
    ctx = context(code)
    [flow] = [f for f in ctx.analysis(BatchFlow).flows() if f.quiet is None]
    [finding] = flow.findings
    assert ctx.code(finding.sink) == "dice(logits, masks)"


@pytest.mark.parametrize("method", ["pop", "get"])
def test_popped_dict_items_are_batch_items(method):
    code = f"""
        import torch.nn.functional as F

        def train(model, loader, device):
            model.to(device)
            for batch in loader:
                labels = batch.{method}("labels")
                batch = {{k: v.to(device) for k, v in batch.items()}}
                loss = F.cross_entropy(model(**batch).logits, labels)
    """
    assert findings(code) == [("labels", "loss")]


def test_sibling_moves_are_no_evidence_for_a_model_built_and_never_moved():
    code = """
        import torch.nn.functional as F

        def train(net, loader, device):
            for data, target in loader:
                out = net(data)
                target = target.to(device)
                loss = F.nll_loss(out, target)

        def main(loader, device):
            net = RemoteNet()
            train(net, loader, device)
    """
    assert findings(code) == []
    # the same loop with no call site (placement unknown): the moved target is evidence
    alone = code.split("        def main")[0]
    assert findings(alone) == [("data", "model")]


def test_moves_that_follow_another_tensor_are_no_sibling_evidence():
    code = """
        import torch.nn.functional as F

        def train(model, loader):
            for data, target in loader:
                out = model(data)
                target = target.to(out.device)
                loss = F.nll_loss(out, target)
    """
    assert findings(code) == []
    assert findings(code.replace("out.device", "device")) == [("data", "model")]


def test_self_attribute_reassigned_last_in_a_method_is_what_other_methods_see():
    code = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Trainer:
            def __init__(self, rank):
                self.model = Net()
                self.model.to(rank)
                self.model = DDP(self.model, device_ids=[rank])

            def train(self):
                self.model(x)
    """
    ctx = context(code)
    moves = ctx.analysis(Moves)
    assert moves.placement(expr(ctx, "self.model")) == {WRAPPED}
    conditional = context(
        code.replace(
            "                self.model = DDP(",
            "                if rank:\n" "                    self.model = DDP(",
        )
    )
    assert conditional.analysis(Moves).placement(expr(conditional, "self.model")) == {
        MOVED,
        WRAPPED,
    }


# -- moves on branches that exclude each other (BatchFlow._exclusive_moves) --------------------

EXCLUSIVE = """
    import torch
    import torch.nn.functional as F

    def train(loader, args):
        model = torch.nn.Linear(8, 2).cuda()
        for images, labels in loader:
{arms}
            loss = F.cross_entropy(model(images), labels)
"""


def _exclusive(arms: str):
    ctx = context(EXCLUSIVE.format(arms=textwrap.indent(textwrap.dedent(arms), " " * 12)))
    out = []
    for flow in ctx.analysis(BatchFlow).flows():
        for f in flow.findings:
            instead = f.instead.element.name if f.instead is not None else None
            out.append((f.element.name, f.kind, instead))
    return out


def test_if_elif_arms_that_move_different_items_leave_one_behind_on_every_path():
    arms = """
        if args.gpu is not None:
            images = images.cuda(args.gpu)
        elif args.cuda:
            labels = labels.cuda()
    """
    assert _exclusive(arms) == [("labels", "loss", "images")]


def test_a_path_that_moves_everything_keeps_the_batch_quiet():
    arms = """
        if args.gpu is not None:
            images = images.cuda(args.gpu)
            labels = labels.cuda(args.gpu)
        else:
            images = images.to("mps")
    """
    assert _exclusive(arms) == []


def test_independent_conditions_are_assumed_to_hold_together():
    arms = """
        if args.gpu is not None:
            images = images.cuda(args.gpu)
        if torch.cuda.is_available():
            labels = labels.cuda()
        else:
            labels = labels.float()
    """
    assert _exclusive(arms) == []


def test_the_same_condition_takes_the_same_branch_twice():
    # Taken independently, `args.a` true then false would move both; it cannot.
    arms = """
        if args.a:
            images = images.cuda()
        else:
            labels = labels.cuda()
        if args.a:
            images = images.float()
        else:
            labels = labels.cuda()
    """
    assert _exclusive(arms) == [("labels", "loss", "images")]


def test_a_model_that_may_move_its_inputs_makes_a_path_possible():
    code = """
        import torch.nn.functional as F

        def train(model, loader, args):
            for images, labels in loader:
                if args.gpu is not None:
                    images = images.cuda(args.gpu)
                else:
                    labels = labels.cuda()
                loss = F.cross_entropy(model(images), labels)
    """
    # `model` comes from the caller: on the `else` path it may be a DataParallel wrapper that
    # moves `images` itself, so only the baseline (nothing) is reported.
    assert findings(code) == []


def test_a_branch_that_leaves_the_iteration_is_no_path_to_the_sinks():
    # The `else` moves everything but skips the batch: it is no path on which the step runs
    # with everything moved, so it does not hide what the other two branches leave behind.
    arms = """
        if args.gpu is not None:
            images = images.cuda(args.gpu)
        elif args.cuda:
            labels = labels.cuda()
        else:
            images, labels = images.cuda(), labels.cuda()
            continue
    """
    assert _exclusive(arms) == [("labels", "loss", "images")]
    # A branch that only skips the batch neither.
    arms = """
        if args.gpu is not None:
            images = images.cuda(args.gpu)
        elif args.cuda:
            labels = labels.cuda()
        else:
            continue
    """
    assert _exclusive(arms) == [("labels", "loss", "images")]
