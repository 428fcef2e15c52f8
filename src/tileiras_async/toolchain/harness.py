"""Running external tools with a hard deadline, and writing outputs all-or-nothing.

Each child gets its own session (process group) so a timeout can kill everything it spawned,
not just the direct child: ptxas and friends may be wrapper scripts that exec or fork.  Each
child also dies with us: on Linux it asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG),
so a tileiras or batch supervisor killed with SIGKILL leaves no ptxas running.  That signal is
tied to the thread that forked the child, so children are always forked from the calling thread
(never from a thread pool whose idle threads exit).
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


from .errors import OutputWriteError, ToolRunError

# After the group is killed, the pipes normally hit EOF at once; a grandchild that escaped into
# its own session could hold them open forever, so stop waiting for output after this long.
_DRAIN_AFTER_KILL_S = 5.0

StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class ToolResult:
    """What a tool run produced. On timeout, `rc` is the (negative) kill signal and the output
    is whatever had been written before the kill."""

    rc: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float
    timed_out: bool
    memory_exceeded: bool = False    # killed for going past run_tool_async's memory_limit
    peak_rss: int = 0                # the largest sampled resident memory of its process tree

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def run_tool(
    argv: Sequence[StrPath],
    *,
    timeout: float,
    input_bytes: bytes | None = None,
    cwd: StrPath | None = None,
) -> ToolResult:
    """Run argv to completion or until `timeout` seconds pass, whichever is first."""
    argv = [os.fspath(arg) for arg in argv]
    start = time.monotonic()
    proc = _spawn(argv, cwd, has_input=input_bytes is not None)
    try:
        stdout, stderr = proc.communicate(input_bytes, timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout, stderr = _kill_and_drain(proc)
        return ToolResult(proc.returncode, stdout, stderr, time.monotonic() - start, True)
    except BaseException:
        # Ctrl-C or any other surprise must not leave the child running behind us.
        _kill_and_drain(proc)
        raise
    return ToolResult(proc.returncode, stdout, stderr, time.monotonic() - start, False)


def _spawn(argv: list[str], cwd: StrPath | None, *, has_input: bool, stdout=subprocess.PIPE,
           stderr=subprocess.PIPE) -> subprocess.Popen[bytes]:
    stdin = subprocess.PIPE if has_input is True else subprocess.DEVNULL if not has_input else has_input
    try:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
    except OSError as exc:
        raise ToolRunError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """A preexec_fn: the child gets SIGKILL when this process dies (None where unsupported).
    The function it returns runs between fork and exec, so it only calls an already-resolved
    C function and os.getppid/os._exit."""
    if _PRCTL is None:
        return None
    parent = os.getpid()

    def child() -> None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:   # the parent died before the request took effect
            os._exit(1)
    return child


def _kill_and_drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Kill the child's whole process group, reap it, and return what it had written."""
    _kill_group(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=_DRAIN_AFTER_KILL_S)
    except subprocess.TimeoutExpired:
        _close_pipes(proc)
        proc.wait()
        return b"", b""
    return stdout or b"", stderr or b""


def _kill_group(pgid: int) -> None:
    # The child is its session leader, so its pid is the group id; it may have already exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


async def run_tool_async(
    argv: Sequence[StrPath],
    *,
    timeout: float,
    input_bytes: bytes | None = None,
    cwd: StrPath | None = None,
    memory_limit: int = 0,
) -> ToolResult:
    """The trio counterpart of run_tool: same deadline, same group kill, same result.

    Output goes to anonymous temp files rather than pipes so that it survives a cancellation and
    so that waiting for the child never depends on a stray grandchild closing a pipe.  With
    `memory_limit` (bytes), the resident memory of the child's process tree is sampled while it
    runs and the group is killed past the limit (`ToolResult.memory_exceeded`, `peak_rss`).
    """
    import trio  # only async callers pay for the import; the drop-in's start-up stays lean

    argv = [os.fspath(arg) for arg in argv]
    start = time.monotonic()
    with contextlib.ExitStack() as files:
        out = files.enter_context(tempfile.TemporaryFile())
        err = files.enter_context(tempfile.TemporaryFile())
        stdin = False
        if input_bytes is not None:
            stdin = files.enter_context(tempfile.TemporaryFile())
            stdin.write(input_bytes)
            stdin.seek(0)
        # forked here, in the trio thread, which lives as long as the process (see the module doc)
        proc = _spawn(argv, cwd, has_input=stdin, stdout=out, stderr=err)
        watch = _MemoryWatch(proc.pid, memory_limit)
        rc = None
        try:
            with trio.move_on_after(timeout):
                rc = await _wait_async(proc, watch)
        finally:
            if rc is None:   # the deadline, a cancellation, or an error: nothing may outlive us
                _kill_group(proc.pid)
                proc.wait()
        timed_out = rc is None and not watch.exceeded
        if rc is None or watch.exceeded:
            rc = -signal.SIGKILL
        return ToolResult(rc, _read_all(out), _read_all(err), time.monotonic() - start, timed_out,
                          memory_exceeded=watch.exceeded, peak_rss=watch.peak)


class _MemoryWatch:
    """Samples the resident memory of a process and its descendants."""

    PERIOD_S = 0.05

    def __init__(self, pid: int, limit: int):
        self.pid = pid
        self.limit = limit
        self.peak = 0
        self.exceeded = False
        self._proc = None

    def sample(self) -> bool:
        """Record the current total; True when it is over the limit (the group is then killed)."""
        if not self.limit:
            return False
        import psutil
        try:
            if self._proc is None:
                self._proc = psutil.Process(self.pid)
            procs = [self._proc, *self._proc.children(recursive=True)]
        except psutil.Error:
            return False
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        self.peak = max(self.peak, total)
        if total > self.limit:
            self.exceeded = True
            _kill_group(self.pid)
            return True
        return False


async def _wait_async(proc: subprocess.Popen[bytes], watch: _MemoryWatch) -> int:
    """The child's exit status, without blocking the event loop: a pidfd becomes readable when it
    exits (Linux 5.3+); elsewhere, polling.  The memory watch samples between waits."""
    import trio

    pidfd = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(proc.pid)
    try:
        delay = 0.002
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc
            if watch.sample():
                return proc.wait()
            period = watch.PERIOD_S if watch.limit else 3600.0
            if pidfd is not None:
                with trio.move_on_after(period):
                    await trio.lowlevel.wait_readable(pidfd)
            else:
                await trio.sleep(min(delay, period))
                delay = min(delay * 2, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _read_all(handle: BinaryIO) -> bytes:
    handle.seek(0)
    return handle.read()


def write_atomic(path: StrPath, data: bytes) -> None:
    """Write `data` to `path` so readers see either the old file or the complete new one."""
    with atomic_output(path) as handle:
        try:
            handle.write(data)
        except OSError as exc:
            raise OutputWriteError(path, exc) from None


@contextlib.contextmanager
def atomic_output(path: StrPath) -> Iterator[BinaryIO]:
    """Yield a file that replaces `path` only if the with-block completes; on any error the
    partial temp file is removed and `path` is left untouched.

    Failures of the write itself raise OutputWriteError; exceptions from the with-block pass
    through unchanged.
    """
    target = Path(path)
    fd, tmp_name = _make_temp_beside(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            _finish_temp(handle, target)
        _replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def _make_temp_beside(target: Path) -> tuple[int, str]:
    # Same directory as the target, so os.replace is a rename, never a cross-device copy.
    try:
        return tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputWriteError(target, exc) from None


def _finish_temp(handle: BinaryIO, target: Path) -> None:
    try:
        handle.flush()
        os.fsync(handle.fileno())
        # mkstemp creates 0600; give the output the mode a plain open() would have.
        os.fchmod(handle.fileno(), 0o666 & ~_umask())
    except OSError as exc:
        raise OutputWriteError(target, exc) from None


def _replace(tmp_name: str, target: Path) -> None:
    try:
        os.replace(tmp_name, target)
    except OSError as exc:
        raise OutputWriteError(target, exc) from None


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    # Reading the umask means setting it; do that once rather than racing other threads per write.
    current = os.umask(0o022)
    os.umask(current)
    return current
