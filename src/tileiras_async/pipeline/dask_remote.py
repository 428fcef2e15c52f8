"""What runs on a Dask worker: one compile job in a sandbox process, with the job's limits.

Dask runs tasks in threads of its worker process, where a stage that hangs, segfaults or
allocates without bound would take the Dask worker with it (and Dask would then retry the
task on the next worker, and the next).  So the task Dask runs, `run_remote`, only forwards
the job's msgpack bytes to a *sandbox*: a child process of the Dask worker (one per worker
thread, started on first use and reused, so the compiler's caches stay warm) that runs
`worker.run_job` exactly as a local pool worker does.  The task enforces the stage timeout
and the memory limit on the sandbox and kills it when one is exceeded; the answer is a
`RemoteOutcome` whose `fault` says why.  A Dask worker that dies (killed, lost host) is
Dask's business: the scheduler retries its tasks elsewhere, up to its `allowed-failures`.

The sandbox is a plain `python -m tileiras_async.pipeline.dask_remote` subprocess speaking
length-prefixed frames on stdin/stdout (not multiprocessing: Dask's worker processes are
daemonic, and daemonic processes may not have multiprocessing children).

Nothing here imports Dask at module level: the sandbox never loads it.
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time

import msgspec

BEGUN_TOPIC = "tileiras-async-begun"
POLL_S = 0.05
_HEADER = struct.Struct("<I")


class RemoteOutcome(msgspec.Struct, frozen=True):
    """The task's result: the worker's JobReply bytes, or why there is none."""
    reply: bytes = b""
    fault: str = ""            # "" | crashed | timeout | memory
    detail: str = ""
    worker: str = ""           # the Dask worker's address
    pid: int = 0               # the sandbox's pid
    worker_pid: int = 0        # the Dask worker process's pid


class _Sandbox:
    """One child process running `worker.run_job` on the frames it reads."""

    def __init__(self, warm_targets: tuple[str, ...], opt_level: int):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tileiras_async.pipeline.dask_remote", "--sandbox", ",".join(warm_targets),
             str(opt_level)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "TILEIRAS_ASYNC_SANDBOX": "1"})

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int | None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(5)
        return None

    def call(self, wire: bytes, timeout_s: float, memory_limit: int) -> tuple[bytes, str, str]:
        """(reply, fault, detail): send one job and wait for its reply within the limits."""
        import psutil
        try:
            self.proc.stdin.write(_HEADER.pack(len(wire)) + wire)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return b"", "crashed", self._death()
        started = time.monotonic()
        out = self.proc.stdout
        try:
            ps = psutil.Process(self.proc.pid)
        except psutil.Error:
            ps = None
        while True:
            ready, _, _ = select.select([out], [], [], POLL_S)
            if ready:
                header = out.read(_HEADER.size)
                if len(header) < _HEADER.size:
                    return b"", "crashed", self._death()
                (n,) = _HEADER.unpack(header)
                reply = out.read(n)
                if len(reply) < n:
                    return b"", "crashed", self._death()
                return reply, "", ""
            if time.monotonic() - started > timeout_s:
                self.kill()
                return b"", "timeout", f"timed out after {timeout_s:g} s: sandbox {self.proc.pid} killed"
            if memory_limit and ps is not None:
                with contextlib.suppress(psutil.Error):
                    rss = ps.memory_info().rss
                    if rss > memory_limit:
                        self.kill()
                        return b"", "memory", (f"sandbox {self.proc.pid} killed: resident memory "
                                               f"{rss >> 20} MiB exceeded the limit of {memory_limit >> 20} MiB")

    def _death(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit status {code}"
        return f"sandbox {self.proc.pid} died ({how})"


_local = threading.local()


def _sandbox(warm_targets: tuple[str, ...], opt_level: int) -> _Sandbox:
    box = getattr(_local, "sandbox", None)
    if box is None or not box.alive:
        box = _local.sandbox = _Sandbox(warm_targets, opt_level)
    return box


def _announce(job: int, pid: int) -> tuple[str, int]:
    """Tell the supervisor (through the scheduler's event log) that this worker began the job."""
    try:
        from distributed import get_worker
        worker = get_worker()
    except (ImportError, ValueError):
        return "", os.getpid()
    with contextlib.suppress(Exception):  # an unannounced job still runs; only the timing is coarser
        worker.log_event(BEGUN_TOPIC, {"job": job, "worker": worker.address, "pid": os.getpid(), "sandbox": pid})
    return worker.address, os.getpid()


def run_remote(wire: bytes, job: int, timeout_s: float, memory_limit: int, warm_targets: tuple[str, ...] = (),
               opt_level: int = 3) -> bytes:
    """The Dask task: one job (JobRequest bytes) -> RemoteOutcome bytes."""
    box = _sandbox(tuple(warm_targets), opt_level)
    address, worker_pid = _announce(job, box.proc.pid)
    reply, fault, detail = box.call(wire, timeout_s, memory_limit)
    return msgspec.msgpack.encode(RemoteOutcome(reply, fault, detail, address, box.proc.pid, worker_pid))


# ---------------------------------------------------------------------- the sandbox process

def _sandbox_main(targets: str, opt_level: str) -> int:
    # the frames travel on the original stdout; whatever a stage prints goes to stderr instead
    frames_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    frames_in = sys.stdin.buffer
    from .worker import run_job, worker_init
    worker_init(None, tuple(t for t in targets.split(",") if t), int(opt_level))
    while True:
        header = frames_in.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return 0
        (n,) = _HEADER.unpack(header)
        reply = run_job(frames_in.read(n))
        frames_out.write(_HEADER.pack(len(reply)) + reply)
        frames_out.flush()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--sandbox":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor's Ctrl-C is for the supervisor
    sys.exit(_sandbox_main(sys.argv[2], sys.argv[3]))
