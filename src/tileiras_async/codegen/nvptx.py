"""LLVM IR text -> PTX with llvmlite's NVPTX back end (libdevice linked when math functions are used)."""
from __future__ import annotations

import contextlib
import re
import threading
from functools import lru_cache

from ..toolchain.discovery import find_libdevice
from ..targets import Target

_INIT_LOCK = threading.Lock()
_initialized = False


class PtxCheckError(Exception):
    """The back end produced PTX that would not assemble (an internal compiler error)."""


def _init() -> None:
    global _initialized
    with _INIT_LOCK:
        if _initialized:
            return
        import llvmlite.binding as llvm
        for name in ("initialize_all_targets", "initialize_all_asmprinters"):
            fn = getattr(llvm, name, None)
            if fn is not None:
                fn()
        # libdevice's sqrtf must be the IEEE square root, as in nvcc's default (prec-sqrt=1)
        llvm.set_option("", "-nvvm-reflect-add=__CUDA_PREC_SQRT=1")
        _initialized = True


def ptx_feature(tgt: Target) -> str:
    major, minor = tgt.emitted_ptx_isa
    return f"+ptx{major}{minor}"


@lru_cache(maxsize=None)
def _target_machine(cpu: str, features: str, opt: int):
    import llvmlite.binding as llvm
    target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    return target.create_target_machine(cpu=cpu, features=features, opt=opt)


@lru_cache(maxsize=1)
def _libdevice_bytes() -> bytes:
    return find_libdevice().read_bytes()


_SUBSETS: dict[tuple[frozenset[str], str, str], bytes] = {}
_SUBSETS_LOCK = threading.Lock()


def _libdevice_subset(names: frozenset[str], triple: str, data_layout: str, tm) -> bytes:
    """libdevice's definitions of `names` and of all they use, as bitcode. Parsing the whole library (~600
    functions) was the largest part of a warm worker's back end for a kernel with one math call; a process
    now parses it once per set of functions its kernels call (the same code is linked either way)."""
    key = (names, triple, data_layout)
    with _SUBSETS_LOCK:
        cached = _SUBSETS.get(key)
    if cached is None:
        import llvmlite.binding as llvm
        lib = llvm.parse_bitcode(_libdevice_bytes())
        lib.triple = triple
        lib.data_layout = data_layout
        for f in lib.functions:
            if not f.is_declaration and f.name not in names:
                f.linkage = "internal"
        _drop_unused(lib, tm)
        cached = lib.as_bitcode()
        with _SUBSETS_LOCK:
            _SUBSETS[key] = cached
    return cached


def _drop_unused(module, tm) -> None:
    """Delete the internal functions nothing calls (all of libdevice but what the kernels use) before the
    optimization pipeline, which would otherwise simplify every one of them before its own dead-code
    pass: 2-3x the back end's time for a kernel that calls one math function (the PTX is the same)."""
    import llvmlite.binding as llvm
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(module, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0)))


def warm_up(targets: tuple[str, ...] = (), opt_level: int = 3) -> None:
    """Fill the back end's caches (LLVM initialisation, libdevice, target machines) ahead of the first compile,
    as long-lived workers do; failures surface later, on the compile that needs the missing piece."""
    from ..targets import target
    _init()
    with contextlib.suppress(Exception):
        _libdevice_bytes()
    for name in targets:
        with contextlib.suppress(Exception):
            tgt = target(name)
            _target_machine(tgt.ptx_target, ptx_feature(tgt), min(opt_level, 3))


def llvm_to_ptx(ir_texts: str | list[str], tgt: Target, opt_level: int = 3, *,
                kernels: tuple[str, ...] = ()) -> str:
    """LLVM IR (one module, or several that are linked first) -> PTX."""
    import llvmlite.binding as llvm
    _init()
    texts = [ir_texts] if isinstance(ir_texts, str) else list(ir_texts)
    module = _link_all([llvm.parse_assembly(text) for text in texts])
    if any(f.name.startswith("__nv_") and f.is_declaration for f in module.functions):
        # our IR is verified before libdevice joins it: verifying libdevice's ~600 functions took as long as
        # the rest of a small kernel's back end, and NVIDIA's bitcode needs no check of ours
        module.verify()
        tm = _target_machine(tgt.ptx_target, ptx_feature(tgt), min(opt_level, 3))
        called = frozenset(f.name for f in module.functions if f.name.startswith("__nv_") and f.is_declaration)
        lib = llvm.parse_bitcode(_libdevice_subset(called, module.triple, module.data_layout, tm))
        module.link_in(lib)
        for f in module.functions:
            # only the kernels stay visible; unused libdevice code is then dropped
            if not f.is_declaration and f.name not in kernels:
                f.linkage = "internal"
        _drop_unused(module, tm)
    else:
        module.verify()
    tm = _target_machine(tgt.ptx_target, ptx_feature(tgt), min(opt_level, 3))
    if opt_level > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
        pb = llvm.create_pass_builder(tm, pto)
        pm = pb.getModulePassManager()
        pm.run(module, pb)
    ptx = tm.emit_assembly(module)
    check_ptx(ptx)
    return ptx


def _link_all(modules: list):
    """Link modules pairwise, in order: each link costs the size of its destination, so linking
    one at a time into a growing module is quadratic in the number of kernels."""
    while len(modules) > 1:
        for dest, src in zip(modules[::2], modules[1::2]):
            dest.link_in(src)
        modules = modules[::2]
    return modules[0]


_EXTERN_LLVM = re.compile(r"\.extern\s+\.func[^;]*?\b(llvm\.[\w.]+)")


def check_ptx(ptx: str) -> None:
    """Catch what LLVM lets through silently: a mistyped intrinsic becomes an extern call ptxas rejects."""
    m = _EXTERN_LLVM.search(ptx)
    if m:
        raise PtxCheckError(f"internal compiler error: intrinsic '{m.group(1)}' was not lowered by the "
                            f"NVPTX back end")
    m = re.search(r"\.extern\s+\.global[^;]*?\b([\w$.]+)\s*(\[\d*\])?;", ptx)
    if m:
        raise PtxCheckError(f"internal compiler error: global '{m.group(1)}' is used but not defined")
    m = re.search(r"\.extern\s+\.func[^;]*?\b(__nv_\w+)", ptx)
    if m:
        raise PtxCheckError(f"internal compiler error: libdevice function '{m.group(1)}' was not linked")
