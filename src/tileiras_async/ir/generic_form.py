"""Ops in MLIR's generic form, as MLIR prints them inside diagnostics.

An op that cannot be verified is printed generically: `%3:2 = "cuda_tile.op"(%arg0, %1#1) <{props}> ({
regions }) : (operand types) -> result types`.  Values are named as MLIR's SSANameState names a function:
entry-block arguments `%argN`, one `%N` per op with results (result k of a multi-result op is `%N#k`);
a region's nested regions are numbered after all of its values, last region first, the counts running on.
Inherent attributes are properties, printed sorted by name, with `operandSegmentSizes` for ops with more
than one variadic or optional operand group.
"""
from __future__ import annotations

from . import attrs as A
from . import types as T
from .core import Block, Function, Operation, Value
from .enums import ENUMS, spelling
from .printer import attr_str, dense_body, escape_string, hints_str, mlir_type_str, predicate_str

# enums printed as their own attribute (`#cuda_tile.<mnemonic><value>`); the others are stored as plain
# i32 integer attributes (`3 : i32`): memory ordering, memory scope, atomic mode
ENUM_MNEMONICS = {"Signedness": "signedness", "IntegerOverflow": "overflow", "RoundingMode": "rounding",
                  "ComparisonPredicate": "comparison_predicate", "ComparisonOrdering": "comparison_ordering",
                  "PaddingValue": "padding_value"}
INDENT = "  "


class GenericNames:
    """The SSA names of one function's values."""

    def __init__(self, fn: Function):
        self._names: dict[int, str] = {}
        self._groups: dict[int, tuple[int, int]] = {}     # id(op) -> (its number, result count)
        value_id = arg_id = 0
        pending = [[fn.body]]
        while pending:      # a stack: a region's last nested region is numbered first
            blocks = pending.pop()
            nested = []
            for i, block in enumerate(blocks):
                for a in block.args:
                    if i == 0:
                        self._names[id(a)], arg_id = f"%arg{arg_id}", arg_id + 1
                    else:
                        self._names[id(a)], value_id = f"%{value_id}", value_id + 1
                for op in block.ops:
                    if op.results:
                        self._groups[id(op)] = (value_id, len(op.results))
                        for k, r in enumerate(op.results):
                            self._names[id(r)] = f"%{value_id}" if len(op.results) == 1 else f"%{value_id}#{k}"
                        value_id += 1
                    nested += [region.blocks for region in op.regions]
            pending += nested

    def value(self, v: Value) -> str:
        return self._names.get(id(v), "<<UNKNOWN SSA VALUE>>")

    def results(self, op: Operation) -> str:
        if id(op) not in self._groups:
            return ""
        n, count = self._groups[id(op)]
        return f"%{n}:{count} = " if count > 1 else f"%{n} = "


def _attr_text(kind: str, value) -> str | None:
    """A property's value; None: not printed (a unit attribute that is not set)."""
    if kind == "unit":
        return "" if value else None
    if kind in ENUMS:
        if kind in ENUM_MNEMONICS:
            return f"#cuda_tile.{ENUM_MNEMONICS[kind]}<{spelling(ENUMS[kind](value))}>"
        return f"{int(value)} : i32"
    if kind == "int":
        return f"{value} : i32"
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return '"' + escape_string(value) + '"'
    if kind == "type":
        return mlir_type_str(value)
    if kind == "dense":
        return f"dense<{dense_body(value)}> : {mlir_type_str(value.type)}"
    if kind == "i32arr":
        return "array<i32" + "".join(f"{', ' if i else ': '}{v}" for i, v in enumerate(value)) + ">"
    if kind == "boolarr":
        return "array<i1" + "".join(f"{', ' if i else ': '}{'true' if v else 'false'}"
                                    for i, v in enumerate(value)) + ">"
    if kind == "hints":
        return "#cuda_tile.optimization_hints" + hints_str(value)
    if kind == "pred":
        return "#cuda_tile." + predicate_str(value)
    if kind == "array":
        return "[" + ", ".join(attr_str(x, "may") for x in (value.items if isinstance(value, A.ArrayAttr)
                                                              else value)) + "]"
    return attr_str(value)


def _properties(op: Operation) -> str:
    props = []
    attrs = dict(op.attrs)
    if "inbounds" in {a.name for a in op.spec.attrs} and "inbounds" not in attrs:
        # a module older than the attribute gets its default: no index known in bounds
        attrs["inbounds"] = (False,) * len(op.operands.get("index") or [])
    for a in op.spec.attrs:
        if a.name in attrs:
            text = _attr_text(a.kind, attrs[a.name])
            if text is not None:
                props.append((a.name, f"{a.name} = {text}" if text else a.name))
    groups = [o for o in op.spec.operands if o.form != "one"]
    if len(groups) > 1:
        sizes = []
        for o in op.spec.operands:
            v = op.operands.get(o.name)
            sizes.append(len(v) if isinstance(v, list) else int(v is not None))
        props.append(("operandSegmentSizes", "operandSegmentSizes = array<i32: "
                      + ", ".join(map(str, sizes)) + ">"))
    if not props:
        return ""
    return " <{" + ", ".join(text for _, text in sorted(props)) + "}>"


def _signature(op: Operation) -> str:
    ins = ", ".join(mlir_type_str(v.type) for v in op.operand_values())
    outs = [mlir_type_str(r.type) for r in op.results]
    out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    return f"({ins}) -> {out}"


def _block(block: Block, names: GenericNames, indent: str, entry: bool) -> list[str]:
    lines = []
    if block.args or not block.ops or not entry:
        args = ", ".join(f"{names.value(a)}: {mlir_type_str(a.type)}" for a in block.args)
        lines.append(f"{indent}^bb0" + (f"({args})" if args else "") + ":")
    for op in block.ops:
        lines.append(generic_op(op, names, indent + INDENT))
    return lines


def generic_op(op: Operation, names: GenericNames, indent: str = "") -> str:
    """`op` in generic form (several lines when it has regions), the first line not indented."""
    operands = ", ".join(names.value(v) for v in op.operand_values())
    text = f'{indent if indent else ""}{names.results(op)}"cuda_tile.{op.name}"({operands}){_properties(op)}'
    if op.regions:
        bodies = []
        for region in op.regions:
            lines = []
            for i, block in enumerate(region.blocks):
                lines += _block(block, names, indent, i == 0)
            bodies.append("{\n" + "\n".join(lines) + ("\n" if lines else "") + indent + "}")
        text += " (" + ", ".join(bodies) + ")"
    return text + " : " + _signature(op)
