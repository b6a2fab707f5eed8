"""Where a DDP option's value comes from when the code reads it from configuration.

`DDP(model, find_unused_parameters=cfg.get("find_unused_parameters", False))` tolerates unused
parameters only when the run's configuration says so. Per file, `OptionSources.setting(value)`
recognises the reads whose source the file shows, as plain data for the project phase:

- an MM-style config loaded in the file (`cfg = Config.fromfile(args.config)`, mmcv's or
  mmengine's) read with `cfg.get("key", default)`, `getattr(cfg, "key", default)`,
  `cfg["key"]` or `cfg.key` (also through a name bound to the read first:
  `find_unused = cfg.get(...)`): source "mm";
- a command-line option the file declares (`parser.add_argument("--find_unused_parameters",
  action="store_true")`) read as `args.find_unused_parameters`: source "argparse", with the
  option's default (`store_true`: False, `store_false`: True, `default=`) and its flags.

Anything else (a YAML file's dict, a parameter of unknown origin) is not a setting: the option
stays "unknown", which the rules read as "may tolerate unused parameters". The project phase
decides a setting against the project's configs (`Hierarchy.setting_tolerates`).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst

from ..base.calls import keyword, positional, string_literal
from ..base.names import Names, dotted_name
from .. import Analysis

MM = "mm"
ARGPARSE = "argparse"
_MISSING = object()
# Loaders of MM-style Python configs (mmcv 1.x, mmengine): `Config.fromfile(path)`.
_CONFIG_LOADERS = ("mmcv.Config.fromfile", "mmcv.utils.Config.fromfile", "mmengine.Config.fromfile")
_CONFIG_LOADER_SUFFIX = ".config.Config.fromfile"  # mmengine.config.Config, mmcv.utils.config...
_PARSE_CALLS = ("parse_args", "parse_known_args")
_MAX_HOPS = 4  # names followed from the keyword to the read (`x = cfg.get(...)`, `y = x`)


class OptionSources(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self._arguments: Optional[Dict[str, Dict[str, object]]] = None

    def setting(self, value: cst.BaseExpression) -> Optional[Dict[str, object]]:
        """The configuration read `value` is, as plain data ({"key", "source", "default",
        "flags", "code"}), or None when its source is not one the file shows."""
        expr = self._deref(value)
        read = _config_read(expr)
        if read is None:
            return None
        holder, key, default = read
        code = self.ctx.code(expr)
        if self._loaded_config(holder):
            return {
                "key": key,
                "source": MM,
                "default": _truth(default),
                "flags": [],
                "code": code,
            }
        option = self.arguments().get(key)
        if option is not None and type(expr) is cst.Attribute and self._parsed_args(holder):
            return dict(option, key=key, code=code)
        return None

    def _parsed_args(self, holder: cst.BaseExpression) -> bool:
        """Is `holder` the namespace the file's parser returns: bound to `parse_args()` /
        `parse_known_args()[0]`, or a parameter of a function of a file that parses its
        arguments (`def main(args)` ... `main(parser.parse_args())`)?"""
        if type(holder) is not cst.Name:
            return False
        bindings = self.ctx.scopes.lookup(holder.value, holder)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind == "param":
                if not self._parses_arguments():
                    return False
                continue
            value = binding.value if binding.kind == "assign" else None
            if type(value) is cst.Subscript:
                value = value.value  # parse_known_args()[0]
            if not (
                type(value) is cst.Call
                and type(value.func) is cst.Attribute
                and value.func.attr.value in _PARSE_CALLS
            ):
                return False
        return True

    def _parses_arguments(self) -> bool:
        return any(
            type(call.func) is cst.Attribute and call.func.attr.value in _PARSE_CALLS
            for call in self.ctx.nodes(cst.Call)
        )

    def arguments(self) -> Dict[str, Dict[str, object]]:
        """dest -> {"source": "argparse", "default": bool or None (unknown), "flags": [...]},
        for the options the file's `add_argument(...)` calls declare with literal flags."""
        if self._arguments is None:
            found: Dict[str, Dict[str, object]] = {}
            for call in self.ctx.nodes(cst.Call):
                if type(call.func) is not cst.Attribute or call.func.attr.value != "add_argument":
                    continue
                flags = [
                    text
                    for arg in call.args
                    if arg.keyword is None
                    for text in [string_literal(arg.value)]
                    if text is not None and text.startswith("--")
                ]
                if not flags:
                    continue
                dest = string_literal(keyword(call, "dest")) or flags[0][2:].replace("-", "_")
                default = _argparse_default(call)
                found[dest] = {"source": ARGPARSE, "default": default, "flags": flags}
            self._arguments = found
        return self._arguments

    def _deref(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """Follow a name to the one value bound to it (`find_unused = cfg.get(...)`)."""
        for _ in range(_MAX_HOPS):
            if type(expr) is not cst.Name:
                break
            bindings = self.ctx.scopes.lookup(expr.value, expr)
            if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
                break
            expr = bindings[0].value
        return expr

    def _loaded_config(self, holder: cst.BaseExpression) -> bool:
        """Is `holder` (`cfg`, `cfg.train`) a config the file loads with `Config.fromfile`?"""
        while type(holder) is cst.Attribute:
            holder = holder.value
        if type(holder) is not cst.Name:
            return False
        bindings = self.ctx.scopes.lookup(holder.value, holder)
        if not bindings:
            return False
        for binding in bindings:
            value = binding.value if binding.kind == "assign" else None
            if type(value) is not cst.Call:
                return False
            qualified = self.names.qualified(value.func)
            if not any(
                q in _CONFIG_LOADERS or q.endswith(_CONFIG_LOADER_SUFFIX) for q in qualified
            ):
                return False
        return True


def _config_read(expr: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, str, object]]:
    """(holder, key, default node or _MISSING) for `h.get("key", d)`, `getattr(h, "key", d)`,
    `h["key"]` and `h.key`; None for anything else."""
    if type(expr) is cst.Call:
        func = expr.func
        if type(func) is cst.Attribute and func.attr.value == "get":
            key = string_literal(positional(expr, 0))
            if key is not None and dotted_name(func.value) is not None:
                return func.value, key, positional(expr, 1) or _MISSING
        if type(func) is cst.Name and func.value == "getattr":
            holder = positional(expr, 0)
            key = string_literal(positional(expr, 1))
            if holder is not None and key is not None and dotted_name(holder) is not None:
                return holder, key, positional(expr, 2) or _MISSING
        return None
    if type(expr) is cst.Subscript and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if type(index) is cst.Index and dotted_name(expr.value) is not None:
            key = string_literal(index.value)
            if key is not None:
                return expr.value, key, _MISSING
        return None
    if type(expr) is cst.Attribute and dotted_name(expr) is not None:
        return expr.value, expr.attr.value, _MISSING
    return None


def _truth(default: object) -> Optional[bool]:
    """A read's default as a truth value: missing or None -> False; a literal -> it; an
    expression -> None (unknown)."""
    if default is _MISSING:
        return False
    if type(default) is cst.Name and default.value in ("True", "False", "None"):
        return default.value == "True"
    if type(default) is cst.Integer:
        return default.value not in ("0",)
    return None


def _argparse_default(call: cst.Call) -> Optional[bool]:
    action = string_literal(keyword(call, "action"))
    default = keyword(call, "default")
    if default is not None:
        return _truth(default)
    if action == "store_false":
        return True
    return False  # store_true, or an option with a value and no default (None)


__all__ = ["ARGPARSE", "MM", "OptionSources"]
