"""Device memory for the emulator: allocations at disjoint fake 64-bit addresses.

Allocation k lives in its own 1 TiB window: its base is ``(k + 1) << 40``, so an
address names its allocation by its high bits and every access can be checked
exactly (``base <= addr`` and ``addr + size <= base + nbytes``) with a few
vectorised operations.  Bases are 256-byte aligned, like ``cudaMalloc``.

An allocation may carry a per-byte ``valid`` mask: a strided (non-contiguous)
numpy view is stored as the whole byte span it covers, and the bytes between
its elements are marked invalid, so a kernel touching them is reported.

Memory-check modes (``MEMCHECK_MODES``; the machine applies them to global reads):

- ``strict`` (the default): every access outside an allocation is a `MemoryFault`, like
  compute-sanitizer's memcheck.  Our own compiled kernels always run so.
- ``device``: as a GPU without a sanitizer.  CUDA guarantees only that ``cudaMalloc`` returns addresses
  aligned to at least 256 bytes (CUDA C++ Programming Guide, "Device Memory Accesses"); the driver maps
  device memory in pages of the allocation granularity (``cuMemGetAllocationGranularity``: 2 MiB on
  current GPUs) and sub-allocates small requests from them (observed behaviour, not documented), so a read
  just past an allocation's end lands in the mapped page holding its last byte (padding or a neighbouring
  allocation) and does not fault.  The model: every allocation starts a ``DEVICE_PAGE``-aligned page (bases
  here are 1 TiB aligned; on a GPU an allocation placed later in its page has less of it left, and a read
  beyond the page may or may not fault, depending on its neighbours), and a global READ in
  ``[end, base + nbytes rounded up to DEVICE_PAGE)`` -- the rest of the page holding the allocation's last
  byte, `mapped_tail` bytes -- returns unspecified data, modelled as ``UNSPECIFIED_BYTE`` (0xff) bytes so a
  kernel that uses it computes a wrong answer instead of passing silently.  The machine reports such reads
  once per (kernel, allocation) as warnings.  Writes outside an allocation, reads before its base or
  beyond that page, and reads of freed allocations or of the gaps of strided arrays still fault.

Shared, local and generic windows (used by the machine, not allocated here):
generic addresses ``SHARED_WINDOW + offset`` and ``LOCAL_WINDOW + offset``
refer to the executing thread's CTA shared memory and local memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import LaunchError, MemoryFault

WINDOW_BITS = 40
WINDOW = 1 << WINDOW_BITS
MAX_ALLOCS = (1 << 19) - 2
SHARED_WINDOW = 0x1 << 60   # generic address of shared-space offset 0
LOCAL_WINDOW = 0x2 << 60    # generic address of local-space offset 0
PARAM_WINDOW = 0x3 << 60    # generic address of kernel-parameter-space offset 0
MEMCHECK_MODES = ("strict", "device")
DEVICE_PAGE = 2 << 20       # the GPU's allocation granularity (see the module docstring)
UNSPECIFIED_BYTE = 0xFF     # what `device` mode reads past an allocation's end


@dataclass
class Allocation:
    index: int
    base: int
    nbytes: int
    data: np.ndarray             # uint8, length padded to a multiple of 16
    name: str
    valid: np.ndarray | None = None   # per-byte mask (None: every byte is valid)
    readonly: bool = False
    freed: bool = False
    views: dict = field(default_factory=dict)

    def view(self, dt) -> np.ndarray:
        dt = np.dtype(dt)
        v = self.views.get(dt.char)
        if v is None:
            v = self.data.view(dt)
            self.views[dt.char] = v
        return v

    @property
    def end(self) -> int:
        return self.base + self.nbytes


def mapped_tail(a: Allocation) -> int:
    """Bytes past the end of `a` that `device` mode lets a kernel read: the rest of its last DEVICE_PAGE."""
    return -a.nbytes % DEVICE_PAGE


def check_memcheck_mode(mode: str) -> str:
    if mode not in MEMCHECK_MODES:
        raise LaunchError(f"unknown memory-check mode '{mode}' (expected {' or '.join(MEMCHECK_MODES)})")
    return mode


def _pad16(n: int) -> int:
    return max(16, (n + 15) // 16 * 16)


class DeviceMemory:
    """A small device memory: byte buffers at disjoint fake device addresses.

    >>> mem = DeviceMemory()
    >>> a = mem.alloc_array(np.arange(4, dtype=np.float32), "x")
    >>> mem.read_array(a, np.float32, 4)
    array([0., 1., 2., 3.], dtype=float32)
    """

    def __init__(self):
        self.allocations: list[Allocation] = []

    # ------------------------------------------------------------------ allocation
    def alloc(self, nbytes: int, name: str = "", *, readonly: bool = False,
              valid: np.ndarray | None = None, init=None) -> int:
        """Allocate `nbytes` (zero-filled unless `init`); returns the device address."""
        nbytes = int(nbytes)
        if nbytes < 0 or nbytes >= WINDOW:
            raise ValueError(f"bad allocation size {nbytes}")
        k = len(self.allocations)
        if k >= MAX_ALLOCS:
            raise ValueError("too many allocations")
        data = np.zeros(_pad16(nbytes), dtype=np.uint8)
        if init is not None:
            src = np.frombuffer(bytes(init), dtype=np.uint8) if not isinstance(init, np.ndarray) \
                else np.ascontiguousarray(init).reshape(-1).view(np.uint8)
            data[:min(nbytes, len(src))] = src[:nbytes]
        if valid is not None:
            vm = np.zeros(len(data), dtype=bool)
            vm[:nbytes] = np.asarray(valid, dtype=bool)[:nbytes]
            valid = vm
        a = Allocation(k, (k + 1) << WINDOW_BITS, nbytes, data, name or f"alloc{k}", valid, readonly)
        self.allocations.append(a)
        return a.base

    def free(self, addr: int) -> None:
        a = self.find(addr)
        if a is None or a.base != addr:
            raise ValueError(f"free of {addr:#x}: not the base of an allocation")
        a.freed = True

    def alloc_array(self, arr: np.ndarray, name: str = "", *, readonly: bool = False) -> int:
        """Copy a numpy array (any strides) into a new allocation; returns the address of element 0.

        Non-contiguous views are stored as the byte span they cover, with the
        bytes that belong to no element marked invalid.
        """
        arr = np.asarray(arr)
        lo, hi = _byte_span(arr)
        span = hi - lo
        if arr.flags.c_contiguous or arr.size <= 1 and span == arr.itemsize * arr.size:
            base = self.alloc(span, name, readonly=readonly, init=np.ascontiguousarray(arr))
            return base - lo
        offs = element_byte_offsets(arr) - lo
        valid = np.zeros(span, dtype=bool)
        valid[(offs[:, None] + np.arange(arr.itemsize)).reshape(-1)] = True
        base = self.alloc(span, name, readonly=readonly, valid=valid)
        a = self.find(base)
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8).reshape(-1, arr.itemsize)
        a.data[(offs[:, None] + np.arange(arr.itemsize))] = raw
        return base - lo

    def copy_back(self, addr: int, arr: np.ndarray) -> None:
        """Copy the contents at `addr` (laid out with `arr`'s strides) back into `arr` in place."""
        if arr.size == 0:
            return
        a = self.find(addr + _byte_span(arr)[0])
        if a is None:
            raise ValueError(f"copy_back: {addr:#x} is not allocated")
        offs = element_byte_offsets(arr) + (addr - a.base)
        raw = a.data[(offs[:, None] + np.arange(arr.itemsize))]
        vals = raw.reshape(-1).view(arr.dtype).reshape(arr.shape)
        arr[...] = vals

    # ------------------------------------------------------------------ host access
    def find(self, addr: int) -> Allocation | None:
        k = (int(addr) >> WINDOW_BITS) - 1
        if 0 <= k < len(self.allocations):
            a = self.allocations[k]
            if a.base <= addr < a.base + max(a.nbytes, 1):
                return a
        return None

    def _host_range(self, addr: int, nbytes: int) -> tuple[Allocation, int]:
        a = self.find(addr)
        if a is None or addr + nbytes > a.end:
            raise MemoryFault(f"host access of {nbytes} bytes at {addr:#x} is outside every allocation",
                              address=addr, size=nbytes)
        return a, addr - a.base

    def write(self, addr: int, data) -> None:
        src = np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) \
            else np.frombuffer(bytes(data), dtype=np.uint8)
        a, off = self._host_range(addr, len(src))
        a.data[off:off + len(src)] = src

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        a, off = self._host_range(addr, nbytes)
        return a.data[off:off + nbytes].copy()

    def read_array(self, addr: int, dtype, count: int) -> np.ndarray:
        dt = np.dtype(dtype)
        return self.read(addr, dt.itemsize * count).view(dt)

    def describe(self, addr: int, size: int = 1) -> str:
        """Where an address lies relative to the allocations (for fault messages)."""
        addr = int(addr)
        best = None
        for a in self.allocations:
            if a.base <= addr < a.end:
                d = 0
            elif addr >= a.end:
                d = addr - a.end
            else:
                d = a.base - addr
            if best is None or d < best[0]:
                best = (d, a)
        if best is None:
            return "no allocation exists"
        d, a = best
        where = f"allocation '{a.name}' [{a.base:#x}, {a.end:#x}) of {a.nbytes} bytes"
        rel = addr - a.base
        if d > (1 << 32):
            return f"not in any allocation (nearest: {where})"
        if a.freed:
            return f"inside freed {where}"
        if rel < 0:
            return f"{-rel} bytes before {where}"
        if rel >= a.nbytes:
            return f"{rel - a.nbytes} bytes after the end of {where}"
        if rel + size > a.nbytes:
            return f"straddling the end of {where} by {rel + size - a.nbytes} bytes"
        return f"at offset {rel} of {where}"


def _byte_span(arr: np.ndarray) -> tuple[int, int]:
    """(lowest, one-past-highest) byte offset touched by `arr`'s elements, relative to element 0."""
    if arr.size == 0:
        return 0, 0
    lo = hi = 0
    for n, s in zip(arr.shape, arr.strides):
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi + arr.itemsize


def element_byte_offsets(arr: np.ndarray) -> np.ndarray:
    """Byte offset (relative to element 0) of every element of `arr`, in C order."""
    offs = np.zeros((), dtype=np.int64)
    for n, s in zip(arr.shape, arr.strides):
        offs = offs[..., None] + np.arange(n, dtype=np.int64) * s
    return offs.reshape(-1)
