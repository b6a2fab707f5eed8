"""The words of PyTorch training code that analyses of several domains recognise, each defined
once: dtypes, loss functions, the contexts that turn autograd off, how models and losses are
usually named, and which files are test code."""

from __future__ import annotations

import os
import re

import libcst as cst

from .calls import argument, is_false
from .names import Names


# `torch.<word>` names a dtype (or a memory format): `.to(torch.float16)` casts, it does not move.
DTYPE_WORDS = frozenset(
    {
        "float",
        "float16",
        "float32",
        "float64",
        "half",
        "double",
        "bfloat16",
        "int",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "long",
        "short",
        "bool",
        "complex64",
        "complex128",
        "channels_last",
    }
)

# `torch.nn.functional` losses (the leaf of the call), also under other spellings (`F.mse_loss`),
# and `cosine_similarity`, trained on as a loss (`1 - F.cosine_similarity(emb, target)`).
LOSS_FUNCTIONS = frozenset(
    {
        "cosine_similarity",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "cosine_embedding_loss",
        "margin_ranking_loss",
        "triplet_margin_loss",
        "ctc_loss",
        "poisson_nll_loss",
        "gaussian_nll_loss",
        "hinge_embedding_loss",
        "multilabel_margin_loss",
        "multilabel_soft_margin_loss",
        "soft_margin_loss",
        "multi_margin_loss",
    }
)


def is_functional_loss(qualified: str) -> bool:
    """`torch.nn.functional.cross_entropy`, `torch.nn.functional.<anything>loss<anything>`."""
    module, _, leaf = qualified.rpartition(".")
    return module == "torch.nn.functional" and (leaf in LOSS_FUNCTIONS or "loss" in leaf)


# Names that hold a loss (`loss`, `criterion`, `err`), a loss callee (`criterion(...)`,
# `loss_fn(...)`, `crit(...)`), a model (`model`, `net`, `backbone`, `netG`) and what is named
# like a model without being one (`model_fn`, `model_path`).
LOSS_NAME = re.compile(r"loss|criterion|(^|_)err(or)?($|_|[A-Z])|^err", re.I)
LOSS_CALLEE = re.compile(r"(criterion|loss|crit$)", re.I)
MODEL_NAME = re.compile(
    r"^(model|net|network|module|classifier|encoder|decoder|backbone|generator|discriminator)s?$"
    r"|model$|^net[A-Z_\d]|^net$|_net$|Net$|^model_",
    re.I,
)
NOT_MODEL_NAME = re.compile(
    r"(_fn|_func|_cls|_class|_name|_path|_dir|_type|_config|_cfg|_args|_kwargs|_list)$", re.I
)
# Optimizers: the classes and factories that build one, and how a name holding one is spelled
# (`optimizer`, `opt_g`, `optimD`), not a scheduler's or an option's.
OPTIMIZER_CLASSES = {
    "SGD",
    "Adam",
    "AdamW",
    "Adamax",
    "Adagrad",
    "Adadelta",
    "RMSprop",
    "Rprop",
    "ASGD",
    "LBFGS",
    "NAdam",
    "RAdam",
    "SparseAdam",
    "Lamb",
    "LAMB",
    "Lion",
    "Adafactor",
    "FusedAdam",
    "FusedLAMB",
    "FusedSGD",
    "DeepSpeedCPUAdam",
    "ZeroRedundancyOptimizer",
    "LARS",
    "build_optimizer",
    "create_optimizer",
    "create_optimizer_v2",
    "get_optimizer",
    "make_optimizer",
}
OPTIMIZER_NAME = re.compile(r"optim|^opt(?:$|[_\d]|[A-Z])|_opt(?:$|[_\d]|[A-Z])", re.I)
NOT_OPTIMIZER_NAME = re.compile(r"sched|warmup|^lr|_lr|option", re.I)
# Functions and loaders named for evaluation (`evaluate`, `val_loader`, `test_dl`).
EVAL_FUNCTION = re.compile(
    r"(^|_)(eval|evaluate|evaluation|evaluator|valid|validate|validation|val|test|testing|"
    r"infer|inference|predict|prediction|predictions)(_|$|\d)",
    re.I,
)
EVAL_LOADER = re.compile(r"(^|_|\.)(val|valid|validation|test|testing|eval|evaluation|dev)", re.I)

# Words of a name (`teacher_model`, `netG`, `ema`) that say it holds a model.
MODEL_WORDS = frozenset(
    {
        "model",
        "models",
        "net",
        "network",
        "encoder",
        "decoder",
        "backbone",
        "generator",
        "discriminator",
        "classifier",
        "detector",
        "segmentor",
        "transformer",
        "unet",
        "vae",
        "policy",
        "critic",
        "actor",
        "head",
        "teacher",
        "student",
        "module",
        "ema",
    }
)

# Reads of a tensor whose result holds no autograd graph: its value as Python numbers or NumPy
# (`.item()`, `.tolist()`, `.numpy()`), the detached tensor (`.detach()`, `.data`), or a fact
# about it (`.numel()`, `.size()`, `.dim()`, `.shape`, `.dtype`, `.device`).
GRAPHLESS_READS = frozenset(
    {
        "item", "tolist", "numpy", "detach", "detach_", "data",
        "numel", "nelement", "size", "dim", "ndimension", "shape", "ndim",
        "dtype", "device", "is_cuda", "get_device", "element_size",
    }
)

# Context managers and decorators under which autograd records nothing.
NO_GRAD_CONTEXTS = (
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    # MONAI's `with eval_mode(net):` sets eval mode and runs its body under `torch.no_grad()`
    "monai.networks.utils.eval_mode",
    "monai.networks.eval_mode",
)
# Switches that turn autograd off when given a literal False.
GRAD_SWITCHES = (
    "torch.set_grad_enabled",
    "torch.autograd.set_grad_enabled",
    "torch.autograd.grad_mode.set_grad_enabled",
)


def disables_grad(names: Names, expr: cst.CSTNode) -> bool:
    """Is `expr`, a `with` item or a decorator, one under which autograd is off:
    `torch.no_grad()`, `@torch.no_grad`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`
    (not `set_grad_enabled(phase == "train")`, which may leave it on)?"""
    func = expr.func if type(expr) is cst.Call else expr
    if names.is_(func, *NO_GRAD_CONTEXTS):
        return True
    if type(expr) is cst.Call and names.is_(func, *GRAD_SWITCHES):
        return is_false(argument(expr, 0, "mode"))
    return False


# A file that never mentions any of these cannot be putting anything on an accelerator.
_ACCELERATOR_HINTS = ("cuda", "gpu", "accelerat", "device", "lightning", "deepspeed")
# Short backend names count only as words: "npu" is in "input", "mps" in "dumps".
_SHORT_ACCELERATOR_HINTS = re.compile(r"(?<![A-Za-z])(?:mps|xla|xpu|npu)(?![A-Za-z])")


def never_mentions_accelerator(text: str) -> bool:
    """CPU-only code: the text names no accelerator, device or library that places tensors
    on one (a notebook is one text: all its cells)."""
    if any(hint in text for hint in _ACCELERATOR_HINTS):
        return False
    return _SHORT_ACCELERATOR_HINTS.search(text) is None


def is_test_file(ctx) -> bool:
    """The file is test code: under a `tests/`, `test/` or `testing/` folder, or named
    `test_*.py`, `*_test.py` or `conftest.py`. The path is taken inside the project root, so a
    project that itself lives in a folder named `test` is not test code."""
    parts = _path_in_project(ctx).replace("\\", "/").split("/")
    name = parts[-1]
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return True
    return any(part in ("tests", "test", "testing") for part in parts[:-1])


def _path_in_project(ctx) -> str:
    path = os.path.abspath(ctx.path)
    root = getattr(ctx.settings, "root", None)
    if root is not None:
        root = os.path.abspath(str(root)).rstrip(os.sep)
        if path.startswith(root + os.sep):
            return path[len(root) + 1 :]
    return ctx.path
