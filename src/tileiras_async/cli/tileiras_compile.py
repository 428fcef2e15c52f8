"""The drop-in's compile proper: input bytes and options in, a `DropInResult` out, nothing written.

Runs in the drop-in's own process on a cache miss, or in a worker of the compile server; both then
hand the result to `tileiras.deliver`, which prints and writes it.  Imports the whole compiler.
"""
from __future__ import annotations


from ..cache.fingerprint import compiled_with
from ..bytecode.reader import MAGIC
from ..frontend import EXIT_CONFIG, InputError, check_version_like_driver
from ..stages import CompileOptions, compile_in_process, stderr_line
from .dropin_result import DropInResult, opt_level


def produce(path: str, data: bytes, opts, *, expected=None) -> DropInResult:
    """Compile; `expected` (a cache Fingerprint) marks the result not cacheable when the compile ran
    another ptxas or libdevice than the fingerprint names (so no entry is filed under a wrong key)."""
    try:
        result = _produce(path, data, opts)
    except InputError as e:
        result = DropInResult(e.rc, "".join(f"{line}\n" for line in e.lines))
    if expected is not None and result.cacheable and not compiled_with(expected):
        result.cacheable = False
    return result


def _produce(path: str, data: bytes, opts) -> DropInResult:
    level = opt_level(opts)
    version = check_version_like_driver(data)
    gpu = opts.get("gpu-name")
    if gpu is None:
        shown = f"{version[0]}.{version[1]}" if version else "unknown"
        raise InputError([f"error: GPU architecture sm_0 is not supported by this version of tileiras. You may "
                          f"need a newer toolchain that supports this architecture (bytecode in file is version "
                          f"{shown})."], EXIT_CONFIG)
    if opts.get("apply-controls") and data.startswith(MAGIC):   # NVIDIA's: after the target, before parsing
        raise InputError(["error: --apply-controls is not supported on this platform"], EXIT_CONFIG)
    if opts.get("l"):
        return _libraries_refused(path, data, opts)
    options = CompileOptions(gpu, level, lineinfo=bool(opts.get("lineinfo")),
                             device_debug=bool(opts.get("device-debug")), num_stages=_num_stages(opts),
                             register_caps=bool(opts.get("register-caps")))
    print_ir = _print_ir(opts)
    want_trace = opts.get("schedule-trace-file") is not None
    remark_filter = _remark_filter(opts)
    result = compile_in_process(path, data, options, with_schedules=want_trace, with_remarks=bool(remark_filter),
                                print_ir=print_ir, warn_hints=bool(opts.get("Wunsupported-hints")),
                                error_on_hints=bool(opts.get("Werr-hints")))
    dumps = list(result.ir_dumps) if print_ir is not None else []
    warnings = "".join(stderr_line(d) + "\n" for d in result.warnings)
    if not result.ok:
        stderr = warnings + result.tool_stderr
        if stderr and not stderr.endswith("\n"):
            stderr += "\n"
        stderr += "".join(stderr_line(d) + "\n" for d in result.diagnostics)
        return DropInResult(result.exit_code, stderr, cacheable=not result.transient, ir_dumps=dumps)
    trace = None
    if want_trace:
        from ..schedule.report import schedule_trace_json
        trace = schedule_trace_json(result.schedules) + "\n"
    remarks = _render_remarks(opts, [r for r in result.remarks if remark_filter.wants(r)]) if remark_filter else None
    return DropInResult(0, warnings, result.cubin, remarks, trace, ir_dumps=dumps)


def _libraries_refused(path: str, data: bytes, opts) -> DropInResult:
    """-l: NVIDIA's tool reads and verifies the module, then needs the simt preview and loads each library;
    tileiras-async reads no tile library (they go with SIMT functions of 13.5 bytecode)."""
    import os
    from ..stages import ParseRequest, parse
    from ..frontend import EXIT_CODEGEN
    parsed = parse(ParseRequest(path, data))
    if not parsed.ok:
        return DropInResult(parsed.exit_code, "".join(stderr_line(d) + "\n" for d in parsed.diagnostics))
    if "simt" not in opts.get("preview", []):
        message = "libraries require the 'simt' preview feature"
    elif not all(os.path.exists(lib) for lib in opts.get("l")):
        message = "failed to open tile library: No such file or directory"
    else:
        message = "tile libraries are not supported by tileiras-async"
    return DropInResult(EXIT_CODEGEN, f"error: {message}\n", cacheable=False)


def _num_stages(opts) -> int:
    raw = opts.get("num-stages")
    if raw is None:
        return 0
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if not 1 <= n <= 8:
        raise InputError([f"error: invalid number of pipeline stages: {raw} (expected 1 to 8)"], EXIT_CONFIG)
    return n


def _print_ir(opts):
    from ..stages import PrintIR, check_print_ir, prepare_ir_dir
    spec = PrintIR(list(opts.get("print-ir-before", [])), list(opts.get("print-ir-after", [])),
                   bool(opts.get("print-ir-after-all")), bool(opts.get("print-ir-after-change")),
                   bool(opts.get("print-debuginfo")), bool(opts.get("print-llvm")))
    if not spec.active:
        return None
    problem = check_print_ir(spec)
    if problem:
        raise InputError([f"error: {problem}"], EXIT_CONFIG)
    problem = prepare_ir_dir(opts.get("print-ir-dir"))
    if problem:
        raise InputError([f"error: {problem}"], EXIT_CONFIG)
    return spec


def _remark_filter(opts):
    from ..remarks import RemarkFilter
    return RemarkFilter.from_options(opts.get("remarks"), passed=opts.get("remarks-passed"),
                                     missed=opts.get("remarks-missed"), failed=opts.get("remarks-failed"),
                                     analysis=opts.get("remarks-analysis"))


def _render_remarks(opts, remarks) -> str:
    """YAML for --remarks-output-file (the default format there), else one line per remark (stderr)."""
    from ..remarks import to_command_line, to_yaml
    fmt = opts.get("remark-format") or ("yaml" if opts.get("remarks-output-file") else "command-line")
    return to_yaml(remarks) if fmt == "yaml" else to_command_line(remarks)
