"""The tile-GPU dialect's ops: what the passes make explicit that cuda_tile leaves implicit.

Each op is declared once here (operands, results, attributes, effects); passes create them with `build`,
the printer prints them generically and codegen has exactly one pattern per op.  cuda_tile ops stay in the
tile-GPU IR unchanged except for their types (tiles gain a layout); these ops are added around them.

| op                         | what it is                                                                 |
|----------------------------|----------------------------------------------------------------------------|
| `tilegpu.convert_layout`   | the same tile in another layout (free when only registers are relabelled)  |
"""
from __future__ import annotations

from dataclasses import dataclass

from ..bytecode.opspec import OperandSpec, OpSpec
from ..ir.core import Operation, Region, Value
from ..ir.types import Type

DIALECT = "tilegpu"


@dataclass(frozen=True)
class OpDecl:
    name: str                        # without the dialect prefix
    operands: tuple[str, ...]        # "x" one value, "xs*" variadic
    results: tuple[str, ...]
    effects: frozenset[str] = frozenset()   # "smem_read", "smem_write", "barrier", "global_read", ...
    doc: str = ""

    @property
    def full_name(self) -> str:
        return f"{DIALECT}.{self.name}"


DECLS: dict[str, OpDecl] = {}
SPECS: dict[str, OpSpec] = {}


def declare(name: str, operands: str = "", results: str = "", effects: str = "", doc: str = "") -> OpDecl:
    d = OpDecl(name, tuple(operands.split()), tuple(results.split()), frozenset(effects.split()), doc)
    DECLS[d.full_name] = d
    SPECS[d.full_name] = OpSpec(
        opcode=-1, name=d.full_name, cls="".join(p.title() for p in name.split("_")) + "Op", since=0,
        flags_since=None, results=tuple(d.results),
        attrs=(), operands=tuple(OperandSpec(o.rstrip("*"), "variadic" if o.endswith("*") else "one", None, 0)
                                 for o in d.operands),
        counted_operands=False, regions=0)
    return d


CONVERT_LAYOUT = declare("convert_layout", "source", "result",
                         doc="the source tile in the result type's layout")


def build(decl: OpDecl, operands: dict[str, Value | list[Value]], result_types: list[Type],
          attrs: dict | None = None, regions: list[Region] | None = None, loc: int = 0) -> Operation:
    return Operation(SPECS[decl.full_name], operands, attrs or {}, result_types, regions, loc)


def is_tilegpu(op: Operation) -> bool:
    return op.name.startswith(DIALECT + ".")


def decl_of(op: Operation) -> OpDecl | None:
    return DECLS.get(op.name)
