"""`tileiras-async serve`: run, stop or query the warm compile server.

    tileiras-async serve [--socket PATH] [-j N] [--idle-timeout S] [--request-timeout S] [--detach]
    tileiras-async serve --status [--socket PATH]
    tileiras-async serve --stop [--socket PATH]

In the foreground by default (logging to stderr); --detach starts it in the background (logging to
<socket>.log) and returns once it accepts connections.  `python -m tileiras_async.server` is the same
command without the batch CLI's imports (what the drop-in runs when $TILEIRAS_ASYNC_SERVER=start).
The server itself is serving/daemon.py; what its workers run is serve_worker.py.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..inputs import exit_table
from ..serving import paths

EXIT_NO_SERVER = 1      # --status/--stop: none answers; in the foreground: one already runs on the socket
EXIT_CANNOT_SERVE = 2   # invalid option values, a socket path that cannot be served, a server that did not start
EXIT_CODES = exit_table({   # README's `serve` table lists them (tests/test_exit_codes.py)
    EXIT_NO_SERVER: "--status / --stop: no server answers; a server already runs on the socket; usage errors",
    EXIT_CANNOT_SERVE: "invalid option values, a socket that cannot be served, a server that did not start"})


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    s = subparsers.add_parser(
        "serve", help="keep a warm compile server for the tileiras drop-in (Unix socket)",
        description="Run a compile server that keeps worker processes with the compiler loaded; the tileiras "
                    "drop-in sends its compiles there while it is up.")
    _add_arguments(s)
    s.set_defaults(func=cmd_serve)
    return s


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from ..pipeline.config import default_jobs
    from ..serving.daemon import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S
    p.add_argument("--socket", default=None, metavar="PATH",
                   help=f"the Unix socket (default: ${paths.ENV_SOCKET}, else {paths.socket_path()})")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help=f"worker processes (default: CPU count, here {default_jobs()})")
    p.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S, metavar="S",
                   help=f"stop after S seconds without requests; 0: never (default {DEFAULT_IDLE_TIMEOUT_S:g})")
    p.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT_S, metavar="S",
                   help=f"time limit of one compile; its worker is then replaced (default "
                        f"{DEFAULT_REQUEST_TIMEOUT_S:g})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--detach", action="store_true", help="run in the background; return once it is ready")
    what.add_argument("--stop", action="store_true", help="stop the running server (after its current requests)")
    what.add_argument("--status", action="store_true", help="print the running server's state")


def cmd_serve(args) -> int:
    sock = os.path.abspath(args.socket) if args.socket else paths.socket_path()
    if args.status:
        return _status(sock)
    if args.stop:
        return _stop(sock)
    if args.request_timeout <= 0 or args.idle_timeout < 0:
        print("error: --request-timeout must be positive and --idle-timeout not negative", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    from ..pipeline.config import default_jobs
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        print(f"error: -j must be at least 1, not {jobs}", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    if len(os.fsencode(sock)) >= 100:
        print(f"error: socket path too long for a Unix socket: {sock}", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    if args.detach:
        return _detach(sock, jobs, args)
    from ..serving.daemon import serve
    from .serve_worker import compile_job, warm
    try:
        return serve(sock, jobs=jobs, idle_timeout_s=args.idle_timeout, request_timeout_s=args.request_timeout,
                     job=compile_job, warm=warm)
    except (OSError, paths.UnsafeDirectory) as e:
        print(f"error: cannot serve on {sock}: {e}", file=sys.stderr)
        return EXIT_CANNOT_SERVE


def _detach(sock: str, jobs: int, args) -> int:
    from ..serving.client import ServerUnavailable, server_running, spawn, status
    if server_running(sock):
        print(f"a compile server is already running on {sock}")
        return 0
    proc = spawn(sock, ("-j", str(jobs), "--idle-timeout", str(args.idle_timeout),
                        "--request-timeout", str(args.request_timeout)))
    try:
        reply = status(sock, timeout_s=30.0) if _wait_listening(sock, proc) else None
    except ServerUnavailable:
        reply = None
    if reply is None:
        print(f"error: the compile server did not start; see {paths.log_path(sock)}", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    print(f"compile server started on {sock} (pid {reply.pid}, {reply.workers} workers)")
    return 0


def _wait_listening(sock: str, proc) -> bool:
    import time
    from ..serving.client import START_WAIT_S, ServerUnavailable, connect
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            connect(sock).close()
            return True
        except ServerUnavailable:
            time.sleep(0.05)
    return False


def _status(sock: str) -> int:
    from ..serving.client import status
    s = _ask(status, sock)
    if s is None:
        return EXIT_NO_SERVER
    print(f"compile server on {s.socket}: pid {s.pid}, tileiras-async {s.version}, up {s.uptime_s:.0f} s\n"
          f"  workers {s.workers} (replaced {s.workers_replaced}), idle timeout {s.idle_timeout_s:g} s, "
          f"request timeout {s.request_timeout_s:g} s\n"
          f"  requests {s.requests} (failed {s.failed}, refused as stale {s.stale}), in flight {s.in_flight}")
    return 0


def _stop(sock: str) -> int:
    from ..serving.client import stop
    reply = _ask(stop, sock)
    if reply is None:
        return EXIT_NO_SERVER
    print(f"compile server (pid {reply.pid}) is stopping")
    return 0


def _ask(request, sock: str):
    """The server's reply to `request`, or None (said on stdout) when no server answers."""
    from ..serving.client import ServerUnavailable
    try:
        return request(sock)
    except ServerUnavailable:
        print(f"no compile server on {sock}")
        return None


def main(argv: list[str] | None = None) -> int:
    from .common import guarded_main
    p = argparse.ArgumentParser(prog="python -m tileiras_async.server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    return guarded_main(lambda a: cmd_serve(p.parse_args(a)), sys.argv[1:] if argv is None else argv,
                        "tileiras-async serve")
