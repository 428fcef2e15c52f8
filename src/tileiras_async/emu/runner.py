"""Compile a cuda_tile module with our compiler and run it in the PTX emulator.

`run_compiled` is what `run --engine emulate` and `run_kernel(engine="emulate")`
call: the module goes through the normal pipeline (read, verify, LLVM -> PTX,
ptxas -- the cubin must still be produced), then the exact PTX handed to ptxas
is executed on numpy data.

Arguments follow cuTile's calling convention v1 (`cutile_python_v1`): each
numpy array becomes its base pointer, then ``shape[0..ndim)``, then
``strides[0..ndim)`` in elements, in the integer type of the entry's
parameters; each scalar becomes one parameter.  Arrays of dtypes numpy lacks
(bf16, fp8) travel as same-width unsigned integers.  Arrays may be
non-contiguous views; they are updated in place when the kernel completes.
Arrays that share memory share one device allocation, as on a GPU.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .emulate import EmuReport, emulate_ptx, load_program
from .errors import LaunchError, UnsupportedLaunch
from .memory import DeviceMemory, _byte_span, check_memcheck_mode, element_byte_offsets


@dataclass
class EmuRun:
    """What `run_compiled` did: the emulator's report, the PTX it ran and the cubin ptxas produced."""
    report: EmuReport
    kernel: str
    ptx: str
    cubin: bytes | None
    block: tuple
    params: list = field(repr=False, default_factory=list)
    arrays: tuple = ()            # indices (into args) of the array arguments copied back


def _load_module(module):
    from ..bytecode.reader import read_module
    from ..ir.core import Module
    if isinstance(module, Module):
        return module
    if isinstance(module, (bytes, bytearray, memoryview)):
        return read_module(bytes(module))
    p = Path(module)
    return read_module(p.read_bytes())


def _check_assumptions(mod, kname: str, params: list) -> None:
    """An argument outside a bound or divisibility the kernel `assume`s (cuTile states sizes and strides >= 0,
    and at launch the alignment and divisibility of its arrays) is refused: the compiler relies on the fact
    (it zero-extends sizes, copies 16 bytes at a time), so the run would compute something else or fault."""
    from ..ir.attrs import BoundedAttr, DivByAttr
    from ..ir.types import PointerType
    fn = next(f for f in mod.functions if f.name.decode(errors="replace") == kname)
    position = {id(a): i for i, a in enumerate(fn.body.args)}
    for op in fn.body.ops:
        pred = op.attrs.get("predicate") if op.name == "assume" else None
        i = position.get(id(op.operands.get("value"))) if isinstance(pred, (BoundedAttr, DivByAttr)) else None
        if i is None or i >= len(params) or not isinstance(params[i], (int, np.integer)):
            continue
        v = int(params[i])
        if isinstance(pred, DivByAttr):
            if pred.every is None and pred.along is None and pred.divisor > 0 and v % pred.divisor:
                shown = f"the address {v:#x}" if isinstance(fn.body.args[i].type.elem, PointerType) else str(v)
                raise LaunchError(f"entry parameter {i} is {shown}, but the kernel assumes it is divisible by "
                                  f"{pred.divisor}")
        elif (pred.lb is not None and v < pred.lb) or (pred.ub is not None and v > pred.ub):
            bounds = f"{'' if pred.lb is None else f'{pred.lb} <= '}x{'' if pred.ub is None else f' <= {pred.ub}'}"
            raise LaunchError(f"entry parameter {i} is {v}, but the kernel assumes {bounds}")


def _pick_kernel(mod, kernel: str | None) -> str:
    names = [f.name.decode(errors="replace") for f in mod.functions]
    if not names:
        raise LaunchError("the module has no kernels")
    if kernel is None:
        if len(names) != 1:
            raise LaunchError(f"the module has {len(names)} kernels ({', '.join(names)}); choose one with kernel=")
        return names[0]
    if kernel in names:
        return kernel
    pref = [n for n in names if n.split("_Kt")[0] == kernel]
    if len(pref) == 1:
        return pref[0]
    raise LaunchError(f"no kernel '{kernel}' in the module (kernels: {', '.join(names)})")


def default_block(prog) -> tuple:
    if prog.reqntid is not None:
        return prog.reqntid
    if prog.maxntid is not None:
        return prog.maxntid
    from ..codegen.emitter import CodegenOptions
    return (CodegenOptions().num_warps * 32, 1, 1)


def _is_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.ndim > 0


def _scalar_value(a):
    if isinstance(a, np.ndarray):
        a = a.reshape(()).item() if a.dtype.kind in "biuf" else a.reshape(())[()]
    if isinstance(a, (bool, np.bool_)):
        return int(a)
    if isinstance(a, (int, float, np.integer, np.floating)):
        return a
    if isinstance(a, np.generic):        # e.g. an ml_dtypes scalar: same-width unsigned bits
        return np.frombuffer(a.tobytes(), dtype={1: np.uint8, 2: np.uint16, 4: np.uint32,
                                                 8: np.uint64}[a.dtype.itemsize])[0]
    raise LaunchError(f"unsupported scalar argument {a!r}")


def _scalar_as(value, elem: str | None):
    """A scalar argument converted for a cuda_tile element type (bf16/f16/fp8 travel as their bits)."""
    if elem is None:
        return value
    from . import fp
    if elem in ("bf16", "f8E4M3FN", "f8E5M2"):
        if isinstance(value, np.generic) and value.dtype.kind == "u":
            return value
        fmt = {"bf16": "bf16", "f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}[elem]
        v = fp.round_fmt(np.array([float(value)]), fmt, "rn", satfinite=fmt == "e4m3")
        bits = fp.encode(v, fmt)[0]
        return np.uint16(bits) if fmt == "bf16" else np.uint8(bits)
    if elem == "f16":
        if isinstance(value, np.generic) and value.dtype.kind == "u":
            return value
        return np.float16(value)
    if elem in ("f32", "tf32"):
        return np.float32(value) if not (isinstance(value, np.generic) and value.dtype.kind == "u") else value
    if elem == "f64":
        return np.float64(value)
    if elem.startswith("i"):
        if isinstance(value, (float, np.floating)) and float(value) != int(value):
            raise LaunchError(f"a non-integral value {value!r} for an {elem} scalar")
        return int(value)
    return value


def scalar_elem_types(mod, kernel: str) -> list:
    """Element type (cuda_tile spelling) of each entry parameter of `kernel`, or None when unknown."""
    for f in mod.functions:
        if f.name.decode(errors="replace") == kernel:
            out = []
            for t in f.type.inputs:
                elem = getattr(t, "elem", t)
                out.append(None if type(elem).__name__ == "PointerType" else str(elem))
            return out
    return []


def map_arguments(prog, args: list, memory: DeviceMemory, elem_types: list | None = None,
                  hidden: int = 0) -> tuple[list, list]:
    """Entry parameter values for `args` (cuTile order); returns (params, [(arg_index, address)]).

    `elem_types` (per entry parameter, see `scalar_elem_types`) tells how to convert scalars of
    types the PTX cannot tell apart (bf16 vs f16 vs i16 in a .b16 parameter).  `hidden`: trailing entry
    parameters the arguments do not give (tensor maps, filled at launch)."""
    arrays = [(i, a) for i, a in enumerate(args) if _is_array(a)]
    addr = _allocate_arrays([a for _, a in arrays], memory, [f"argument {i}" for i, _ in arrays])
    addr_of = {i: addr[k] for k, (i, _) in enumerate(arrays)}
    params: list = []
    kp = prog.kparams[:len(prog.kparams) - hidden]
    for i, a in enumerate(args):
        pos = len(params)
        if i in addr_of:
            if pos >= len(kp) or kp[pos].size != 8:
                raise LaunchError(f"argument {i} is an array but entry parameter {pos} of {prog.kernel} is "
                                  f"not a pointer ({_entry_sig(prog)})")
            params.append(addr_of[i])
            idx = kp[pos + 1:pos + 1 + 2 * a.ndim]
            if len(idx) != 2 * a.ndim or any(p.type not in ("u32", "s32", "b32", "u64", "s64", "b64") for p in idx):
                raise LaunchError(f"argument {i}: a {a.ndim}-D array does not match the entry parameters "
                                  f"{_entry_sig(prog)}")
            params += [int(n) for n in a.shape]
            params += [int(s) // a.itemsize if a.itemsize else 0 for s in a.strides]
        else:
            if pos >= len(kp):
                raise LaunchError(f"too many arguments for {prog.kernel} {_entry_sig(prog)}")
            v = _scalar_value(a)
            if elem_types and pos < len(elem_types):
                v = _scalar_as(v, elem_types[pos])
            params.append(v)
    if len(params) != len(kp):
        raise LaunchError(f"the arguments give {len(params)} entry parameters, {prog.kernel} takes {len(kp)} "
                          f"{_entry_sig(prog)}")
    return params, [(i, addr_of[i]) for i, _ in arrays]


def _entry_sig(prog) -> str:
    return "(" + ", ".join("." + p.type for p in prog.kparams) + ")"


def _allocate_arrays(arrs: list, memory: DeviceMemory, names: list[str]) -> list:
    """Device addresses (of element 0) for each array (allocations named by `names`, which fault messages and
    memcheck warnings quote); overlapping arrays share an allocation."""
    spans = []
    for k, a in enumerate(arrs):
        lo, hi = _byte_span(a)
        p0 = a.__array_interface__["data"][0]
        spans.append((p0 + lo, p0 + hi, k, p0))
    order = sorted(range(len(arrs)), key=lambda k: spans[k][0])
    groups: list = []
    for k in order:
        lo, hi = spans[k][0], spans[k][1]
        if groups and lo < groups[-1][1] and hi > lo:
            g = groups[-1]
            g[1] = max(g[1], hi)
            g[2].append(k)
        else:
            groups.append([lo, hi, [k]])
    out = [0] * len(arrs)
    for lo, hi, members in groups:
        if len(members) == 1:
            k = members[0]
            a = arrs[k]
            out[k] = memory.alloc_array(a, names[k], readonly=not a.flags.writeable)
            continue
        size = hi - lo
        raw = ctypes.string_at(lo, size) if size else b""
        valid = np.zeros(size, dtype=bool)
        for k in members:
            a = arrs[k]
            p0 = spans[k][3]
            offs = element_byte_offsets(a) + (p0 - lo)
            valid[(offs[:, None] + np.arange(a.itemsize)).reshape(-1)] = True
        ro = all(not arrs[k].flags.writeable for k in members)
        base = memory.alloc(size, " / ".join(names[k] for k in members), readonly=ro,
                            valid=None if valid.all() else valid, init=raw)
        for k in members:
            out[k] = base + (spans[k][3] - lo)
    return out


def _entry(module_bytes_or_path, kernel: str | None, verify: bool):
    """The read (and verified) module and the name of the kernel to run."""
    mod = _load_module(module_bytes_or_path)
    if verify:
        from ..frontend import verify as _verify
        _verify(mod, None, False)
    return mod, _pick_kernel(mod, kernel)


def run_compiled(module_bytes_or_path, grid, args, *, kernel: str | None = None, gpu_name: str = "sm_100",
                 opt_level: int = 3, block: tuple | None = None, assemble: bool = True,
                 verify: bool = True, max_lanes: int = 4096, memory: DeviceMemory | None = None,
                 check_races: bool = False, pipeline_stages: int | None = None, memcheck: str = "strict") -> EmuRun:
    """Compile `module_bytes_or_path` for `gpu_name` at `-O opt_level` (and `--num-stages pipeline_stages`),
    run `kernel` over `grid` on `args`.

    The arrays in `args` are updated in place.  Raises the pipeline's errors
    (bytecode/verifier `InputError`, `CodegenUnavailable`, `PtxasError`) or the
    emulator's (`MemoryFault`, `UnsupportedInstruction`, ...).  `memcheck`: "strict" or "device"
    (emulate_ptx; our own code is meant to pass "strict").
    """
    from ..codegen.host_object import ptxas_options
    from ..driver import module_ptx
    from ..toolchain.ptxas import assemble as _assemble
    from ..targets import target
    mod, kname = _entry(module_bytes_or_path, kernel, verify)
    try:
        tgt = target(gpu_name)
    except KeyError:
        raise LaunchError(f"unknown GPU '{gpu_name}'") from None
    opt_level = int(opt_level)
    if not 0 <= opt_level <= 3:
        raise LaunchError(f"invalid opt_level {opt_level} (expected 0..3)")
    ptx = module_ptx(mod, tgt, opt_level, pipeline_stages=pipeline_stages)
    opts = ptxas_options(ptx, tgt, opt_level)
    cubin = _assemble(ptx, opts) if assemble else None
    return _launch(mod, kname, ptx, cubin, grid, args, block, memory, max_lanes, check_races,
                   _compiled_tensor_maps(ptx, kname, cubin, opts.host_object), memcheck)


def _compiled_tensor_maps(ptx: str, kname: str, cubin: bytes | None, host_object: bytes | None):
    """Where the tensor maps of our compiled kernel come from, as the driver gets them: the host object
    ptxas embedded in the cubin (`.nv.host`; without a cubin, the object itself).  None: no maps."""
    target, entry = _ptx_entry(ptx, kname)
    if not tensor_map_params(entry):
        return None
    from ..toolchain.cubin import host_object as embedded
    from .host_object import parse_host_object
    data = embedded(cubin) if cubin is not None else host_object
    if data is None:
        raise LaunchError(f"the compiled '{kname}' takes tensor maps but its cubin has no host object")
    return _TensorMaps(parse_host_object(data, f"{kname}'s .nv.host"), target, entry)


def run_ptx(module_bytes_or_path, ptx: str, grid, args, *, kernel: str | None = None,
            host_object: str | None = None, block: tuple | None = None, verify: bool = True,
            max_lanes: int = 4096, memory: DeviceMemory | None = None, check_races: bool = False,
            memcheck: str = "strict") -> EmuRun:
    """Run given PTX (e.g. NVIDIA's tileiras output for this module) instead of compiling the module.

    The module supplies the parameter ABI: which entry to run (the PTX must have an entry of that name), the
    element types of scalars and the bounds it `assume`s.  PTX that takes tensor maps (TMA) needs them
    filled at launch by the host object NVIDIA's tool wrote beside it (`host_object`: its launch hook runs,
    host_object.py; without it the launch is an `UnsupportedLaunch`).  `memcheck`: "strict" (the default: any
    read outside an allocation faults) or "device" (as a GPU without a sanitizer: a read just past an allocation
    returns 0xff bytes and is reported in `report.warnings`; memory.py defines "just past")."""
    mod, kname = _entry(module_bytes_or_path, kernel, verify)
    host = _host(host_object, kname) if host_object is not None else None
    target, entry = _ptx_entry(ptx, kname)
    maps = tensor_map_params(entry)
    which = ", ".join(map(str, maps))
    if maps and host is None:
        raise UnsupportedLaunch(f"the PTX takes {len(maps)} tensor map(s) (TMA; entry parameter(s) {which}), which "
                                "the host object's launch hook fills: give the host object (run --host-object)")
    if maps and maps != list(range(len(entry.params) - len(maps), len(entry.params))):
        raise UnsupportedLaunch(f"tensor maps among the module's parameters (entry parameter(s) {which}): only "
                                "trailing ones, as NVIDIA's tool appends them, are mapped")
    return _launch(mod, kname, ptx, None, grid, args, block, memory, max_lanes, check_races,
                   _TensorMaps(host, target, entry) if maps else None, memcheck)


def read_ptx_file(path: str) -> str:
    """The text of a PTX file given to run (`run --ptx`); a `LaunchError` when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise LaunchError(f"cannot read PTX '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise LaunchError(f"cannot read PTX '{path}': not a text file") from None


def _host(path: str, kname: str):
    """The host object at `path`, which must have a launch hook for kernel `kname` (a `LaunchError` when it
    is no host object of NVIDIA's tool, or one for other kernels)."""
    from .host_object import read_host_object
    host = read_host_object(path)
    if kname not in host.hooks:
        raise LaunchError(f"host object '{path}' has no launch hook for '{kname}' "
                          f"(it has: {', '.join(sorted(host.hooks)) or 'none'})")
    return host


@dataclass(frozen=True)
class _TensorMaps:
    """Where a launch's tensor maps come from: the host object's hook for the parsed PTX entry."""
    host: object
    target: str
    entry: object

    def fill(self, prog, kname: str, params: list) -> list:
        """`params` (the ordinary parameters' values) with the tensor maps the hook writes appended."""
        from .host_object import with_tensor_maps
        from .machine import _param_bytes
        values = [_param_bytes(kp, v).tobytes() for kp, v in zip(prog.kparams, params)]
        return params + with_tensor_maps(self.host, kname, self.target, self.entry.params, values)[len(params):]


def _ptx_entry(ptx: str, kname: str):
    """(the `.target`, the parsed entry `kname`) of `ptx`."""
    from .parser import parse_ptx
    mod = parse_ptx(ptx)
    fn = mod.functions.get(kname)
    if fn is None or fn.kind != "entry":
        raise LaunchError(f"no entry function '{kname}' in the PTX (entries: {', '.join(mod.entries) or 'none'})")
    return mod.target, fn


def tensor_map_params(entry) -> list[int]:
    """Entry parameters (of a parsed entry) that are tensor maps (host_object.is_tensor_map)."""
    from .host_object import is_tensor_map
    return [i for i, p in enumerate(entry.params) if is_tensor_map(p)]


def _launch(mod, kname: str, ptx: str, cubin: bytes | None, grid, args, block, memory, max_lanes: int,
            check_races: bool, tensor_maps: _TensorMaps | None = None, memcheck: str = "strict") -> EmuRun:
    """Map `args` onto kernel `kname` of `ptx` (cuTile's convention, the module's types; the trailing tensor
    maps from `tensor_maps`), run it, copy back."""
    check_memcheck_mode(memcheck)
    prog = load_program(ptx, kname)
    g = tuple(int(x) for x in (grid if hasattr(grid, "__iter__") else (grid,)))
    if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
        raise LaunchError(f"bad grid {grid!r}")
    g = g + (1,) * (3 - len(g))
    blk = tuple(block) if block is not None else default_block(prog)
    memory = memory if memory is not None else DeviceMemory()
    args = list(args)
    hidden = len(tensor_map_params(tensor_maps.entry)) if tensor_maps else 0
    params, arrays = map_arguments(prog, args, memory, scalar_elem_types(mod, kname), hidden)
    _check_assumptions(mod, kname, params)
    if tensor_maps is not None:
        params = tensor_maps.fill(prog, kname, params)
    report = emulate_ptx(ptx, kname, g, blk, params, memory, max_lanes=max_lanes, check_races=check_races,
                         memcheck=memcheck)
    for i, addr in arrays:
        a = args[i]
        if a.flags.writeable:
            memory.copy_back(addr, a)
    return EmuRun(report, kname, ptx, cubin, blk, params, tuple(i for i, _ in arrays))
