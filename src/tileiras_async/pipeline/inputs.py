"""Reading the batch's input files without ever blocking the supervisor's event loop.

The supervisor only stats a path on the loop's thread (which never blocks on a FIFO); the read
runs in a thread under a deadline and a size cap.  Only regular files are read unless asked
(`--read-special-files`): a FIFO without a writer would block forever, /dev/zero would grow the
supervisor without bound.  A directory named as a file is refused as the drop-in refuses it.
"""
from __future__ import annotations

import os
import stat

import trio

from ..inputs import EXIT_USAGE, MAX_INPUT_BYTES, InputError, read_input_file, unreadable

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


async def read_input(path: str, *, timeout: float, special: bool = False, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The file's bytes, or InputError (exit 1) with the reason."""
    try:
        st = os.stat(path)   # never blocks on a FIFO or a device: it does not open them
    except OSError as e:
        raise InputError([unreadable(path, e.strerror or str(e))], EXIT_USAGE) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError([unreadable(path, os.strerror(21))], EXIT_USAGE)   # EISDIR, as the drop-in says
    if not stat.S_ISREG(st.st_mode) and not special:
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise InputError([unreadable(path, f"{kind}, not a regular file (--read-special-files reads it)")],
                         EXIT_USAGE)
    with trio.move_on_after(timeout):
        # abandoned on timeout: a thread stuck in open() on a FIFO cannot be interrupted, but the
        # batch goes on and the thread (a daemon) does not keep the process alive
        return await trio.to_thread.run_sync(read_input_file, path, limit, abandon_on_cancel=True)
    raise InputError([unreadable(path, f"reading it took longer than {timeout:g} s")], EXIT_USAGE)
