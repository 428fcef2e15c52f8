"""Tensor copies through tensor maps (TMA, sm_90+): `cp.async.bulk.tensor.{1,...,5}d ... .tile`.

* `cp.async.bulk.tensor.Nd.shared::cta.global.tile.mbarrier::complete_tx::bytes [dst], [tmap, {c0, ...}],
  [mbar]`: the box of the map at element coordinates (c0 innermost) is read when the copy issues --
  elements outside the tensor's extents read as zero -- and lands in shared memory, row-major with the
  innermost dimension contiguous and swizzled as the map says (on the absolute shared address, as wgmma
  descriptors read it), delivering the box's bytes to the mbarrier when a thread next waits on it.
* `cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [tmap, {c0, ...}], [src]`: the box is read
  from shared memory and its in-bounds elements written to global memory when `cp.async.bulk.wait_group`
  retires its group (as the non-tensor bulk stores).

The 128-byte map is read from the kernel parameter it lives in.  Its encoding is NVIDIA's (filled on the
host by the host object's launch hook, emu/README.md "NVIDIA's launch-time hook"); `decode_tensor_map`
reads the fields observed there: address, element type, rank, swizzle, extents, strides, box (per dimension
d >= 1 of ranks up to 5: the stride / 16 in 32-bit half 2 + d, the extent - 1 in half 8 + d, the box
extent - 1 in byte d - 1 of word 7).  im2col modes, multicast and reductions are not emulated.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..memory import PARAM_WINDOW
from ..parser import TensorAddr, Vec
from ..program import SymRef
from .bulk_copy import _HINTS, bulk_load, issue_clocks
from .core import _err, _lanes, _space, address_fn, bl, getter
from .descriptors import swizzle_address
from .mbarrier import mbar_keys

# element-type codes (bits 7..10 of the map's second word) seen in NVIDIA's maps -> element bytes:
# u32 (int32 data), f16, f32 (also tf32 operands), bf16
_ELEM_BYTES = {2: 4, 6: 2, 7: 4, 10: 2}
_SWIZZLE = {0: "none", 1: "32B", 2: "64B", 3: "128B"}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_M32 = 0xFFFFFFFF
MAX_RANK = 5      # the tile mode's ranks (PTX ISA: cp.async.bulk.tensor .dim = .1d ... .5d)
_RANKS = {f"{r}d": r for r in range(1, MAX_RANK + 1)}


@dataclass(frozen=True)
class TensorMap:
    address: int
    elem_bytes: int
    swizzle: str
    extents: tuple        # elements per dimension, innermost first
    strides: tuple        # bytes per step of each dimension, innermost first
    box: tuple            # box elements per dimension, innermost first

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.elem_bytes


def _half(words, k: int) -> int:
    """The k-th 32-bit half of the map (k // 2: the word, k % 2: low 0, high 1)."""
    return (words[k // 2] >> 32 * (k % 2)) & _M32


def decode_tensor_map(raw: bytes) -> TensorMap:
    """The fields of a 128-byte tensor map as NVIDIA's launch hooks write them (ValueError: not decodable)."""
    w = struct.unpack("<16Q", raw)
    flags = w[1] & _M32
    rank = ((flags >> 4) & 7) + 1
    code = (flags >> 7) & 0xF
    if code not in _ELEM_BYTES:
        raise ValueError(f"element-type code {code} (word {w[1]:#x}) is not decoded")
    if rank > MAX_RANK:
        raise ValueError(f"rank {rank} (word {w[1]:#x}): tensor maps have ranks 1 to {MAX_RANK}")
    esize = _ELEM_BYTES[code]
    swizzle = _SWIZZLE[(flags >> 13) & 3]
    atom = (flags >> 19) & 3          # 1: 128-byte swizzle of 32-byte atoms (sm_100's tf32 operands)
    if atom == 1 and swizzle == "128B":
        swizzle = "128B_base32B"
    elif atom:
        raise ValueError(f"swizzle atom code {atom} with {swizzle} swizzle (word {w[1]:#x}) is not decoded")
    extents = tuple(_half(w, 8 + d) + 1 for d in range(rank))
    strides = (esize, *(_half(w, 2 + d) * 16 for d in range(1, rank)))
    box = ((w[6] >> 56) + 1, *(((w[7] >> 8 * (d - 1)) & 0xFF) + 1 for d in range(1, rank)))
    return TensorMap(w[0] & 0x01FFFFFFFFFFFFF0, esize, swizzle, extents, strides, box)


def build_tensor(mc, li, mods):
    """`cp.async.bulk.tensor...` (dispatched from the `cp` builder)."""
    rank = _RANKS.get(mods.take(*_RANKS))
    dst_space = _space(mods, None)
    src_space = _space(mods, None)
    if not mods.has("tile"):
        raise _err(li, "cp.async.bulk.tensor: only the .tile mode is emulated (not im2col)")
    mods.ignore(*_HINTS)
    if rank is None:
        raise _err(li, f"cp.async.bulk.tensor: expected a dimension .1d to .{MAX_RANK}d")
    if mods.has("multicast::cluster"):
        raise _err(li, "cp.async.bulk.tensor: multicast is not emulated")
    to_shared = mods.has("mbarrier::complete_tx::bytes")
    to_global = mods.has("bulk_group")
    mods.done()
    ops = li.ops
    if to_shared and dst_space == "shared" and src_space == "global":
        _, dfn = address_fn(mc, ops[0], li)
        tmap, coords = _tensor_operand(mc, li, ops[1], rank)
        _, bfn = address_fn(mc, ops[2], li)
        return lambda m: _load(mc, li, m, dfn, tmap, coords, bfn)
    if to_global and dst_space == "global" and src_space == "shared":
        tmap, coords = _tensor_operand(mc, li, ops[0], rank)
        _, sfn = address_fn(mc, ops[1], li)
        return lambda m: _store(mc, li, m, tmap, coords, sfn)
    raise _err(li, f"{li.opcode} is not supported")


def _tensor_operand(mc, li, op, rank: int):
    """(fn(idx, full) -> the map of each lane, fn(idx) -> [lanes, rank] coordinates) of `[tmap, {c...}]`."""
    if not isinstance(op, TensorAddr) or not isinstance(op.coords, Vec) or len(op.coords.items) != rank:
        raise _err(li, f"expected [tensor map, {{{rank} coordinates}}], got {op}")
    if isinstance(op.base.base, SymRef) and op.base.base.kind != "kparam":
        raise _err(li, "tensor maps are read from kernel parameters only")
    _, afn = address_fn(mc, op.base, li)
    gets = [getter(mc, c, "s32", li) for c in op.coords.items]
    cache: dict = {}

    def maps(idx, full):
        out = []
        for a in afn(idx, full).tolist():
            off = a - PARAM_WINDOW if a >= PARAM_WINDOW else a
            if off + 128 > len(mc.kparam):
                raise _err(li, f"tensor map at parameter offset {off:#x} is outside the kernel parameters")
            raw = bytes(mc.kparam[off:off + 128])
            if raw not in cache:
                try:
                    cache[raw] = decode_tensor_map(raw)
                except ValueError as e:
                    raise _err(li, f"tensor map: {e}") from None
            out.append(cache[raw])
        return out

    def coords(idx):
        return np.stack([bl(np.asarray(g()), mc.L)[idx].astype(np.int64) for g in gets], axis=1)
    return maps, coords


def _elements(tm: TensorMap, at) -> tuple[np.ndarray, np.ndarray]:
    """(global byte addresses, in-bounds mask) of the box's elements in row-major order (innermost last)."""
    grids = np.meshgrid(*[at[d] + np.arange(tm.box[d]) for d in reversed(range(len(tm.box)))], indexing="ij")
    inside = np.ones(grids[0].shape, bool)
    addr = np.full(grids[0].shape, tm.address, np.int64)
    for g, d in zip(grids, reversed(range(len(tm.box)))):
        inside &= (g >= 0) & (g < tm.extents[d])
        addr += g * tm.strides[d]
    return addr.reshape(-1), inside.reshape(-1)


def _placement(li, tm: TensorMap, saddr: int) -> np.ndarray:
    """Where each byte of the dense box goes, relative to `saddr`, under the map's swizzle."""
    n = tm.box_bytes
    dense = np.arange(n, dtype=np.int64)
    phys = swizzle_address(saddr + dense, tm.swizzle) - saddr
    if phys.min() < 0 or phys.max() >= n:
        raise _err(li, f"shared address {saddr:#x} is not aligned for the {tm.swizzle} swizzle of the tensor map")
    return phys


def _load(mc, li, m, dfn, tmap, coords, bfn) -> None:
    idx, full = _lanes(mc, m)
    if not len(idx):
        return
    maps, at, daddr = tmap(idx, full), coords(idx), dfn(idx, full)
    keys = mbar_keys(mc, li, bfn(idx, full), idx)
    for k, lane in enumerate(idx.tolist()):
        tm = maps[k]
        addr, inside = _elements(tm, at[k])
        vals = np.zeros(len(addr), _UINT[tm.elem_bytes])
        sel = np.flatnonzero(inside)
        if len(sel):
            vals[sel] = mc.load("global", addr[sel].astype(np.uint64), np.full(len(sel), lane), tm.elem_bytes,
                                _UINT[tm.elem_bytes], 1, li)
        data = np.zeros(tm.box_bytes, np.uint8)
        data[_placement(li, tm, int(daddr[k]))] = vals.view(np.uint8)
        lanes = np.array([lane])
        mc.resolve("shared", np.arange(int(daddr[k]), int(daddr[k]) + tm.box_bytes, 16, dtype=np.uint64),
                   np.full(tm.box_bytes // 16, lane), 16, True, li)
        mc.bulk_in.append([int(keys[k]), lanes, mc.shbase[lanes] + np.int64(daddr[k]), data[None, :], li,
                           issue_clocks(mc, lanes)])


@dataclass
class TensorStore:
    """A tensor store waiting for its bulk group: the map, the box's coordinates and the shared source."""
    tm: TensorMap
    at: np.ndarray
    saddr: int

    def write(self, mc, lane: int, li) -> None:
        tm = self.tm
        phys = bulk_load(mc, "shared", np.array([self.saddr], np.uint64), np.array([lane]), tm.box_bytes, li)[0]
        dense = phys[_placement(li, tm, self.saddr)].view(_UINT[tm.elem_bytes])
        addr, inside = _elements(tm, self.at)
        sel = np.flatnonzero(inside)
        if len(sel):
            mc.store("global", addr[sel].astype(np.uint64), np.full(len(sel), lane), tm.elem_bytes,
                     _UINT[tm.elem_bytes], 1, dense[sel], li)


def _store(mc, li, m, tmap, coords, sfn) -> None:
    idx, full = _lanes(mc, m)
    if not len(idx):
        return
    maps, at, saddr = tmap(idx, full), coords(idx), sfn(idx, full)
    for k, lane in enumerate(idx.tolist()):
        tm = maps[k]
        mc.resolve("shared", np.arange(int(saddr[k]), int(saddr[k]) + tm.box_bytes, 16, dtype=np.uint64),
                   np.full(tm.box_bytes // 16, lane), 16, False, li)
        mc.bulk_out.append([np.array([lane]), TensorStore(tm, at[k], int(saddr[k])), None, tm.box_bytes,
                            np.full(1, -1, np.int64), li])
