"""`tileiras`: a drop-in for NVIDIA's CUDA Tile IR optimizing assembler (same options, messages, exit codes).

One call is: parse the options, read the input, then

    cache hit  -> replay the stored outcome (diagnostics, exit status, output files)
    miss       -> compile on the warm compile server when one is up (`tileiras-async serve`), else in
                  this process; store the outcome when it is deterministic (a success, or exit 3 / 5
                  with diagnostics; never a timeout, a crash or a missing tool); then deliver it

Whatever produced it, an outcome is delivered by the same code (`deliver`), so the cache, the server
and an in-process compile print the same diagnostics, exit with the same status and write the same
files, atomically.  This module stays lean: the cache-hit path, `--help` and the empty-module probe
import no llvmlite, numpy, trio or msgspec, nor any of the compiler (`tileiras_compile` holds that part).
"""
from __future__ import annotations

import os
import sys

from .. import __version__
from ..inputs import (EXIT_BAD_INPUT, EXIT_CODEGEN, EXIT_CONFIG, EXIT_USAGE, InputError, output_dir_problem,
                      read_input_file)
from .common import exit_table, guarded_main, print_lines
from .options import Option, OptionError, OptionParser, generic_options, help_asked, preview_option
from .dropin_result import DropInResult, opt_level

PROG = "tileiras"
EXIT_CODES = exit_table({   # NVIDIA's statuses (README's drop-in table lists them: tests/test_exit_codes.py)
    EXIT_USAGE: "option errors (an unknown --gpu-name included), unreadable input",
    EXIT_CONFIG: "invalid option values, missing --gpu-name, unwritable output",
    EXIT_BAD_INPUT: "bytecode that does not parse or verify",
    EXIT_CODEGEN: "code that cannot be lowered, or that ptxas rejects",
})
DEFAULT_OUTPUT = "elf.o"
CACHE_KIND = "tileiras"

# targets.GPU_NAMES, spelled out: that module imports dataclasses and re, which cost more than a cache hit
# (tests/test_cache_dropin.py checks that the two agree)
GPU_NAMES = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_107", "sm_110",
             "sm_120", "sm_121")

OPTIONS = [
    Option("O", "Alias for --opt-level", kind="value", prefix=True, alias_of="opt-level"),
    Option("opt-level", "Specify optimization level. Default Value: 3.", kind="value", meta="N", integer=True),
    Option("apply-controls", "Composite ACF file forwarded to libNVVM and, when used, direct PTXAS. Paths requiring "
           "quoting, including paths with whitespace, are unsupported.", kind="value", meta="path"),
    Option("arch", "Alias for --gpu-name", kind="enum", alias_of="gpu-name"),
    Option("gpu-name", "Specify name of NVIDIA GPU to generate code for.", kind="enum",
           values=tuple((g, f"SM {g[3:]}") for g in GPU_NAMES)),
    Option("device-debug", "Generate debug information (if present in the input bytecode)"),
    Option("g", "Alias for --device-debug", alias_of="device-debug"),
    Option("lineinfo", "Generate line-number information (if present in the input bytecode)"),
    *generic_options(),
    Option("Wunsupported-hints", "Enable warnings for unsupported/invalid optimization hints.", hidden=True),
    Option("Werr-hints", "Treat unsupported/invalid optimization hints as errors.", hidden=True),
    Option("host-arch", "Specify the architecture for the generated host code.", kind="enum",
           values=(("x86_64", "x86_64"), ("aarch64", "aarch64"))),
    Option("host-os", "Specify the operating system for the generated host code.", kind="enum",
           values=(("linux", "linux"), ("windows", "windows"))),
    Option("l", "Tile libraries to load. Requires the SIMT preview.", kind="list", meta="path"),
    Option("list-versions", "List all supported bytecode versions and exit"),
    Option("o", "Alias for --output-file", kind="value", alias_of="output-file"),
    Option("output-file", "Specify name of output file.", kind="value", meta="file"),
    preview_option(),
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
    Option("register-caps", "After ptxas, cap (.maxnreg) the registers of kernels whose registers limit their CTAs "
           "per SM, where that costs no spills and at most 1 in 128 more instructions"),
    Option("print-ir-after-all", "Print the tile-GPU IR after every pass (to stderr, or to --print-ir-dir)"),
    Option("print-ir-after", "Print the tile-GPU IR after the named passes (emit-llvm: the LLVM IR)", kind="list",
           meta="pass[,pass...]"),
    Option("print-ir-before", "Print the tile-GPU IR before the named passes", kind="list", meta="pass[,pass...]"),
    Option("print-ir-after-change", "Print the tile-GPU IR after a pass only if the pass changed it (after "
           "every pass, or after those --print-ir-after names)"),
    Option("print-ir-dir", "Write the IR snapshots to files in this directory instead of stderr", kind="value",
           meta="dir"),
    Option("print-debuginfo", "Print each op's source location (loc(...)) in the tile-GPU IR snapshots"),
    Option("print-llvm", "Print each kernel's LLVM IR too, as the snapshot after emit-llvm"),
    Option("sanitize", "Instrument generated code (memcheck)", kind="enum",
           values=(("memcheck", "Check global memory accesses"),)),
    Option("version", "Display the version of this program"),
    # tileiras-async's own (not in NVIDIA's tool)
    Option("cache-dir", "Compile cache directory (default: $TILEIRAS_ASYNC_CACHE_DIR, else the user cache "
           "directory)", kind="value", meta="dir"),
    Option("no-cache", "Compile without reading or writing the compile cache"),
]

# Options that never change what a compile produces: kept out of the cache key.  Every other option
# is in the key, so an option added to OPTIONS is keyed by construction.
NOT_IN_KEY = frozenset({"output-file", "cache-dir", "no-cache", "print-options", "print-all-options"})
# Options naming where an output goes: whether they are given is in the key, not the path.
OUTPUT_PATHS = frozenset({"remarks-output-file", "schedule-trace-file"})
# IR snapshots are a debugging aid written where the call runs: such calls compile here, uncached.
PRINT_IR = frozenset({"print-ir-after-all", "print-ir-after", "print-ir-before", "print-ir-after-change",
                      "print-ir-dir", "print-debuginfo", "print-llvm"})

PARSER = OptionParser(PROG, "tileiras: CUDA Tile IR optimizing assembler (tileiras-async)",
                      "tileiras [options] <tile bytecode file>", OPTIONS)


def version_text() -> str:
    from ..frontend import SUPPORTED_VERSIONS
    return (f"tileiras: CUDA Tile IR optimizing assembler (tileiras-async {__version__})\n"
            f"Supported bytecode versions: {', '.join(SUPPORTED_VERSIONS)}\n")


def _check_options(opts) -> None:
    """What the real tool rejects before it reads the input."""
    level = opt_level(opts)
    if opts.get("device-debug") and level != 0:
        raise InputError(["error: optimized debugging is currently not supported, change the optimization "
                          "level to 0 or disable full debug info"], EXIT_CONFIG)


def run(argv: list[str]) -> int:
    try:
        opts = PARSER.parse(argv)
    except OptionError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    hidden = help_asked(opts)
    if hidden is not None:
        sys.stdout.write(PARSER.help_text(hidden))
        return 0
    if opts.get("version"):
        sys.stdout.write(version_text())
        return 0
    if opts.get("list-versions"):
        from ..frontend import SUPPORTED_VERSIONS
        sys.stdout.write("".join(f"{v}\n" for v in SUPPORTED_VERSIONS))
        return 0
    if not opts.positionals:
        print("error: no input file provided\n", file=sys.stderr)
        sys.stdout.write(PARSER.help_text())
        return EXIT_USAGE
    try:
        _check_options(opts)
        path = opts.positionals[0]
        data = read_input_file(path)
    except InputError as e:
        print_lines(e.lines)
        return e.rc
    return deliver(obtain(path, data, opts), opts)


def compile_options(path: str, opts) -> dict:
    """The options as they go into the cache key and to the compile server: every option but those in
    NOT_IN_KEY, output paths reduced to "given" (plus the input path when a schedule trace, which
    names it, is asked for)."""
    request = {name: (True if name in OUTPUT_PATHS else value) for name, value in opts.values.items()
               if name not in NOT_IN_KEY}
    if "schedule-trace-file" in request:
        request["input-path"] = path
    return request


def obtain(path: str, data: bytes, opts) -> DropInResult:
    """The outcome of compiling `data`: from the cache, the compile server, or this process."""
    from ..cache import config as cache_config
    from ..cache.store import CacheStore
    request = compile_options(path, opts)
    if PRINT_IR & request.keys():
        return _compile_here(path, data, opts)
    store = CacheStore(opts.get("cache-dir") or cache_config.default_dir(), cache_config.max_size_from_env())
    use_cache = not opts.get("no-cache") and not cache_config.disabled_by_env()
    fp = key = None
    if use_cache:
        from ..cache.fingerprint import compute
        from ..cache.key import make_key
        fp = compute(store.memo_dir)
        key = make_key(CACHE_KIND, request, data, fp.digest)
        hit = store.get(key)
        if hit is not None:
            try:
                return DropInResult.from_sections(hit)
            except (KeyError, ValueError, UnicodeDecodeError):
                pass  # an entry from another layout: recompile and replace it
    result = _compile_on_server(path, data, request, fp, store)
    if result is None:
        result = _compile_here(path, data, opts, expected=fp)
    if use_cache and result.cacheable:
        store.put(key, result.sections())
    return result


def _compile_here(path: str, data: bytes, opts, *, expected=None) -> DropInResult:
    """Compile in this process.  Importing the compiler is most of a cold call; in a process of our own the
    stored code of the dataclasses' generated methods (dataclass_code) spares it compiling them again."""
    if _own_process:
        from ..dataclass_code import install
        install()
    from .tileiras_compile import produce
    return produce(path, data, opts, expected=expected)


def _compile_on_server(path: str, data: bytes, request: dict, fp, store) -> DropInResult | None:
    """The compile server's outcome, or None when no server is available (compile in-process then)."""
    from ..serving import paths as server_paths
    mode = server_paths.server_mode()
    if mode == "off":
        return None
    socket_path = server_paths.socket_path()
    if mode != "start" and not os.path.exists(socket_path):
        return None  # the common case without a server: one stat
    from ..serving.client import ServerFailed, ServerUnavailable, compile_remote
    if fp is None:
        from ..cache.fingerprint import compute
        fp = compute(store.memo_dir)
    try:
        sections = compile_remote(socket_path, path, data, request, fp.digest, start=mode == "start",
                                  timeout_s=server_paths.request_timeout())
    except ServerUnavailable:
        return None
    except ServerFailed as e:
        return DropInResult(e.exit_code, e.message + "\n", cacheable=False)
    try:
        return DropInResult.from_sections(sections)
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def deliver(result: DropInResult, opts) -> int:
    """Print the diagnostics and write the outputs of an outcome, whatever produced it."""
    if result.ir_dumps:
        from ..stages import write_ir_dumps
        path = os.path.basename(opts.positionals[0]).removesuffix(".tileirbc")
        write_ir_dumps(result.ir_dumps, f"{path}.{opts.get('gpu-name')}", opts.get("print-ir-dir"), sys.stderr)
    if result.stderr:
        sys.stderr.write(result.stderr)
    if result.rc:
        return result.rc
    from ..cache.files import write_atomic
    out_path = opts.get("output-file", DEFAULT_OUTPUT)
    problem = output_dir_problem(out_path)
    if problem:   # NVIDIA's tool exits 2 without a word here; the status stays, the line says what failed
        return _cannot_write(out_path, problem)
    trace_file = opts.get("schedule-trace-file")
    if trace_file is not None and result.trace is not None:
        try:
            write_atomic(trace_file, result.trace.encode(), unlink_first=True)
        except OSError as e:
            print(f"error: cannot write schedule trace '{trace_file}': {e.strerror or e}", file=sys.stderr)
            return EXIT_CONFIG
    if result.remarks is not None:
        remarks_file = opts.get("remarks-output-file")
        if remarks_file:
            try:
                write_atomic(remarks_file, result.remarks.encode(), unlink_first=True)
            except OSError as e:
                print(f"error: cannot write remarks to '{remarks_file}': {e.strerror or e}", file=sys.stderr)
                return EXIT_CONFIG
        else:
            sys.stderr.write(result.remarks)
    try:
        write_atomic(out_path, result.cubin, unlink_first=True)
    except OSError as e:
        return _cannot_write(out_path, e.strerror or str(e))
    return 0


def _cannot_write(path: str, problem: str) -> int:
    print(f"error: cannot write {path}: {problem}", file=sys.stderr)
    return EXIT_CONFIG


def main(argv: list[str] | None = None) -> int:
    return guarded_main(run, sys.argv[1:] if argv is None else argv, PROG)


_own_process = False   # set by console_main: process-wide settings are ours to choose


def console_main() -> None:
    """The installed `tileiras` command (and `python -m tileiras_async.cli.tileiras`): `main` in a process
    of its own, tuned for one short call.

    The cyclic garbage collector runs less often (as mypy does): a cold compile allocates the compiler's
    modules and the kernel's IR and frees little; collecting every 700 allocations cost about 10 ms of it.
    The process ends as soon as the outcome is delivered (everything is written and closed by then):
    interpreter finalization (freeing the IR, LLVM's objects and every module) took about 30 ms of a cold
    call.  The cleanups registered with atexit (the per-process temporary directory) still run."""
    global _own_process
    import gc
    gc.set_threshold(50_000, 20, 20)
    _own_process = True
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass   # a closed stdout (`tileiras --help | head -1`): nothing more can be said there
    import atexit
    atexit._run_exitfuncs()
    os._exit(rc)


if __name__ == "__main__":
    console_main()
