"""Tensor views and tile views: which addresses a view access touches, and which are in bounds.

A `TensorView` is a base pointer with a shape and strides (in elements).  A
`TileView` (partition, strided or gather/scatter view) maps an index to one tile
of coordinates in the tensor view:

* partition view:  coord[dim_map[i]] = index[i] * tile[i] + t[i]
* strided view:    coord[dim_map[i]] = index[i] * traversal_stride[i] + t[i]
* gather/scatter:  coord[i] = index[i] + t[i] (the other indices are element offsets:
  cuTile's `ct.Slice(start, n)` passes `start`), except along `sparse_dim`, where the
  index is a 1-D tile giving the coordinate of each tile row.

Index spaces: ceil(shape[dim_map[i]] / tile[i]) (partition), ceil(shape / traversal
stride) (strided), shape (gather/scatter).  An index outside the index space is undefined behaviour and
reported.  Tile elements whose coordinates fall outside the tensor view are
out of bounds: loads give the padding value (zero when the view has none; the
hardware's value is unspecified), stores skip them.  Dimensions flagged
`inbounds` by the producer (13.4) are not masked: their accesses go to memory as
computed, where the memory's own bounds checks apply.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import types as T
from ..ir.enums import PaddingValue
from . import numerics as N
from .errors import UndefinedBehavior

_U64 = np.uint64
_M64 = (1 << 64) - 1


@dataclass(frozen=True)
class TensorView:
    base: int
    elem: T.Type
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def esize(self) -> int:
        return N.storage_dtype(self.elem).itemsize


@dataclass(frozen=True)
class TileView:
    kind: str                       # "partition" | "strided" | "gather"
    tv: TensorView
    tile: tuple[int, ...]
    dim_map: tuple[int, ...]
    steps: tuple[int, ...]          # tile base step per index dimension
    padding: PaddingValue | None
    sparse_dim: int | None = None

    def index_space(self) -> tuple[int, ...]:
        out = []
        for i, step in enumerate(self.steps):
            extent = self.tv.shape[self.dim_map[i]]
            out.append(-(-extent // step) if step > 0 else 0)
        return tuple(out)


def make_tile_view(vt: T.Type, tv: TensorView) -> TileView:
    pad = PaddingValue(vt.padding) if getattr(vt, "padding", None) is not None else None
    if isinstance(vt, T.PartitionViewType):
        dm = tuple(vt.dim_map) or tuple(range(len(vt.tile_shape)))
        return TileView("partition", tv, tuple(vt.tile_shape), dm, tuple(vt.tile_shape), pad)
    if isinstance(vt, T.StridedViewType):
        dm = tuple(vt.dim_map) or tuple(range(len(vt.tile_shape)))
        return TileView("strided", tv, tuple(vt.tile_shape), dm, tuple(vt.traversal_strides), pad)
    if isinstance(vt, T.GatherScatterViewType):
        r = len(vt.tile_shape)
        return TileView("gather", tv, tuple(vt.tile_shape), tuple(range(r)), (1,) * r, pad,
                        sparse_dim=vt.sparse_dim)
    raise TypeError(f"not a tile view type: {vt}")


def padding_value(pad: PaddingValue | None, elem: T.Type) -> np.ndarray:
    """The fill value for out-of-bounds loads, as a 0-d compute value."""
    dt = N.compute_dtype(elem)
    if pad is None or pad == PaddingValue.zero or not isinstance(elem, T.FloatType):
        return np.zeros((), dt)
    v = {PaddingValue.neg_zero: -0.0, PaddingValue.nan: np.nan, PaddingValue.pos_inf: np.inf,
         PaddingValue.neg_inf: -np.inf}[pad]
    return np.asarray(N.to_float(np.float64(v), elem), dtype=dt)


_REL_CACHE: dict = {}


def _relative_bytes(tile: tuple, strides: tuple, esize: int) -> np.ndarray:
    """Byte offset of every tile element from the tile's first element (uint64, cached)."""
    key = (tile, strides, esize)
    rel = _REL_CACHE.get(key)
    if rel is None:
        r = len(tile)
        rel = np.zeros(tile, dtype=_U64)
        for i, (n, st) in enumerate(zip(tile, strides)):
            bshape = [1] * r
            bshape[i] = n
            rel = rel + (np.arange(n, dtype=_U64) * _U64((st * esize) & _M64)).reshape(bshape)
        rel.setflags(write=False)
        if len(_REL_CACHE) > 4096:
            _REL_CACHE.clear()
        _REL_CACHE[key] = rel
    return rel


def access(view: TileView, index: list, inbounds: tuple[bool, ...] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Addresses (uint64, tile-shaped) of one tile of the view, and the in-bounds mask (None: all in)."""
    tv = view.tv
    r = len(view.tile)
    space = view.index_space()
    for i, idx in enumerate(index):
        if i == view.sparse_dim:
            continue
        if idx >= space[i]:
            raise UndefinedBehavior(
                f"index {tuple(_show(x) for x in index)} is outside the index space {space} of the "
                f"{view.kind} view (tensor shape {tv.shape}, tile {view.tile})")
    esize = tv.esize
    start_bytes = 0
    strides = []
    masks = []
    sparse_rel = None
    for i in range(r):
        d = view.dim_map[i]
        n = view.tile[i]
        st = tv.strides[d]
        if i == view.sparse_dim:
            coords = np.asarray(index[i]).astype(np.int64).view(_U64).reshape(-1)[:n]
            if coords.size != n:
                raise UndefinedBehavior(f"gather index tile has {coords.size} elements, expected {n}")
            bshape = [1] * r
            bshape[i] = n
            sparse_rel = (coords * _U64((st * esize) & _M64)).reshape(bshape)
            strides.append(0)
            if not (inbounds and i < len(inbounds) and inbounds[i]):
                inb = coords < _U64(tv.shape[d])
                if not inb.all():
                    masks.append(inb.reshape(bshape))
            continue
        start = index[i] * view.steps[i]
        start_bytes += start * st * esize
        strides.append(st)
        if start + n > tv.shape[d] and not (inbounds and i < len(inbounds) and inbounds[i]):
            bshape = [1] * r
            bshape[i] = n
            masks.append((np.arange(n) < tv.shape[d] - start).reshape(bshape))
    rel = _relative_bytes(view.tile, tuple(strides), esize)
    addrs = rel + _U64((tv.base + start_bytes) & _M64)
    if sparse_rel is not None:
        addrs = addrs + sparse_rel
    mask = None
    if masks:
        mask = masks[0]
        for m in masks[1:]:
            mask = mask & m
        mask = np.broadcast_to(mask, view.tile)
    return addrs, mask


def _show(x):
    return x if isinstance(x, int) else "tile"
