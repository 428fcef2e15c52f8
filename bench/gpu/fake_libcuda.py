"""A stand-in for libcuda.so.1 with the functions run_on_device.py calls, for testing the runner on a machine
without a GPU (tests/test_bench_gpu.py; `run_on_device.py JOB --fake-driver bench/gpu/fake_libcuda.py` for a
dry run of a job's plumbing).

Device memory is host memory (ctypes buffers; device pointers are their addresses).  A "cubin" whose image
starts with `FAKE ` is a list of `key=value` words that say what its kernel does when launched:

    kernel=vec_add   c = a + b over float32 1-D arrays (cuTile's ABI: ptr, shape, stride per array, 32-bit index)
    mode=ok|wrong|fault|crash|hang|noop
                     ok: run it; wrong: run it, then change c[0]; fault: CUDA_ERROR_ILLEGAL_ADDRESS (and the
                     context is dead from then on); crash: the process exits; hang: it never returns; noop: nothing
    us=5             the kernel's simulated duration: events read a clock that launches advance
    slow_after=N     its duration doubles once the device has run N launches of any kernel (a GPU whose
                     clocks drift during a case)
    smem=0           the static shared memory cuFuncGetAttribute reports

Any other image (a real cubin) loads as `mode=noop`.  Every entry point returns a CUresult as libcuda does.
"""
from __future__ import annotations

import ctypes
import os
import struct
import time

ILLEGAL_ADDRESS = 700
INVALID_HANDLE = 400
NOT_FOUND = 500
ATTRS = {16: 132, 75: 9, 76: 0, 97: 227 * 1024}


def _set(out, value) -> None:
    """Store through a ctypes.byref(...) argument."""
    out._obj.value = value


def _val(x) -> int:
    return x.value if hasattr(x, "value") else int(x or 0)


class FakeLib:
    def __init__(self):
        self.buffers: dict[int, ctypes.Array] = {}
        self.modules: dict[int, dict] = {}
        self.functions: dict[int, dict] = {}
        self.events: dict[int, float] = {}
        self.streams: dict[int, list | None] = {}   # stream -> captured launches while capturing
        self.graphs: dict[int, list] = {}
        self.clock_us = 0.0
        self.launches = 0
        self.dead = False
        self.next_handle = 0x1000
        self.calls: list[str] = []

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name.startswith("cu") and callable(attr):
            calls = object.__getattribute__(self, "calls")

            def traced(*args):
                calls.append(name)
                if object.__getattribute__(self, "dead") and name not in ("cuGetErrorName",):
                    return ILLEGAL_ADDRESS
                return attr(*args)
            return traced
        return attr

    def _handle(self) -> int:
        self.next_handle += 16
        return self.next_handle

    # device and context
    def cuInit(self, flags):
        return 0

    def cuDriverGetVersion(self, out):
        _set(out, 13000)
        return 0

    def cuDeviceGet(self, out, ordinal):
        _set(out, _val(ordinal))
        return 0 if _val(ordinal) == 0 else 101

    def cuDeviceGetName(self, buf, n, dev):
        ctypes.memmove(buf, b"Fake GPU\0", 9)
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        _set(out, ATTRS.get(_val(attr), 0))
        return 0

    def cuDevicePrimaryCtxRetain(self, out, dev):
        _set(out, 0xC0)
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, dev):
        return 0

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuCtxSynchronize(self):
        return 0

    def cuGetErrorName(self, code, out):
        names = {ILLEGAL_ADDRESS: b"CUDA_ERROR_ILLEGAL_ADDRESS", INVALID_HANDLE: b"CUDA_ERROR_INVALID_HANDLE",
                 NOT_FOUND: b"CUDA_ERROR_NOT_FOUND"}
        if _val(code) not in names:
            return 1
        _set(out, names[_val(code)])
        return 0

    # modules and functions
    def cuModuleLoadData(self, out, image):
        raw = bytes(image.raw) if hasattr(image, "raw") else ctypes.string_at(image)
        spec = {"mode": "noop", "us": "1", "smem": "0", "kernel": ""}
        if raw.startswith(b"FAKE "):
            spec.update(w.split("=", 1) for w in raw[5:].decode().rstrip("\0").split() if "=" in w)
        h = self._handle()
        self.modules[h] = spec
        _set(out, h)
        return 0

    def cuModuleUnload(self, mod):
        return 0 if self.modules.pop(_val(mod), None) is not None else INVALID_HANDLE

    def cuModuleGetFunction(self, out, mod, name):
        spec = self.modules.get(_val(mod))
        if spec is None:
            return INVALID_HANDLE
        h = self._handle()
        self.functions[h] = dict(spec, name=name.value.decode())
        _set(out, h)
        return 0

    def cuFuncGetAttribute(self, out, attr, f):
        fn = self.functions[_val(f)]
        _set(out, {0: 1024, 1: int(fn["smem"]), 3: 0, 4: 40}.get(_val(attr), 0))
        return 0

    def cuFuncSetAttribute(self, f, attr, value):
        self.functions[_val(f)].setdefault("set", {})[_val(attr)] = _val(value)
        return 0

    # memory
    def cuMemAlloc_v2(self, out, size):
        buf = ctypes.create_string_buffer(_val(size))
        addr = ctypes.addressof(buf)
        self.buffers[addr] = buf
        _set(out, addr)
        return 0

    def cuMemFree_v2(self, ptr):
        return 0 if self.buffers.pop(_val(ptr), None) is not None else INVALID_HANDLE

    def _check_range(self, addr: int, n: int) -> bool:
        return any(a <= addr and addr + n <= a + len(b) for a, b in self.buffers.items())

    def cuMemcpyHtoD_v2(self, dst, src, size):
        if not self._check_range(_val(dst), _val(size)):
            return ILLEGAL_ADDRESS
        ctypes.memmove(_val(dst), src, _val(size))
        return 0

    def cuMemcpyDtoH_v2(self, dst, src, size):
        if not self._check_range(_val(src), _val(size)):
            return ILLEGAL_ADDRESS
        ctypes.memmove(dst, _val(src), _val(size))
        return 0

    # streams, launches, events, graphs
    def cuStreamCreate(self, out, flags):
        h = self._handle()
        self.streams[h] = None
        _set(out, h)
        return 0

    def cuStreamDestroy_v2(self, s):
        return 0 if self.streams.pop(_val(s), 0) != 0 else INVALID_HANDLE

    def cuStreamSynchronize(self, s):
        return 0

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        fn = self.functions.get(_val(f))
        if fn is None:
            return INVALID_HANDLE
        launch = (fn, [_val(g) for g in (gx, gy, gz)], [params[i] for i in range(9)] if fn["kernel"] else [])
        captured = self.streams.get(_val(stream))
        if captured is not None:
            captured.append(launch)
            return 0
        return self._execute(*launch)

    def _execute(self, fn, grid, params) -> int:
        mode = fn["mode"]
        if mode == "crash":
            os._exit(3)
        if mode == "hang":
            while True:
                time.sleep(1)
        if mode == "fault":
            self.dead = True
            return ILLEGAL_ADDRESS
        self.launches += 1
        slow = int(fn.get("slow_after", 0) or 0)
        self.clock_us += float(fn["us"]) * (2 if slow and self.launches > slow else 1)
        if mode in ("ok", "wrong") and fn["kernel"] == "vec_add":
            self._vec_add(params, wrong=mode == "wrong")
        return 0

    @staticmethod
    def _vec_add(params, wrong: bool) -> None:
        def arg(i: int, size: int) -> int:
            return int.from_bytes(ctypes.string_at(params[i], size), "little")
        a, n, b, c = arg(0, 8), arg(1, 4), arg(3, 8), arg(6, 8)
        xa = struct.unpack("<%df" % n, ctypes.string_at(a, 4 * n))
        xb = struct.unpack("<%df" % n, ctypes.string_at(b, 4 * n))
        out = [x + y for x, y in zip(xa, xb)]
        if wrong:
            out[0] += 1.0
        ctypes.memmove(c, struct.pack("<%df" % n, *out), 4 * n)

    def cuEventCreate(self, out, flags):
        h = self._handle()
        self.events[h] = 0.0
        _set(out, h)
        return 0

    def cuEventDestroy_v2(self, e):
        return 0 if self.events.pop(_val(e), None) is not None else INVALID_HANDLE

    def cuEventRecord(self, e, s):
        self.events[_val(e)] = self.clock_us
        return 0

    def cuEventSynchronize(self, e):
        return 0

    def cuEventElapsedTime(self, out, e0, e1):
        _set(out, (self.events[_val(e1)] - self.events[_val(e0)]) / 1000.0)
        return 0

    def cuStreamBeginCapture_v2(self, s, mode):
        self.streams[_val(s)] = []
        return 0

    def cuStreamEndCapture(self, s, out):
        h = self._handle()
        self.graphs[h] = self.streams[_val(s)] or []
        self.streams[_val(s)] = None
        _set(out, h)
        return 0

    def cuGraphInstantiateWithFlags(self, out, graph, flags):
        h = self._handle()
        self.graphs[h] = list(self.graphs[_val(graph)])
        _set(out, h)
        return 0

    def cuGraphLaunch(self, ex, s):
        for launch in self.graphs[_val(ex)]:
            rc = self._execute(*launch)
            if rc:
                return rc
        return 0

    def cuGraphExecDestroy(self, ex):
        return 0 if self.graphs.pop(_val(ex), None) is not None else INVALID_HANDLE

    def cuGraphDestroy(self, g):
        return 0 if self.graphs.pop(_val(g), None) is not None else INVALID_HANDLE


def make_lib() -> FakeLib:
    return FakeLib()
