"""What runs inside a compile server's worker process: one drop-in compile per job.

The worker is started once (trio-parallel, spawned) and `warm` loads the compiler, llvmlite,
libdevice and the usual target machines before the first job; `compile_job` then runs the very
function the drop-in runs in-process (`tileiras_compile.produce`), so both give the same outcome.
An exception in the compiler becomes the outcome the drop-in would have printed for it.

$TILEIRAS_ASYNC_SERVER_FAULT=MODE[:MATCH][,MODE[:MATCH]...] with MODE crash or hang makes jobs whose input
path contains MATCH kill their worker or hang (tests only; read in the worker, never set by default).
"""
from __future__ import annotations

import os
import time

import msgspec

from ..cache import entry as cache_entry
from ..cache.fingerprint import Fingerprint
from ..serving.protocol import CompileRequest

FAULT_ENV = "TILEIRAS_ASYNC_SERVER_FAULT"
WARM_TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")

_decoder = msgspec.msgpack.Decoder(CompileRequest)


def warm() -> None:
    """trio-parallel's `init`: exit with the server, import and warm the compiler before any job."""
    from ..pipeline.worker import worker_init
    worker_init(None, WARM_TARGETS, 3)
    from . import tileiras_compile  # noqa: F401


def compile_job(payload: bytes, ptxas: str | None, libdevice: str | None) -> bytes:
    """One CompileRequest (msgpack) -> the outcome's sections as a cache entry, plus "cacheable"."""
    from .common import describe_exception
    from .options import Parsed
    from .tileiras import PROG, DropInResult
    from .tileiras_compile import produce
    req = _decoder.decode(payload)
    _misbehave(req.path)
    try:
        result = produce(req.path, req.data, Parsed(dict(req.options), [req.path]),
                         expected=Fingerprint(req.fingerprint, ptxas, libdevice))
    except Exception as e:  # noqa: BLE001 - reported exactly as the drop-in reports it in-process
        line, rc = describe_exception(e, PROG)
        result = DropInResult(rc, line + "\n", cacheable=False)
    return cache_entry.encode({**result.sections(), "cacheable": b"1" if result.cacheable else b"0"})


def _misbehave(path: str) -> None:
    for spec in os.environ.get(FAULT_ENV, "").split(","):
        mode, _, match = spec.partition(":")
        if not mode or (match and match not in path):
            continue
        if mode == "crash":
            import signal
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "hang":
            while True:
                time.sleep(3600)
