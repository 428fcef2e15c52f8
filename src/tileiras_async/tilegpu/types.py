"""Types of the tile-GPU IR: tiles whose type says how they are spread over the CTA.

A cuda_tile `tile<64x64xf32>` becomes `tile<64x64xf32, #L3>` once `assign-layouts` has run: the encoding is
a `LinearLayout` (registers x lanes x warps -> element coordinates; blocked, mma-fragment and sliced layouts
are all of this form).  A rank-0 tile is *uniform*: every thread holds the same value in one register, so
it needs no layout (and no shared-memory broadcast).  Shared-memory buffers are `smem<...>` values made by
`tilegpu.local_alloc`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import types as T
from .layout import LinearLayout


@dataclass(frozen=True, slots=True)
class LayoutTile(T.TileType):
    """A tile with its distribution over the CTA (None: a uniform rank-0 value)."""
    layout: LinearLayout | None = None

    def __str__(self) -> str:
        return T.TileType.__str__(self)

    @property
    def bare(self) -> T.TileType:
        return T.TileType(self.shape, self.elem)


@dataclass(frozen=True, slots=True)
class SmemType(T.Type):
    """A shared-memory buffer of `nbytes` bytes."""
    nbytes: int

    def __str__(self) -> str:
        return f"smem<{self.nbytes}>"


def with_layout(ty: T.TileType, layout: LinearLayout | None) -> LayoutTile:
    return LayoutTile(ty.shape, ty.elem, None if not ty.shape else layout)


def layout_of(ty: T.Type) -> LinearLayout | None:
    """The layout a value's type carries (None for uniform values and non-tiles)."""
    return getattr(ty, "layout", None)


def bare(ty: T.Type) -> T.Type:
    """The cuda_tile type without the encoding (what the type meant before assign-layouts)."""
    return T.TileType(ty.shape, ty.elem) if isinstance(ty, LayoutTile) else ty


def elem_bytes(t: T.Type) -> int:
    """Bytes one element occupies in registers and shared memory (tf32 is stored as f32, pointers are 64-bit)."""
    if isinstance(t, T.TileType):
        t = t.elem
    if isinstance(t, T.PointerType):
        return 8
    if t == T.TF32:
        return 4
    return max(1, t.width // 8)


def is_splat(raw: bytes, elem: T.Type) -> bool:
    """Whether a dense constant's bytes hold a single element for the whole tile (i1 packs 8 per byte:
    an all-zero or all-one byte is a splat)."""
    if isinstance(elem, T.IntType) and elem.width == 1:
        return len(raw) == 1 and raw[0] in (0, 0xFF)
    return len(raw) == (3 if elem == T.TF32 else max(1, elem.width // 8))


ALIGN = 16      # bytes: every shared-memory buffer and scratch area starts on a 16-byte boundary (vector accesses)


def align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a
