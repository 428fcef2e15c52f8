#!/usr/bin/env python3
"""Run a GPU timing job (bench/gpu/build.py) on a real GPU: ours and NVIDIA's cubin of every kernel, outputs
checked against the expected ones, launches timed.

    python3 bench/gpu/run_on_device.py JOB_DIR [--out FILE.json] [--kernels ID,...] [--repeats 7]
                                       [--target-ms 2] [--warmup 5] [--budget-s 150] [--kernel-timeout-s 45]
                                       [--no-isolate] [--device N] [--loader library|module]

Needs only python3 (3.6+) and the CUDA driver (libcuda.so.1, through ctypes): no numpy (used when present, for
faster output checks), no CUDA toolkit, no network.

Per case and cubin: cuLibraryLoadData and cuLibraryGetKernel, as cuTile loads its cubins (the driver keeps the
cubin's `.nv.host` launch hook, which fills NVIDIA's hidden tensor-map parameters at each launch), and every
launch a cuLaunchKernelEx with the user's parameters only; `--loader module` (the default for jobs built before
the launch set) uses cuModuleLoadData and cuLaunchKernel instead, for cubins without hidden parameters.  Then
the kernel's static shared memory and the device's opt-in maximum (the
dynamic-shared-memory limit is raised to what is left, as cuTile's launcher does, so kernels over 48 KiB load),
the argument buffers uploaded, one launch checked against the expected outputs (each element within the case's
rtol/atol, NaN equal to NaN: refs.py's check), then `--warmup` launches and the timing: `--repeats` batches of
n back-to-back launches (n chosen so a batch lasts about `--target-ms`), timed with CUDA events, both as one
CUDA graph of n launches (`us_graph`: launch overhead mostly removed) and as n stream launches (`us_stream`);
each figure is the median over the batches, per launch, in microseconds.  `us` is the graph figure (the stream
one where graphs fail).  Both cubins of a case are loaded and checked first, then timed batch by batch in turn
(ours, NVIDIA's, ours, ...): timed one after the other, whichever went first measured 10-30% faster at corpus
sizes on an H100.  The same inputs stay in place for every launch (kernels that accumulate into an output
keep accumulating: only the first launch is checked).

Every case runs in its own worker process (a kernel that faults poisons its CUDA context; a hung one is killed
after --kernel-timeout-s); after a fault, a crash or a hang the other cubin of the case, if it had loaded,
runs again alone in a fresh worker.  Which cubin loads and times first alternates from case to case.  A
failing kernel prints its error and the run goes on; cases left when --budget-s is spent are reported as
skipped.  A job built with `build.py --versus REV` has our compiler at REV as its second side: the table
names it instead of NVIDIA.

Buffers the job generates instead of storing (large inputs) are built here from their seeds; their outputs are
checked against a float64 reference at sampled coordinates (matmul, attention: REFERENCE_OPS).  When both
cubins of a case load, their outputs are compared with each other too (`sides_agree`).

Output: one JSON line per case on stdout (`{"case", "grid", "ours": {...}, "nvidia": {...}, "ratio"}`, with
`flops` and each side's `tflops` for matmuls and attention), then a table (ours us, NVIDIA us, ratio
ours/NVIDIA, correct?, TFLOP/s), and with --out the whole run as one JSON document.
Exit status 0 when every case ran and was correct on both sides, 1 otherwise, 2 for a bad job or no driver.
"""
from __future__ import annotations

import argparse
import array
import ctypes
import json
import math
import os
import platform
import random
import statistics
import struct
import subprocess
import sys
import time
import zlib

SIDES = ("ours", "nvidia")
RESULT_TAG = "RESULT "

# CUDA driver enums (cuda.h)
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
# Errors after which the context is unusable (the process must be replaced).
STICKY_ERRORS = {700, 702, 714, 715, 716, 717, 718, 719, 999}
ERROR_NAMES = {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
               100: "CUDA_ERROR_NO_DEVICE", 200: "CUDA_ERROR_INVALID_IMAGE", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
               218: "CUDA_ERROR_INVALID_PTX", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
               500: "CUDA_ERROR_NOT_FOUND", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
               701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
               714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
               716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
               718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED", 999: "CUDA_ERROR_UNKNOWN"}


class CudaError(Exception):
    def __init__(self, call: str, code: int, name: str = ""):
        self.call, self.code, self.name = call, code, name or ERROR_NAMES.get(code, "CUDA_ERROR_%d" % code)
        super().__init__("%s failed: %s (%d)" % (call, self.name, code))

    @property
    def sticky(self) -> bool:
        return self.code in STICKY_ERRORS


# ---------------------------------------------------------------- the driver API


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


class Driver:
    """The driver API calls the runner makes, over `lib`: ctypes.CDLL("libcuda.so.1") or a test double with the
    same function names.  Every argument is an explicit ctypes object; outputs go through ctypes.byref."""

    def __init__(self, lib):
        self.lib = lib

    def _fn(self, *names):
        for n in names:
            fn = getattr(self.lib, n, None)
            if fn is not None:
                return fn
        raise CudaError(names[0], 500, "symbol not found in the driver")

    def call(self, *names_and_args):
        """call(("cuX_v2", "cuX"), arg, ...) or call("cuX", arg, ...)."""
        names, args = names_and_args[0], names_and_args[1:]
        names = names if isinstance(names, tuple) else (names,)
        rc = self._fn(*names)(*args)
        if rc:
            raise CudaError(names[-1], int(rc), self.error_name(int(rc)))

    def error_name(self, code: int) -> str:
        fn = getattr(self.lib, "cuGetErrorName", None)
        if fn is not None:
            s = ctypes.c_char_p()
            try:
                if fn(ctypes.c_int(code), ctypes.byref(s)) == 0 and s.value:
                    return s.value.decode(errors="replace")
            except Exception:  # noqa: BLE001 - a name is only decoration
                pass
        return ERROR_NAMES.get(code, "CUDA_ERROR_%d" % code)

    # device and context
    def init(self) -> None:
        self.call("cuInit", ctypes.c_uint(0))

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def device(self, ordinal: int) -> int:
        d = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(d), ctypes.c_int(ordinal))
        return d.value

    def device_name(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, ctypes.c_int(256), ctypes.c_int(dev))
        return buf.value.decode(errors="replace")

    def device_attr(self, attr: int, dev: int) -> int:
        v = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(v), ctypes.c_int(attr), ctypes.c_int(dev))
        return v.value

    def retain_primary_context(self, dev: int):
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), ctypes.c_int(dev))
        self.call("cuCtxSetCurrent", ctx)
        return ctx

    def release_primary_context(self, dev: int) -> None:
        self.call(("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), ctypes.c_int(dev))

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")

    # modules and functions
    def load_module(self, image: bytes):
        buf = ctypes.create_string_buffer(image, len(image))
        mod = ctypes.c_void_p()
        self.call("cuModuleLoadData", ctypes.byref(mod), buf)
        return mod

    def unload_module(self, mod) -> None:
        self.call("cuModuleUnload", mod)

    def load_library(self, image: bytes):
        """cuLibraryLoadData, as cuTile loads its cubins: the driver keeps the cubin's `.nv.host` launch hook
        and runs it at every launch to fill the kernel's hidden parameters (tensor maps)."""
        buf = ctypes.create_string_buffer(image, len(image))
        lib = ctypes.c_void_p()
        self.call("cuLibraryLoadData", ctypes.byref(lib), buf, None, None, ctypes.c_uint(0), None, None,
                  ctypes.c_uint(0))
        return lib

    def unload_library(self, lib) -> None:
        self.call("cuLibraryUnload", lib)

    def library_function(self, lib, name: str):
        """The kernel `name` of a library as a CUfunction of the current context (for attributes and
        launches)."""
        k = ctypes.c_void_p()
        self.call("cuLibraryGetKernel", ctypes.byref(k), lib, ctypes.c_char_p(name.encode()))
        f = ctypes.c_void_p()
        self.call("cuKernelGetFunction", ctypes.byref(f), k)
        return f

    def function(self, mod, name: str):
        f = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(f), mod, ctypes.c_char_p(name.encode()))
        return f

    def func_attr(self, f, attr: int) -> int:
        v = ctypes.c_int()
        self.call("cuFuncGetAttribute", ctypes.byref(v), ctypes.c_int(attr), f)
        return v.value

    def set_func_attr(self, f, attr: int, value: int) -> None:
        self.call("cuFuncSetAttribute", f, ctypes.c_int(attr), ctypes.c_int(value))

    # memory
    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self.call(("cuMemAlloc_v2", "cuMemAlloc"), ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1)))
        return p.value

    def free(self, ptr: int) -> None:
        self.call(("cuMemFree_v2", "cuMemFree"), ctypes.c_uint64(ptr))

    def upload(self, ptr: int, data: bytes) -> None:
        if data:
            src = ctypes.create_string_buffer(bytes(data), len(data))
            self.call(("cuMemcpyHtoD_v2", "cuMemcpyHtoD"), ctypes.c_uint64(ptr), src, ctypes.c_size_t(len(data)))

    def download(self, ptr: int, nbytes: int) -> bytes:
        dst = ctypes.create_string_buffer(max(nbytes, 1))
        if nbytes:
            self.call(("cuMemcpyDtoH_v2", "cuMemcpyDtoH"), dst, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes))
        return dst.raw[:nbytes]

    # streams, launches, events, graphs
    def stream(self):
        s = ctypes.c_void_p()
        self.call("cuStreamCreate", ctypes.byref(s), ctypes.c_uint(CU_STREAM_NON_BLOCKING))
        return s

    def destroy_stream(self, s) -> None:
        self.call(("cuStreamDestroy_v2", "cuStreamDestroy"), s)

    def stream_sync(self, s) -> None:
        self.call("cuStreamSynchronize", s)

    def launch(self, f, grid, block, smem: int, stream, params) -> None:
        self.call("cuLaunchKernel", f, ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]), ctypes.c_uint(grid[2]),
                  ctypes.c_uint(block[0]), ctypes.c_uint(block[1]), ctypes.c_uint(block[2]), ctypes.c_uint(smem),
                  stream, params, ctypes.c_void_p(None))

    def launch_ex(self, f, grid, block, smem: int, stream, params) -> None:
        """cuLaunchKernelEx with the user's parameters only, as cuTile launches (the hook adds the rest)."""
        config = LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, None, 0)
        self.call("cuLaunchKernelEx", ctypes.byref(config), f, params, ctypes.c_void_p(None))

    def event(self):
        e = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(e), ctypes.c_uint(0))
        return e

    def destroy_event(self, e) -> None:
        self.call(("cuEventDestroy_v2", "cuEventDestroy"), e)

    def record(self, e, s) -> None:
        self.call("cuEventRecord", e, s)

    def event_sync(self, e) -> None:
        self.call("cuEventSynchronize", e)

    def elapsed_ms(self, e0, e1) -> float:
        ms = ctypes.c_float()
        self.call(("cuEventElapsedTime", "cuEventElapsedTime_v2"), ctypes.byref(ms), e0, e1)
        return ms.value

    def begin_capture(self, s) -> None:
        self.call(("cuStreamBeginCapture_v2", "cuStreamBeginCapture"), s,
                  ctypes.c_int(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))

    def end_capture(self, s):
        g = ctypes.c_void_p()
        self.call("cuStreamEndCapture", s, ctypes.byref(g))
        return g

    def instantiate(self, graph):
        ex = ctypes.c_void_p()
        self.call("cuGraphInstantiateWithFlags", ctypes.byref(ex), graph, ctypes.c_ulonglong(0))
        return ex

    def graph_launch(self, ex, s) -> None:
        self.call("cuGraphLaunch", ex, s)

    def destroy_graph(self, graph, ex) -> None:
        if ex is not None:
            self.call("cuGraphExecDestroy", ex)
        if graph is not None:
            self.call("cuGraphDestroy", graph)


def load_driver(fake: str | None = None, job_dir: str | None = None) -> Driver:
    """The real driver, or (tests, dry runs) the `make_lib(job_dir)` of a Python file standing in for it (the
    job's folder tells it where the PTX of each cubin is)."""
    if fake:
        import importlib.util
        spec = importlib.util.spec_from_file_location("fake_libcuda", fake)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return Driver(mod.make_lib(job_dir))
    return Driver(ctypes.CDLL("libcuda.so.1"))


# ---------------------------------------------------------------- the job


def read_job(job_dir: str) -> dict:
    with open(os.path.join(job_dir, "job.json")) as f:
        job = json.load(f)
    if job.get("format") != 1:
        raise ValueError("unsupported job format %r" % job.get("format"))
    return job


def read_blob(job_dir: str, rel: str) -> bytes:
    with open(os.path.join(job_dir, rel), "rb") as f:
        data = f.read()
    return zlib.decompress(data) if rel.endswith(".z") else data


# Generated buffers: a table of GEN_PERIOD seeded values in [-1, 1), laid down in chunks of GEN_CHUNK values from
# offsets that step by GEN_STEP: no row of a power-of-two length repeats another, so an operand read from the
# wrong row or column reads other values.
GEN_PERIOD, GEN_CHUNK, GEN_STEP = 65521, 4093, 7919


def generate(spec: dict) -> bytes:
    """A buffer the job describes instead of storing (`{"nbytes", "seed", "dtype"}`, or `"zero": true`):
    built here, from the seed, in pure Python, in a few seconds for 32 MiB."""
    n = spec["nbytes"]
    if spec.get("zero"):
        return bytes(n)
    dtype = spec["dtype"]
    if dtype not in ("float16", "float32", "bfloat16"):
        raise ValueError("cannot generate %s values" % dtype)
    rng = random.Random(spec["seed"])
    vals = [rng.uniform(-1.0, 1.0) for _ in range(GEN_PERIOD)]
    if dtype == "bfloat16":
        wide = struct.unpack("<%dI" % GEN_PERIOD, struct.pack("<%df" % GEN_PERIOD, *vals))
        table = struct.pack("<%dH" % GEN_PERIOD, *[v >> 16 for v in wide])
    else:
        table = struct.pack("<%d%s" % (GEN_PERIOD, _STRUCT[dtype]), *vals)
    item = len(table) // GEN_PERIOD
    twice = table + table
    out, k = bytearray(), 0
    while len(out) < n:
        off = (k * GEN_STEP) % GEN_PERIOD
        out += twice[off * item:(off + GEN_CHUNK) * item]
        k += 1
    return bytes(out[:n])


def buffer_image(job_dir: str, buf: dict) -> bytes:
    """A buffer's initial bytes: its stored image, or generated from its seed."""
    return generate(buf["generate"]) if "generate" in buf else read_blob(job_dir, buf["file"])


def param_values(params: list, kparams: list, bases: list) -> list:
    """The bytes of every kernel parameter, in order: a pointer is its buffer's device address plus the byte
    offset; an integer is two's complement in the parameter's width; raw bytes go as they are."""
    if len(params) != len(kparams):
        raise ValueError("%d parameter values for %d kernel parameters" % (len(params), len(kparams)))
    out = []
    for p, (_off, size) in zip(params, kparams):
        if "ptr" in p:
            buf, off = p["ptr"]
            v = (bases[buf] + off).to_bytes(size, "little")
        elif "int" in p:
            v = (int(p["int"]) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        else:
            v = bytes.fromhex(p["raw"])
            if len(v) != size:
                raise ValueError("a %d-byte value for a %d-byte parameter" % (len(v), size))
        out.append(v)
    return out


def param_block(params: list, kparams: list, bases: list) -> bytes:
    """The kernel's whole parameter block (what the driver copies into constant bank 0), laid out at the
    cubin's offsets; holes are zero."""
    values = param_values(params, kparams, bases)
    end = max([off + size for off, size in kparams] + [0])
    block = bytearray(end)
    for (off, size), v in zip(kparams, values):
        block[off:off + size] = v
    return bytes(block)


class Params:
    """cuLaunchKernel's kernelParams: an array of pointers, one per parameter, to its bytes (kept alive here)."""

    def __init__(self, values: list):
        self.bufs = [ctypes.create_string_buffer(v, len(v)) for v in values]
        self.array = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(b) for b in self.bufs])


# ---------------------------------------------------------------- checking outputs

_STRUCT = {"float16": "e", "float32": "f", "float64": "d", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H",
           "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "bool": "?", "bfloat16": "H"}


def gather(raw: bytes, offset: int, shape: list, strides: list, itemsize: int) -> bytes:
    """The bytes of an array's elements in C order, from a buffer image (any strides)."""
    n = 1
    for d in shape:
        n *= d
    contiguous, expect = True, itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d > 1 and s != expect:
            contiguous = False
        expect *= d
    if contiguous:
        return bytes(raw[offset:offset + n * itemsize])
    out = bytearray()
    idx = [0] * len(shape)
    for _ in range(n):
        p = offset + sum(i * s for i, s in zip(idx, strides))
        out += raw[p:p + itemsize]
        for ax in range(len(shape) - 1, -1, -1):
            idx[ax] += 1
            if idx[ax] < shape[ax]:
                break
            idx[ax] = 0
    return bytes(out)


def decode(data: bytes, dtype: str) -> list:
    """Element values (floats or ints) of raw little-endian data."""
    code = _STRUCT.get(dtype)
    if code is None:
        raise ValueError("no decoder for %s" % dtype)
    vals = [v[0] for v in struct.iter_unpack("<" + code, data)]
    if dtype == "bfloat16":
        wide = array.array("I", [v << 16 for v in vals])
        if sys.byteorder != "little":
            wide.byteswap()
        return list(struct.unpack("<%df" % len(vals), wide.tobytes()))
    return vals


def _close(g, e, rtol: float, atol: float) -> bool:
    if g == e:
        return True
    if isinstance(g, float) and isinstance(e, float):
        if math.isnan(g) or math.isnan(e):
            return math.isnan(g) and math.isnan(e)
        if math.isinf(g) or math.isinf(e):
            return False
        return abs(g - e) <= atol + rtol * abs(e)
    return False


def _first_bad_numpy(got: bytes, want: bytes, dtype: str, rtol: float, atol: float):
    """(count, index, got, expected) of the mismatches, with numpy; None when numpy is absent."""
    try:
        import numpy as np
    except ImportError:
        return None
    if dtype == "bfloat16":
        g = (np.frombuffer(got, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        e = (np.frombuffer(want, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        dt = np.dtype("<" + _STRUCT[dtype])
        g, e = np.frombuffer(got, dt), np.frombuffer(want, dt)
    if g.dtype.kind == "f":
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True) | (g64 == e64)
    else:
        ok = g == e
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return 0, None, None, None
    i = int(bad[0])
    return int(bad.size), i, g[i].item(), e[i].item()


def compare(got: bytes, want: bytes, dtype: str, rtol: float, atol: float, shape: list) -> str | None:
    """None when every element is within tolerance (refs.py's check), else a one-line description."""
    if got == want:
        return None
    if len(got) != len(want):
        return "%d bytes, expected %d" % (len(got), len(want))
    if dtype not in _STRUCT:              # fp8 and other formats without a decoder: bit for bit
        n = sum(1 for a, b in zip(got, want) if a != b)
        return "%d bytes differ (compared bit for bit)" % n
    found = _first_bad_numpy(got, want, dtype, rtol, atol)
    if found is None:
        g, e = decode(got, dtype), decode(want, dtype)
        bad = [i for i, (a, b) in enumerate(zip(g, e)) if not _close(a, b, rtol, atol)]
        found = (len(bad), bad[0], g[bad[0]], e[bad[0]]) if bad else (0, None, None, None)
    count, i, g0, e0 = found
    if not count:
        return None
    idx, rest = [], i
    for d in reversed(shape):
        idx.append(rest % d)
        rest //= d
    return "%d of %d differ, first at %s: got %r expected %r" % (
        count, len(want) // struct.calcsize("<" + _STRUCT[dtype]), tuple(reversed(idx)), g0, e0)


def _vector(images: list, arr: dict, index: list, axis: int) -> list:
    """The elements of array `arr` (a job array: buffer, offset, shape, byte strides, itemsize, dtype) along
    `axis` at `index` (its other coordinates), decoded."""
    off = arr["offset"] + sum(i * s for ax, (i, s) in enumerate(zip(index, arr["strides"])) if ax != axis)
    raw = gather(images[arr["buffer"]], off, [arr["shape"][axis]], [arr["strides"][axis]], arr["itemsize"])
    return decode(raw, arr["dtype"])


def sample_indices(shape: list, count: int) -> list:
    """`count` output coordinates to check against the reference: the first and the last element, the rest
    spread over the array by a fixed seed."""
    rng = random.Random(len(shape) * 1000003 + sum(shape))
    picks = [[0] * len(shape), [d - 1 for d in shape]]
    while len(picks) < count:
        picks.append([rng.randrange(d) for d in shape])
    return picks


def _matmul_expected(images: list, ref: dict, index: list) -> list:
    """C[i, j] = sum_k A[i, k] B[k, j] in float64, for one (i, j)."""
    i, j = index
    row = _vector(images, ref["a"], [i, 0], 1)
    col = _vector(images, ref["b"], [0, j], 0)
    return [math.fsum(x * y for x, y in zip(row, col))]


def _attention_expected(images: list, ref: dict, index: list) -> list:
    """Out[b, h, q, :] of softmax(Q K^T * scale) V in float64 (grouped heads: K and V head h // G; causal:
    key positions up to q + pos)."""
    b, h, q = index[:3]
    qa, ka, va = ref["q"], ref["k"], ref["v"]
    group = qa["shape"][1] // ka["shape"][1]
    hk = h // group
    qv = _vector(images, qa, [b, h, q, 0], 3)
    keys = ka["shape"][2] if not ref["causal"] else min(ka["shape"][2], q + ref["pos"] + 1)
    scores = [ref["scale"] * math.fsum(x * y for x, y in zip(qv, _vector(images, ka, [b, hk, t, 0], 3)))
              for t in range(keys)]
    top = max(scores)
    weights = [math.exp(x - top) for x in scores]
    total = math.fsum(weights)
    out = [0.0] * qa["shape"][3]
    for w, t in zip(weights, range(keys)):
        for d, v in enumerate(_vector(images, va, [b, hk, t, 0], 3)):
            out[d] += w * v
    return [x / total for x in out]


# op -> (the expected values at a sampled index, the rank of the sampled index, how many samples)
REFERENCE_OPS = {"matmul": (_matmul_expected, 2, 32), "attention": (_attention_expected, 3, 8)}


def sampled_check(images: list, o: dict) -> str | None:
    """A generated case's output against a float64 reference at sampled coordinates (the whole output's
    reference would take the device machine's CPU minutes): None, or what differs.  An attention output is
    checked a whole row (all D values) per sampled query."""
    fn, rank, count = REFERENCE_OPS[o["reference"]["op"]]
    bad, first, checked = 0, None, 0
    for idx in sample_indices(o["shape"][:rank], count):
        want = fn(images, o["reference"], idx)
        if len(o["shape"]) == rank:
            got = _vector(images, o, idx, rank - 1)[idx[-1]:idx[-1] + 1]
        else:
            got = _vector(images, o, idx + [0], rank)
        for g, e in zip(got, want):
            checked += 1
            if not _close(float(g), e, o["rtol"], o["atol"]):
                bad += 1
                first = first or (tuple(idx), g, e)
    if not bad:
        return None
    return "%d of %d sampled elements differ from the float64 reference, first at %s: got %r expected %r" % (
        bad, checked, first[0], first[1], first[2])


def output_bytes(case: dict, images: list) -> dict:
    """{output name: its elements' bytes in C order} from the buffer images after a launch."""
    return {o["name"]: gather(images[o["buffer"]], o["offset"], o["shape"], o["strides"], o["itemsize"])
            for o in case["outputs"]}


# Without numpy, the pure-Python comparison of two sides' outputs looks at every k-th element of outputs larger
# than this (16M f16 elements would take it half a minute of the worker's time limit).
CROSS_CHECK_PURE_PYTHON_MAX = 1 << 20


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def cross_check(case: dict, a: dict, b: dict) -> list:
    """Where two sides' outputs differ beyond the case's tolerances (on generated inputs, the only full
    check of the output; every k-th element of a large one when numpy is absent)."""
    problems = []
    for o in case["outputs"]:
        x, y, shape = a[o["name"]], b[o["name"]], o["shape"]
        n = len(x) // o["itemsize"]
        if n > CROSS_CHECK_PURE_PYTHON_MAX and not _has_numpy() and len(x) == len(y):
            k, size = -(-n // CROSS_CHECK_PURE_PYTHON_MAX), o["itemsize"]
            x, y = (b"".join(v[i:i + size] for i in range(0, len(v), k * size)) for v in (x, y))
            shape = [len(x) // size]
        bad = compare(x, y, o["dtype"], o["rtol"], o["atol"], shape)
        if bad:
            problems.append("%s: %s" % (o["name"], bad))
    return problems


def check_outputs(job_dir: str, case: dict, images: list) -> list:
    """The problems of the downloaded buffer images against the case's expected outputs (stored, or sampled
    from a float64 reference for generated inputs)."""
    problems = []
    for o in case["outputs"]:
        if "reference" in o:
            bad = sampled_check(images, o)
        else:
            got = gather(images[o["buffer"]], o["offset"], o["shape"], o["strides"], o["itemsize"])
            want = read_blob(job_dir, o["expected"])
            bad = compare(got, want, o["dtype"], o["rtol"], o["atol"], o["shape"])
        if bad:
            problems.append("%s: %s" % (o["name"], bad))
    return problems


# ---------------------------------------------------------------- running one cubin


class Options:
    def __init__(self, repeats=7, target_ms=2.0, warmup=5, max_launches=2000, loader="module"):
        self.repeats, self.target_ms, self.warmup, self.max_launches = repeats, target_ms, warmup, max_launches
        self.loader = loader


def _median(xs: list):
    return statistics.median(xs) if xs else None


def time_stream(drv: Driver, launch_on, stream, n: int, repeats: int) -> list:
    """Per-launch milliseconds of `repeats` batches of n launches (`launch_on(stream)`) on the stream."""
    e0, e1 = drv.event(), drv.event()
    try:
        out = []
        for _ in range(repeats):
            drv.record(e0, stream)
            for _ in range(n):
                launch_on(stream)
            drv.record(e1, stream)
            drv.event_sync(e1)
            out.append(drv.elapsed_ms(e0, e1) / n)
        return out
    finally:
        drv.destroy_event(e0)
        drv.destroy_event(e1)


def _quietly(release, *handles) -> None:
    """Release a driver object; a failure (a dead context) leaves nothing more to do."""
    try:
        release(*handles)
    except CudaError:
        pass


class Graph:
    """A CUDA graph of n launches of a kernel on its own stream (a failed capture leaves nothing behind)."""

    def __init__(self, drv: Driver, launch_on, n: int):
        self.drv, self.graph, self.ex = drv, None, None
        self.s = drv.stream()
        try:
            drv.begin_capture(self.s)
            try:
                for _ in range(n):
                    launch_on(self.s)
            finally:
                self.graph = drv.end_capture(self.s)
            self.ex = drv.instantiate(self.graph)
            drv.graph_launch(self.ex, self.s)     # the first launch uploads the graph
            drv.stream_sync(self.s)
        except CudaError:
            self.close()
            raise
        self.n = n

    def time_ms(self) -> float:
        """Per-launch milliseconds of one launch of the graph."""
        e0, e1 = self.drv.event(), self.drv.event()
        try:
            self.drv.record(e0, self.s)
            self.drv.graph_launch(self.ex, self.s)
            self.drv.record(e1, self.s)
            self.drv.event_sync(e1)
            return self.drv.elapsed_ms(e0, e1) / self.n
        finally:
            self.drv.destroy_event(e0)
            self.drv.destroy_event(e1)

    def close(self) -> None:
        _quietly(self.drv.destroy_graph, self.graph, self.ex)
        _quietly(self.drv.destroy_stream, self.s)


class Side:
    """One cubin of a case loaded, its buffers uploaded, its output checked and warmed up: ready to time.
    `res` holds what is known so far (registers, shared memory, correctness)."""

    def __init__(self, drv: Driver, dev: int, job_dir: str, case: dict, side: str, images: list, opts: Options):
        self.drv, self.case, self.res = drv, case, {"ok": False}
        self.mod, self.stream, self.ptrs, self.graph, self.ready = None, None, [], None, False
        self.loader = opts.loader
        cub = case["cubins"][side]
        if cub.get("hidden") and self.loader != "library":
            raise ValueError("the cubin's %d hidden parameter(s) are filled by its launch hook, which only "
                             "cuLibraryLoadData keeps: use --loader library" % cub["hidden"])
        with open(os.path.join(job_dir, cub["file"]), "rb") as fh:
            image = fh.read()
        self.mod = drv.load_library(image) if self.loader == "library" else drv.load_module(image)
        try:
            self._prepare(dev, job_dir, cub, images, opts)
        except BaseException:
            self.close()
            raise

    def _prepare(self, dev: int, job_dir: str, cub: dict, images: list, opts: Options) -> None:
        drv, case, res = self.drv, self.case, self.res
        if self.loader == "library":
            f = self.f = drv.library_function(self.mod, cub["symbol"])
        else:
            f = self.f = drv.function(self.mod, cub["symbol"])
        static = drv.func_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        res.update(regs=drv.func_attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS), smem_static=static,
                   local_bytes=drv.func_attr(f, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES))
        optin = drv.device_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)
        if optin > static:
            try:        # cuTile's launcher does this for every kernel: the rest of the opt-in shared memory
                drv.set_func_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static)
            except CudaError as e:
                if e.sticky:
                    raise
                res["note"] = "raising the dynamic shared memory limit failed: %s" % e
        block = self.block = cub["block"]
        max_threads = drv.func_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        if block[0] * block[1] * block[2] > max_threads:
            res["error"] = "block %s over the kernel's %d threads" % (block, max_threads)
            return
        for img in images:
            p = drv.alloc(len(img))
            self.ptrs.append(p)
            drv.upload(p, img)
        self.params = Params(param_values(case["params"], cub["kparams"], self.ptrs))
        self.stream = drv.stream()
        self.launch_on(self.stream)
        drv.stream_sync(self.stream)
        out_images = list(images)
        for b in sorted({o["buffer"] for o in case["outputs"]}):
            out_images[b] = drv.download(self.ptrs[b], len(images[b]))
        self.outputs = output_bytes(case, out_images)
        problems = check_outputs(job_dir, case, out_images)
        res.update(correct=not problems, problems=problems[:3])
        for _ in range(opts.warmup):
            self.launch_on(self.stream)
        drv.stream_sync(self.stream)
        probe = self.stream_batch(10)
        self.n = int(min(opts.max_launches, max(10, math.ceil(opts.target_ms / max(probe, 1e-4)))))
        self.stream_ms, self.graph_ms = [], []
        res.update(launches=self.n, repeats=opts.repeats)
        self.ready = True

    def launch_on(self, stream) -> None:
        """One launch on `stream`: cuLaunchKernelEx with the user's parameters (library), or cuLaunchKernel
        (module)."""
        launch = self.drv.launch_ex if self.loader == "library" else self.drv.launch
        launch(self.f, self.case["grid"], self.block, 0, stream, self.params.array)

    def stream_batch(self, n: int) -> float:
        return time_stream(self.drv, self.launch_on, self.stream, n, 1)[0]

    def make_graph(self) -> None:
        try:
            self.graph = Graph(self.drv, self.launch_on, self.n)
        except CudaError as e:
            if e.sticky:
                raise
            self.res["graph_error"] = str(e)

    def finish(self) -> dict:
        res = self.res
        res.update(us_stream=round(_median(self.stream_ms) * 1000, 3),
                   us_stream_min=round(min(self.stream_ms) * 1000, 3))
        if self.graph_ms:
            res.update(us_graph=round(_median(self.graph_ms) * 1000, 3),
                       us_graph_min=round(min(self.graph_ms) * 1000, 3))
        res["us"] = res.get("us_graph", res["us_stream"])
        res["ok"] = True
        return res

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()
        for p in self.ptrs:
            _quietly(self.drv.free, p)
        if self.stream is not None:
            _quietly(self.drv.destroy_stream, self.stream)
        if self.mod is not None:
            _quietly(self.drv.unload_library if self.loader == "library" else self.drv.unload_module, self.mod)


def time_interleaved(sides: list, opts: Options) -> None:
    """Time the ready sides batch by batch in turn (A B A B ...), stream launches then graphs, so that
    whatever drifts during a case (clocks, caches, the order of loading) meets every side alike: timed one
    after the other, the side that went first measured 10-30% faster on an H100 at corpus sizes."""
    for _ in range(opts.repeats):
        for sd in sides:
            sd.stream_ms.append(sd.stream_batch(sd.n))
    for sd in sides:
        sd.make_graph()
    graphs = [sd for sd in sides if sd.graph is not None]
    for _ in range(opts.repeats):
        for sd in graphs:
            sd.graph_ms.append(sd.graph.time_ms())


def run_case(drv: Driver, dev: int, job_dir: str, case: dict, sides: list, opts: Options, report=None) -> dict:
    """{side: result} for the requested sides: each loaded and checked in turn, then all timed interleaved
    (time_interleaved).  After a fault that kills the context, the sides without a result come back as
    {"lost": True} (the parent runs them again in a fresh process).  `report(side, result)` is called as each
    side finishes, and `report(side, None)` once a side is loaded and checked (a worker killed later is not
    that side's fault)."""
    images = [buffer_image(job_dir, b) for b in case["buffers"]]
    out, ready = {}, []
    dead = None
    t0 = time.perf_counter()

    def lost(why: str) -> dict:
        return {"ok": False, "lost": True, "error": "%s: the context died (%s)" % (why, dead)}

    def done(side: str) -> None:
        out[side]["wall_s"] = round(time.perf_counter() - t0, 3)
        if report is not None:
            report(side, out[side])

    def load(side: str):
        """A Side ready to time, or the side's result when it cannot be timed."""
        nonlocal dead
        if dead is not None:
            return lost("not run")
        if "error" in case["cubins"][side]:
            return {"ok": False, "error": case["cubins"][side]["error"]}
        try:
            sd = Side(drv, dev, job_dir, case, side, images, opts)
        except CudaError as e:
            if e.sticky:
                dead = "%s on %s" % (e.name, side)
            return {"ok": False, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - a bad job entry fails its side only
            return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        if sd.ready:
            return sd
        sd.close()
        return sd.res
    try:
        for side in sides:
            got = load(side)
            if isinstance(got, Side):
                ready.append((side, got))
                if report is not None:
                    report(side, None)
            else:
                out[side] = got
                done(side)
        if dead is not None:   # the loaded sides' context is gone too
            for side, _ in ready:
                out[side] = lost("not run")
                done(side)
            return out
        if len(ready) == 2:
            differ = cross_check(case, ready[0][1].outputs, ready[1][1].outputs)
            for _, sd in ready:
                sd.res["sides_differ"] = differ[:3]
        try:
            time_interleaved([sd for _, sd in ready], opts)
        except CudaError as e:
            dead = "%s while timing" % e.name if e.sticky else None
            for side, sd in ready:
                out[side] = lost("not timed") if dead else dict(sd.res, error=str(e))
                done(side)
            return out
        for side, sd in ready:
            out[side] = sd.finish()
            done(side)
        return out
    finally:
        for _, sd in ready:
            sd.close()


# ---------------------------------------------------------------- the parent: isolation, budget, report


def device_info(drv: Driver, ordinal: int) -> tuple:
    drv.init()
    dev = drv.device(ordinal)
    info = {"name": drv.device_name(dev), "driver_version": drv.driver_version(),
            "cc": "%d.%d" % (drv.device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                             drv.device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)),
            "sms": drv.device_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
            "smem_optin": drv.device_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)}
    return dev, info


def _worker_argv(args, case: str, sides: list) -> list:
    argv = [sys.executable, os.path.abspath(__file__), args.job, "--worker", case, "--sides", ",".join(sides),
            "--repeats", str(args.repeats), "--target-ms", str(args.target_ms), "--warmup", str(args.warmup),
            "--device", str(args.device)]
    if args.loader:
        argv += ["--loader", args.loader]
    if args.fake_driver:
        argv += ["--fake-driver", args.fake_driver]
    return argv


def _reported(stdout, why: str = "") -> dict:
    """The sides a worker reported (one `RESULT {"side": ..., "result": ...}` line each).  A side it had
    loaded and checked (result null) but not finished when it died is lost: it runs again in a fresh worker."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    out = {}
    for line in (stdout or "").splitlines():
        if line.startswith(RESULT_TAG):
            msg = json.loads(line[len(RESULT_TAG):])
            out[msg["side"]] = msg["result"] or {"ok": False, "lost": True, "error": why}
    return out


def run_isolated(args, case: dict, sides: list) -> dict:
    """Run sides of a case in a worker process; a crash or a timeout fails the sides it did not load."""
    try:
        proc = subprocess.run(_worker_argv(args, case["case"], sides), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=args.kernel_timeout_s, universal_newlines=True)
    except subprocess.TimeoutExpired as e:
        why = "worker killed after %ss (hung kernel?)" % args.kernel_timeout_s
        return dict({s: {"ok": False, "error": why} for s in sides}, **_reported(e.stdout, why))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
    why = "worker exited %d: %s" % (proc.returncode, tail)
    return dict({s: {"ok": False, "error": why} for s in sides}, **_reported(proc.stdout, why))


def run_one(args, drv, dev, case: dict, opts: Options, order: list) -> dict:
    """Both sides of a case in `order`: in workers (a side lost to the other's fault gets a fresh worker), or
    here."""
    if args.no_isolate:
        res = run_case(drv, dev, args.job, case, order, opts)
        lost = [s for s in order if res[s].get("lost")]
        if lost:   # without isolation a dead context cannot be replaced: say so
            for s in lost:
                res[s]["error"] += " (use process isolation to rerun it)"
        return res
    res = run_isolated(args, case, order)
    lost = [s for s in order if res.get(s, {}).get("lost")]
    if lost:
        res.update(run_isolated(args, case, lost))
    return res


def summarize(case: dict, res: dict) -> dict:
    row = {"case": case["case"], "bytecode": case["bytecode"], "size": case.get("size", "corpus"),
           "grid": case["grid"]}
    for s in SIDES:
        r = dict(res.get(s) or {"ok": False, "error": "not run"})
        r.pop("lost", None)
        if s in case["cubins"] and "block" in case["cubins"][s]:
            r["block"] = case["cubins"][s]["block"]
        row[s] = r
    o, n = row["ours"].get("us"), row["nvidia"].get("us")
    row["ratio"] = round(o / n, 3) if o and n else None
    if case.get("flops"):
        row["flops"] = case["flops"]
        for s in SIDES:
            if row[s].get("us"):
                row[s]["tflops"] = round(tflops(case["flops"], row[s]["us"]), 2)
    differ = row["ours"].get("sides_differ")
    row["sides_agree"] = None if differ is None else not differ
    return row


def tflops(flops: int, us: float) -> float:
    return flops / us / 1e6


def _cell_ok(r: dict) -> str:
    if not r.get("ok"):
        return "ERROR"
    return "yes" if r.get("correct") else "NO"


def table(rows: list, device: dict, other: str = "NVIDIA") -> str:
    """The run as text; `other`: what the second side is (NVIDIA's tileiras, or ours at a revision)."""
    lines = ["%s (cc %s, %d SMs, driver %s)" % (device.get("name"), device.get("cc"), device.get("sms", 0),
                                                device.get("driver_version")),
             "%-46s %-12s %10s %10s %7s  %-6s %-6s" % ("case", "grid", "ours us", (other + " us")[-10:], "ratio",
                                                       "ours", other[:6])
             + "  TFLOP/s (ours, %s)" % other]
    for r in rows:
        g = "x".join(str(x) for x in r["grid"])
        cells = []
        for s in SIDES:
            us = r[s].get("us")
            cells.append("%10.2f" % us if us is not None else "%10s" % "-")
        ratio = "%7.2f" % r["ratio"] if r.get("ratio") else "%7s" % "-"
        flops = "  %s, %s" % tuple(("%.1f" % r[s]["tflops"]) if r[s].get("tflops") else "-" for s in SIDES) \
            if r.get("flops") else ""
        lines.append("%-46s %-12s %s %s %s  %-6s %-6s%s" % (r["case"][:46], g[:12], cells[0], cells[1], ratio,
                                                           _cell_ok(r["ours"]), _cell_ok(r["nvidia"]), flops))
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append("geometric mean of ours/%s over %d case%s: %.2f (median %.2f)"
                     % (other, len(ratios), "" if len(ratios) == 1 else "s", geo, statistics.median(ratios)))
    for r in rows:
        for s in SIDES:
            if not r[s].get("ok"):
                lines.append("%s %s: %s" % (r["case"], s, r[s].get("error")))
            elif not r[s].get("correct"):
                lines.append("%s %s: wrong output: %s" % (r["case"], s, "; ".join(r[s].get("problems", []))))
        if r.get("sides_agree") is False:
            lines.append("%s: the sides' outputs differ: %s" % (r["case"], "; ".join(r["ours"]["sides_differ"])))
    return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Run a GPU timing job (bench/gpu/build.py) on the GPU.")
    ap.add_argument("job", help="the job folder (job.json, cubins/, data/)")
    ap.add_argument("--out", help="write the whole run here as JSON")
    ap.add_argument("--kernels", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--target-ms", type=float, default=2.0, help="length of one timed batch")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=150.0, help="cases left after this are skipped")
    ap.add_argument("--kernel-timeout-s", type=float, default=45.0)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--no-isolate", action="store_true", help="run every case in this process")
    ap.add_argument("--loader", choices=("library", "module"),
                    help="library: cuLibraryLoadData + cuLaunchKernelEx with the user's parameters, as cuTile "
                         "(the cubin's launch hook fills tensor maps); module: cuModuleLoadData + cuLaunchKernel "
                         "(cubins without hidden parameters only); default: the job's (build.py sets library)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--sides", default=",".join(SIDES), help=argparse.SUPPRESS)
    ap.add_argument("--fake-driver", help=argparse.SUPPRESS)   # tests: a Python file whose make_lib() is libcuda
    return ap.parse_args(argv)


def loader_of(args, job: dict) -> str:
    """--loader, else the job's; jobs from before the library path load as modules."""
    return args.loader or job.get("loader", "module")


def worker_main(args) -> int:
    job = read_job(args.job)
    opts = Options(args.repeats, args.target_ms, args.warmup, loader=loader_of(args, job))
    case = next(c for c in job["cases"] if c["case"] == args.worker)
    sides = [s for s in args.sides.split(",") if s]

    def report(side: str, result: dict) -> None:
        sys.stdout.write(RESULT_TAG + json.dumps({"side": side, "result": result}, sort_keys=True) + "\n")
        sys.stdout.flush()
    try:
        drv = load_driver(args.fake_driver, args.job)
        dev, _ = device_info(drv, args.device)
        drv.retain_primary_context(dev)
    except (CudaError, OSError) as e:
        for s in sides:
            report(s, {"ok": False, "error": "driver: %s" % e})
        return 0
    run_case(drv, dev, args.job, case, sides, opts, report)
    return 0


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return worker_main(args)
    t_start = time.perf_counter()
    try:
        job = read_job(args.job)
    except (OSError, ValueError) as e:
        print("error: cannot read the job in %s: %s" % (args.job, e), file=sys.stderr)
        return 2
    try:
        drv = load_driver(args.fake_driver, args.job)
        dev, device = device_info(drv, args.device)
        drv.retain_primary_context(dev)    # held for the whole run: keeps the driver initialised for the workers
    except (CudaError, OSError) as e:
        print("error: no usable CUDA driver: %s" % e, file=sys.stderr)
        return 2
    device.update(python=platform.python_version(), host=platform.node())
    print("# %s, job for %s built at %s; bytecode: %s" % (
        json.dumps(device, sort_keys=True), job.get("gpu_name"), job.get("commit"),
        job.get("set_label", "unhinted bytecode")), flush=True)
    want = [w for w in args.kernels.split(",") if w]
    cases = [c for c in job["cases"] if not want or c["case"] in want]
    opts = Options(args.repeats, args.target_ms, args.warmup, loader=loader_of(args, job))
    rows = []
    for k, case in enumerate(cases):
        if time.perf_counter() - t_start > args.budget_s:
            res = {s: {"ok": False, "error": "skipped: the %ss budget is spent" % args.budget_s} for s in SIDES}
        else:   # which cubin goes first alternates, so neither always meets a colder GPU
            res = run_one(args, drv, dev, case, opts, list(SIDES) if k % 2 == 0 else list(reversed(SIDES)))
        row = summarize(case, res)
        rows.append(row)
        print(json.dumps(row, sort_keys=True), flush=True)
    wall = time.perf_counter() - t_start
    print()
    print(table(rows, device, job.get("versus") or "NVIDIA"))
    print("wall %.1f s" % wall)
    if args.out:
        doc = {"device": device, "job": {k: job[k] for k in ("gpu_name", "opt_level", "commit", "src_commit",
                                                             "nvidia_tileiras", "versus", "set", "set_label")
                                         if k in job},
               "options": {"repeats": args.repeats, "target_ms": args.target_ms, "warmup": args.warmup,
                           "isolated": not args.no_isolate, "loader": opts.loader},
               "wall_s": round(wall, 1), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
    all_ok = all(r[s].get("ok") and r[s].get("correct") for r in rows for s in SIDES)
    return 0 if all_ok and rows else 1


if __name__ == "__main__":
    sys.exit(main())
