"""Tensor-core descriptors: 64-bit shared-memory matrix descriptors (wgmma, tcgen05) and the 32-bit
tcgen05 instruction descriptor, decoded into values, and the exact address of every operand element.

Shared-memory matrix descriptor (bits):

    wgmma (sm_90a)                          tcgen05 (sm_100a)
    0-13   start address >> 4               0-13   start address >> 4
    16-29  leading byte offset >> 4         16-29  leading byte offset >> 4
    32-45  stride byte offset >> 4          32-45  stride byte offset >> 4
    49-51  base offset                      46-48  fixed 0b001
    62-63  swizzle: 0 none, 1 128B,         49-51  base offset
           2 64B, 3 32B                     52     leading-offset mode (1: absolute, sm_103a)
                                            61-63  swizzle: 0 none, 1 128B with 32B atoms,
                                                   2 128B, 4 64B, 6 32B

Canonical layouts (what the descriptor fields mean; T = 16 / element bytes elements per 16-byte
chunk, W = swizzle width in bytes).  An operand is R rows (M for A, N for B) by K elements; one
instruction always covers 32 bytes of K:

    K-major, no swizzle:  row r, element k at  (r%8)*16 + (r//8)*SBO + (k//T)*LBO + (k%T)*b
    K-major, swizzle W:   row r, element k at  (r%8)*W  + (r//8)*SBO + k*b
    MN-major, no swizzle: row r, element k at  (r%T)*b + (r//T)*SBO + (k%8)*16 + (k//8)*LBO
    MN-major, swizzle W:  row r, element k at  (r%T)*b + ((r//T)%(W/16))*16 + (r//(T*W/16))*LBO
                                               + (k%8)*W + (k//8)*SBO

(these are CUTLASS's `make_gmma_desc` / `make_umma_desc` canonical forms; for K-major swizzled
layouts the leading byte offset is unused).  The byte address is ``start + offset`` and the swizzle
is applied to that absolute shared-memory address, the way the hardware (and TMA, and the XOR the
compilers emit for their own stores) does: Swizzle<B,M,S> XORs bits [M+S, M+S+B) into [M, M+B)
(<3,4,3> for 128B, <2,4,3> for 64B, <1,4,3> for 32B, <2,5,2> for 128B with 32B atoms).  The base
offset is for patterns that do not start on their repeat boundary (1024/512/256 bytes): the row
phase used for the XOR is ``(address >> 7) - base_offset``.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..errors import EmuError
from .mma import _decode_elems


class DescriptorError(EmuError):
    """A matrix or instruction descriptor the hardware does not accept (reserved bits, bad fields)."""


# swizzle name -> (B, M, S) of CuTe's Swizzle<B,M,S>, and the row width in bytes of its atom
SWIZZLES = {"none": (0, 4, 3), "32B": (1, 4, 3), "64B": (2, 4, 3), "128B": (3, 4, 3), "128B_base32B": (2, 5, 2)}
ROW_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128, "128B_base32B": 128}
_WGMMA_SWIZZLE = {0: "none", 1: "128B", 2: "64B", 3: "32B"}
_TCGEN05_SWIZZLE = {0: "none", 1: "128B_base32B", 2: "128B", 4: "64B", 6: "32B"}


@dataclass(frozen=True)
class SmemDescriptor:
    start: int              # byte address in the CTA's shared-memory window
    lbo: int                # leading dimension byte offset
    sbo: int                # stride dimension byte offset
    base_offset: int        # 0..7
    swizzle: str            # none | 32B | 64B | 128B | 128B_base32B
    lbo_absolute: bool = False


def _field(v: int, lo: int, n: int) -> int:
    return (v >> lo) & ((1 << n) - 1)


def decode_wgmma_desc(value: int) -> SmemDescriptor:
    """The fields of a wgmma (sm_90a) shared-memory matrix descriptor."""
    v = int(value) & 0xFFFFFFFFFFFFFFFF
    return SmemDescriptor(start=_field(v, 0, 14) << 4, lbo=_field(v, 16, 14) << 4, sbo=_field(v, 32, 14) << 4,
                          base_offset=_field(v, 49, 3), swizzle=_WGMMA_SWIZZLE[_field(v, 62, 2)])


def decode_tcgen05_desc(value: int) -> SmemDescriptor:
    """The fields of a tcgen05 (sm_100a) shared-memory descriptor; reserved bits must hold their values."""
    v = int(value) & 0xFFFFFFFFFFFFFFFF
    if _field(v, 46, 3) != 0b001:
        raise DescriptorError(f"shared-memory descriptor {v:#018x}: bits 46-48 must be 0b001 "
                              f"(got {_field(v, 46, 3):#05b})")
    sw = _field(v, 61, 3)
    if sw not in _TCGEN05_SWIZZLE:
        raise DescriptorError(f"shared-memory descriptor {v:#018x}: swizzle mode {sw} is invalid")
    return SmemDescriptor(start=_field(v, 0, 14) << 4, lbo=_field(v, 16, 14) << 4, sbo=_field(v, 32, 14) << 4,
                          base_offset=_field(v, 49, 3), swizzle=_TCGEN05_SWIZZLE[sw],
                          lbo_absolute=bool(_field(v, 52, 1)))


def swizzle_address(addr, swizzle: str, base_offset: int = 0):
    """Apply a swizzle mode to absolute shared-memory byte addresses (numpy array or int)."""
    b, m, s = SWIZZLES[swizzle]
    if b == 0:
        return addr
    a = np.asarray(addr, dtype=np.int64)
    phase = ((a >> (m + s)) - base_offset) & ((1 << b) - 1)
    out = a ^ (phase << m)
    return out if isinstance(addr, np.ndarray) else int(out)


def _linear_offsets(d: SmemDescriptor, rows: int, k: int, elem_bytes: int, mn_major: bool) -> np.ndarray:
    """Unswizzled byte offsets [rows, k] of the canonical layout (see the module docstring)."""
    b = elem_bytes
    t = 16 // b
    r = np.arange(rows, dtype=np.int64)[:, None]
    kk = np.arange(k, dtype=np.int64)[None, :]
    w = ROW_BYTES[d.swizzle]
    if not mn_major:
        if d.swizzle == "none":
            return (r % 8) * 16 + (r // 8) * d.sbo + (kk // t) * d.lbo + (kk % t) * b
        return (r % 8) * w + (r // 8) * d.sbo + kk * b
    if d.swizzle == "none":
        return (r % t) * b + (r // t) * d.sbo + (kk % 8) * 16 + (kk // 8) * d.lbo
    chunks = w // 16
    return ((r % t) * b + ((r // t) % chunks) * 16 + (r // (t * chunks)) * d.lbo
            + (kk % 8) * w + (kk // 8) * d.sbo)


_CACHE: OrderedDict = OrderedDict()


def operand_addresses(d: SmemDescriptor, rows: int, k: int, elem_bytes: int, mn_major: bool) -> np.ndarray:
    """Shared-memory byte address [rows, k] of every element of an operand described by `d` (cached)."""
    key = (d, rows, k, elem_bytes, mn_major)
    v = _CACHE.get(key)
    if v is not None:
        _CACHE.move_to_end(key)
        return v
    if elem_bytes not in (1, 2, 4):
        raise DescriptorError(f"{elem_bytes}-byte elements in shared-memory operands")
    if d.lbo_absolute:
        raise DescriptorError("absolute leading-dimension addresses (descriptor bit 52, sm_103a) are not modelled")
    v = swizzle_address(d.start + _linear_offsets(d, rows, k, elem_bytes, mn_major), d.swizzle, d.base_offset)
    v.setflags(write=False)
    _CACHE[key] = v
    if len(_CACHE) > 256:
        _CACHE.popitem(last=False)
    return v


ELEM_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1}
_ELEM_DT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def load_operand(mc, li, decode, descs: np.ndarray, idx: np.ndarray, rows: int, k: int, ty: str,
                 mn_major: bool) -> np.ndarray:
    """The [n, rows, k] elements (float64, or int64 for s8/u8) of n shared-memory operands: descriptor
    descs[i] (decoded by `decode`) read in the shared memory of lane idx[i]'s CTA, bounds-checked."""
    nb = ELEM_BYTES[ty]
    out = np.empty((len(idx), rows, k), np.int64 if ty in ("s8", "u8") else np.float64)
    for dv in np.unique(descs):
        sel = np.flatnonzero(descs == dv)
        try:
            addr = operand_addresses(decode(int(dv)), rows, k, nb, mn_major)
        except DescriptorError as e:
            e.line, e.text, e.kernel = li.line, li.text, mc.prog.kernel
            raise
        flat = np.tile(addr.reshape(-1), len(sel)).astype(np.uint64)
        raw = mc.load("shared", flat, np.repeat(idx[sel], rows * k), nb, _ELEM_DT[nb], 1, li)
        out[sel] = _decode_elems(raw, ty).reshape(len(sel), rows, k)
    return out


# ============================================================================ tcgen05 instruction descriptor


@dataclass(frozen=True)
class InstrDescriptor:
    kind: str               # f16 | tf32 | f8f6f4 | i8
    m: int
    n: int
    k: int
    dtype: str              # f16 | f32 | s32
    atype: str
    btype: str
    negate_a: bool
    negate_b: bool
    transpose_a: bool       # A is M-major (else K-major)
    transpose_b: bool       # B is N-major (else K-major)
    saturate: bool
    max_shift: int


_KIND_TYPES = {
    "f16": ({0: "f16", 1: "bf16"}, {0: "f16", 1: "f32"}, 16),
    "tf32": ({2: "tf32"}, {1: "f32"}, 8),
    "f8f6f4": ({0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}, {1: "f32"}, 32),
    "i8": ({0: "u8", 1: "s8"}, {2: "s32"}, 32),
}


def decode_idesc(kind: str, value: int, *, ws: bool = False) -> InstrDescriptor:
    """Decode the instruction descriptor of `tcgen05.mma{.ws}.kind::<kind>` (dense kinds)."""
    v = int(value) & 0xFFFFFFFF
    if kind not in _KIND_TYPES:
        raise DescriptorError(f"instruction descriptors of .kind::{kind} are not modelled")
    atypes, dtypes, k = _KIND_TYPES[kind]

    def bad(msg):
        return DescriptorError(f"instruction descriptor {v:#010x} (.kind::{kind}): {msg}")
    if _field(v, 2, 1):
        raise bad("sparse matrices (bit 2) are not modelled")
    if _field(v, 6, 1) or _field(v, 23, 1) or _field(v, 29, 1):
        raise bad("reserved bits 6, 23 and 29 must be 0")
    dtype = dtypes.get(_field(v, 4, 2))
    atype = atypes.get(_field(v, 7, 3))
    btype = atypes.get(_field(v, 10, 3))
    if dtype is None or atype is None or btype is None:
        raise bad(f"types D={_field(v, 4, 2)} A={_field(v, 7, 3)} B={_field(v, 10, 3)} are not valid")
    if kind in ("f16", "tf32") and atype != btype:
        raise bad(f"A is .{atype} but B is .{btype}")
    sat = bool(_field(v, 3, 1))
    if sat and kind != "i8":
        raise bad("saturation (bit 3) is for .kind::i8 only")
    neg_a, neg_b = bool(_field(v, 13, 1)), bool(_field(v, 14, 1))
    if kind == "i8" and (neg_a or neg_b):
        raise bad("negation (bits 13-14) is not valid for .kind::i8")
    m, n = _field(v, 24, 5) << 4, _field(v, 17, 6) << 3
    valid_m = (32, 64, 128) if ws else (64, 128)
    if m not in valid_m:
        raise bad(f"M={m} (valid: {', '.join(map(str, valid_m))})")
    step = 16 if (m == 128 and not ws) else 8
    if not (step <= n <= 256 and n % step == 0):
        raise bad(f"N={n} with M={m} (valid: multiples of {step} up to 256)")
    shift = _field(v, 30, 2)
    if shift and not ws:
        raise bad("a B-reuse shift (bits 30-31) needs .ws")
    return InstrDescriptor(kind=kind, m=m, n=n, k=k, dtype=dtype, atype=atype, btype=btype,
                           negate_a=neg_a, negate_b=neg_b, transpose_a=bool(_field(v, 15, 1)),
                           transpose_b=bool(_field(v, 16, 1)), saturate=sat, max_shift=shift)
