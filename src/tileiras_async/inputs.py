"""What every front door does before parsing: the exit codes, the error that carries the real tool's
stderr lines, and reading the input file.

Kept free of the reader and the IR (only `os`) so that the drop-in's cache-hit path can use it
without paying for the compiler's imports; `frontend` re-exports all of it.
"""
from __future__ import annotations

import errno
import os

EXIT_USAGE = 1        # option errors, unreadable input
EXIT_CONFIG = 2       # invalid option values, unsupported target, unwritable output
EXIT_BAD_INPUT = 3    # bytecode that does not parse or verify
EXIT_CODEGEN = 5      # the module is valid but cannot be lowered (reported with the op and its location)
EXIT_PTXAS = 5        # ptxas rejected the generated PTX


class InputError(Exception):
    def __init__(self, lines: list[str], rc: int = EXIT_BAD_INPUT):
        super().__init__("\n".join(lines))
        self.lines = lines  # complete stderr lines
        self.rc = rc


def read_input_file(path: str) -> bytes:
    """Read the input like the real tool: unreadable or a directory is exit 1."""
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        reason = e.strerror or str(e)
        raise InputError([f"error: unable to read input file '{path}': {reason}"], EXIT_USAGE) from None
