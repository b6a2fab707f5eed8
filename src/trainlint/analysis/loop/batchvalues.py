"""The abstract values of `BatchFlow`: batch elements, what meets the device unmoved, and the words
that tell a tensor from a non-tensor by its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from .structure import BatchSource


# == Batch-element dataflow (TRL101) ===========================================================
#
# `BatchFlow.flow(source)` follows the names a batch source binds through the statements that see
# them, in order: what is moved to the device (`.to`/`.cuda`/`.type_as`, comprehensions, helpers,
# in-place moves of the whole batch), what is derived from an element without moving it
# (`y = batch["labels"]`, `labels.long()`, `labels[:, 0]`, `x, y = batch`), and what holds a value
# on the device (moved elements, outputs of a model on the device and what is computed from them,
# until `.cpu()`/`.item()`/`.numpy()`). Where an element that was never moved meets the device it
# records a finding: an argument of a moved model (inputs handed to a DataParallel / DDP
# wrapper are moved by it), a loss or criterion call or `F.*loss*` next to a device value,
# arithmetic or a comparison with one, `torch.cat`/`stack` with one. Branches are followed
# separately and joined conservatively: an element moved on one path counts as moved.

TENSOR_PRESERVING = frozenset(
    {
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "short",
        "bool",
        "byte",
        "char",
        "type",
        "squeeze",
        "unsqueeze",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "permute",
        "transpose",
        "t",
        "contiguous",
        "flatten",
        "clone",
        "detach",
        "repeat",
        "expand",
        "expand_as",
        "narrow",
        "flip",
        "pin_memory",
        "squeeze_",
        "unsqueeze_",
        "requires_grad_",
        "to",  # only when it is not a move (a dtype cast)
    }
)
NOT_TENSOR_RESULTS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "cpu",
        "size",
        "dim",
        "numel",
        "nelement",
        "stride",
        "data_ptr",
        "get_device",
        "element_size",
        "is_contiguous",
        "keys",
        "values",
        "items",
        "get",
    }
)
NOT_TENSOR_ATTRS = frozenset(
    {"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout"}
)
# Attributes a tensor has that are not methods: reading any other attribute of a batch item
# (`graph.ndata["feat"]`, `data.edge_index`) says the item is an object holding tensors.
TENSOR_ATTRS = NOT_TENSOR_ATTRS | frozenset(
    {"data", "grad", "T", "mT", "H", "mH", "real", "imag", "names", "is_leaf", "is_sparse",
     "is_quantized", "is_meta", "itemsize", "nbytes", "output_nr", "_version"}
)
BINARY_METHODS = frozenset(
    {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "add",
        "sub",
        "mul",
        "div",
        "matmul",
        "mm",
        "bmm",
        "add_",
        "sub_",
        "mul_",
        "div_",
        "masked_fill",
        "masked_fill_",
    }
)
COMPARISON_OPS = (
    cst.Equal,
    cst.NotEqual,
    cst.LessThan,
    cst.LessThanEqual,
    cst.GreaterThan,
    cst.GreaterThanEqual,
)
TORCH_JOIN = (
    "torch.cat",
    "torch.concat",
    "torch.concatenate",
    "torch.stack",
    "torch.hstack",
    "torch.vstack",
    "torch.dstack",
)
# Module methods that take no batch (calling them is not running the model).
MODULE_NOT_FORWARD = frozenset(
    {
        "state_dict",
        "load_state_dict",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "train",
        "eval",
        "to",
        "cuda",
        "cpu",
        "apply",
        "zero_grad",
        "modules",
        "named_modules",
        "children",
        "requires_grad_",
        "half",
        "float",
        "double",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_buffer",
        "add_module",
        "get_submodule",
        "no_sync",
        "join",
    }
)
# Batch items that are not tensors, or stay on the CPU by design (pack_padded_sequence lengths).
NON_TENSOR_WORDS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "filenames",
        "fname",
        "fnames",
        "name",
        "names",
        "caption",
        "captions",
        "text",
        "texts",
        "sentence",
        "sentences",
        "prompt",
        "prompts",
        "question",
        "questions",
        "answer",
        "answers",
        "meta",
        "metas",
        "metadata",
        "info",
        "infos",
        "url",
        "urls",
        "idx",
        "idxs",
        "index",
        "indices",
        "indexes",
        "key",
        "keys",
        "str",
        "string",
        "strings",
        "title",
        "titles",
        "word",
        "words",
        "len",
        "lens",
        "length",
        "lengths",
        "raw",
        "uid",
        "uids",
        "img_metas",
        "n",
        "num",
        "count",
        "counts",
    }
)
TENSOR_ID_WORDS = frozenset(
    {"input", "token", "position", "type", "label", "labels", "target", "targets", "class"}
)
TEXT_CALLEE = re.compile(r"(token|tokenize|imread|open|path\.|join$|split$|format$)", re.I)
TEXT_METHODS = frozenset(
    {"split", "lower", "upper", "strip", "startswith", "endswith", "encode", "format", "replace"}
)
MOVING_LOADER = re.compile(
    r"prefetch|(device|cuda|gpu).*(loader|iter|batch)|(loader|iter).*(device|cuda|gpu)", re.I
)

DEVICE = "<on the device>"  # the abstract value of anything on the device
_MOVING_NODES = (cst.Call, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
MOVING_TYPES = frozenset(_MOVING_NODES)  # exact types: the parser builds exactly these


@dataclass(eq=False)
class Element:
    """A value taken from a batch that has not been moved to the device."""

    name: str  # what the code calls it: labels, batch["labels"], batch
    source: "BatchSource" = field(repr=False)
    # the For, or the statement line that bound the name
    bound_at: Optional[cst.CSTNode] = field(repr=False)
    root: bool = False  # the whole batch
    fix_target: Optional[str] = None  # what a fix may assign (`labels`, `batch["labels"]`)
    # the element this one was computed from
    origin: Optional["Element"] = field(default=None, repr=False)
    helper: Optional[Tuple[str, int]] = None  # imported helper (qualname, arg) that may move it
    # `labels.to(device)` whose result was thrown away
    discarded: Optional[cst.Call] = field(default=None, repr=False)
    # the call that handed it to a helper of this file
    via: Optional[cst.Call] = field(default=None, repr=False)
    moved_keys: Set[str] = field(default_factory=set)
    # keys whose item was replaced by a value of unknown placement (`batch["x"] = prep(x)`)
    rebound_keys: Set[str] = field(default_factory=set)
    children: Dict[str, "Element"] = field(default_factory=dict, repr=False)

    def lineage(self) -> List["Element"]:
        out: List[Element] = []
        current: Optional[Element] = self
        while current is not None and current not in out:
            out.append(current)
            current = current.origin
        return out

    def derive(self, name: str, bound_at, root: bool = False, fix_target=None) -> "Element":
        return Element(
            name=name,
            source=self.source,
            bound_at=bound_at,
            root=root,
            fix_target=fix_target,
            origin=self,
            helper=self.helper,
        )


@dataclass
class Unmoved:
    """An element that never reached the device, at its first use next to the device."""

    element: Element
    use: cst.CSTNode  # the expression that carries the element into the sink
    sink: cst.CSTNode  # the model call, loss call, operation or torch.cat/stack
    kind: str  # model, loss, arithmetic, comparison, cat
    # Found by the path check: the batch's moves sit on branches that exclude each other, and
    # this is what another of those branches leaves on the CPU.
    instead: Optional["Unmoved"] = None
    # A model built from classes imported from the project, whose `forward` (in another file)
    # may place this argument itself: (the classes' qualified names, the argument's position or
    # keyword). Only the project phase can read those forwards.
    forward_of: Optional[Tuple[List[str], Union[int, str]]] = None
    # ...and the constructor's arguments that hold a DataParallel wrapper in every call that
    # builds the model (`TSN(n, net)` with `net` wrapped: [1]), for a `forward` that hands
    # its input to the attribute `__init__` keeps such an argument in.
    wrapped_init: List[object] = field(default_factory=list)


@dataclass
class Flow:
    source: "BatchSource"
    findings: List[Unmoved] = field(default_factory=list)
    moves: list = field(default_factory=list)  # devices.Move of this batch's elements
    quiet: Optional[str] = None  # why nothing is reported for this source
    helper: Optional[Tuple[str, int]] = None  # an imported collate_fn that may move the batch
    bound_names: Set[str] = field(default_factory=set)  # names (re)bound in the body


def name_words(name: str) -> List[str]:
    name = re.sub(r"\[.*?\]|\W", "_", name)
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[_\d]+", name.lower()) if w]
