"""Text form of the tile-GPU IR (what --print-ir-after-all shows), in MLIR's generic op syntax:

    #L0 = layout<64x64 reg=[0,1 0,2 8,0] lane=[...] warp=[...]>
    tilegpu.kernel @matmul(%0: ptr<f16>, ...) {
      %7 = "cuda_tile.load_view_tko"(%5, %3, %4) {memory_ordering_semantics = weak} : (...) -> (tile<64x32xf16, #L0>, token)
      "cuda_tile.for"(%1, %2, %3, %9) ({
      ^bb(%10: tile<i32>, %11: tile<64x64xf32, #L1>):
        ...
      }) : (...) -> (...)
    }

Layouts are printed once, as aliases.  The printer is iterative (deep nesting is fine) and deterministic.
"""
from __future__ import annotations

import enum

from ..ir import attrs as A
from ..ir import types as T
from ..ir.core import Block, Operation, Value
from ..schedule.report import ScheduleReport
from .layout import LinearLayout
from .mma import FmaPlan, MmaPlan
from .wgmma import WgmmaPlan
from .ir import KernelIR
from .types import LayoutTile


def _coords(bases) -> str:
    return " ".join(",".join(map(str, b)) for b in bases)


def layout_text(layout: LinearLayout) -> str:
    reg, lane, warp = layout.bases
    return (f"layout<{'x'.join(map(str, layout.shape))} reg=[{_coords(reg)}] lane=[{_coords(lane)}] "
            f"warp=[{_coords(warp)}]>")


class _Names:
    def __init__(self):
        self.values: dict[int, str] = {}
        self.layouts: dict[LinearLayout, str] = {}

    def define(self, v: Value) -> str:
        name = f"%{len(self.values)}"
        self.values[id(v)] = name
        return name

    def use(self, v: Value | None) -> str:
        if v is None:
            return "<none>"
        return self.values.get(id(v), "%<undefined>")

    def type(self, t) -> str:
        if isinstance(t, LayoutTile) and t.layout is not None:
            alias = self.layouts.setdefault(t.layout, f"#L{len(self.layouts)}")
            return f"tile<{''.join(f'{d}x' for d in t.shape)}{t.elem}, {alias}>"
        return _type_text(t)


def _type_text(t) -> str:
    if isinstance(t, (T.TensorViewType, T.PartitionViewType)):
        return type(t).__name__.removesuffix("Type").lower()
    return str(t)


def _attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, bytes):
        text = v.decode(errors="replace")
        return repr(text[:40] + ("..." if len(text) > 40 else ""))
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    if isinstance(v, A.IntegerAttr):
        return f"{v.value} : {v.type}"
    if isinstance(v, A.FloatAttr):
        return f"0x{v.bits:X} : {v.type}"
    if isinstance(v, A.DenseElements):
        raw = v.raw.hex()
        return f"dense<0x{raw[:32]}{'...' if len(raw) > 32 else ''}>"
    if isinstance(v, A.ArrayAttr):
        return "[" + ", ".join(_attr(x) for x in v.items) + "]"
    if isinstance(v, LinearLayout):
        return layout_text(v)
    if isinstance(v, T.Type):
        return str(v)
    if isinstance(v, (MmaPlan, WgmmaPlan)):   # a Tcgen05Plan is a WgmmaPlan
        return f"#{type(v).__name__}<{v.instr.key}>"
    if isinstance(v, FmaPlan):
        return f"#FmaPlan<kc = {v.kc}>"
    if isinstance(v, ScheduleReport):
        return f"#schedule<{v.strategy}, ii = {v.ii}, stages = {v.stage_count}>"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _attrs(op: Operation) -> str:
    if not op.attrs:
        return ""
    return " {" + ", ".join(f"{k} = {_attr(v)}" for k, v in sorted(op.attrs.items())) + "}"


def print_kernel(k: KernelIR) -> str:
    """The kernel as text, layouts first."""
    names = _Names()
    fn = k.fn
    args = ", ".join(f"{names.define(a)}: {names.type(a.type)}" for a in fn.body.args)
    body: list[str] = []
    _print_ops(fn.body, names, body)
    head = [f"{alias} = {layout_text(lay)}" for lay, alias in names.layouts.items()]
    return "\n".join(head + [f"tilegpu.kernel @{k.name}({args}) {{"] + body + ["}", ""])


def _op_line(op: Operation, names: _Names) -> tuple[str, str]:
    """(the part before the regions, the part after them)."""
    operands = ", ".join(names.use(v) for v in op.operand_values())
    otypes = ", ".join(names.type(v.type) for v in op.operand_values())
    results = [r for r in op.results if r is not None]
    lhs = ", ".join(names.define(r) for r in results)
    rtypes = ", ".join(names.type(r.type) for r in results)
    head = (f"{lhs} = " if lhs else "") + f'"{op.spec.qualified_name}"({operands})'
    tail = f"{_attrs(op)} : ({otypes}) -> ({rtypes})"
    return head, tail


def _print_ops(body: Block, names: _Names, out: list[str]) -> None:
    """Iterative: a stack of frames ("ops", block, next op, indent), ("args", block, indent) starting a
    region block, ("sep", indent) between regions and ("close", tail, indent) ending a region op."""
    frames: list = [("ops", body, 0, 1)]
    while frames:
        frame = frames.pop()
        if frame[0] == "close":
            _, tail, indent = frame
            out.append("  " * indent + "})" + tail)
            continue
        if frame[0] == "sep":
            out.append("  " * frame[1] + "}, {")
            continue
        if frame[0] == "args":
            _, block, indent = frame
            if block.args:
                out.append("  " * indent + "^bb(" + ", ".join(f"{names.define(a)}: {names.type(a.type)}"
                                                           for a in block.args) + "):")
            frames.append(("ops", block, 0, indent + 1))
            continue
        _, block, i, indent = frame
        if i >= len(block.ops):
            continue
        op = block.ops[i]
        frames.append(("ops", block, i + 1, indent))
        pad = "  " * indent
        if not op.regions:
            head, tail = _op_line(op, names)
            out.append(pad + head + tail)
            continue
        head, tail = _op_line(op, names)
        out.append(pad + head + " ({")
        frames.append(("close", tail, indent))
        blocks = [b for r in op.regions for b in r.blocks]
        for j, b in enumerate(reversed(blocks)):
            frames.append(("args", b, indent))
            if j < len(blocks) - 1:
                frames.append(("sep", indent))

