"""The pipeline's own messages: the envelope around a stage message on its way to a worker and
back, and the datagrams a worker sends the supervisor.  Only msgpack bytes cross the process
boundary; the stage messages themselves are those of `tileiras_async.stages`.
"""
from __future__ import annotations

from typing import Union

import msgspec

from ..stages import (AssembleRequest, CodegenRequest, CubinModule, KernelSchedule, LoweredKernel, LowerRequest,
                      ParsedModule, ParseRequest, PtxModule)

# stage name -> (request type, response type); the names are the keys of stages.STAGES
STAGE_TYPES: dict[str, tuple[type, type]] = {
    "parse": (ParseRequest, ParsedModule),
    "schedule": (LowerRequest, KernelSchedule),
    "lower": (LowerRequest, LoweredKernel),
    "codegen": (CodegenRequest, PtxModule),
    "assemble": (AssembleRequest, CubinModule),
}

SLOW_FAULT_S = 3.0
FAULT_MODES = ("raise", "segfault", "hang", "oom", "exit", "slow", "kill-host")


class FaultSpec(msgspec.Struct, frozen=True):
    """Make a stage misbehave inside its worker (tests and demos only; never set by default).

    Spelled `STAGE:MODE[:MATCH]` in $TILEIRAS_ASYNC_FAULT or --inject-fault: MODE is one of
    raise | segfault | hang | oom (allocate without bound) | exit (worker exits unexpectedly) |
    slow (sleep SLOW_FAULT_S, then run normally: a window for tests that kill a worker mid-job) |
    kill-host (in a Dask sandbox: SIGKILL the Dask worker process that hosts it; elsewhere as `exit`);
    MATCH restricts it to jobs whose module path or kernel name contains that text.
    """
    stage: str
    mode: str
    match: str = ""

    @classmethod
    def parse(cls, text: str) -> "FaultSpec":
        parts = text.split(":", 2)
        if len(parts) < 2 or parts[0] not in STAGE_TYPES or parts[1] not in FAULT_MODES:
            raise ValueError(f"invalid fault spec '{text}': expected STAGE:MODE[:MATCH] with STAGE one of "
                             f"{', '.join(STAGE_TYPES)} and MODE one of {', '.join(FAULT_MODES)}")
        return cls(parts[0], parts[1], parts[2] if len(parts) > 2 else "")

    def applies(self, stage: str, module: str, kernel: str) -> bool:
        return stage == self.stage and (not self.match or self.match in module or self.match in kernel)


class JobRequest(msgspec.Struct, frozen=True):
    job: int
    stage: str
    payload: bytes                    # msgpack of the stage's request message
    module: str = ""                  # for fault matching and messages only
    kernel: str = ""
    fault: FaultSpec | None = None


class JobReply(msgspec.Struct, frozen=True):
    job: int
    pid: int
    ok: bool                          # False: the stage raised; `error` says what
    payload: bytes = b""              # msgpack of the stage's response message
    error: str = ""
    elapsed_s: float = 0.0            # the stage function alone
    received_at: float = 0.0          # time.monotonic() in the worker (same clock as the supervisor's)
    replied_at: float = 0.0
    cold: bool = False                # the worker's first job
    ready_at: float = 0.0             # when the worker finished starting (cold jobs only)
    rss_bytes: int = 0
    peak_rss_bytes: int = 0


class _Note(msgspec.Struct, frozen=True, tag_field="note"):
    pid: int


class WorkerHello(_Note, tag="hello"):
    """Sent once, when a worker has finished starting (imports, warm caches)."""
    startup_s: float = 0.0


class JobBegun(_Note, tag="begun"):
    """Sent when a worker picks up a job: arms the stage timeout and names the job's worker."""
    job: int = 0


WorkerNote = Union[WorkerHello, JobBegun]
