"""`tileiras-async tui` and `tileiras-async compile --tui`.

    tileiras-async tui FILES|DIRS... [--gpu-name G ...] [-j N] [-O N] [--out-dir D]
                       [--no-schedules] [--no-keep-ptx] [--no-ir] [--keep-sass] [--exit-when-done]
    tileiras-async tui --replay EVENTS.jsonl [--speed X] [--exit-when-done]
    tileiras-async compile FILES... --gpu-name G ... --tui [--exit-when-done]

`tui` compiles like `compile` (same options) with the scheduler, --keep-ptx and --print-ir-after-all
on by default, so the kernel view has schedules, PTX and the tile-GPU IR after each pass to show (IR
snapshots bypass the compile cache: --no-ir turns them off), and --gpu-name sm_100 when none is given.
`--replay` shows a recorded `compile --json` stream instead (retry and cancel need a live run).
The dashboard stays open when the batch is done, until `q`; --exit-when-done closes it then.
The exit status is the batch's; the summary table and the diagnostics are printed when the
dashboard closes, as `compile` prints them.
"""
from __future__ import annotations

import argparse
import io
import os
import sys

DEFAULT_TUI_GPU = "sm_100"
from tileiras_async.pipeline.config import EXIT_CONFIG   # the batch's statuses (pipeline.config.EXIT_CODES)


def add_tui_parser(subparsers) -> argparse.ArgumentParser:
    from tileiras_async.pipeline.cli_compile import add_cluster_option
    from tileiras_async.pipeline.config import (DEFAULT_MEMORY_LIMIT, DEFAULT_OUT_DIR, DEFAULT_STAGE_TIMEOUT_S,
                                                default_jobs)
    t = subparsers.add_parser(
        "tui", help="live dashboard: compile modules (or replay a --json event stream) and watch them",
        description="Compile Tile IR bytecode files with the batch pipeline and watch them in a terminal "
                    "dashboard (modules x kernels x targets, diagnostics, workers, schedules, PTX), or "
                    "replay a recorded `compile --json` stream.")
    t.add_argument("inputs", nargs="*", metavar="FILE|DIR")
    t.add_argument("--replay", metavar="FILE", help="show a recorded `compile --json` event stream")
    t.add_argument("--speed", type=float, default=None, metavar="X",
                   help="replay X times the recorded speed (default: as fast as the dashboard takes it)")
    t.add_argument("--exit-when-done", action="store_true", help="close the dashboard when the batch is done")
    t.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help=f"worker processes (default: CPU count, here {default_jobs()})")
    t.add_argument("--gpu-name", "--arch", action="append", dest="gpu_names", metavar="G", default=[],
                   help=f"target GPU; repeat or comma-separate for several (default {DEFAULT_TUI_GPU})")
    t.add_argument("-O", "--opt-level", type=int, default=3, metavar="N", help="optimization level 0-3 (default 3)")
    t.add_argument("--out-dir", default=DEFAULT_OUT_DIR, metavar="D",
                   help=f"where outputs go (default {DEFAULT_OUT_DIR}; created when the first file is written)")
    t.add_argument("--timeout", type=float, default=DEFAULT_STAGE_TIMEOUT_S, metavar="S",
                   help=f"per-stage time limit in seconds (default {DEFAULT_STAGE_TIMEOUT_S:g})")
    t.add_argument("--memory-limit", type=int, default=DEFAULT_MEMORY_LIMIT >> 20, metavar="MIB",
                   help=f"kill a worker whose resident memory exceeds this (default {DEFAULT_MEMORY_LIMIT >> 20})")
    t.add_argument("--no-schedules", dest="schedules", action="store_false",
                   help="do not run the loop scheduler (no schedules in the kernel view)")
    t.add_argument("--no-keep-ptx", dest="keep_ptx", action="store_false", help="do not write <name>.<gpu>.ptx")
    t.add_argument("--no-ir", dest="print_ir_after_all", action="store_false",
                   help="do not take the tile-GPU IR after each pass for the kernel view's IR tab (compiles then "
                        "go through the compile cache)")
    t.add_argument("--keep-sass", action="store_true", help="also write <name>.<gpu>.sass (nvdisasm -c)")
    add_cluster_option(t)
    t.add_argument("--inject-fault", metavar="STAGE:MODE[:MATCH]", default=None, help=argparse.SUPPRESS)
    t.add_argument("--num-stages", type=int, default=0, metavar="N",
                   help="software-pipeline stages of K-loops (1: no pipelining; default: 4)")
    t.set_defaults(func=cmd_tui, json=False, tui=True, print_ir_after=[], print_ir_before=[], print_ir_dir=None)
    return t


def cmd_tui(args) -> int:
    if args.replay:
        if args.inputs:
            print("error: give either FILES to compile or --replay FILE, not both", file=sys.stderr)
            return EXIT_CONFIG
        return run_replay(args.replay, speed=args.speed, exit_when_done=args.exit_when_done)
    if not args.inputs:
        print("error: nothing to do: give FILES|DIRS to compile, or --replay FILE", file=sys.stderr)
        return EXIT_CONFIG
    if not args.gpu_names:
        args.gpu_names = [DEFAULT_TUI_GPU]
    from tileiras_async.pipeline.cli_compile import build_config
    config = build_config(args, handle_signals=False)   # validates like `compile`
    if isinstance(config, int):
        return config
    return run_live(config, exit_when_done=args.exit_when_done)


def _need_terminal() -> str | None:
    if os.environ.get("TILEIRAS_TUI_HEADLESS"):
        return None
    for stream in (sys.stdin, sys.__stderr__):   # Textual draws on stderr, reads stdin
        try:
            if not os.isatty(stream.fileno()):
                return "the dashboard needs a terminal (use --json for the event stream)"
        except (AttributeError, OSError, ValueError):
            return "the dashboard needs a terminal (use --json for the event stream)"
    return None


def run_live(config, *, exit_when_done: bool = False) -> int:
    """`compile --tui`: run the batch in a thread under the dashboard; the batch's exit status."""
    from tileiras_async.pipeline.summary import DiagnosticPrinter, Summary

    from .app import DashboardApp
    from .sources import LiveSource

    why = _need_terminal()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return EXIT_CONFIG
    summary = Summary()
    diag_text = io.StringIO()
    printer = DiagnosticPrinter(diag_text)
    source = LiveSource(config, hold_open=not exit_when_done, sinks=[summary, printer])
    app = DashboardApp(source, exit_when_done=exit_when_done, title="tileiras-async compile")
    source.start()
    try:
        app.run()
    finally:
        if source.running:
            source.close(cancel=not app.model.done)   # the app died: stop the batch too
        source.join()
    if source.error is not None:
        raise source.error
    sys.stderr.write(diag_text.getvalue())
    sys.stdout.write(summary.render())
    sys.stdout.flush()
    if source.finished is not None:
        return source.finished.exit_code
    return app.model.exit_code


def run_replay(path: str, *, speed: float | None = None, exit_when_done: bool = False) -> int:
    from tileiras_async.pipeline.summary import Summary

    from .app import DashboardApp
    from .sources import ReplaySource, read_events

    try:
        events, _skipped = read_events(path)
    except OSError as e:
        print(f"error: cannot read '{path}': {e.strerror or e}", file=sys.stderr)
        return EXIT_CONFIG
    why = _need_terminal()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return EXIT_CONFIG
    app = DashboardApp(ReplaySource(events, speed), exit_when_done=exit_when_done,
                       title=f"tileiras-async replay {os.path.basename(path)}")
    app.run()
    summary = Summary()
    for e in events:
        summary(e)
    if summary.started is not None:
        sys.stdout.write(summary.render())
        sys.stdout.flush()
    return app.model.exit_code


def main(argv: list[str] | None = None) -> int:
    """`python -m tileiras_tui ...` (the same as `tileiras-async tui ...`)."""
    parser = argparse.ArgumentParser(prog="python -m tileiras_tui")
    sub = parser.add_subparsers(dest="command")
    add_tui_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(["tui", *argv])
    return args.func(args)
