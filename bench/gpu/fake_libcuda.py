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

A real cubin (an ELF image) whose PTX the job carries (`"ptx"` beside the cubin in job.json, found by the
cubin's sha256) runs that PTX in the PTX emulator at its first launch with given parameters, up to
EMULATE_MAX_THREADS threads (larger launches, and later identical ones, only advance the clock: the runner
checks the first launch's output, and the emulator takes seconds per launch).  Loaded through
cuLibraryLoadData and launched with cuLaunchKernelEx, it does what the driver does with the user's
parameters: the launch hook in the cubin's `.nv.host` section (NVIDIA's TMA kernels) runs on them and
appends the hidden tensor maps (tileiras_async.emu.host_object).  Device memory is mirrored into the
emulator's for the launch (pointers among the parameters are translated; the hook then
sees the emulator's addresses) and copied back.  Other real cubins load as `mode=noop`.  Every entry point
returns a CUresult as libcuda does.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import time

ILLEGAL_ADDRESS = 700
LAUNCH_FAILED = 719
# Larger launches (a job's large sizes) would take the emulator minutes: they only advance the clock.
EMULATE_MAX_THREADS = 1 << 16
INVALID_HANDLE = 400
NOT_FOUND = 500
ATTRS = {16: 132, 75: 9, 76: 0, 97: 227 * 1024}


def _set(out, value) -> None:
    """Store through a ctypes.byref(...) argument."""
    out._obj.value = value


def _val(x) -> int:
    return x.value if hasattr(x, "value") else int(x or 0)


class FakeLib:
    def __init__(self, job_dir: str | None = None):
        self.ptx_of = _ptx_index(job_dir)     # cubin sha256 (16 hex digits) -> its PTX's path
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
                 NOT_FOUND: b"CUDA_ERROR_NOT_FOUND", LAUNCH_FAILED: b"CUDA_ERROR_LAUNCH_FAILED"}
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
        elif raw.startswith(b"\x7fELF") and hashlib.sha256(raw).hexdigest()[:16] in self.ptx_of:
            spec.update(mode="emulate", ptx_file=self.ptx_of[hashlib.sha256(raw).hexdigest()[:16]],
                        host=_host_section(raw))
        h = self._handle()
        self.modules[h] = spec
        _set(out, h)
        return 0

    def cuLibraryLoadData(self, out, code, jit_options, jit_values, n_jit, lib_options, lib_values, n_lib):
        return self.cuModuleLoadData(out, code)

    def cuLibraryUnload(self, lib):
        return self.cuModuleUnload(lib)

    def cuLibraryGetKernel(self, out, lib, name):
        return self.cuModuleGetFunction(out, lib, name)

    def cuKernelGetFunction(self, out, kernel):
        if _val(kernel) not in self.functions:
            return INVALID_HANDLE
        _set(out, _val(kernel))
        return 0

    def cuModuleUnload(self, mod):
        return 0 if self.modules.pop(_val(mod), None) is not None else INVALID_HANDLE

    def cuModuleGetFunction(self, out, mod, name):
        spec = self.modules.get(_val(mod))
        if spec is None:
            return INVALID_HANDLE
        h = self._handle()
        fn = self.functions[h] = dict(spec, name=name.value.decode())
        if fn["mode"] == "emulate":
            try:
                _describe_entry(fn)
            except Exception:  # noqa: BLE001 - PTX without this entry: the kernel is not in the image
                del self.functions[h]
                return NOT_FOUND
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
        return self._launch(f, [_val(g) for g in (gx, gy, gz)], [_val(b) for b in (bx, by, bz)], stream, params)

    def cuLaunchKernelEx(self, config, f, params, extra):
        c = config._obj
        return self._launch(f, [c.gridDimX, c.gridDimY, c.gridDimZ], [c.blockDimX, c.blockDimY, c.blockDimZ],
                            c.hStream, params)

    def _launch(self, f, grid, block, stream, params) -> int:
        fn = self.functions.get(_val(f))
        if fn is None:
            return INVALID_HANDLE
        if fn["mode"] == "emulate":     # the parameters' bytes now, as the driver copies them at launch
            args = [ctypes.string_at(params[i], size) for i, size in enumerate(fn["user_sizes"])]
        else:
            args = [params[i] for i in range(9)] if fn["kernel"] else []
        launch = (fn, grid, block, args)
        captured = self.streams.get(_val(stream))
        if captured is not None:
            captured.append(launch)
            return 0
        return self._execute(*launch)

    def _execute(self, fn, grid, block, params) -> int:
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
        threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
        if mode == "emulate" and threads <= EMULATE_MAX_THREADS and tuple(params) not in fn.setdefault("ran", set()):
            fn["ran"].add(tuple(params))
            return self._emulate(fn, grid, block, params)
        return 0

    def _emulate(self, fn, grid, block, values) -> int:
        """Run the kernel's PTX on a mirror of device memory, the hook's tensor maps appended to the user's
        parameters as the driver appends them; a fault in the emulator is a failed launch (the context dies,
        as on a GPU)."""
        from tileiras_async.emu import DeviceMemory, emulate_ptx
        from tileiras_async.emu.host_object import parse_host_object, with_tensor_maps
        mem = DeviceMemory()
        mirror = {addr: mem.alloc(len(buf), f"buffer at {addr:#x}", init=buf.raw)
                  for addr, buf in self.buffers.items()}
        params = [self._translate(v, mirror) for v in values]
        try:
            if fn["hidden"]:
                host = parse_host_object(fn["host"], "the cubin's .nv.host section")
                params = with_tensor_maps(host, fn["name"], fn["target"], fn["entry"].params, params)
            emulate_ptx(fn["ptx"], fn["name"], tuple(grid), tuple(block), params, mem)
        except Exception as e:  # noqa: BLE001 - whatever stops the kernel fails its launch
            fn["error"] = f"{type(e).__name__}: {e}"
            self.dead = True
            return LAUNCH_FAILED
        for addr, buf in self.buffers.items():
            ctypes.memmove(addr, mem.read(mirror[addr], len(buf)).tobytes(), len(buf))
        return 0

    def _translate(self, value: bytes, mirror: dict) -> bytes:
        """A pointer parameter into a fake buffer, moved to the buffer's mirror; anything else as it is."""
        if len(value) != 8:
            return value
        x = int.from_bytes(value, "little")
        for addr, buf in self.buffers.items():
            if addr <= x < addr + len(buf):
                return (mirror[addr] + x - addr).to_bytes(8, "little")
        return value

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


def _ptx_index(job_dir: str | None) -> dict:
    """{cubin sha256 prefix: path of the PTX the job carries beside it}."""
    if not job_dir or not os.path.isfile(os.path.join(job_dir, "job.json")):
        return {}
    with open(os.path.join(job_dir, "job.json")) as f:
        job = json.load(f)
    return {cub["sha256"]: os.path.join(job_dir, cub["ptx"]) for case in job.get("cases", [])
            for cub in case.get("cubins", {}).values() if cub.get("ptx") and cub.get("sha256")}


def _host_section(cubin: bytes) -> bytes | None:
    """The `.nv.host` section of a cubin (the launch hooks' x86-64 object), or None."""
    from tileiras_async.toolchain.cubin import host_object
    return host_object(cubin)


def _describe_entry(fn: dict) -> None:
    """What a launch of an emulated kernel needs from its PTX: the text, the target, the parsed entry, the
    sizes of the user's parameters and how many tensor maps the hook appends."""
    from tileiras_async.emu import load_program
    from tileiras_async.emu.runner import _ptx_entry, tensor_map_params
    with open(fn["ptx_file"]) as f:
        fn["ptx"] = f.read()
    fn["target"], fn["entry"] = _ptx_entry(fn["ptx"], fn["name"])
    fn["hidden"] = len(tensor_map_params(fn["entry"]))
    kparams = load_program(fn["ptx"], fn["name"]).kparams
    fn["user_sizes"] = [kp.size for kp in kparams[:len(kparams) - fn["hidden"]]]


def make_lib(job_dir: str | None = None) -> FakeLib:
    return FakeLib(job_dir)
