"""What the batch pipeline reports while it runs: one tagged msgspec union, one stream.

Every consumer reads the same events: `--json` writes them as JSON lines, the summary table
is folded from them (summary.py), and the dashboard renders them.  Each event carries `t`,
seconds since the run started (monotonic clock), and a tag field `event` naming its type.

Identifiers: `module` is the input path as given on the command line (or found in a given
directory); `target` a --gpu-name; `kernel` a kernel's symbol name; `job` a number unique in
the run, shared by a job's StageStarted / StageFinished / WorkerSample events.
"""
from __future__ import annotations

from typing import Union

import msgspec

from ..remarks import Remark
from ..schedule.report import ScheduleReport
from ..stages import IRDump
from ..toolchain.resources import KernelResources


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    t: float = 0.0  # seconds since RunStarted


class RunStarted(_Event, tag="run_started"):
    version: str
    modules: list[str]
    targets: list[str]
    jobs: int
    opt_level: int
    out_dir: str
    supervisor_pid: int
    stage_timeout_s: float
    memory_limit_bytes: int
    cluster: str | None = None        # --cluster (a Dask scheduler address or local:N); None: local workers


class RunFinished(_Event, tag="run_finished"):
    ok: bool
    exit_code: int
    elapsed_s: float
    modules: int
    modules_failed: int
    kernels: int                      # kernel x target pairs
    kernels_failed: int
    outputs: list[str] = []           # files written, in input order
    cancelled: str | None = None      # "SIGINT" / "SIGTERM" when interrupted


class WorkerStarted(_Event, tag="worker_started"):
    pid: int
    worker: str | None = None         # a Dask worker's address (--cluster); None: a local worker process


class WorkerExited(_Event, tag="worker_exited"):
    pid: int
    reason: str                       # crashed | timeout | memory | cancelled
    exit_code: int | None = None      # negative: killed by that signal
    signal: str | None = None         # e.g. "SIGSEGV"
    job: int | None = None
    worker: str | None = None         # a Dask worker's address (reason "lost": it left the cluster)


class WorkerSample(_Event, tag="worker_sample"):
    """A busy worker's resident memory, sampled by the supervisor's watchdog (about 1 Hz)."""
    pid: int
    rss_bytes: int
    job: int | None = None


class ModuleStarted(_Event, tag="module_started"):
    module: str
    index: int                        # position in the run's input order


class ModuleFinished(_Event, tag="module_finished"):
    module: str
    ok: bool
    exit_code: int
    elapsed_s: float
    version: str = ""
    kernels: list[str] = []


class TargetStarted(_Event, tag="target_started"):
    module: str
    target: str


class TargetFinished(_Event, tag="target_finished"):
    module: str
    target: str
    ok: bool
    exit_code: int
    elapsed_s: float
    outputs: list[str] = []


class KernelStarted(_Event, tag="kernel_started"):
    module: str
    target: str
    kernel: str


class KernelFinished(_Event, tag="kernel_finished"):
    """A kernel is done on a target: at once when its lowering failed, else once the target's cubin is made
    (or its assembly failed).  `ok` and `elapsed_s` are its lowering's."""
    module: str
    target: str
    kernel: str
    ok: bool
    elapsed_s: float
    resources: KernelResources | None = None   # read from the target's cubin; None: no cubin was made
    remarks: list[Remark] = []        # with --remarks*: the kernel's remarks the options ask for


class CacheLookup(_Event, tag="cache_lookup"):
    """The compile cache was asked for a module x target (before compiling it); on a hit the
    target's kernels and outputs come from the cache: no lower/codegen/assemble stages run."""
    module: str
    target: str
    hit: bool
    key: str = ""


class KernelScheduled(_Event, tag="kernel_scheduled"):
    """The modulo-scheduling analysis of a kernel's loops (with --schedules; for the dashboard)."""
    module: str
    target: str
    kernel: str
    reports: list[ScheduleReport] = []


class KernelIRDumped(_Event, tag="kernel_ir"):
    """Tile-GPU IR snapshots of a kernel (with --print-ir-*; for the dashboard's IR tab)."""
    module: str
    target: str
    kernel: str
    dumps: list[IRDump] = []


class StageStarted(_Event, tag="stage_started"):
    job: int
    stage: str                        # parse | schedule | lower | codegen | assemble | disasm
    module: str
    target: str | None = None
    kernel: str | None = None
    worker_pid: int | None = None     # None: run by the supervisor (ptxas, nvdisasm)
    queued_s: float = 0.0             # waiting for a worker slot
    worker: str | None = None         # the Dask worker's address (--cluster)


class StageFinished(_Event, tag="stage_finished"):
    job: int
    stage: str
    module: str
    ok: bool
    elapsed_s: float                  # the stage's own time (in the worker, or the tool's wall time)
    target: str | None = None
    kernel: str | None = None
    worker_pid: int | None = None
    rss_bytes: int = 0                # worker RSS when the job finished
    peak_rss_bytes: int = 0           # worker's peak RSS so far
    overhead_s: float = 0.0           # pipeline cost of the job: encode + IPC + decode (not queueing)
    worker: str | None = None         # the Dask worker's address (--cluster)


class StageRetried(_Event, tag="stage_retried"):
    """A job began again on another worker: the one running it left the cluster (Dask re-runs it)."""
    job: int
    stage: str
    module: str
    worker: str
    previous_worker: str
    reason: str = "worker lost"
    target: str | None = None
    kernel: str | None = None


class ClusterWorker(msgspec.Struct, frozen=True, kw_only=True):
    address: str
    name: str = ""
    pid: int | None = None            # known once the worker has run one of this run's jobs
    nthreads: int = 1
    memory_bytes: int = 0             # the Dask worker process's memory (its sandboxes not included)
    memory_limit_bytes: int = 0
    executing: int = 0                # tasks running on it now (any client's)
    tasks_done: int = 0               # this run's jobs it has finished


class ClusterState(_Event, tag="cluster_state"):
    """The Dask cluster's workers (--cluster), sent when it changes (about once a second while busy)."""
    scheduler: str
    workers: list[ClusterWorker] = []


class Diagnostic(_Event, tag="diagnostic"):
    module: str
    severity: str                     # error | warning | remark | note
    message: str
    stage: str | None = None
    target: str | None = None
    kernel: str | None = None
    location: str | None = None       # file:line:col in the kernel's source, when known
    tool_stderr: str = ""             # an external tool's stderr, verbatim


Event = Union[
    RunStarted, RunFinished,
    WorkerStarted, WorkerExited, WorkerSample,
    ModuleStarted, ModuleFinished,
    TargetStarted, TargetFinished,
    KernelStarted, KernelFinished, KernelScheduled, KernelIRDumped,
    CacheLookup,
    StageStarted, StageFinished, StageRetried,
    Diagnostic,
    ClusterState,
]

EVENT_TYPES: tuple[type, ...] = Event.__args__  # type: ignore[attr-defined]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


def encode_json(event: _Event) -> bytes:
    return _encoder.encode(event)


def decode_json(line: bytes | str) -> _Event:
    return _decoder.decode(line)


def format_diagnostic(event: Diagnostic) -> str:
    """One stderr line, compiler style: `module: target: kernel: location: error: message`."""
    where = ": ".join(x for x in (event.module, event.target, event.kernel) if x)
    message = event.message
    if event.location and event.location not in message:
        where = f"{where}: {event.location}"
    if _has_severity(message):
        return f"{where}: {message}"
    return f"{where}: {event.severity}: {message}"


def _has_severity(message: str) -> bool:
    head = message.split(": ")
    return any(part in ("error", "warning", "note", "remark") for part in head[:4])
