"""The worker pool: trio-parallel processes, with the supervision trio-parallel leaves to us.

trio-parallel gives: spawned worker processes reused across jobs (warm caches), SIGINT
ignored in workers, SIGKILL of a worker whose job is cancelled (`kill_on_cancel`), and
`BrokenWorkerError` (carrying the process and its exit code) when a worker dies.  On top of
it this module adds:

* a notification socket (AF_UNIX datagrams): each worker says hello when it is ready and
  names itself when it picks up a job, so the supervisor knows job -> worker pid as it
  happens (for events, and for the watchdog);
* the stage timeout, armed when the worker begins the job (worker start-up is not charged
  to the job) and enforced by cancelling the job's scope -> trio-parallel kills the worker;
* a psutil watchdog that samples busy workers' RSS and SIGKILLs one above the memory limit;
* a priority slot limiter of size -j shared with the supervisor's ptxas runs, so that later
  stages of admitted modules go before earlier stages of new ones.

A killed or crashed worker is replaced by trio-parallel on the next job; the job that was on
it raises WorkerFault and becomes a diagnostic for its module.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import secrets
import signal
import socket as _socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import msgspec
import trio
import trio_parallel

from .events import StageFinished, StageStarted, WorkerExited, WorkerSample, WorkerStarted
from .messages import STAGE_TYPES, FaultSpec, JobBegun, JobReply, JobRequest, WorkerHello, WorkerNote
from .tools import signal_name
from .worker import run_job, worker_init

WATCHDOG_PERIOD_S = 0.05
SAMPLE_PERIOD_S = 1.0
STARTUP_ALLOWANCE_S = 120.0   # a job whose worker never says "begun" still times out eventually
SHUTDOWN_GRACE_S = 5.0


class WorkerFault(Exception):
    """The job's worker died or was killed; `message` is the diagnostic for its module."""

    def __init__(self, reason: str, message: str, pid: int | None = None):
        super().__init__(message)
        self.reason = reason      # crashed | timeout | memory
        self.message = message
        self.pid = pid


class StageRaised(Exception):
    """The stage function raised inside the worker (the worker survives)."""


class PrioritySlots:
    """A counting limiter whose waiters are served lowest priority tuple first (FIFO on ties)."""

    def __init__(self, total: int):
        self.total = total
        self._free = total
        self._waiters: list[list[Any]] = []
        self._seq = itertools.count()

    @contextlib.asynccontextmanager
    async def acquire(self, priority: tuple = ()):
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free > 0 and not self._waiters:
            self._free -= 1
        else:
            entry = [priority, next(self._seq), trio.Event(), False]  # [.., .., event, granted]
            heapq.heappush(self._waiters, entry)
            try:
                await entry[2].wait()
            except BaseException:
                if entry[3]:
                    self._release()
                else:
                    entry[3] = None  # tombstone: skipped by _release
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiters:
            entry = heapq.heappop(self._waiters)
            if entry[3] is None:
                continue
            entry[3] = True
            entry[2].set()
            return
        self._free += 1

    def resize(self, total: int) -> None:
        """Change the number of slots (a Dask cluster grows or loses workers); held slots stay held."""
        self._free += total - self.total
        self.total = total
        while self._free > 0 and any(e[3] is not None for e in self._waiters):
            self._free -= 1
            self._release()

    @property
    def busy(self) -> int:
        return self.total - self._free


@dataclass
class _Job:
    id: int
    stage: str
    module: str
    target: str | None
    kernel: str | None
    submitted: float
    scope: trio.CancelScope | None = None
    pid: int | None = None
    begun: float | None = None
    started_emitted: bool = False
    kill_reason: str | None = None
    kill_detail: str = ""
    peak_rss: int = 0
    last_sample: float = 0.0
    priority: tuple = ()
    worker: str | None = None       # a Dask worker's address (DaskPool)


class _NoLimit:
    async def __aenter__(self):
        return None

    async def __aexit__(self, *exc):
        return False


@dataclass
class PoolStats:
    jobs: int = 0
    overhead_s: float = 0.0          # encode + IPC + decode, summed over warm jobs
    cold_jobs: int = 0
    workers_started: int = 0
    startup_s: float = 0.0
    per_stage_overhead: dict[str, float] = field(default_factory=dict)


class WorkerPool:
    """`async with WorkerPool(...) as pool: reply = await pool.run(...)`."""

    def __init__(self, jobs: int, *, emit: Callable[..., None], stage_timeout_s: float, memory_limit_bytes: int,
                 slots: PrioritySlots | None = None, fault: FaultSpec | None = None, warm_targets=(),
                 opt_level: int = 3):
        self.jobs = jobs
        self.slots = slots or PrioritySlots(jobs)
        self._emit = emit
        self.stage_timeout_s = stage_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.fault = fault
        self._warm_targets = tuple(warm_targets)
        self._opt_level = opt_level
        self._ids = itertools.count(1)
        self._active: dict[int, _Job] = {}
        self._known_pids: set[int] = set()
        self._procs: dict[int, Any] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self._reply_decoder = msgspec.msgpack.Decoder(JobReply)
        self._response_decoders = {s: msgspec.msgpack.Decoder(resp) for s, (_req, resp) in STAGE_TYPES.items()}
        self._note_decoder = msgspec.msgpack.Decoder(WorkerNote)
        self.stats = PoolStats()
        self._stack = contextlib.AsyncExitStack()
        self._tmpdir: str | None = None

    def next_job_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "WorkerPool":
        stack = self._stack
        await stack.__aenter__()
        try:
            sock, addr = await self._open_notify_socket()
            stack.callback(sock.close)
            init = partial(worker_init, addr, self._warm_targets, self._opt_level)
            self._ctx = await stack.enter_async_context(trio_parallel.open_worker_context(
                idle_timeout=math.inf, init=init, grace_period=SHUTDOWN_GRACE_S,
                worker_type=trio_parallel.WorkerType.SPAWN))
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)  # runs first on exit: stop the helper tasks
            nursery.start_soon(self._receive_notes, sock)
            nursery.start_soon(self._watchdog)
        except BaseException:
            await stack.__aexit__(*sys.exc_info())
            raise
        return self

    async def __aexit__(self, *exc) -> bool | None:
        try:
            return await self._stack.__aexit__(*exc)
        except trio_parallel.BrokenWorkerError:
            return None  # a worker that would not shut down in time was killed: nothing left behind
        finally:
            if self._tmpdir:
                with contextlib.suppress(OSError):
                    os.rmdir(self._tmpdir)

    async def _open_notify_socket(self):
        sock = trio.socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
        if sys.platform.startswith("linux"):
            addr: bytes | str = b"\0tileiras-async-" + secrets.token_hex(8).encode()
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="tia-")
            addr = os.path.join(self._tmpdir, "notify")
        await sock.bind(addr)
        with contextlib.suppress(OSError):
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVBUF, 1 << 20)
        return sock, addr

    # ------------------------------------------------------------------ jobs

    async def run(self, stage: str, request: msgspec.Struct, *, module: str, target: str | None = None,
                  kernel: str | None = None, priority: tuple = (), job_id: int | None = None):
        """Run one stage in a worker; returns the stage's response message.

        Raises WorkerFault (worker died/killed: crash, timeout, memory) or StageRaised.
        """
        job = _Job(job_id or self.next_job_id(), stage, module, target, kernel, time.monotonic(), priority=priority)
        async with self.slots.acquire(priority):
            return await self._run_in_slot(job, request)

    async def _run_in_slot(self, job: _Job, request: msgspec.Struct):
        t_sent = time.monotonic()
        wire = self._encoder.encode(JobRequest(job.id, job.stage, self._encoder.encode(request), job.module,
                                               job.kernel or "", self.fault))
        self._active[job.id] = job
        try:
            # (trio's clock is not time.monotonic: deadlines are relative to trio.current_time())
            with trio.CancelScope(deadline=trio.current_time() + self.stage_timeout_s + STARTUP_ALLOWANCE_S) as scope:
                job.scope = scope
                try:
                    raw = await self._ctx.run_sync(run_job, wire, kill_on_cancel=True, limiter=_NoLimit())
                except trio_parallel.BrokenWorkerError as e:
                    raise self._fault_from_broken(job, e) from None
                except Exception as e:  # noqa: BLE001 - e.g. the job could not be pickled or unpickled
                    self._worker_gone(None, "", None, job)
                    raise StageRaised(f"{type(e).__name__}: {e}") from None
            if scope.cancelled_caught:
                raise self._timeout_fault(job)
            reply = self._reply_decoder.decode(raw)
            response = self._response_decoders[job.stage].decode(reply.payload) if reply.ok else None
        finally:
            del self._active[job.id]
        t_done = time.monotonic()
        self._account(job, reply, t_sent, t_done, reply.ok and getattr(response, "ok", True))
        if not reply.ok:
            raise StageRaised(reply.error)
        return response

    def _account(self, job: _Job, reply: JobReply, t_sent: float, t_done: float, ok: bool) -> None:
        if not job.started_emitted:
            self._emit_started(job, reply.pid, reply.received_at)
        if reply.cold:
            # the worker was spawned for this job: charge only what follows its start-up
            overhead = (t_done - max(reply.ready_at, t_sent)) - reply.elapsed_s
            self.stats.cold_jobs += 1
        else:
            overhead = (t_done - t_sent) - reply.elapsed_s
        overhead = max(overhead, 0.0)
        self.stats.jobs += 1
        self.stats.overhead_s += overhead
        self.stats.per_stage_overhead[job.stage] = self.stats.per_stage_overhead.get(job.stage, 0.0) + overhead
        self._emit(StageFinished, job=job.id, stage=job.stage, module=job.module, ok=ok,
                   elapsed_s=reply.elapsed_s, target=job.target, kernel=job.kernel, worker_pid=reply.pid,
                   rss_bytes=reply.rss_bytes, peak_rss_bytes=reply.peak_rss_bytes, overhead_s=overhead,
                   worker=job.worker)

    def _emit_started(self, job: _Job, pid: int | None, at: float | None = None) -> None:
        job.started_emitted = True
        queued = max(0.0, (at or time.monotonic()) - job.submitted)
        self._emit(StageStarted, job=job.id, stage=job.stage, module=job.module, target=job.target,
                   kernel=job.kernel, worker_pid=pid, queued_s=queued, worker=job.worker)

    def _fault_from_broken(self, job: _Job, e: BaseException) -> WorkerFault:
        proc = e.args[-1] if e.args else None
        pid = getattr(proc, "pid", None) or job.pid
        code = getattr(proc, "exitcode", None)
        sig = signal_name(-code) if isinstance(code, int) and code < 0 else None
        if job.kill_reason == "memory":
            reason, message = "memory", f"worker {pid} killed: {job.kill_detail}"
        else:
            how = f"signal {sig}" if sig else f"exit status {code}"
            reason, message = "crashed", f"worker {pid} died ({how}) during {job.stage}"
        self._worker_gone(pid, reason, code, job)
        return WorkerFault(reason, message, pid)

    def _timeout_fault(self, job: _Job) -> WorkerFault:
        limit = self.stage_timeout_s
        message = (f"{job.stage} timed out after {limit:g} s: worker {job.pid} killed" if job.pid
                   else f"{job.stage} did not start within {limit + STARTUP_ALLOWANCE_S:g} s")
        self._worker_gone(job.pid, "timeout", -signal.SIGKILL, job)
        return WorkerFault("timeout", message, job.pid)

    def _worker_gone(self, pid: int | None, reason: str, code: int | None, job: _Job) -> None:
        if not job.started_emitted:
            self._emit_started(job, pid)
        self._emit(StageFinished, job=job.id, stage=job.stage, module=job.module, ok=False,
                   elapsed_s=time.monotonic() - (job.begun or job.submitted), target=job.target, kernel=job.kernel,
                   worker_pid=pid, peak_rss_bytes=job.peak_rss, worker=job.worker)
        if pid is not None and reason:
            self._known_pids.discard(pid)
            self._procs.pop(pid, None)
            self._emit(WorkerExited, pid=pid, reason=reason, exit_code=code,
                       signal=signal.Signals(-code).name if isinstance(code, int) and code < 0 else None,
                       job=job.id)

    # ------------------------------------------------------------------ helper tasks

    async def _receive_notes(self, sock) -> None:
        while True:
            data = await sock.recv(65536)
            try:
                note = self._note_decoder.decode(data)
            except msgspec.DecodeError:
                continue
            now = time.monotonic()
            if isinstance(note, WorkerHello):
                self._known_pids.add(note.pid)
                self.stats.workers_started += 1
                self.stats.startup_s += note.startup_s
                self._emit(WorkerStarted, pid=note.pid)
            elif isinstance(note, JobBegun):
                job = self._active.get(note.job)
                if job is None or job.begun is not None:
                    continue
                job.pid, job.begun = note.pid, now
                if job.scope is not None:
                    job.scope.deadline = trio.current_time() + self.stage_timeout_s
                self._emit_started(job, note.pid, now)

    async def _watchdog(self) -> None:
        """Sample busy workers' RSS; SIGKILL one that is over the memory limit."""
        import psutil
        while True:
            await trio.sleep(WATCHDOG_PERIOD_S)
            now = time.monotonic()
            for job in list(self._active.values()):
                if job.pid is None or job.kill_reason:
                    continue
                proc = self._procs.get(job.pid)
                try:
                    if proc is None:
                        proc = self._procs[job.pid] = psutil.Process(job.pid)
                    rss = proc.memory_info().rss
                except (psutil.Error, OSError):
                    continue
                job.peak_rss = max(job.peak_rss, rss)
                if self.memory_limit_bytes and rss > self.memory_limit_bytes:
                    job.kill_reason = "memory"
                    job.kill_detail = (f"resident memory {_mib(rss)} exceeded the limit of "
                                       f"{_mib(self.memory_limit_bytes)} during {job.stage}")
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(job.pid, signal.SIGKILL)
                    continue
                if not job.last_sample:
                    job.last_sample = now  # short jobs report their RSS in StageFinished only
                elif now - job.last_sample >= SAMPLE_PERIOD_S:
                    job.last_sample = now
                    self._emit(WorkerSample, pid=job.pid, rss_bytes=rss, job=job.id)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"
