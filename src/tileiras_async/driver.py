"""The compile driver: one kernel through the target checks, the tile-GPU pass list (tilegpu/passes) and code
generation (codegen/translate.py); modules to LLVM IR, PTX and cubins.  It only sequences them: the passes
decide, codegen translates."""
from __future__ import annotations

from .codegen.emitter import CodegenOptions, KernelEmitter, LoweringError
from .codegen.llvmir import ModuleIR
from .codegen.translate import empty_module_ptx, link_kernels_ptx, module_globals_ir, translate_kernel
from .deepstack import call_deep, nesting_depth
from .ir.capabilities import check_kernel
from .ir.core import Function, Module
from .ir.diagnostics import resolve_loc
from .limits import tile_limit_problem
from .symbols import COMPILE_FAILED, symbol_problem
from .targets import Target
from .tilegpu.decisions import loop_schedules
from .tilegpu.ir import KernelIR, clone_function
from .tilegpu.passes import IRPrinting, IRSnapshot, run_pipeline
from .codegen.host_object import ptxas_options
from .toolchain.ptxas import assemble


class CodegenUnavailable(Exception):
    """The module is valid, but this build cannot generate code for part of it.

    Besides the message, it says where and why (for failures.lowering_notes): the kernel, the op's
    name, its index in the kernel's walk order, its source location, and the lowering's reason.  `lines`,
    when given, are the real tool's own stderr lines for something it refuses too (printed as they are,
    without notes)."""

    def __init__(self, message: str, *, kernel: str = "", op_name: str = "", op_index: int | None = None,
                 location: str | None = None, reason: str = "", lines: list[str] | None = None):
        super().__init__(message)
        self.kernel, self.op_name, self.op_index = kernel, op_name, op_index
        self.location, self.reason = location, reason or message
        self.lines = lines


class UnemittableSymbol(CodegenUnavailable):
    """A kernel name NVIDIA's back end refuses; `detail` is what it prints before failing ("" or lines)."""

    def __init__(self, detail: str):
        super().__init__(COMPILE_FAILED)
        self.detail = detail


def emit_kernel(module: Module, fn: Function, options: CodegenOptions | None = None, *,
                printing: IRPrinting | None = None, snapshots: list[IRSnapshot] | None = None,
                module_ir: ModuleIR | None = None, source: str = "") -> KernelEmitter:
    """One kernel through the target checks, the tile-GPU passes and code generation (into `module_ir`, a
    fresh LLVM module by default); returns the finished emitter (its remarks and pipelines).  The IR snapshots
    `printing` asks for are appended to `snapshots`.  The caller's IR is never changed."""
    options = options or CodegenOptions()
    # what the target cannot run is refused as the real tool does, before any rewriting
    incompatible = check_kernel(module, fn, options.target)
    if incompatible is not None:
        raise CodegenUnavailable(incompatible.message, lines=incompatible.lines(), kernel=fn.name.decode(errors="replace"),
                                 op_name=f"cuda_tile.{incompatible.op.name}")
    problem = symbol_problem(fn.name)   # before any LLVM text: LLVM and ptxas would fail on it
    if problem is not None:
        raise UnemittableSymbol(problem)
    fn = clone_function(fn)   # the passes rewrite a private copy; the module itself is only read
    # an op's position in the kernel as the user's module has it (the notes name it without debug info)
    position = {id(c): i for i, c in enumerate(fn.walk())}
    k = KernelIR(module, fn, options, source=source)
    try:
        run = call_deep(nesting_depth(fn.body), run_pipeline, k, printing)   # passes may recurse per region
    except LoweringError as e:
        raise _unavailable(module, fn, e, position) from None
    if snapshots is not None:
        snapshots.extend(run.snapshots)
    too_big = tile_limit_problem(module, fn)   # after DCE, before code generation spends minutes and gigabytes
    if too_big:
        raise CodegenUnavailable(too_big)
    try:
        return translate_kernel(k, module_ir)
    except LoweringError as e:
        raise _unavailable(module, fn, e, position) from None


def resumed_kernel_ptx(k: KernelIR, after: str | None, tgt: Target, globals_module: Module | None = None) -> str:
    """PTX for a kernel read back from its IR text (tilegpu/parser.py) as pass `after` left it (None: before
    the first pass): the remaining passes, code generation, the link (with `globals_module`'s globals)."""
    try:
        call_deep(nesting_depth(k.fn.body), run_pipeline, k, after=after)
        ir = translate_kernel(k).module_ir.render()
    except LoweringError as e:
        raise CodegenUnavailable(_describe(k.module, k.fn, e)) from None
    globals_ir = module_globals_ir(globals_module) if globals_module is not None else ""
    return link_kernels_ptx([ir], [k.name], tgt, k.options.opt_level, globals_ir)


def kernel_schedules(module: Module, fn: Function, options: CodegenOptions | None = None, *,
                     source: str = "") -> list:
    """The schedule of every loop of a kernel, as schedule-loops makes it (the passes up to it only)."""
    k = KernelIR(module, clone_function(fn), options or CodegenOptions(), source=source)
    try:
        call_deep(nesting_depth(fn.body), run_pipeline, k, until="schedule-loops")   # passes may recurse
    except LoweringError as e:
        raise CodegenUnavailable(_describe(module, fn, e)) from None
    return loop_schedules(k.fn.body)


def kernel_llvm_ir(module: Module, fn: Function, options: CodegenOptions | None = None, *,
                   remarks: list | None = None, printing: IRPrinting | None = None,
                   snapshots: list[IRSnapshot] | None = None, schedules: list | None = None,
                   source: str = "") -> tuple[str, int]:
    """One kernel as a standalone LLVM module; returns (IR text, shared memory bytes).  Remarks are appended
    to `remarks`, the IR snapshots `printing` asks for to `snapshots`, the loops' schedules (the ones the
    code follows) to `schedules`."""
    em = emit_kernel(module, fn, options, printing=printing, snapshots=snapshots, source=source)
    if schedules is not None:
        schedules.extend(em.schedules)
    if remarks is not None:
        # a loop emitted in several versions reports the same decision once
        remarks.extend(dict.fromkeys(_as_remark(r, em.fn) for r in em.remarks))
    return em.module_ir.render(), em.shared_bytes


def _describe(module: Module, fn: Function, e: LoweringError) -> str:
    """'kernel: message' plus the op and its source location, for the user."""
    text = f"{fn.name.decode(errors='replace')}: {e}"
    if e.op is not None:
        loc = resolve_loc(module, e.op.loc)
        name = e.op.name if "." in e.op.name else f"cuda_tile.{e.op.name}"
        text += f" (op '{name}'" + (f" at {loc})" if loc else ")")
    return text


def _unavailable(module: Module, fn: Function, e: LoweringError, position: dict[int, int]) -> CodegenUnavailable:
    """The user-facing failure, with the op's identity kept apart for the notes (`position`: the index of each
    op of the passes' copy in the user's kernel; ops the passes made have none)."""
    op = e.op
    name = (op.name if "." in op.name else f"cuda_tile.{op.name}") if op is not None else ""
    index = position.get(id(op)) if op is not None else None
    loc = resolve_loc(module, op.loc) if op is not None else None
    return CodegenUnavailable(_describe(module, fn, e), kernel=fn.name.decode(errors="replace"), op_name=name,
                              op_index=index, location=str(loc) if loc else None, reason=str(e))


def _as_remark(r, fn: Function):
    """Lowerings record Remark objects; a plain string is a loop-pipelining note."""
    from .remarks import Remark
    if isinstance(r, Remark):
        return r
    return Remark("missed", "pipelining", "LoopNotPipelined", fn.name.decode(errors="replace"), str(r))


def module_llvm_ir(module: Module, options: CodegenOptions | None = None) -> list[str]:
    return [kernel_llvm_ir(module, fn, options)[0] for fn in module.functions]


def module_ptx(module: Module, tgt: Target, opt_level: int = 3, debug: str = "none",
               pipeline_stages: int | None = None) -> str:
    if not module.functions:
        return empty_module_ptx(tgt)
    opts = CodegenOptions(opt_level=opt_level, target=tgt.name, debug=debug)
    if pipeline_stages is not None:   # --num-stages
        opts.pipeline_stages = pipeline_stages
    irs = module_llvm_ir(module, opts)
    return link_kernels_ptx(irs, [f.name.decode() for f in module.functions], tgt, opt_level,
                            module_globals_ir(module))


def compile_module(module: Module, tgt: Target, opt_level: int = 3, *, timeout: float = 600) -> bytes:
    ptx = module_ptx(module, tgt, opt_level)
    return assemble(ptx, ptxas_options(ptx, tgt, opt_level), timeout=timeout)
