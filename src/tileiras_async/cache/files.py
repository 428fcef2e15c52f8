"""File helpers of the cache and the drop-in: all-or-nothing writes, and directory listings that never raise.

A write goes to a uniquely named temporary file beside the target, which is then renamed over it
(a rename within one directory is atomic on POSIX): readers see the old file or the complete new
one, never a part.  Only `os` is imported: this runs on the drop-in's cache-hit path.
"""
from __future__ import annotations

import itertools
import os
import time

_counter = itertools.count()


def temp_name(path: str) -> str:
    """A name beside `path` that no other process or thread picks (pid, counter, clock)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.{os.getpid()}.{next(_counter)}.{time.time_ns()}.tmp")


def write_atomic(path: str, data: bytes, *, mode: int = 0o666, unlink_first: bool = False) -> None:
    """Replace `path` by `data`; raises OSError (with the target's name) and leaves `path` as it was.

    `mode` is filtered by the umask as open() would.  No fsync: a compiler's outputs need not survive
    a power cut (ptxas does not sync either), and a torn cache entry fails its checksum and is
    recompiled; an fsync costs more than the rest of a cache hit.

    `unlink_first` removes an existing `path` just before the rename: readers may then find no file
    for a moment (never a partial one), and the rename does not replace a file, which on ext4 forces
    the new file's data to disk first (auto_da_alloc): milliseconds, more than a cache hit's own work.
    """
    tmp = temp_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        raise OSError(e.errno, e.strerror, path) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if unlink_first:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                pass  # the rename reports it
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OSError(e.errno, e.strerror, path) from None
        raise


def scandir(path: str) -> list:
    """The entries of a directory ([] when it cannot be read)."""
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def listdir(path: str) -> list[str]:
    """The names in a directory ([] when it cannot be read)."""
    try:
        return os.listdir(path)
    except OSError:
        return []
