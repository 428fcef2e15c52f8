"""`run_kernel`: load a module, bind numpy arguments by the cuTile calling convention, run, copy back."""
from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..deepstack import call_deep, nesting_depth
from ..ir import types as T
from ..ir.core import Function, Module
from ..targets import looks_like_gpu_name
from . import numerics as N
from .abi import ParamSpec, describe_entry, numpy_matches, parse_symbol, specs_match
from .blas import single_threaded_blas
from .errors import ArgumentError, EngineNotImplemented, InterpError, KernelFault
from .interpreter import Interp, preflight
from .memory import Memory

ENGINES = ("interpret", "emulate", "both")
MAX_GRID = (1 << 24) - 1
NOT_TILE_IR = "input does not correspond to Tile IR bytecode"


class InvalidModule(InterpError):
    """The module does not parse or verify (the diagnostics of the reader/verifier)."""

    exit_code = 3

    def __init__(self, lines: list[str]):
        self.lines = [ln.removeprefix("error: ") for ln in lines]
        super().__init__(self.lines[0] if self.lines else "invalid module")


@dataclass
class RunReport:
    """What a run did: the engine, the kernel, wall time and counters, and the device's printed output."""

    engine: str
    kernel: str
    grid: tuple[int, int, int]
    time_s: float
    counters: dict[str, int] = field(default_factory=dict)
    stdout: str = ""
    array_args: tuple[int, ...] = ()   # which arguments were bound as arrays (updated in place)
    warnings: tuple[str, ...] = ()     # the emulator's memcheck="device" reports (EmuReport.warnings)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def as_dict(self) -> dict:
        return {"engine": self.engine, "kernel": self.kernel, "grid": list(self.grid),
                "time_s": self.time_s, "counters": dict(self.counters), "stdout": self.stdout,
                "array_args": list(self.array_args)}


# ============================================================================ module loading
def load_module(module) -> Module:
    """A path, bytes or an already-read Module -> a verified Module (InvalidModule otherwise)."""
    if isinstance(module, Module):
        return module
    if isinstance(module, (bytes, bytearray, memoryview)):
        data = bytes(module)
    elif isinstance(module, (str, os.PathLike)):
        try:
            with open(module, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ArgumentError(f"cannot read module '{os.fspath(module)}': {e.strerror or e}") from None
    else:
        raise ArgumentError(f"module must be a path, bytes or a Module, got {type(module).__name__}")
    from ..frontend import InputError, check_version_like_driver, parse
    try:
        check_version_like_driver(data)
        mod = parse(data, NOT_TILE_IR)
    except InputError as e:
        raise InvalidModule(e.lines) from None
    try:
        from ..ir.verifier import first_error
    except ImportError:  # a build without the verifier: the interpreter's own preflight still runs
        return mod
    diag = first_error(mod)
    if diag is not None:
        body = diag.render()
        body = body.removeprefix("error: ")
        where = f"{diag.loc}: " if getattr(diag, "loc", None) else ""
        raise InvalidModule([f"{where}{body} (the module does not verify)"])
    return mod


def pick_kernel(mod: Module, kernel: str | bytes | None) -> Function:
    names = [f.name.decode(errors="replace") for f in mod.functions]
    if kernel is None:
        if len(mod.functions) == 1:
            return mod.functions[0]
        if not mod.functions:
            raise ArgumentError("the module has no kernels")
        raise ArgumentError(f"the module has {len(names)} kernels ({', '.join(names)}); pick one with --kernel")
    key = kernel.encode() if isinstance(kernel, str) else bytes(kernel)
    for f in mod.functions:
        if f.name == key:
            return f
    raise ArgumentError(f"no kernel named '{key.decode(errors='replace')}' in the module "
                        f"(kernels: {', '.join(names) or 'none'})")


def check_grid(grid) -> tuple[int, int, int]:
    try:
        dims = tuple(grid) if not isinstance(grid, (int, np.integer)) else (grid,)
    except TypeError:
        raise ArgumentError(f"grid must be a tuple of 1 to 3 positive integers, got {grid!r}") from None
    if not 1 <= len(dims) <= 3:
        raise ArgumentError(f"grid must have 1 to 3 dimensions, got {len(dims)}")
    out = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise ArgumentError(f"grid extents must be integers, got {d!r}")
        if d <= 0:
            raise ArgumentError(f"grid extents must be positive, got {tuple(int(x) for x in dims)}")
        if d > MAX_GRID:
            raise ArgumentError(f"grid extent {int(d)} exceeds the limit of {MAX_GRID} tile blocks per axis")
        out.append(int(d))
    return tuple(out + [1] * (3 - len(out)))  # type: ignore[return-value]


# ============================================================================ argument binding
@dataclass
class _ArrayArg:
    index: int
    array: np.ndarray
    elem: T.Type
    lo: int = 0
    hi: int = 0
    p0: int = 0
    valid: np.ndarray | None = None   # byte mask over [lo, hi), None: dense
    buffer: Any = None
    group_lo: int = 0                 # first byte of the buffer this argument lives in


def _expected(fn: Function, specs: list[ParamSpec] | None, params: list[T.Type]) -> str:
    sym = fn.name.decode(errors="replace")
    if specs is not None:
        lines = "; ".join(f"{i}: {s.describe()}" for i, s in enumerate(specs))
        return f"kernel {sym} takes {len(specs)} argument(s): {lines}"
    return (f"kernel {sym} has entry parameters {describe_entry(params)} (each array argument is "
            f"passed as ptr, shape..., strides...; each scalar as one value)")


def _is_scalar_arg(a) -> bool:
    if isinstance(a, np.ndarray):
        return a.ndim == 0
    return isinstance(a, (int, float, bool, np.integer, np.floating, np.bool_))


def _scalar_value(a, t: T.Type, i: int, spec: ParamSpec | None, expected: str) -> np.ndarray:
    v = a[()] if isinstance(a, np.ndarray) else a
    dt = np.asarray(v).dtype
    if dt.kind not in "biuf":
        raise ArgumentError(f"argument {i}: expected a {t} scalar, got {dt}; {expected}")
    if isinstance(t, T.IntType):
        if dt.kind == "f":
            raise ArgumentError(f"argument {i}: expected an integer scalar ({t}), got a float ({v!r}); "
                                f"{expected}")
        x = int(v)
        w = t.width
        lo = -(1 << (w - 1)) if w > 1 else 0
        hi = (1 << w) - 1
        if spec is not None and spec.dtype.startswith("int"):
            hi = (1 << (w - 1)) - 1
        if spec is not None and spec.dtype.startswith("uint"):
            lo = 0
        if not lo <= x <= hi:
            raise ArgumentError(f"argument {i}: value {x} does not fit the kernel's {spec.dtype if spec else t} "
                                f"parameter")
        return N.int_scalar(x, w)
    if isinstance(t, T.FloatType):
        if t.name in ("bf16", "f8E4M3FN", "f8E5M2", "f8E8M0FNU") and dt.kind == "u" and \
                dt.itemsize * 8 == N.elem_bits(t):
            return np.asarray(N.bits_to_compute(np.asarray(v), t), dtype=N.compute_dtype(t)).reshape(())
        if isinstance(v, (bool, np.bool_)):
            raise ArgumentError(f"argument {i}: expected a {t} scalar, got a bool; {expected}")
        return np.asarray(N.to_float(np.float64(v), t)).reshape(())
    raise ArgumentError(f"argument {i}: unsupported scalar parameter type {t}")


def _array_extent(arr: np.ndarray) -> tuple[int, int, int, np.ndarray | None]:
    p0 = int(arr.__array_interface__["data"][0])
    isz = arr.itemsize
    if arr.size == 0:
        return p0, p0, p0, None
    lo = p0 + sum(min(0, s * (n - 1)) for s, n in zip(arr.strides, arr.shape))
    hi = p0 + sum(max(0, s * (n - 1)) for s, n in zip(arr.strides, arr.shape)) + isz
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        return lo, hi, p0, None
    offs = np.zeros((), dtype=np.int64)
    for s, n in zip(arr.strides, arr.shape):
        offs = np.add.outer(offs, np.arange(n, dtype=np.int64) * s)
    offs = offs.reshape(-1) + (p0 - lo)
    mask = np.zeros(hi - lo, dtype=np.bool_)
    for k in range(isz):
        mask[offs + k] = True
    return lo, hi, p0, (None if mask.all() else mask)


def bind_arguments(fn: Function, args: Sequence, memory: Memory) -> tuple[list, list[_ArrayArg]]:
    params = [t.elem if isinstance(t, T.TileType) else t for t in fn.type.inputs]
    specs = parse_symbol(fn.name.decode(errors="replace"))
    if specs is not None and not specs_match(specs, params):
        specs = None
    expected = _expected(fn, specs, params)
    args = list(args)
    if specs is not None and len(args) != len(specs):
        raise ArgumentError(f"got {len(args)} argument(s); {expected}")

    values: list = []
    arrays: list[_ArrayArg] = []
    cursor = 0
    for i, a in enumerate(args):
        spec = specs[i] if specs is not None else None
        if cursor >= len(params):
            raise ArgumentError(f"too many arguments ({len(args)}); {expected}")
        t = params[cursor]
        if isinstance(t, T.PointerType):
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"argument {i}: expected an array ({spec.describe() if spec else t}), "
                                    f"got {type(a).__name__}; {expected}")
            ndim = a.ndim
            if spec is not None and spec.ndim != ndim:
                raise ArgumentError(f"argument {i}: expected a {spec.ndim}-D array, got a {ndim}-D array "
                                    f"of shape {a.shape}; {expected}")
            idx_types = params[cursor + 1:cursor + 1 + 2 * ndim]
            if len(idx_types) != 2 * ndim or not all(isinstance(x, T.IntType) for x in idx_types):
                raise ArgumentError(f"argument {i}: a {ndim}-D array does not fit the entry parameters "
                                    f"here; {expected}")
            ok, want = numpy_matches(a.dtype, t.pointee)
            if not ok:
                raise ArgumentError(f"argument {i}: the kernel's element type is {t.pointee}: expected "
                                    f"{want}, got {a.dtype}; {expected}")
            isz = a.itemsize
            for d, s in enumerate(a.strides):
                if s < 0:
                    raise ArgumentError(f"argument {i}: negative stride along dimension {d}: the cuTile "
                                        f"calling convention requires strides >= 0 (pass a copy)")
                if s % isz:
                    raise ArgumentError(f"argument {i}: stride {s} bytes along dimension {d} is not a "
                                        f"multiple of the element size {isz}")
            shape_vals, stride_vals = [], []
            for d in range(ndim):
                st, tt = idx_types[d], idx_types[ndim + d]
                n, s = int(a.shape[d]), int(a.strides[d] // isz)
                for what, v, ty in (("extent", n, st), ("stride", s, tt)):
                    if v >= 1 << (ty.width - 1):
                        raise ArgumentError(f"argument {i}: {what} {v} along dimension {d} does not fit the "
                                            f"kernel's {ty} index type")
                shape_vals.append(N.int_scalar(n, st.width))
                stride_vals.append(N.int_scalar(s, tt.width))
            lo, hi, p0, valid = _array_extent(a)
            rec = _ArrayArg(i, a, t.pointee, lo, hi, p0, valid)
            arrays.append(rec)
            values.append(rec)
            values.extend(shape_vals + stride_vals)
            cursor += 1 + 2 * ndim
        else:
            if not _is_scalar_arg(a):
                what = f"a {a.ndim}-D array" if isinstance(a, np.ndarray) else type(a).__name__
                raise ArgumentError(f"argument {i}: expected a scalar ({spec.describe() if spec else t}), "
                                    f"got {what}; {expected}")
            values.append(_scalar_value(a, t, i, spec, expected))
            cursor += 1
    if cursor != len(params):
        raise ArgumentError(f"too few arguments ({len(args)}); {expected}")

    _place_arrays(arrays, memory)
    out = []
    for v in values:
        if isinstance(v, _ArrayArg):
            out.append(np.asarray(v.buffer.base + (v.p0 - v.group_lo), dtype=np.uint64))
        else:
            out.append(v)
    return out, arrays


def _place_arrays(arrays: list[_ArrayArg], memory: Memory) -> None:
    """Group arguments whose memory overlaps into one buffer each, copy their bytes in."""
    order = sorted(arrays, key=lambda r: (r.lo, r.hi))
    groups: list[list[_ArrayArg]] = []
    end = None
    for r in order:
        if groups and r.hi > r.lo and end is not None and r.lo < end:
            groups[-1].append(r)
            end = max(end, r.hi)
        else:
            groups.append([r])
            end = r.hi if r.hi > r.lo else None
    for g in groups:
        lo = min(r.lo for r in g)
        hi = max(r.hi for r in g)
        size = hi - lo
        raw = ctypes.string_at(lo, size) if size else b""
        valid = None
        if len(g) > 1 or any(r.valid is not None for r in g):
            valid = np.zeros(size, dtype=np.bool_)
            for r in g:
                if r.valid is None:
                    valid[r.lo - lo:r.hi - lo] = True
                else:
                    valid[r.lo - lo:r.hi - lo] |= r.valid
            if valid.all():
                valid = None
        readonly = all(not r.array.flags.writeable for r in g)
        names = " / ".join(f"argument {r.index} ({r.array.dtype}{list(r.array.shape)})" for r in g)
        buf = memory.allocate(size, names, init=raw, phase=lo, valid=valid, readonly=readonly,
                              elem_size=g[0].array.itemsize)
        for r in g:
            r.buffer = buf
            r.group_lo = lo


def _copy_back(arrays: list[_ArrayArg]) -> None:
    for r in arrays:
        a = r.array
        if not r.buffer.written or not a.flags.writeable or a.size == 0:
            continue
        view = np.ndarray(a.shape, dtype=a.dtype, buffer=r.buffer.data, offset=r.p0 - r.group_lo,
                          strides=a.strides)
        a[...] = view


# ============================================================================ entry point
def run_kernel(module, grid, args, *, kernel=None, engine="interpret", gpu_name="sm_100", opt_level=3,
               stdout=None) -> RunReport:
    """Run one kernel of a cuda_tile module on the CPU.

    module: a path, bytes (or a read Module); grid: 1-3 positive ints; args: the
    kernel's runtime arguments in cuTile parameter order (numpy arrays of any
    strides for array parameters, numbers / 0-d arrays for scalars; bf16 and fp8
    data as raw unsigned bits).  Arrays are updated in place when the kernel
    completes.  Returns a RunReport; raises InterpError subclasses on failure
    (ArgumentError, InvalidModule, UnsupportedOp, KernelFault, ...).
    `stdout`, if given, is called with each piece of device output as it is printed.
    """
    if engine not in ENGINES:
        raise ArgumentError(f"unknown engine '{engine}' (expected one of {', '.join(ENGINES)})")
    if engine != "interpret":
        raise EngineNotImplemented(f"engine '{engine}' is not implemented yet; use engine='interpret'")
    if not looks_like_gpu_name(gpu_name):
        raise ArgumentError(f"invalid gpu_name {gpu_name!r} (expected sm_XX)")
    if not isinstance(opt_level, (int, np.integer)) or not 0 <= int(opt_level) <= 3:
        raise ArgumentError(f"invalid opt_level {opt_level!r} (expected 0..3)")
    dims = check_grid(grid)
    mod = load_module(module)
    fn = pick_kernel(mod, kernel)
    if isinstance(args, (np.ndarray, str, bytes)) or not hasattr(args, "__iter__"):
        raise ArgumentError("args must be a list of arguments in cuTile parameter order")
    preflight(mod, fn)
    memory = Memory()
    values, arrays = bind_arguments(fn, args, memory)
    interp = Interp(mod, fn, memory, dims, emit=stdout)
    t0 = time.perf_counter()
    with np.errstate(all="ignore"), single_threaded_blas():
        interp.init_globals()
        try:
            # the handlers recurse once per nesting level: deep kernels run on a large-stack thread
            call_deep(nesting_depth(fn.body), interp.run, values)
        except KernelFault as e:
            e.stdout = "".join(interp.output)
            raise
        except RecursionError:
            raise KernelFault("regions are nested too deeply for the interpreter") from None
    elapsed = time.perf_counter() - t0
    _copy_back(arrays)
    counters = {"tile_blocks": dims[0] * dims[1] * dims[2], "ops": interp.ops_executed,
                "elements": interp.elements, **memory.counters}
    return RunReport("interpret", fn.name.decode(errors="replace"), dims, elapsed, counters,
                     "".join(interp.output), tuple(r.index for r in arrays))
