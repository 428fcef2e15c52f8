"""What every command-line front door shares: printing diagnostics and never leaking a traceback.

Lean on purpose (the drop-in's cache-hit path imports it): `os` and `sys` only.
"""
from __future__ import annotations

import os
import sys

from ..inputs import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, exit_table  # noqa: F401  (for the CLIs)


def print_lines(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def describe_exception(e: BaseException, prog: str) -> tuple[str, int]:
    """The one `error:` line and exit status an unexpected exception is reported with (in-process,
    or by the compile server for a request its worker failed)."""
    if isinstance(e, RecursionError):
        return "error: input is nested too deeply", EXIT_BAD_INPUT
    if isinstance(e, MemoryError):
        return "error: out of memory", EXIT_INTERNAL
    return f"error: internal error in {prog}: {type(e).__name__}: {e}", EXIT_INTERNAL


def guarded_main(run, argv: list[str], prog: str) -> int:
    """Run a CLI body (`run(argv) -> exit status`); an unexpected exception is reported as one
    `error:` line, not a traceback."""
    try:
        return run(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`); stay quiet like other Unix tools
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - last line of defence for users
        if os.environ.get("TILEIRAS_ASYNC_TRACEBACK") and not isinstance(e, (RecursionError, MemoryError)):
            raise
        line, rc = describe_exception(e, prog)
        print(line, file=sys.stderr)
        return rc
