"""What runs inside a worker process: decode a job, run one stage, encode the reply.

Workers are trio-parallel processes that live for the whole batch, so everything the
compiler caches at module level (LLVM initialisation, target machines, libdevice, imported
lowering tables) stays warm from one job to the next.  `worker_init` pays the start-up cost
before the first job; `run_job` is the only function the supervisor calls.

Fault injection (`FaultSpec`) lives here, in the wrapper, never in the compiler stages.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import resource
import signal
import socket
import sys
import time

import msgspec

from .messages import SLOW_FAULT_S, STAGE_TYPES, FaultSpec, JobBegun, JobReply, JobRequest, WorkerHello

SANDBOX_ENV = "TILEIRAS_ASYNC_SANDBOX"   # set in a Dask worker's sandbox process (dask_remote.py)
_state: dict = {"notify": None, "addr": None, "jobs": 0, "ready_at": 0.0, "proc": None}
_job_decoder = msgspec.msgpack.Decoder(JobRequest)
_encoder = msgspec.msgpack.Encoder()
_request_decoders = {stage: msgspec.msgpack.Decoder(req) for stage, (req, _resp) in STAGE_TYPES.items()}


def worker_init(notify_addr: bytes | str | None, targets: tuple[str, ...] = (), opt_level: int = 3) -> None:
    """Runs once per worker before its first job (trio-parallel's `init`)."""
    _die_with_parent()
    _warm(targets, opt_level)
    if notify_addr is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        _state["notify"], _state["addr"] = sock, notify_addr
    _state["ready_at"] = time.monotonic()
    _notify(WorkerHello(os.getpid(), startup_s=_process_age() or 0.0))


def run_job(request: bytes) -> bytes:
    """One stage on one message; the stage's own exceptions come back as `ok=False`."""
    received = time.monotonic()
    req = _job_decoder.decode(request)
    pid = os.getpid()
    _notify(JobBegun(pid, job=req.job))
    _state["jobs"] += 1
    cold = _state["jobs"] == 1
    from ..stages import STAGES
    ok, payload, error = True, b"", ""
    t0 = t1 = time.perf_counter()
    try:
        message = _request_decoders[req.stage].decode(req.payload)
        t0 = time.perf_counter()  # the stage's own time excludes decoding and encoding its messages
        if req.fault is not None and req.fault.applies(req.stage, req.module, req.kernel):
            _misbehave(req.fault)
        response = STAGES[req.stage](message)
        t1 = time.perf_counter()
        payload = _encoder.encode(response)
    except Exception as e:  # noqa: BLE001 - a stage bug is a diagnostic for its module, not a dead worker
        ok, error, t1 = False, f"{type(e).__name__}: {e}", time.perf_counter()
    elapsed = t1 - t0
    rss, peak = _memory()
    return _encoder.encode(JobReply(req.job, pid, ok, payload, error, elapsed, received, time.monotonic(), cold,
                                    _state["ready_at"] if cold else 0.0, rss, peak))


def _notify(note) -> None:
    sock = _state["notify"]
    if sock is None:
        return
    with contextlib.suppress(OSError):  # a full socket buffer only costs the supervisor precision
        sock.sendto(_encoder.encode(note), _state["addr"])


def _memory() -> tuple[int, int]:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    try:
        import psutil
        if _state["proc"] is None:
            _state["proc"] = psutil.Process()
        return _state["proc"].memory_info().rss, peak
    except Exception:  # noqa: BLE001 - memory figures are informational
        return 0, peak


def _process_age() -> float | None:
    try:
        import psutil
        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001
        return None


def _die_with_parent() -> None:
    """Exit if the supervisor dies without cleaning up (kill -9): a daemon thread polls the parent pid.

    (Not prctl(PR_SET_PDEATHSIG): that fires when the *thread* that spawned the worker exits, and
    trio-parallel spawns workers from trio's thread cache, whose idle threads do exit.)
    """
    import threading

    parent = os.getppid()

    def sweep_after_parent() -> None:
        """If the supervisor is dying (kill -9 cannot clean up), wait until it is gone, then
        remove its temporary directory for it.  Its closed pipes usually end this worker while
        it is still being torn down, before the kernel has dropped its directory lock."""
        from ..toolchain import tempdirs
        with contextlib.suppress(Exception):
            if not tempdirs.exiting(parent):
                return   # a normal shutdown: the supervisor removes its own directory
            deadline = time.monotonic() + 2.0
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.01)
            tempdirs.sweep()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                sweep_after_parent()
                os._exit(1)

    threading.Thread(target=watch, name="tileiras-async-parent-watch", daemon=True).start()
    atexit.register(sweep_after_parent)


def _warm(targets: tuple[str, ...], opt_level: int) -> None:
    """Import the compiler and fill its module-level caches before the first job arrives."""
    from .. import stages  # noqa: F401
    try:
        from .. import frontend  # noqa: F401  (reader, verifier: what parse needs)
        from ..ir import verifier  # noqa: F401
        from .. import driver  # noqa: F401  (imports register every lowering)
        from ..codegen.nvptx import warm_up
    except Exception:  # noqa: BLE001 - a broken import surfaces as a stage error, with its message
        return
    with contextlib.suppress(Exception):
        warm_up(targets, opt_level)


def _misbehave(fault: FaultSpec) -> None:
    if fault.mode == "raise":
        raise RuntimeError(f"injected fault in stage {fault.stage}")
    if fault.mode == "segfault":
        import ctypes
        ctypes.string_at(0)
        os.kill(os.getpid(), 11)  # in case address 0 is readable here
    if fault.mode == "kill-host" and os.environ.get(SANDBOX_ENV):
        os.kill(os.getppid(), signal.SIGKILL)   # the Dask worker: Dask sees a worker die mid-task
        time.sleep(3600)
    if fault.mode in ("exit", "kill-host"):
        os._exit(3)
    if fault.mode == "slow":
        time.sleep(SLOW_FAULT_S)
        return
    if fault.mode == "hang":
        while True:
            time.sleep(3600)
    if fault.mode == "oom":
        hoard = []
        while True:
            hoard.append(b"\x01" * (32 << 20))  # written, so it is resident
