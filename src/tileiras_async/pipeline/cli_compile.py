"""`tileiras-async compile`: the batch front door of the pipeline.

    tileiras-async compile FILES|DIRS... --gpu-name G [--gpu-name G2 ...] [-j N] [-O N]
                           [--out-dir D] [--json] [--tui] [--timeout S] [--keep-ptx] [--keep-sass]
                           [--memory-limit MIB] [--resources] [--remarks CATEGORY] [--remarks-KIND CATEGORIES]

Outputs are <input name without .tileirbc>.<gpu-name>.cubin (and .ptx / .sass) in --out-dir (default
build/tileiras-async, created when the first file is written).
Diagnostics go to stderr per module as modules finish; the summary table is printed at the end
(on stdout, or on stderr with --json, where stdout carries only the JSON-lines event stream), then with
--resources the table of each kernel's resources per target.  --remarks* (the drop-in's options) print each
module's remarks on stderr as the drop-in does, prefixed with `module: target: `; with --json they are in the
kernel_finished events.
Exit status: 0 when everything compiled; otherwise the largest per-module status (1 unreadable
input, 2 unwritable output or missing tool, 3 invalid bytecode, 4 worker crash/timeout/memory or
internal error, 5 code generation or ptxas failure); 130/143 when interrupted by SIGINT/SIGTERM.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..targets import GPU_NAMES
from .config import (DEFAULT_MEMORY_LIMIT, DEFAULT_OUT_DIR, DEFAULT_STAGE_TIMEOUT_S, EXIT_CONFIG, EXIT_UNREADABLE,
                     BatchConfig, default_jobs, expand_inputs, out_dir_problem)

FAULT_ENV = "TILEIRAS_ASYNC_FAULT"
EXIT_USAGE = EXIT_UNREADABLE   # argparse's usage errors and inputs that do not exist


def add_compile_parser(subparsers) -> argparse.ArgumentParser:
    c = subparsers.add_parser(
        "compile", help="compile many modules for several targets with a pool of worker processes",
        description="Compile Tile IR bytecode files (or every *.tileirbc in the given directories) for one or "
                    "more GPUs with a pool of worker processes supervised by trio.")
    c.add_argument("inputs", nargs="+", metavar="FILE|DIR")
    c.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help=f"worker processes (default: CPU count, here {default_jobs()})")
    c.add_argument("--gpu-name", "--arch", action="append", dest="gpu_names", metavar="G", default=[],
                   help=f"target GPU; repeat or comma-separate for several ({', '.join(GPU_NAMES)})")
    c.add_argument("-O", "--opt-level", type=int, default=3, metavar="N", help="optimization level 0-3 (default 3)")
    c.add_argument("--out-dir", default=DEFAULT_OUT_DIR, metavar="D",
                   help=f"where outputs go (default {DEFAULT_OUT_DIR}; created when the first file is written)")
    c.add_argument("--json", action="store_true", help="write the event stream as JSON lines on stdout")
    c.add_argument("--tui", action="store_true", help="watch the batch in the terminal dashboard (keys: ? for help)")
    c.add_argument("--exit-when-done", action="store_true",
                   help="with --tui: close the dashboard when the batch is done (default: stay open until q)")
    c.add_argument("--timeout", type=float, default=DEFAULT_STAGE_TIMEOUT_S, metavar="S",
                   help=f"per-stage time limit in seconds, ptxas included (default {DEFAULT_STAGE_TIMEOUT_S:g})")
    c.add_argument("--memory-limit", type=int, default=DEFAULT_MEMORY_LIMIT >> 20, metavar="MIB",
                   help=f"kill a worker whose resident memory exceeds this (default {DEFAULT_MEMORY_LIMIT >> 20})")
    c.add_argument("--read-special-files", action="store_true",
                   help="also read inputs that are not regular files (FIFOs, devices), within --timeout and "
                        "the input size limit; by default they are refused")
    c.add_argument("--keep-ptx", action="store_true", help="also write <name>.<gpu>.ptx")
    c.add_argument("--keep-sass", action="store_true", help="also write <name>.<gpu>.sass (nvdisasm -c)")
    c.add_argument("--schedules", action="store_true",
                   help="run the loop scheduler too: kernel_scheduled events and <name>.<gpu>.schedule.json "
                        "(Chrome trace, as the drop-in's --schedule-trace-file)")
    c.add_argument("--schedule-trace-file", metavar="F", default=None,
                   help="write every loop's modulo schedule of the batch as one Chrome-trace JSON file (Perfetto); "
                        "implies --schedules")
    c.add_argument("--num-stages", type=int, default=0, metavar="N",
                   help="software-pipeline stages of K-loops (1: no pipelining; default: 4)")
    c.add_argument("--register-caps", action="store_true",
                   help="after ptxas, cap (.maxnreg) the registers of kernels whose registers limit their CTAs per "
                        "SM, where that costs no spills and at most 1 in 128 more instructions")
    c.add_argument("--print-ir-after-all", action="store_true",
                   help="print the tile-GPU IR after every pass (to stderr, or to --print-ir-dir)")
    c.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                   help="print the tile-GPU IR after this pass (repeat or comma-separate; emit-llvm: the LLVM IR)")
    c.add_argument("--print-ir-before", action="append", default=[], metavar="PASS",
                   help="print the tile-GPU IR before this pass (repeat or comma-separate)")
    c.add_argument("--print-ir-after-change", action="store_true",
                   help="print the tile-GPU IR after a pass only if the pass changed it (after every pass, or after "
                        "those --print-ir-after names)")
    c.add_argument("--print-ir-dir", metavar="D", default=None,
                   help="write the IR snapshots to files in this directory instead of stderr")
    c.add_argument("--print-debuginfo", action="store_true",
                   help="print each op's source location (loc(...)) in the tile-GPU IR snapshots")
    c.add_argument("--print-llvm", action="store_true",
                   help="print each kernel's LLVM IR too, as the snapshot after emit-llvm")
    add_cluster_option(c)
    c.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on the terminal (it is never shown when stderr is not a terminal)")
    c.add_argument("--cache-dir", metavar="D", default=None,
                   help="the compile cache (default: $TILEIRAS_ASYNC_CACHE_DIR, else the user cache directory)")
    c.add_argument("--no-cache", action="store_true",
                   help="compile everything, without reading or writing the compile cache")
    c.add_argument("--resources", action="store_true",
                   help="after the summary, a table of each kernel's resources per target (registers, spills, "
                        "stack, shared and tensor memory, threads, CTAs per SM and what limits them, tensor-core "
                        "instruction, copy engine), read from the cubins")
    c.add_argument("--inject-fault", metavar="STAGE:MODE[:MATCH]", default=None, help=argparse.SUPPRESS)
    c.set_defaults(func=cmd_compile)
    return c


def add_cluster_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="tcp://HOST:PORT|local:N", default=None,
                        help="run the stages on a Dask cluster: a scheduler's address, or local:N for a local "
                             "cluster of N worker processes (needs: pip install 'tileiras-async[dask]')")


def _error(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _targets(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            if name and name not in out:
                out.append(name)
    return out


class _IRDumps:
    """Writes the kernels' IR snapshots as they arrive (to stderr, or one file each in a directory)."""

    def __init__(self, directory: str | None):
        self.directory = directory

    def __call__(self, event) -> None:
        from ..stages import write_ir_dumps
        from .config import output_stem
        from .events import KernelIRDumped
        if isinstance(event, KernelIRDumped):
            write_ir_dumps(event.dumps, f"{output_stem(event.module)}.{event.target}", self.directory, sys.stderr)


def _print_ir(args):
    """(PrintIR or None, error message or None) from the --print-ir-* options."""
    from ..stages import PrintIR, check_print_ir, prepare_ir_dir
    before, after = _targets(args.print_ir_before), _targets(args.print_ir_after)
    spec = PrintIR(before, after, args.print_ir_after_all, getattr(args, "print_ir_after_change", False),
                   getattr(args, "print_debuginfo", False), getattr(args, "print_llvm", False))
    if not spec.active:
        return None, None
    problem = check_print_ir(spec)
    if problem is None:
        problem = prepare_ir_dir(args.print_ir_dir)
    return spec, problem


class _ScheduleTrace:
    """Collects the kernels' schedule reports; written as one trace in a fixed order (any -j, any completion)."""

    def __init__(self):
        self.reports: list[tuple[tuple, object]] = []

    def __call__(self, event) -> None:
        from .events import KernelScheduled
        if isinstance(event, KernelScheduled):
            for r in event.reports:
                self.reports.append(((event.module, event.target, event.kernel, r.loop), r))

    def write(self, path: str) -> None:
        from ..schedule.report import schedule_trace_json
        from ..toolchain import write_atomic
        ordered = [r for _, r in sorted(self.reports, key=lambda kr: kr[0])]
        write_atomic(path, (schedule_trace_json(ordered) + "\n").encode())


def _cache_dir(args, fault) -> str | None:
    """The compile cache's directory, or None when the cache is off (--no-cache, the environment, or a
    fault injected for a test: a cached module would never reach the faulty stage)."""
    from ..cache import config as cache_config
    if getattr(args, "no_cache", False) or fault is not None or cache_config.disabled_by_env():
        return None  # (the dashboard's parser has no cache options: the defaults then)
    return getattr(args, "cache_dir", None) or cache_config.default_dir()


def _remark_filter(args):
    """The remarks the drop-in's --remarks* options (added to `compile` by the command line) ask for; None: none."""
    per_kind = {kind: getattr(args, f"remarks_{kind}", None) for kind in ("passed", "missed", "failed", "analysis")}
    if not (getattr(args, "remarks", None) or any(per_kind.values())):
        return None
    from ..remarks import RemarkFilter
    return RemarkFilter.from_options(getattr(args, "remarks", None), **per_kind) or None


def build_config(args, **overrides) -> "BatchConfig | int":
    """The batch `compile` (or the dashboard) was asked for, or the exit status of a usage error
    (its `error:` line printed)."""
    from .messages import FaultSpec

    if args.tui and args.json:
        return _error("--tui and --json cannot be combined (record with --json, then `tileiras-async tui "
                      "--replay FILE`)", EXIT_CONFIG)
    targets = _targets(args.gpu_names)
    if not targets:
        return _error("no --gpu-name given: name at least one target GPU", EXIT_CONFIG)
    bad = [t for t in targets if t not in GPU_NAMES]
    if bad:
        return _error(f"unsupported --gpu-name '{bad[0]}' (choose from: {', '.join(GPU_NAMES)})", EXIT_CONFIG)
    if not 0 <= args.opt_level <= 3:
        return _error(f"invalid optimization level: {args.opt_level}", EXIT_CONFIG)
    num_stages = getattr(args, "num_stages", 0)   # (the dashboard's parser has neither these nor --print-ir-*)
    if not 0 <= num_stages <= 8:
        return _error(f"invalid number of pipeline stages: {num_stages} (expected 1 to 8)", EXIT_CONFIG)
    print_ir, problem = _print_ir(args) if hasattr(args, "print_ir_after_all") else (None, None)
    if problem:
        return _error(problem, EXIT_CONFIG)
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        return _error(f"-j must be at least 1, not {jobs}", EXIT_CONFIG)
    if args.timeout <= 0 or args.memory_limit <= 0:
        return _error("--timeout and --memory-limit must be positive", EXIT_CONFIG)
    cluster = getattr(args, "cluster", None)
    if cluster:
        from .dask_pool import ClusterError, parse_cluster, require_distributed
        try:
            parse_cluster(cluster)
            require_distributed()
        except (ValueError, ClusterError) as e:
            return _error(str(e), EXIT_CONFIG)
    try:
        spec = args.inject_fault or os.environ.get(FAULT_ENV)
        fault = FaultSpec.parse(spec) if spec else None
    except ValueError as e:
        return _error(str(e), EXIT_CONFIG)
    inputs, errors = expand_inputs(args.inputs)
    if errors:
        for line in errors:
            print(line, file=sys.stderr)
        return EXIT_USAGE
    problem = out_dir_problem(args.out_dir)
    if problem:
        return _error(f"cannot create output directory '{args.out_dir}': {problem}", EXIT_CONFIG)

    if getattr(args, "schedule_trace_file", None):
        args.schedules = True
    return BatchConfig(inputs, targets, jobs=jobs, opt_level=args.opt_level, out_dir=args.out_dir,
                       stage_timeout_s=args.timeout, memory_limit_bytes=args.memory_limit << 20,
                       read_special=getattr(args, "read_special_files", False),
                       keep_ptx=args.keep_ptx, keep_sass=args.keep_sass, schedules=args.schedules, fault=fault,
                       num_stages=num_stages, register_caps=getattr(args, "register_caps", False),
                       print_ir=print_ir, cluster=cluster, cache_dir=_cache_dir(args, fault),
                       remarks=_remark_filter(args), **overrides)


def cmd_compile(args) -> int:
    """`tileiras-async compile`.  With --tui the batch runs under the dashboard, which the command line
    wires in as `args.run_live` (the pipeline does not import the dashboard)."""
    from .dask_pool import ClusterError
    from .progress import Progress
    from .summary import DiagnosticPrinter, JsonLines, RemarkPrinter, Summary
    from .supervisor import compile_batch, ignore_signals, signals_deferred

    if args.tui:
        run_live = getattr(args, "run_live", None)
        if run_live is None:
            return _error("--tui needs the dashboard package (tileiras_tui), which is not installed", EXIT_CONFIG)
        config = build_config(args, handle_signals=False)
        if isinstance(config, int):
            return config
        return run_live(config, exit_when_done=getattr(args, "exit_when_done", False))
    config = build_config(args)
    if isinstance(config, int):
        return config
    summary = Summary()
    sinks = [summary]
    trace = _ScheduleTrace() if args.schedule_trace_file else None
    if trace is not None:
        sinks.append(trace)
    if config.print_ir is not None and not args.json:
        sinks.append(_IRDumps(args.print_ir_dir))
    progress = Progress(sys.stderr) if not args.quiet and Progress.wanted(sys.stderr) else None
    if progress is not None:
        sinks.append(progress.before)     # erase the progress line before diagnostics are printed
    if args.json:
        sinks.append(JsonLines(sys.stdout.buffer))
    else:
        sinks.append(DiagnosticPrinter(sys.stderr))
        if config.remarks is not None:
            sinks.append(RemarkPrinter(sys.stderr))
    if progress is not None:
        sinks.append(progress)
    with signals_deferred():   # a Ctrl-C after the run must not cut the summary short
        try:
            finished = compile_batch(config, sinks)
        except ClusterError as e:
            return _error(str(e), EXIT_CONFIG)
        if trace is not None:
            try:
                trace.write(args.schedule_trace_file)
            except OSError as e:
                return _error(f"cannot write schedule trace '{args.schedule_trace_file}': {e.strerror or e}",
                              EXIT_CONFIG)
        out = sys.stderr if args.json else sys.stdout
        out.write(summary.render())
        if getattr(args, "resources", False):
            out.write("\n" + summary.resource_table())
        out.flush()
    if finished.cancelled:
        ignore_signals()    # exiting with the signal's status: a later Ctrl-C must not turn it into a crash
    return finished.exit_code
