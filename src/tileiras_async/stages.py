"""The compiler as a sequence of stages over serialisable messages.

Every stage is a plain function from one msgspec Struct to another, so the
same code runs in-process (the drop-in `tileiras`) or in worker processes
(the batch pipeline), and nothing but bytes crosses a process boundary.  The
pipeline only knows these message types and stage names, never op semantics.

    parse    ParseRequest    -> ParsedModule      read + verify; each kernel as data (irdata.KernelData)
    schedule LowerRequest    -> KernelSchedule    one kernel's loops -> modulo schedules (reports)
    lower    LowerRequest    -> LoweredKernel     one kernel -> LLVM IR (layouts, control flow)

The module's bytes are read once, by parse; the later stages get the kernel they work on as data.
    codegen  CodegenRequest  -> PtxModule         the module's kernels -> PTX (llvmlite NVPTX)
    assemble AssembleRequest -> CubinModule       PTX -> cubin (ptxas)
"""
from __future__ import annotations

import time

import msgspec

from .bytecode.errors import BytecodeError  # noqa: F401  (documented failure type of parse)
from .diagnostics import StageDiagnostic
from .irdata import KernelData
from .remarks import Remark
from .toolchain.resources import KernelResources, kernel_resources
from .schedule.report import ScheduleReport


class CompileOptions(msgspec.Struct, frozen=True):
    gpu_name: str
    opt_level: int = 3
    num_warps: int = 4
    lineinfo: bool = False
    device_debug: bool = False
    num_stages: int = 0               # software-pipeline stages of K-loops (0: the default, 4; 1: none)
    register_caps: bool = False       # --register-caps: try .maxnreg caps for occupancy after ptxas


class PrintIR(msgspec.Struct, frozen=True):
    """Which tile-GPU IR snapshots to take (--print-ir-before=P, --print-ir-after=P, --print-ir-after-all,
    --print-ir-after-change), with source locations (--print-debuginfo), and whether the kernel's LLVM IR is
    one more snapshot (--print-llvm)."""
    before: list[str] = []
    after: list[str] = []
    after_all: bool = False
    after_change: bool = False
    debuginfo: bool = False
    llvm: bool = False

    @property
    def active(self) -> bool:
        return bool(self.before or self.after or self.after_all or self.after_change or self.wants_llvm)

    @property
    def wants_llvm(self) -> bool:
        """--print-llvm, or --print-ir-after=emit-llvm (the LLVM IR is the snapshot after that step)."""
        return self.llvm or LLVM_DUMP in self.after


LLVM_DUMP = "emit-llvm"   # the pass name the LLVM IR snapshot is printed after (the last step of lowering)


class IRDump(msgspec.Struct, frozen=True):
    kernel: str
    when: str                         # before | after
    pass_name: str
    text: str

    def banner(self) -> str:
        """MLIR's dump header: `// -----// IR Dump After assign-layouts (kernel) //----- //`."""
        return f"// -----// IR Dump {self.when.title()} {self.pass_name} ({self.kernel}) //----- //"

    def file_name(self, stem: str, seq: int) -> str:
        """Its file under --print-ir-dir: ordered by `seq` (the dump's position in the kernel's run)."""
        suffix = "ll" if self.pass_name == LLVM_DUMP else "tilegpu"
        return f"{stem}.{self.kernel}.{seq:02d}-{self.when}-{self.pass_name}.{suffix}"


def check_print_ir(print_ir: PrintIR) -> str | None:
    """An error message when --print-ir-before/-after names a pass that does not exist (--print-ir-after also
    takes emit-llvm: the LLVM IR)."""
    from .tilegpu.passes import PASS_NAMES
    for flag, names, also in (("--print-ir-before", print_ir.before, ()),
                              ("--print-ir-after", print_ir.after, (LLVM_DUMP,))):
        for name in names:
            if name not in PASS_NAMES and name not in also:
                return f"unknown pass '{name}' for {flag} (passes: {', '.join(PASS_NAMES + also)})"
    return None


def prepare_ir_dir(directory: str | None) -> str | None:
    """Create --print-ir-dir (like an output folder); an error message when it cannot be one."""
    import os
    if directory is None:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        return f"--print-ir-dir '{directory}' cannot be created: {e.strerror or e}"
    if not os.path.isdir(directory):
        return f"--print-ir-dir '{directory}' is not a directory"
    return None


def write_ir_dumps(dumps: list[IRDump], stem: str, directory: str | None, stream) -> None:
    """IR snapshots to `stream` (banner + text each) or, with a directory, one file each."""
    import os
    seqs: dict[str, int] = {}
    for d in dumps:
        if directory is None:
            stream.write(d.banner() + "\n" + d.text)
            continue
        seq = seqs[d.kernel] = seqs.get(d.kernel, 0) + 1
        with open(os.path.join(directory, d.file_name(stem, seq)), "w", encoding="utf-8") as f:
            f.write(d.text)


class ParseRequest(msgspec.Struct, frozen=True):
    path: str
    data: bytes
    tool: str = "tileiras"            # which real tool's wording diagnostics follow
    warn_hints: bool = False          # tileiras -Wunsupported-hints: warnings about optimization hints
    error_on_hints: bool = False      # tileiras -Werr-hints: with warn_hints, such a warning fails the module


class ParsedModule(msgspec.Struct, frozen=True):
    path: str
    ok: bool
    version: str = ""
    kernels: list[str] = []
    kernel_ir: list[KernelData] = []  # the kernels (in module order) as the later stages get them
    globals_ir: str = ""              # the module's globals as LLVM IR, linked into every target's PTX
    diagnostics: list[StageDiagnostic] = []
    exit_code: int = 0
    elapsed_s: float = 0.0
    warnings: list[StageDiagnostic] = []   # printed whether or not the module compiles (-Wunsupported-hints)


class LowerRequest(msgspec.Struct, frozen=True):
    path: str
    kernel: KernelData
    options: CompileOptions
    print_ir: PrintIR | None = None

    @property
    def name(self) -> str:
        return self.kernel.name.decode(errors="replace")


class LoweredKernel(msgspec.Struct, frozen=True):
    kernel: str
    ok: bool
    llvm_ir: str = ""
    shared_bytes: int = 0
    remarks: list[Remark] = []
    diagnostics: list[StageDiagnostic] = []
    tool_stderr: str = ""             # what the back end printed before failing, verbatim
    elapsed_s: float = 0.0
    ir_dumps: list[IRDump] = []
    schedules: list[ScheduleReport] = []   # every loop's schedule, the one the code follows


class KernelSchedule(msgspec.Struct, frozen=True):
    kernel: str
    reports: list[ScheduleReport] = []
    elapsed_s: float = 0.0


class CodegenRequest(msgspec.Struct, frozen=True):
    path: str
    kernels: list[LoweredKernel]
    options: CompileOptions
    globals_ir: str = ""


class PtxModule(msgspec.Struct, frozen=True):
    ok: bool
    ptx: str = ""
    diagnostics: list[StageDiagnostic] = []
    tool_stderr: str = ""
    elapsed_s: float = 0.0


class AssembleRequest(msgspec.Struct, frozen=True):
    ptx: str
    options: CompileOptions
    timeout_s: float = 600.0
    resource_report: bool = False     # remarks: each kernel's resources (read from the cubin) and register caps


class CubinModule(msgspec.Struct, frozen=True):
    ok: bool
    cubin: bytes = b""
    remarks: list[Remark] = []
    diagnostics: list[StageDiagnostic] = []
    tool_stderr: str = ""
    exit_code: int = 0
    elapsed_s: float = 0.0
    transient: bool = False           # failed for a reason outside the input (tool missing, timed out, killed)
    ptx: str = ""                     # the PTX assembled, when not the request's (register caps added)
    resources: dict[str, KernelResources] = {}   # per kernel, read from the cubin (toolchain/resources.py)


def _error(message: str, location: str | None = None) -> StageDiagnostic:
    return StageDiagnostic("error", message, location)


def _from_stderr_line(line: str) -> StageDiagnostic:
    """A real-tool stderr line as a diagnostic; a located one ("#cuda_tile.di_loc<...>: error: ...") is kept whole."""
    return _error(line.removeprefix("error: "))


def stderr_line(d: StageDiagnostic) -> str:
    """The line the drop-in prints for a diagnostic (located ones already are whole lines)."""
    return d.message if d.message.startswith("#cuda_tile.di_loc<") else f"{d.severity}: {d.message}"


def _diagnostic(line: str) -> StageDiagnostic:
    """A front-end line back as a diagnostic (`stderr_line` prints it the same again)."""
    if line.startswith("warning: "):
        return StageDiagnostic("warning", line.removeprefix("warning: "))
    return StageDiagnostic("error", line.removeprefix("error: "))


def parse(req: ParseRequest) -> ParsedModule:
    """Read and verify; on failure the diagnostics are the real tool's stderr lines."""
    from .frontend import InputError, check_version_like_driver, load
    t0 = time.perf_counter()
    trailer = ("input does not correspond to Tile IR bytecode" if req.tool == "tileiras"
               else "failed to read provided Tile IR bytecode")
    hint_warnings: list[str] | None = [] if req.warn_hints else None
    try:
        if req.tool == "tileiras":
            check_version_like_driver(req.data)
        module = load(req.data, trailer, with_debug_locations=req.tool != "tileiras", hint_warnings=hint_warnings,
                      error_on_hints=req.error_on_hints)
    except InputError as e:
        diags = [_diagnostic(line) for line in e.lines]
        return ParsedModule(req.path, False, diagnostics=diags, exit_code=e.rc,
                            elapsed_s=time.perf_counter() - t0)
    from .codegen.translate import module_globals_ir
    from .irdata import kernel_data
    major, minor, _tag = module.version
    return ParsedModule(req.path, True, f"{major}.{minor}", [f.name.decode(errors="replace") for f in module.functions],
                        [kernel_data(module, f) for f in module.functions], module_globals_ir(module),
                        elapsed_s=time.perf_counter() - t0,
                        warnings=[_diagnostic(w) for w in hint_warnings or []])


def lower(req: LowerRequest) -> LoweredKernel:
    from .driver import CodegenUnavailable, kernel_llvm_ir
    from .irdata import kernel_module
    t0 = time.perf_counter()
    module = kernel_module(req.kernel)
    fn = module.functions[0]
    remarks: list[Remark] = []
    snapshots: list = []
    schedules: list = []
    try:
        ir, shared = kernel_llvm_ir(module, fn, codegen_options(req.options), remarks=remarks,
                                    printing=_printing(req.print_ir), snapshots=snapshots, schedules=schedules,
                                    source=req.path)
    except CodegenUnavailable as e:
        detail = getattr(e, "detail", None)   # driver.UnemittableSymbol: the back end's own text
        if e.lines:   # refused as the real tool refuses it: its lines, nothing added
            diagnostics = [_from_stderr_line(line) for line in e.lines]
        elif detail is not None:   # a symbol the real back end refuses: its final line, nothing added
            diagnostics = [_error(str(e))]
        else:
            from .failures import lowering_notes
            diagnostics = [_error(str(e)), *lowering_notes(e, req.options.gpu_name)]
        return LoweredKernel(req.name, False, diagnostics=diagnostics, tool_stderr=detail or "",
                             elapsed_s=time.perf_counter() - t0)
    dumps = [IRDump(req.name, s.when, s.pass_name, s.text) for s in snapshots]
    if req.print_ir is not None and req.print_ir.wants_llvm:
        dumps.append(IRDump(req.name, "after", LLVM_DUMP, ir if ir.endswith("\n") else ir + "\n"))
    return LoweredKernel(req.name, True, ir, shared, remarks, elapsed_s=time.perf_counter() - t0, ir_dumps=dumps,
                         schedules=schedules)


def codegen_options(options: CompileOptions):
    """What the passes and code generation are told, from the stage message's options."""
    from .tilegpu.options import CodegenOptions
    debug = "full" if options.device_debug else ("lineinfo" if options.lineinfo else "none")
    out = CodegenOptions(num_warps=options.num_warps, opt_level=options.opt_level, target=options.gpu_name,
                         debug=debug)
    if options.num_stages:
        out.pipeline_stages = options.num_stages
    return out


def _printing(print_ir: PrintIR | None):
    if print_ir is None:
        return None
    from .tilegpu.passes import IRPrinting
    return IRPrinting(frozenset(print_ir.before), frozenset(print_ir.after) - {LLVM_DUMP}, print_ir.after_all,
                      print_ir.after_change, print_ir.debuginfo)


def schedule(req: LowerRequest) -> KernelSchedule:
    """Every loop's schedule in one kernel, as the pass pipeline makes it (what --schedule-trace-file and the
    dashboard show: the schedule the emitted code follows)."""
    from .driver import CodegenUnavailable, kernel_schedules
    from .irdata import kernel_module
    t0 = time.perf_counter()
    module = kernel_module(req.kernel)   # this kernel alone, as data from the parse stage
    try:
        reports = kernel_schedules(module, module.functions[0], codegen_options(req.options), source=req.path)
    except CodegenUnavailable:
        reports = []
    return KernelSchedule(req.name, reports, time.perf_counter() - t0)


def codegen(req: CodegenRequest) -> PtxModule:
    from .codegen.translate import empty_module_ptx, link_kernels_ptx
    from .codegen.nvptx import PtxCheckError
    from .targets import target
    t0 = time.perf_counter()
    tgt = target(req.options.gpu_name)
    failed = [d for k in req.kernels if not k.ok for d in k.diagnostics]
    if failed:
        stderr = "".join(k.tool_stderr + "\n" for k in req.kernels if not k.ok and k.tool_stderr)
        return PtxModule(False, diagnostics=failed, tool_stderr=stderr, elapsed_s=time.perf_counter() - t0)
    try:
        ptx = (link_kernels_ptx([k.llvm_ir for k in req.kernels], [k.kernel for k in req.kernels], tgt,
                                req.options.opt_level, req.globals_ir) if req.kernels else empty_module_ptx(tgt))
    except PtxCheckError as e:
        return PtxModule(False, diagnostics=[_error(str(e))], elapsed_s=time.perf_counter() - t0)
    return PtxModule(True, ptx, elapsed_s=time.perf_counter() - t0)


def trims_registers(options: CompileOptions) -> bool:
    """Whether assembly tries register caps for occupancy (toolchain/occupancy.py): asked for, at -O3.  Not by
    default: on an H100 no capped kernel ran faster and rmsnorm_bf16_1024 (2048 rows) ran 13% slower with
    12 CTAs per SM instead of 10 (bench/results/gpu_h100_ab.json)."""
    return options.register_caps and options.opt_level >= 3 and not options.device_debug


def cap_remarks(caps) -> list[Remark]:
    return [Remark("passed" if c.kept else "missed", "resources", "OccupancyRegisterCap", c.kernel, c.describe())
            for c in caps]


def resource_remarks(resources: dict[str, KernelResources]) -> list[Remark]:
    """Per kernel: its resource line (an analysis remark), and a missed remark when it spills."""
    out = []
    for kernel, r in resources.items():
        out.append(Remark("analysis", "resources", "ResourceUsage", kernel, r.summary()))
        if r.spill_store_bytes or r.spill_load_bytes:
            out.append(Remark("missed", "resources", "RegisterSpills", kernel,
                              f"registers spilled to local memory ({r.spill_store_bytes} bytes stored, "
                              f"{r.spill_load_bytes} bytes loaded)"))
    return out


def assembled(req: AssembleRequest, cubin: bytes, ptx: str, caps, elapsed_s: float, tool_stderr: str = "") -> CubinModule:
    """A successful assembly: the cubin, its kernels' resources (the cubin parsed once) and, when asked for,
    the resource and register-cap remarks.  `ptx` is what ptxas assembled last.  A cubin that cannot be read
    (only a stand-in ptxas writes one) has no resources: they are a report, the cubin is the output."""
    try:
        resources = kernel_resources(req.options.gpu_name, cubin, ptx)
    except ValueError:
        resources = {}
    remarks = resource_remarks(resources) + cap_remarks(caps) if req.resource_report else []
    return CubinModule(True, cubin, remarks, tool_stderr=tool_stderr, elapsed_s=elapsed_s,
                       ptx=ptx if ptx != req.ptx else "", resources=resources)


def assemble(req: AssembleRequest) -> CubinModule:
    from .toolchain.occupancy import OccupancyTrim
    from .targets import target
    from .codegen.host_object import ptxas_options
    from .toolchain import PtxasError, ToolchainError
    from .toolchain import assemble as ptxas
    t0 = time.perf_counter()
    tgt = target(req.options.gpu_name)
    opts = ptxas_options(req.ptx, tgt, req.options.opt_level)
    try:
        cubin = ptxas(req.ptx, opts, timeout=req.timeout_s)
        ptx, caps = req.ptx, []
        if trims_registers(req.options):
            trim = OccupancyTrim(req.options.gpu_name, req.ptx, cubin)
            while (text := trim.next_ptx()) is not None:
                try:
                    trim.feed(ptxas(text, opts, timeout=req.timeout_s))
                except ToolchainError:
                    break       # ptxas failed or timed out on the capped PTX: the code as first assembled
            ptx, cubin, caps = trim.result()
    except PtxasError as e:
        from .failures import ptxas_notes
        return CubinModule(False, diagnostics=[_error("failed to compile Tile IR program"),
                                               *ptxas_notes(e.stderr, req.ptx, req.options.gpu_name)],
                           tool_stderr=e.stderr, exit_code=e.rc, elapsed_s=time.perf_counter() - t0,
                           transient=e.ptxas_rc is None or e.ptxas_rc <= 0)
    except ToolchainError as e:
        return CubinModule(False, diagnostics=[_error(str(e).removeprefix("error: "))], exit_code=2,
                           elapsed_s=time.perf_counter() - t0, transient=True)
    return assembled(req, cubin, ptx, caps, time.perf_counter() - t0)


STAGES = {"parse": parse, "schedule": schedule, "lower": lower, "codegen": codegen, "assemble": assemble}


class CompileResult(msgspec.Struct, frozen=True):
    ok: bool
    cubin: bytes = b""
    ptx: str = ""
    schedules: list[ScheduleReport] = []
    remarks: list[Remark] = []
    diagnostics: list[StageDiagnostic] = []
    tool_stderr: str = ""
    exit_code: int = 0
    ir_dumps: list[IRDump] = []
    transient: bool = False           # see CubinModule.transient: such a failure is not cached
    warnings: list[StageDiagnostic] = []   # the front end's (-Wunsupported-hints), printed before anything else
    resources: dict[str, KernelResources] = {}   # per kernel (CubinModule.resources): cached with the cubin


def compile_in_process(path: str, data: bytes, options: CompileOptions, *, with_schedules: bool = False,
                       with_remarks: bool = False, print_ir: PrintIR | None = None, warn_hints: bool = False,
                       error_on_hints: bool = False) -> CompileResult:
    """All stages one after another in this process (what the drop-in does for one file)."""
    from .frontend import EXIT_CODEGEN
    parsed = parse(ParseRequest(path, data, warn_hints=warn_hints, error_on_hints=error_on_hints))
    if not parsed.ok:
        return CompileResult(False, diagnostics=parsed.diagnostics, exit_code=parsed.exit_code)
    warnings = parsed.warnings
    requests = [LowerRequest(path, k, options, print_ir) for k in parsed.kernel_ir]
    lowered = [lower(req) for req in requests]
    schedules = [r for k in lowered for r in k.schedules] if with_schedules else []
    dumps = [d for k in lowered for d in k.ir_dumps]
    ptx = codegen(CodegenRequest(path, lowered, options, parsed.globals_ir))
    if not ptx.ok:
        return CompileResult(False, diagnostics=ptx.diagnostics, tool_stderr=ptx.tool_stderr, exit_code=EXIT_CODEGEN,
                             ir_dumps=dumps, warnings=warnings)
    cubin = assemble(AssembleRequest(ptx.ptx, options, resource_report=with_remarks))
    if not cubin.ok:
        return CompileResult(False, ptx=ptx.ptx, diagnostics=cubin.diagnostics, tool_stderr=cubin.tool_stderr,
                             exit_code=cubin.exit_code, transient=cubin.transient, warnings=warnings)
    remarks = [r for k in lowered for r in k.remarks] + list(cubin.remarks) if with_remarks else []
    return CompileResult(True, cubin.cubin, cubin.ptx or ptx.ptx, schedules, remarks, ir_dumps=dumps,
                         warnings=warnings, resources=cubin.resources)
