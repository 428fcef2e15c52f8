"""What every command-line front door shares: printing diagnostics and never leaking a traceback."""
from __future__ import annotations

import os
import sys
from typing import Callable

EXIT_INTERNAL = 4


def print_lines(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def guarded_main(run: Callable[[list[str]], int], argv: list[str], prog: str) -> int:
    """Run a CLI body; an unexpected exception is reported as one `error:` line, not a traceback."""
    try:
        return run(argv)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`); stay quiet like other Unix tools
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except RecursionError:
        print("error: input is nested too deeply", file=sys.stderr)
        return 3
    except MemoryError:
        print("error: out of memory", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as e:  # noqa: BLE001 - last line of defence for users
        if os.environ.get("TILEIRAS_ASYNC_TRACEBACK"):
            raise
        print(f"error: internal error in {prog}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL
