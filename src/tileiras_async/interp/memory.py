"""The interpreter's global memory: argument arrays, globals and allocas in a fake 64-bit address space.

Every buffer gets its own 1 TiB window: buffer k starts at ``(k + 1) << 40`` plus
the low 8 bits of the real address of its first byte (so alignment facts about
the caller's arrays carry over).  A pointer is a plain uint64 in that space, so
`offset`, `int_to_ptr` and `ptr_to_int` are integer arithmetic, and a bounds
check is exact: an address belongs to buffer ``(addr >> 40) - 1`` if it lies in
``[base, base + size)``.

Buffers are private byte copies.  An argument whose elements are not one dense
run (a strided numpy view) additionally has a byte mask of which bytes belong
to its elements: touching a gap is an error, as is writing a read-only array.
Overlapping arguments (the same memory passed twice) share one buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import types as T
from . import numerics as N
from .errors import MemoryFault

WINDOW_BITS = 40
WINDOW = 1 << WINDOW_BITS


@dataclass
class Buffer:
    index: int
    base: int                       # fake address of byte 0
    size: int                       # bytes
    data: np.ndarray                # uint8, len >= size (padded to a multiple of 8)
    name: str
    valid: np.ndarray | None = None  # per-byte mask (None: every byte belongs to the buffer)
    readonly: bool = False
    freed: bool = False
    written: bool = False
    elem_size: int = 1              # the natural element size (for messages)
    views: dict = field(default_factory=dict)

    def typed(self, dt: np.dtype, phase: int) -> np.ndarray:
        """The buffer as an array of `dt` starting at byte `phase`."""
        key = (dt.str, phase)
        v = self.views.get(key)
        if v is None:
            n = (len(self.data) - phase) // dt.itemsize
            v = self.data[phase:phase + n * dt.itemsize].view(dt)
            self.views[key] = v
        return v


class Memory:
    def __init__(self):
        self.buffers: list[Buffer] = []
        self.counters = {"loads": 0, "stores": 0, "atomics": 0, "bytes_loaded": 0, "bytes_stored": 0}

    # ------------------------------------------------------------------ allocation
    def allocate(self, size: int, name: str, *, init: bytes | np.ndarray | None = None, phase: int = 0,
                 valid: np.ndarray | None = None, readonly: bool = False, elem_size: int = 1,
                 align: int = 256) -> Buffer:
        if size >= WINDOW - 256:
            raise MemoryFault(f"allocation of {size} bytes for {name} is too large")
        k = len(self.buffers)
        phase = phase % align if align else 0
        base = ((k + 1) << WINDOW_BITS) + phase
        data = np.zeros(((size + 7) // 8) * 8 + 8, dtype=np.uint8)
        if init is not None:
            src = np.frombuffer(init, dtype=np.uint8) if isinstance(init, (bytes, bytearray)) else init
            data[:size] = src[:size]
        buf = Buffer(k, base, size, data, name, valid, readonly, elem_size=elem_size)
        self.buffers.append(buf)
        return buf

    def free(self, buf: Buffer) -> None:
        buf.freed = True

    def describe(self, addr: int) -> str:
        k = (addr >> WINDOW_BITS) - 1
        if 0 <= k < len(self.buffers):
            b = self.buffers[k]
            off = addr - b.base
            if b.freed:
                return f"address {addr:#x} is in {b.name}, which is no longer live"
            if off < 0:
                return f"address {addr:#x} is {-off} bytes before the start of {b.name}"
            if off >= b.size:
                return f"address {addr:#x} is {off - b.size} bytes past the end of {b.name} ({b.size} bytes)"
            return f"address {addr:#x} is at byte {off} of {b.name}"
        return f"address {addr:#x} does not belong to any argument array, global or allocation"

    # ------------------------------------------------------------------ address resolution
    def _fault(self, what: str, addrs: np.ndarray, lanes: np.ndarray, bad: np.ndarray, shape,
               extra: str = "") -> MemoryFault:
        first = int(np.flatnonzero(bad)[0])
        lane = int(lanes[first])
        idx = tuple(int(i) for i in np.unravel_index(lane, shape)) if shape else ()
        addr = int(addrs[first])
        msg = f"out-of-bounds {what} at tile element {idx}: {self.describe(addr)}"
        if extra:
            msg = f"{what} at tile element {idx}: {extra} ({self.describe(addr)})"
        nbad = int(np.count_nonzero(bad))
        if nbad > 1:
            msg += f" ({nbad} offending elements)"
        return MemoryFault(msg)

    def resolve(self, addrs: np.ndarray, nbytes: int, what: str, shape, lanes: np.ndarray | None,
                write: bool = False) -> list[tuple[Buffer, np.ndarray, np.ndarray | None]]:
        """Flat uint64 addresses of active lanes -> [(buffer, byte offsets, positions in `addrs`)].

        `lanes` gives the tile position of each address (None: address i is lane i); it is
        only used for messages.  Raises MemoryFault for any address that is not entirely
        inside one live buffer, misaligned for `nbytes`, in a gap of a strided argument,
        or (for writes) in a read-only buffer.
        """
        if addrs.size == 0:
            return []
        lo, hi = int(addrs.min()), int(addrs.max())
        w = (lo >> WINDOW_BITS) - 1
        if w == (hi >> WINDOW_BITS) - 1 and 0 <= w < len(self.buffers):
            buf = self.buffers[w]
            if (not buf.freed and lo >= buf.base and hi + nbytes <= buf.base + buf.size and buf.valid is None
                    and not (write and buf.readonly)
                    and (nbytes == 1 or not (addrs & np.uint64(nbytes - 1)).any())):
                return [(buf, (addrs - np.uint64(buf.base)).astype(np.int64), None)]
        if lanes is None:
            lanes = np.arange(addrs.size)
        return self._resolve_slow(addrs, nbytes, what, shape, lanes, write)

    def _resolve_slow(self, addrs, nbytes, what, shape, lanes, write):
        mis = (addrs % np.uint64(nbytes)) != 0 if nbytes > 1 else None
        if mis is not None and mis.any():
            raise self._fault(what, addrs, lanes, mis, shape,
                              extra=f"misaligned {nbytes}-byte access")
        win = (addrs >> np.uint64(WINDOW_BITS)).astype(np.int64) - 1
        w0 = int(win[0])
        if (win == w0).all():
            groups = [(w0, None)]
        else:
            groups = [(int(w), win == w) for w in np.unique(win)]
        out = []
        for w, sel in groups:
            a = addrs if sel is None else addrs[sel]
            ln = lanes if sel is None else lanes[sel]
            if not (0 <= w < len(self.buffers)) or self.buffers[w].freed:
                raise self._fault(what, a, ln, np.ones(a.shape, bool), shape)
            buf = self.buffers[w]
            off = a.astype(np.int64) - np.int64(buf.base)
            bad = (off < 0) | (off > buf.size - nbytes)
            if bad.any():
                raise self._fault(what, a, ln, bad, shape)
            if buf.valid is not None:
                ok = buf.valid[off]
                for k in range(1, nbytes):
                    ok &= buf.valid[off + k]
                if not ok.all():
                    raise self._fault(what, a, ln, ~ok, shape,
                                      extra="access to memory between the elements of a strided array")
            if write and buf.readonly:
                raise self._fault(what, a, ln, np.ones(a.shape, bool), shape,
                                  extra=f"write to read-only {buf.name}")
            out.append((buf, off, np.flatnonzero(sel) if sel is not None else None))
        return out

    # ------------------------------------------------------------------ raw element access
    @staticmethod
    def _read(buf: Buffer, off: np.ndarray, dt: np.dtype) -> np.ndarray:
        n = dt.itemsize
        phase = int(off[0]) % n if off.size else 0
        if off.size and not ((off - phase) % n).any():
            return buf.typed(dt, phase)[(off - phase) // n]
        idx = off[:, None] + np.arange(n, dtype=np.int64)[None, :]
        return np.ascontiguousarray(buf.data[idx]).view(dt).reshape(-1)

    @staticmethod
    def _write(buf: Buffer, off: np.ndarray, dt: np.dtype, vals: np.ndarray) -> None:
        n = dt.itemsize
        vals = np.ascontiguousarray(vals, dtype=dt)
        phase = int(off[0]) % n if off.size else 0
        if off.size and not ((off - phase) % n).any():
            buf.typed(dt, phase)[(off - phase) // n] = vals
        else:
            idx = off[:, None] + np.arange(n, dtype=np.int64)[None, :]
            buf.data[idx] = vals.view(np.uint8).reshape(-1, n)
        buf.written = True

    # ------------------------------------------------------------------ typed gather / scatter
    def load(self, addrs: np.ndarray, mask: np.ndarray | None, elem: T.Type, pad: np.ndarray | None,
             what: str = "load") -> np.ndarray:
        """Gather a tile of `elem` from uint64 addresses; masked-off lanes get `pad` (or zero)."""
        shape = addrs.shape
        sdt = N.storage_dtype(elem)
        flat = addrs.reshape(-1)
        if mask is None:
            lanes = None
            act = flat
        else:
            m = np.broadcast_to(mask, shape).reshape(-1)
            lanes = np.flatnonzero(m)
            act = flat[lanes]
        parts = self.resolve(act, sdt.itemsize, what, shape, lanes)
        if lanes is None and len(parts) == 1 and parts[0][2] is None:
            out = self._read(parts[0][0], parts[0][1], sdt)
        else:
            out = np.zeros(flat.shape, dtype=sdt)
            for buf, off, pos in parts:
                vals = self._read(buf, off, sdt)
                if lanes is None:
                    out[slice(None) if pos is None else pos] = vals
                else:
                    out[lanes if pos is None else lanes[pos]] = vals
        self.counters["loads"] += 1
        self.counters["bytes_loaded"] += int(act.size) * sdt.itemsize
        res = N.from_storage(out, elem).reshape(shape)
        if mask is not None and pad is not None and lanes.size != flat.size:
            m = np.broadcast_to(mask, shape)
            res = np.where(m, res, np.broadcast_to(pad, shape)).astype(res.dtype)
        return res

    def store(self, addrs: np.ndarray, mask: np.ndarray | None, elem: T.Type, values: np.ndarray,
              what: str = "store") -> None:
        shape = addrs.shape
        sdt = N.storage_dtype(elem)
        flat = addrs.reshape(-1)
        vals = N.to_storage(np.broadcast_to(values, shape), elem).astype(sdt).reshape(-1)
        if mask is None:
            lanes = None
            act, v = flat, vals
        else:
            m = np.broadcast_to(mask, shape).reshape(-1)
            lanes = np.flatnonzero(m)
            act, v = flat[lanes], vals[lanes]
        for buf, off, pos in self.resolve(act, sdt.itemsize, what, shape, lanes, write=True):
            self._write(buf, off, sdt, v if pos is None else v[pos])
        self.counters["stores"] += 1
        self.counters["bytes_stored"] += int(act.size) * sdt.itemsize

    def atomic(self, addrs: np.ndarray, mask: np.ndarray | None, elem: T.Type, combine, args: tuple,
               masked_result: np.ndarray, what: str) -> np.ndarray:
        """Per-lane atomic read-modify-write in lane order; returns the old values.

        `combine(old, *lane_args) -> new` works on compute values (numpy arrays).
        Lanes with distinct addresses are done at once; lanes hitting the same
        address are applied one after another, so every lane sees the value left by
        the previous one (as one serialisation of the hardware's atomics).
        """
        shape = addrs.shape
        sdt = N.storage_dtype(elem)
        flat = addrs.reshape(-1)
        flat_args = [np.broadcast_to(a, shape).reshape(-1) for a in args]
        result = np.array(np.broadcast_to(masked_result, shape), dtype=N.compute_dtype(elem)).reshape(-1)
        if mask is None:
            lanes = np.arange(flat.size)
        else:
            lanes = np.flatnonzero(np.broadcast_to(mask, shape).reshape(-1))
        act = flat[lanes]
        self.counters["atomics"] += 1
        for buf, off, pos in self.resolve(act, sdt.itemsize, what, shape, lanes, write=True):
            ln = lanes if pos is None else lanes[pos]
            uniq = np.unique(off)
            if uniq.size == off.size:
                old = N.from_storage(self._read(buf, off, sdt), elem)
                new = combine(old, *[a[ln] for a in flat_args])
                self._write(buf, off, sdt, N.to_storage(new, elem))
                result[ln] = old
            else:
                for j in range(off.size):
                    o = off[j:j + 1]
                    old = N.from_storage(self._read(buf, o, sdt), elem)
                    new = combine(old, *[a[ln[j]:ln[j] + 1] for a in flat_args])
                    self._write(buf, o, sdt, N.to_storage(new, elem))
                    result[ln[j]] = old[0]
        return result.reshape(shape)
