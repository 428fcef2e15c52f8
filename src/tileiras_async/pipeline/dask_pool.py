"""The worker pool on a Dask cluster: `compile --cluster tcp://HOST:PORT` or `--cluster local:N`.

The same interface as `pool.WorkerPool` (the supervisor cannot tell them apart, except that
ptxas runs on the cluster too: `remote_assemble`), so planning, ordering, events, the summary
and the dashboard stay in the trio supervisor.  What crosses to Dask is msgpack bytes only:
a task is `dask_remote.run_remote(JobRequest bytes, ...)` and its result is `RemoteOutcome`
bytes; Dask never sees the compiler's objects.

Dask's client is synchronous here and lives in one bridge thread, off the trio loop:

    trio tasks --submit/cancel--> queue --> bridge thread (Client) --done--> memory channel --> trio

Dask's own callbacks (a future finished, a worker announced a job) only put a note on the
bridge's queue or the trio channel; the bridge thread fetches results, so the trio loop never
blocks.  A Dask worker that dies mid-task is Dask's to handle: the scheduler re-runs the task
on another worker (the event stream gets `stage_retried` when the job begins again elsewhere,
and `worker_exited` with reason "lost"); a task that has killed `allowed-failures` workers
comes back as KilledWorker and its module fails.  Stage timeouts and memory limits are
enforced on the worker by `dask_remote` (the job's sandbox process is killed); the supervisor
keeps a backstop deadline of its own.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import queue
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec
import trio

from .config import EXIT_CONFIG
from .dask_remote import BEGUN_TOPIC, RemoteOutcome, run_remote
from .events import ClusterState, ClusterWorker, StageRetried, WorkerExited, WorkerStarted
from .messages import JobReply, JobRequest
from .pool import STARTUP_ALLOWANCE_S, PrioritySlots, StageRaised, WorkerFault, WorkerPool, _Job

LOCAL_PREFIX = "local:"
POLL_PERIOD_S = 1.0
BACKSTOP_GRACE_S = 30.0     # the worker enforces the stage timeout; this only catches a lost answer
EXIT_CLUSTER = EXIT_CONFIG


class ClusterError(Exception):
    """The cluster could not be reached or started; `str()` is the one-line reason."""


def parse_cluster(spec: str) -> tuple[str, int | str]:
    """`local:N` -> ("local", N); `tcp://HOST:PORT` (or any Dask address) -> ("address", spec)."""
    if spec.startswith(LOCAL_PREFIX):
        n = spec[len(LOCAL_PREFIX):]
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"invalid --cluster '{spec}': local:N needs a positive number of workers")
        return "local", int(n)
    if "://" not in spec or spec.endswith("://"):
        raise ValueError(f"invalid --cluster '{spec}': expected tcp://HOST:PORT (a Dask scheduler) or local:N")
    return "address", spec


def require_distributed() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ClusterError("--cluster needs Dask's distributed package: pip install 'tileiras-async[dask]'") from None


def _dask_priority(priority: tuple) -> int:
    """Our (stage rank, module index) -- lower first -- as Dask's integer priority (higher first)."""
    rank, index = (tuple(priority) + (0, 0))[:2]
    return -(int(rank) * 1_000_000 + int(index))


@dataclass
class _Pending:
    job: _Job
    done: trio.Event = field(default_factory=trio.Event)
    outcome: Any = None            # ("ok", bytes) | ("error", kind, message)
    workers: list[str] = field(default_factory=list)


class _Bridge(threading.Thread):
    """Owns the Dask client; everything that may block on the network happens here."""

    def __init__(self, spec: str, deliver: Callable[[tuple], None]):
        super().__init__(name="tileiras-async-dask", daemon=True)
        self.spec = spec
        self.deliver = deliver           # thread-safe: hands a note to the trio side
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.client = None
        self.cluster = None
        self.address = ""
        self.futures: dict[int, Any] = {}
        self.connected = threading.Event()
        self.error: BaseException | None = None

    # -- runs in the bridge thread
    def run(self) -> None:
        try:
            self._connect()
        except BaseException as e:  # noqa: BLE001 - reported by the trio side
            self.error = e
            self.connected.set()
            return
        self.connected.set()
        try:
            self._loop()
        finally:
            self._disconnect()

    def _connect(self) -> None:
        from distributed import Client
        kind, value = parse_cluster(self.spec)
        if kind == "local":
            from distributed import LocalCluster
            self.cluster = LocalCluster(n_workers=int(value), threads_per_worker=1, processes=True,
                                        host="127.0.0.1", dashboard_address=None, silence_logs=50)
            self.client = Client(self.cluster, set_as_default=False)
        else:
            # how long to try: Dask's own setting (distributed.comm.timeouts.connect, e.g.
            # DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s), as for any Dask client
            import dask
            from dask.utils import parse_timedelta
            wait = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
            try:
                self.client = Client(value, set_as_default=False)
            except (OSError, TimeoutError) as e:
                raise ClusterError(f"cannot reach the Dask scheduler at {value}: {e}") from None
            try:
                self.client.wait_for_workers(1, timeout=max(wait, 1.0))
            except (TimeoutError, OSError):
                raise ClusterError(f"the Dask cluster at {value} has no workers (waited {wait:g} s)") from None
        self.address = self.client.scheduler.address
        self.client.subscribe_topic(BEGUN_TOPIC, lambda ev: self.deliver(("begun", ev[1])))

    def _loop(self) -> None:
        while True:
            try:
                command = self.commands.get(timeout=POLL_PERIOD_S)
            except queue.Empty:
                self._poll()
                continue
            op = command[0]
            if op == "stop":
                return
            if op == "submit":
                _, job, key, args, priority = command
                future = self.client.submit(run_remote, *args, key=key, pure=False, priority=priority)
                self.futures[job] = future
                future.add_done_callback(lambda f, job=job: self.commands.put(("done", job)))
            elif op == "cancel":
                future = self.futures.pop(command[1], None)
                if future is not None:
                    with contextlib.suppress(Exception):
                        future.cancel()
            elif op == "done":
                future = self.futures.pop(command[1], None)
                if future is not None:
                    self.deliver(("result", command[1], self._result(future)))
            elif op == "poll":
                self._poll()

    def _result(self, future) -> tuple:
        from distributed import KilledWorker
        try:
            return ("ok", future.result())
        except KilledWorker as e:
            return ("error", "killed", str(e))
        except Exception as e:  # noqa: BLE001 - a task error, a cancelled future, a lost connection
            return ("error", "raised", f"{type(e).__name__}: {e}")

    def _poll(self) -> None:
        try:
            info = self.client.sync(self.client.scheduler.identity)
        except Exception:  # noqa: BLE001 - a scheduler that stopped answering shows up in the results
            return
        self.deliver(("cluster", info))

    def _disconnect(self) -> None:
        with contextlib.suppress(Exception):
            if self.futures:
                self.client.cancel(list(self.futures.values()))
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()

    # -- called from the trio thread (never blocks)
    def submit(self, job: int, key: str, args: tuple, priority: int) -> None:
        self.commands.put(("submit", job, key, args, priority))

    def cancel(self, job: int) -> None:
        self.commands.put(("cancel", job))

    def stop(self) -> None:
        self.commands.put(("stop",))


class DaskPool(WorkerPool):
    """`async with DaskPool(spec, ...) as pool: reply = await pool.run(...)` (see WorkerPool)."""

    remote_assemble = True

    def __init__(self, cluster: str, *, emit: Callable[..., None], stage_timeout_s: float, memory_limit_bytes: int,
                 slots: PrioritySlots | None = None, fault=None, warm_targets=(), opt_level: int = 3):
        super().__init__(1, emit=emit, stage_timeout_s=stage_timeout_s, memory_limit_bytes=memory_limit_bytes,
                         slots=slots, fault=fault, warm_targets=warm_targets, opt_level=opt_level)
        self.spec = cluster
        self.scheduler = ""
        self._run_id = secrets.token_hex(4)
        self._pending: dict[int, _Pending] = {}
        self._workers: dict[str, ClusterWorker] = {}
        self._pids: dict[str, int] = {}        # Dask worker address -> its process id
        self._sandboxes: dict[str, int] = {}   # Dask worker address -> the sandbox running our jobs
        self._done_by: dict[str, int] = {}
        self._bridge: _Bridge | None = None
        self._decode_outcome = msgspec.msgpack.Decoder(RemoteOutcome).decode

    async def __aenter__(self) -> "DaskPool":
        require_distributed()
        send, receive = trio.open_memory_channel(math.inf)
        token = trio.lowlevel.current_trio_token()

        def deliver(note: tuple) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(send.send_nowait, note)

        bridge = self._bridge = _Bridge(self.spec, deliver)
        bridge.start()
        await trio.to_thread.run_sync(bridge.connected.wait, abandon_on_cancel=True)
        if bridge.error is not None:
            error = bridge.error
            if isinstance(error, ClusterError):
                raise error
            raise ClusterError(f"cannot use the Dask cluster '{self.spec}': {type(error).__name__}: {error}")
        self.scheduler = bridge.address
        stack = self._stack
        await stack.__aenter__()
        try:
            stack.push_async_callback(self._shutdown)
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)
            nursery.start_soon(self._dispatch, receive)
            bridge.commands.put(("poll",))
        except BaseException:
            await stack.__aexit__(*sys.exc_info())
            raise
        return self

    async def _shutdown(self) -> None:
        if self._bridge is not None:
            self._bridge.stop()
            await trio.to_thread.run_sync(self._bridge.join, 30.0, abandon_on_cancel=True)

    # ------------------------------------------------------------------ jobs

    async def _run_in_slot(self, job: _Job, request: msgspec.Struct):
        assert self._bridge is not None
        t_sent = time.monotonic()
        wire = self._encoder.encode(JobRequest(job.id, job.stage, self._encoder.encode(request), job.module,
                                               job.kernel or "", self.fault))
        pending = self._pending[job.id] = _Pending(job)
        self._active[job.id] = job
        key = f"tileiras-{job.stage}-{self._run_id}-{job.id}"
        args = (wire, job.id, self.stage_timeout_s, self.memory_limit_bytes, self._warm_targets, self._opt_level)
        self._bridge.submit(job.id, key, args, _dask_priority(job.priority))
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.stage_timeout_s + STARTUP_ALLOWANCE_S) as scope:
                job.scope = scope
                await pending.done.wait()
            if scope.cancelled_caught:
                self._bridge.cancel(job.id)
                raise self._timeout_fault(job)
        except BaseException:
            if not pending.done.is_set():
                self._bridge.cancel(job.id)   # Ctrl-C, a cancelled module: the cluster drops the task
            raise
        finally:
            del self._active[job.id]
            del self._pending[job.id]
        if pending.outcome[0] == "error":
            _, kind, message = pending.outcome
            if kind == "killed":
                m = re.search(r"on (\d+) different workers", message)
                times = f"{m.group(1)} times" if m else "repeatedly"
                where = f" ({', '.join(dict.fromkeys(pending.workers))})" if pending.workers else ""
                raise self._lost(job, WorkerFault("crashed", f"{job.stage} killed the Dask worker running it {times}"
                                                             f"{where}; Dask gave up on it (the scheduler's "
                                                             f"allowed-failures)"))
            self._worker_gone(None, "", None, job)
            raise StageRaised(message)
        outcome = self._decode_outcome(pending.outcome[1])
        job.pid, job.worker = outcome.pid, outcome.worker or job.worker
        if outcome.fault:
            raise self._lost(job, WorkerFault(outcome.fault, f"{job.stage} on {outcome.worker}: {outcome.detail}",
                                              outcome.pid))
        reply = self._reply_decoder.decode(outcome.reply)
        response = self._response_decoders[job.stage].decode(reply.payload) if reply.ok else None
        t_done = time.monotonic()
        self._done_by[job.worker or ""] = self._done_by.get(job.worker or "", 0) + 1
        self._account(job, reply, t_sent, t_done, reply.ok and getattr(response, "ok", True))
        if not reply.ok:
            raise StageRaised(reply.error)
        return response

    def _lost(self, job: _Job, fault: WorkerFault) -> WorkerFault:
        self._worker_gone(fault.pid, "", None, job)
        return fault

    # ------------------------------------------------------------------ notes from the bridge

    async def _dispatch(self, receive) -> None:
        async for note in receive:
            kind = note[0]
            if kind == "result":
                pending = self._pending.get(note[1])
                if pending is not None:
                    pending.outcome = note[2]
                    pending.done.set()
            elif kind == "begun":
                self._begun(note[1])
            elif kind == "cluster":
                self._cluster(note[1])

    def _begun(self, msg: dict) -> None:
        pending = self._pending.get(msg.get("job", -1))
        address, sandbox = msg.get("worker", ""), msg.get("sandbox")
        if address and msg.get("pid"):
            self._pids[address] = msg["pid"]
        if address and sandbox and self._sandboxes.get(address) != sandbox:
            self._sandboxes[address] = sandbox
            self._emit(WorkerStarted, pid=sandbox, worker=address)
        if pending is None:
            return
        job = pending.job
        if pending.workers and pending.workers[-1] != address:
            self._emit(StageRetried, job=job.id, stage=job.stage, module=job.module, target=job.target,
                       kernel=job.kernel, worker=address, previous_worker=pending.workers[-1],
                       reason="worker lost")
        pending.workers.append(address)
        job.worker, job.pid, job.begun = address, sandbox, time.monotonic()
        if job.scope is not None:
            job.scope.deadline = trio.current_time() + self.stage_timeout_s + BACKSTOP_GRACE_S
        if not job.started_emitted:
            self._emit_started(job, job.pid, job.begun)

    def _cluster(self, info: dict) -> None:
        workers = {}
        for address, w in sorted(info.get("workers", {}).items()):
            metrics = w.get("metrics", {})
            counts = metrics.get("task_counts", {}) or {}
            workers[address] = ClusterWorker(
                address=address, name=str(w.get("name", "")), pid=self._pids.get(address),
                nthreads=int(w.get("nthreads", 1)), memory_bytes=int(metrics.get("memory", 0) or 0),
                memory_limit_bytes=int(w.get("memory_limit", 0) or 0), executing=int(counts.get("executing", 0)),
                tasks_done=self._done_by.get(address, 0))
        for address in sorted(self._workers.keys() - workers.keys()):
            self._pids.pop(address, None)
            self._emit(WorkerExited, pid=self._sandboxes.pop(address, 0), reason="lost", worker=address)
        threads = sum(w.nthreads for w in workers.values())
        if threads:
            self.slots.resize(threads)
            self.jobs = threads
        if workers != self._workers:
            self._workers = workers
            self._emit(ClusterState, scheduler=self.scheduler, workers=list(workers.values()))
