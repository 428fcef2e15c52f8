"""What a cuda_tile value is while code is being generated, and element types in LLVM."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import types as T
from ..tilegpu.layout import LinearLayout
from ..tilegpu.types import elem_bytes  # noqa: F401  (re-exported for the patterns)

_FLOAT_LLVM = {"f16": "half", "bf16": "bfloat", "f32": "float", "tf32": "float", "f64": "double"}
GLOBAL_PTR = "ptr addrspace(1)"
SHARED_PTR = "ptr addrspace(3)"


def llvm_type(t: T.Type) -> str:
    """The LLVM type of one element (a rank-0 tile is its element)."""
    if isinstance(t, T.TileType):
        t = t.elem
    if isinstance(t, T.IntType):
        return f"i{t.width}"
    if isinstance(t, T.FloatType):
        return _FLOAT_LLVM.get(t.name, "i8")  # fp8/fp4 kinds travel as their raw bits
    if isinstance(t, T.PointerType):
        return GLOBAL_PTR
    raise TypeError(f"no LLVM element type for {t}")


@dataclass
class Tile:
    """A tile distributed over the CTA: `regs[r]` holds the element at layout.apply(r, lane, warp).

    Rank-0 tiles are uniform scalars: no layout, one register, same value in every thread.
    """
    type: T.TileType
    layout: LinearLayout | None
    regs: list[str]

    @property
    def elem(self) -> T.Type:
        return self.type.elem

    @property
    def is_scalar(self) -> bool:
        return self.layout is None

    @property
    def llvm(self) -> str:
        return llvm_type(self.type.elem)


@dataclass
class TensorView:
    type: T.TensorViewType
    base: str                 # ptr addrspace(1)
    shape: list[str]          # i64 values
    strides: list[str]        # i64 values, in elements


@dataclass
class PartitionView:
    type: T.PartitionViewType
    view: TensorView


@dataclass
class GatherScatterView:
    """A gather/scatter view: one dimension (`type.sparse_dim`) indexed by a tile of coordinates."""
    type: T.GatherScatterViewType
    view: TensorView


TOKEN = object()  # tokens order memory ops; program order already does, so they carry nothing
