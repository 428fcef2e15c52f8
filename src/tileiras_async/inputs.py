"""What every front door does before parsing: the exit codes, the error that carries the real tool's
stderr lines, and reading the input file.

Kept free of the reader and the IR (only `os`) so that the drop-in's cache-hit path can use it
without paying for the compiler's imports; `frontend` re-exports all of it.
"""
from __future__ import annotations

import errno
import os
import stat

EXIT_USAGE = 1        # option errors, unreadable input
EXIT_CONFIG = 2       # invalid option values, unsupported target, unwritable output
EXIT_BAD_INPUT = 3    # bytecode that does not parse or verify
EXIT_CODEGEN = 5      # the module is valid but cannot be lowered (reported with the op and its location)
EXIT_PTXAS = 5        # ptxas rejected the generated PTX
EXIT_INTERNAL = 4     # a bug: reported as one `error:` line, never a traceback
EXIT_INTERRUPTED = 130  # Ctrl-C: the status a shell gives a process that SIGINT ended

# What every command may exit with besides its own statuses (cli.common.guarded_main).  Each command keeps
# its statuses in one EXIT_CODES table built by exit_table; README's exit-code tables list every command's
# (tests/test_exit_codes.py compares them).
COMMON_EXIT_CODES = {EXIT_INTERNAL: "internal error (a bug): one error: line, never a traceback",
                     EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}


def exit_table(own: dict[int, str]) -> dict[int, str]:
    """A command's exit statuses: its own, then the common ones it does not describe itself; by status."""
    merged = {**COMMON_EXIT_CODES, **own}
    return {code: merged[code] for code in sorted(merged)}


class InputError(Exception):
    def __init__(self, lines: list[str], rc: int = EXIT_BAD_INPUT):
        super().__init__("\n".join(lines))
        self.lines = lines  # complete stderr lines
        self.rc = rc


def output_dir_problem(path: str) -> str | None:
    """Why an output file cannot be created at `path` because of its folder (the OS's words), or None."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(folder):
        return None
    return os.strerror(errno.ENOTDIR if os.path.exists(folder) else errno.ENOENT)


MAX_INPUT_BYTES = 256 << 20   # no bytecode file comes near this; /dev/zero would grow without end


def read_input_file(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """Read the input like the real tool: unreadable or a directory is exit 1.  At most `limit`
    bytes are read: a larger input (a huge file, /dev/zero) is refused before memory grows."""
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            too_big = stat.S_ISREG(st.st_mode) and st.st_size > limit   # refused without reading it
            data = b"" if too_big else f.read(limit + 1)
            if too_big or len(data) > limit:
                raise InputError([unreadable(path, f"larger than the input limit of {limit >> 20} MiB")],
                                 EXIT_USAGE)
            return data
    except OSError as e:
        raise InputError([unreadable(path, e.strerror or str(e))], EXIT_USAGE) from None


def unreadable(path: str, reason: str) -> str:
    return f"error: unable to read input file '{path}': {reason}"
