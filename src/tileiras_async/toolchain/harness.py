"""Running external tools with a hard deadline, and writing outputs all-or-nothing.

Each child gets its own session (process group) so a timeout can kill everything it spawned,
not just the direct child: ptxas and friends may be wrapper scripts that exec or fork.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
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


def _spawn(argv: list[str], cwd: StrPath | None, *, has_input: bool) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if has_input else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolRunError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


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
) -> ToolResult:
    """The trio counterpart of run_tool: same deadline, same group kill, same result.

    Output goes to anonymous temp files rather than pipes so that it survives a cancelled
    trio.run_process (which discards captured pipe output) and so that waiting for the child
    never depends on a stray grandchild closing a pipe.
    """
    import trio  # only async callers pay for the import; the drop-in's start-up stays lean

    argv = [os.fspath(arg) for arg in argv]
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        completed = None
        with trio.move_on_after(timeout) as deadline:
            completed = await _run_process(argv, cwd, input_bytes, out, err)
        timed_out = deadline.cancelled_caught
        rc = completed.returncode if completed is not None else -signal.SIGKILL
        return ToolResult(rc, _read_all(out), _read_all(err), time.monotonic() - start, timed_out)


async def _run_process(
    argv: list[str], cwd: StrPath | None, input_bytes: bytes | None, out: BinaryIO, err: BinaryIO
) -> subprocess.CompletedProcess[bytes]:
    import trio

    try:
        return await trio.run_process(
            argv,
            stdin=subprocess.DEVNULL if input_bytes is None else input_bytes,
            stdout=out,
            stderr=err,
            cwd=cwd,
            check=False,
            start_new_session=True,
            deliver_cancel=_deliver_cancel_to_group,
        )
    except OSError as exc:
        raise ToolRunError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


async def _deliver_cancel_to_group(process) -> None:  # a trio.Process
    # trio's default is SIGTERM-then-SIGKILL to the child alone; we want the whole group, now.
    _kill_group(process.pid)


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
