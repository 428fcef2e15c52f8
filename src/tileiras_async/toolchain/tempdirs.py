"""Temporary directories that do not outlive their process.

Every temporary directory the compiler makes (ptxas and nvdisasm work directories) lives under one
directory per process, <tmp>/tileiras-async-<uid>/<pid>-<start time>/, which the process removes
when it exits.  A process killed with SIGKILL cannot; so the first temporary directory any later
process asks for sweeps the per-process directories whose owner is gone, and a batch worker whose
supervisor died sweeps on its way out.  The owner holds an flock on the directory's `.lock` for
its whole life: the kernel drops it the moment the owner dies, which is what "gone" means (a
pid and start time that no longer match say the same where the lock file is missing).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_mine: dict[int, str] = {}    # pid -> its directory (a forked child gets its own)


def root() -> str:
    return os.path.join(tempfile.gettempdir(), f"tileiras-async-{os.getuid()}")


def start_time(pid: int) -> str | None:
    """When process `pid` started (an opaque token), or None if there is no such process (or only
    its zombie: a process killed with SIGKILL stays one until its parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # stat(5): field 3 is the state, field 22 the start time in clock ticks since boot
        return None if fields[0] in (b"Z", b"X") else fields[19].decode()
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        import psutil
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else f"{proc.create_time():.2f}"
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess and friends
        return None


_PF_EXITING = 0x4   # include/linux/sched.h: set as soon as a task starts to exit


def exiting(pid: int) -> bool:
    """Whether `pid` is gone or on its way out (Linux: its stat flags say PF_EXITING)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError):
        return False


def _private_root() -> str | None:
    """The shared root, created 0700 and owned by us; None if it cannot be trusted."""
    path = root()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def process_dir() -> str | None:
    """This process's directory (created on first use, removed at exit); None when no private root
    can be made (callers then use the system temp directory directly)."""
    pid = os.getpid()
    with _lock:
        if pid in _mine:
            return _mine[pid]
        base = _private_root()
        if base is None:
            return None
        sweep(base)
        token = start_time(pid) or "0"   # (never None for ourselves)
        path = os.path.join(base, f"{pid}-{token}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        _hold_lock(path)
        _mine[pid] = path
        atexit.register(_remove, pid, path)
        return path


def _remove(pid: int, path: str) -> None:
    if os.getpid() == pid:   # not in a forked child that inherited the atexit hook
        shutil.rmtree(path, ignore_errors=True)


_held: list[int] = []   # the lock file descriptors this process keeps open


def _hold_lock(path: str) -> None:
    try:
        import fcntl
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held.append(fd)
    except (ImportError, OSError):
        pass   # the pid and start time still identify the owner


LOCK_NAME = ".lock"


def owner_gone(name: str, base: str | None = None) -> bool:
    """Whether the per-process directory `name` (pid-start) belongs to a process that has exited."""
    pid_text, _, token = name.partition("-")
    if not pid_text.isdigit():
        return False
    lock = os.path.join(base or root(), name, LOCK_NAME)
    try:
        import fcntl
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except (ImportError, OSError):
        return start_time(int(pid_text)) != token
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep(base: str | None = None) -> list[str]:
    """Remove the per-process directories of processes that are gone; returns what was removed."""
    base = base or root()
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.is_dir(follow_symlinks=False) and owner_gone(entry.name, base):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def mkdtemp(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=process_dir())


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    """A directory under this process's directory, removed when the block ends."""
    path = mkdtemp(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
