"""`tileiras`: a drop-in for NVIDIA's CUDA Tile IR optimizing assembler (same options, messages, exit codes)."""
from __future__ import annotations

import os
import sys

from .. import __version__
from ..targets import GPU_NAMES
from ..frontend import (EXIT_CONFIG, EXIT_USAGE, SUPPORTED_VERSIONS, InputError, check_version_like_driver,
                        read_input_file)
from .common import guarded_main, print_lines
from .options import Option, OptionError, OptionParser

PROG = "tileiras"
DEFAULT_OUTPUT = "elf.o"
PREVIEW_FEATURES: tuple[str, ...] = ()  # none yet

OPTIONS = [
    Option("O", "Alias for --opt-level", kind="value", prefix=True, alias_of="opt-level"),
    Option("opt-level", "Specify optimization level. Default Value: 3.", kind="value", meta="N"),
    Option("arch", "Alias for --gpu-name", kind="enum", alias_of="gpu-name"),
    Option("gpu-name", "Specify name of NVIDIA GPU to generate code for.", kind="enum",
           values=tuple((g, f"SM {g[3:]}") for g in GPU_NAMES)),
    Option("device-debug", "Generate debug information (if present in the input bytecode)"),
    Option("g", "Alias for --device-debug", alias_of="device-debug"),
    Option("lineinfo", "Generate line-number information (if present in the input bytecode)"),
    Option("help", "Display available options"),
    Option("host-arch", "Specify the architecture for the generated host code.", kind="enum",
           values=(("x86_64", "x86_64"), ("aarch64", "aarch64"))),
    Option("host-os", "Specify the operating system for the generated host code.", kind="enum",
           values=(("linux", "linux"), ("windows", "windows"))),
    Option("l", "Tile libraries to load. Requires the SIMT preview.", kind="list", meta="path"),
    Option("list-versions", "List all supported bytecode versions and exit"),
    Option("o", "Alias for --output-file", kind="value", alias_of="output-file"),
    Option("output-file", "Specify name of output file.", kind="value", meta="file"),
    Option("preview", "Enable one or more named preview features", kind="list", meta="feature[,feature...]"),
    Option("remark-format", "Specify the format for remark output", kind="enum",
           values=(("command-line", "Print remarks to command-line"), ("yaml", "Write remarks to YAML file"))),
    Option("remarks", "Enable all remark types (passed, missed, failed, analysis) for the specified category",
           kind="enum", values=(("none", "Disable all remarks"), ("all", "Show all remarks"),
                                ("memory", "Show memory-related remarks"),
                                ("tensorcore", "Show tensor core remarks"))),
    Option("remarks-passed", "Enable passed remarks for the given categories", kind="value", meta="category"),
    Option("remarks-missed", "Enable missed remarks for the given categories", kind="value", meta="category"),
    Option("remarks-failed", "Enable failed remarks for the given categories", kind="value", meta="category"),
    Option("remarks-analysis", "Enable analysis remarks for the given categories", kind="value",
           meta="category"),
    Option("remarks-output-file", "Write remarks to this file", kind="value", meta="file"),
    Option("schedule-trace-file", "Write each loop's modulo schedule as Chrome-trace JSON (Perfetto) to this file",
           kind="value", meta="file"),
    Option("num-stages", "Software-pipeline stages of K-loops (1: no pipelining). Default Value: 4.", kind="value",
           meta="N"),
    Option("print-ir-after-all", "Print the tile-GPU IR after every pass (to stderr, or to --print-ir-dir)"),
    Option("print-ir-after", "Print the tile-GPU IR after the named passes", kind="list", meta="pass[,pass...]"),
    Option("print-ir-before", "Print the tile-GPU IR before the named passes", kind="list", meta="pass[,pass...]"),
    Option("print-ir-dir", "Write the IR snapshots to files in this directory instead of stderr", kind="value",
           meta="dir"),
    Option("sanitize", "Instrument generated code (memcheck)", kind="enum",
           values=(("memcheck", "Check global memory accesses"),)),
    Option("version", "Display the version of this program"),
]

PARSER = OptionParser(PROG, "tileiras: CUDA Tile IR optimizing assembler (tileiras-async)",
                      "tileiras [options] <tile bytecode file>", OPTIONS)


def version_text() -> str:
    return (f"tileiras: CUDA Tile IR optimizing assembler (tileiras-async {__version__})\n"
            f"Supported bytecode versions: {', '.join(SUPPORTED_VERSIONS)}\n")


def _opt_level(opts) -> int:
    raw = opts.get("opt-level", "3")
    try:
        level = int(raw)
    except ValueError:
        level = None
    if level is None or not 0 <= level <= 3:
        raise InputError([f"error: invalid optimization level: {raw}"], EXIT_CONFIG)
    return level


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
    from ..stages import PrintIR, check_print_ir
    if not (opts.get("print-ir-after-all") or opts.get("print-ir-after") or opts.get("print-ir-before")):
        return None
    spec = PrintIR(list(opts.get("print-ir-before", [])), list(opts.get("print-ir-after", [])),
                   bool(opts.get("print-ir-after-all")))
    problem = check_print_ir(spec)
    if problem:
        raise InputError([f"error: {problem}"], EXIT_CONFIG)
    directory = opts.get("print-ir-dir")
    if directory is not None and not os.path.isdir(directory):
        raise InputError([f"error: --print-ir-dir '{directory}' is not a directory"], EXIT_CONFIG)
    return spec


def _check_unsupported(opts) -> None:
    if opts.get("l"):
        raise InputError(["error: -l requires the SIMT preview, which tileiras-async does not provide"],
                         EXIT_CONFIG)
    for feature in opts.get("preview", []):
        if feature not in PREVIEW_FEATURES:
            raise InputError([f"error: unknown preview feature '{feature}'"], EXIT_CONFIG)


def run(argv: list[str]) -> int:
    try:
        opts = PARSER.parse(argv)
    except OptionError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    if opts.get("help"):
        sys.stdout.write(PARSER.help_text())
        return 0
    if opts.get("version"):
        sys.stdout.write(version_text())
        return 0
    if opts.get("list-versions"):
        sys.stdout.write("".join(f"{v}\n" for v in SUPPORTED_VERSIONS))
        return 0
    if not opts.positionals:
        print("error: no input file provided\n", file=sys.stderr)
        sys.stdout.write(PARSER.help_text())
        return EXIT_USAGE
    try:
        return _compile(opts)
    except InputError as e:
        print_lines(e.lines)
        return e.rc


def _compile(opts) -> int:
    from ..stages import CompileOptions, compile_in_process, stderr_line
    from ..toolchain import OutputWriteError, write_atomic

    opt_level = _opt_level(opts)
    if opts.get("device-debug") and opt_level != 0:
        raise InputError(["error: optimized debugging is currently not supported, change the optimization "
                          "level to 0 or disable full debug info"], EXIT_CONFIG)
    _check_unsupported(opts)
    path = opts.positionals[0]
    data = read_input_file(path)
    version = check_version_like_driver(data)
    gpu = opts.get("gpu-name")
    if gpu is None:
        shown = f"{version[0]}.{version[1]}" if version else "unknown"
        raise InputError([f"error: GPU architecture sm_0 is not supported by this version of tileiras. You may "
                          f"need a newer toolchain that supports this architecture (bytecode in file is version "
                          f"{shown})."], EXIT_CONFIG)
    out_path = opts.get("output-file", DEFAULT_OUTPUT)
    options = CompileOptions(gpu, opt_level, lineinfo=bool(opts.get("lineinfo")),
                             device_debug=bool(opts.get("device-debug")), num_stages=_num_stages(opts))
    print_ir = _print_ir(opts)
    trace_file = opts.get("schedule-trace-file")
    remark_filter = _remark_filter(opts)
    result = compile_in_process(path, data, options, with_schedules=trace_file is not None,
                                with_remarks=bool(remark_filter), print_ir=print_ir)
    if print_ir is not None:
        from ..stages import write_ir_dumps
        write_ir_dumps(result.ir_dumps, os.path.basename(path).removesuffix(".tileirbc") + f".{gpu}",
                       opts.get("print-ir-dir"), sys.stderr)
    if not result.ok:
        if result.tool_stderr:
            sys.stderr.write(result.tool_stderr if result.tool_stderr.endswith("\n") else result.tool_stderr + "\n")
        raise InputError([stderr_line(d) for d in result.diagnostics], result.exit_code)
    if not os.path.isdir(os.path.dirname(out_path) or "."):
        return EXIT_CONFIG  # the real tool exits 2 silently here
    if trace_file is not None:
        from ..schedule.report import schedule_trace_json
        try:
            write_atomic(trace_file, (schedule_trace_json(result.schedules) + "\n").encode())
        except (OutputWriteError, OSError) as e:
            raise InputError([f"error: cannot write schedule trace '{trace_file}': {e}"], EXIT_CONFIG) from None
    if remark_filter:
        _emit_remarks(opts, [r for r in result.remarks if remark_filter.wants(r)])
    try:
        write_atomic(out_path, result.cubin)
    except (OutputWriteError, OSError):
        return EXIT_CONFIG
    return 0


def _remark_filter(opts):
    from ..remarks import RemarkFilter
    return RemarkFilter.from_options(opts.get("remarks"), passed=opts.get("remarks-passed"),
                                     missed=opts.get("remarks-missed"), failed=opts.get("remarks-failed"),
                                     analysis=opts.get("remarks-analysis"))


def _emit_remarks(opts, remarks) -> None:
    """YAML to --remarks-output-file (the default format there), else one line per remark on stderr."""
    from ..remarks import to_command_line, to_yaml
    from ..toolchain import OutputWriteError, write_atomic
    out_file = opts.get("remarks-output-file")
    fmt = opts.get("remark-format") or ("yaml" if out_file else "command-line")
    text = to_yaml(remarks) if fmt == "yaml" else to_command_line(remarks)
    if out_file:
        try:
            write_atomic(out_file, text.encode())
        except (OutputWriteError, OSError) as e:
            raise InputError([f"error: cannot write remarks to '{out_file}': {e}"], EXIT_CONFIG) from None
    else:
        sys.stderr.write(text)


def main(argv: list[str] | None = None) -> int:
    return guarded_main(run, sys.argv[1:] if argv is None else argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
