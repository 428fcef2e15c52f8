"""The dashboard's state, folded from the pipeline's event stream (no Textual, no compiler).

`RunModel.apply(event)` takes the same messages `tileiras-async compile --json` prints, in the
same order, and keeps:

* one `Row` per (module, target, kernel) -- before a module's kernels are known each target has
  one placeholder row (kernel ""), which becomes the first kernel's row;
* per-stage progress at the level the pipeline runs it: parse per module; lower and schedule per
  kernel; codegen, ptxas (the `assemble` stage) and write (outputs, `disasm`) per target;
* the diagnostics, the workers (pid, job, RSS, restarts), the schedule reports and the tile-GPU IR
  snapshots (--print-ir-*) per kernel, the outputs per target, and run totals.

The model only records *what changed* (`take_changes()`): the UI drains events in batches and
then touches only the rows, panes and header that changed, so a burst of thousands of events
costs one update of the affected cells, never a redraw per event.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from tileiras_async.pipeline import events as ev

STAGES = ("parse", "lower", "schedule", "codegen", "ptxas", "write")
STAGE_COLUMN = {"parse": "parse", "lower": "lower", "schedule": "schedule", "codegen": "codegen",
                "assemble": "ptxas", "disasm": "write", "write": "write"}
MODULE_STAGES = ("parse",)
KERNEL_STAGES = ("lower", "schedule")
TARGET_STAGES = ("codegen", "ptxas", "write")

EXIT_CANCELLED = 130  # the supervisor's BatchControl cancel (supervisor.EXIT_CANCELLED)

# stage / row statuses
PENDING, RUNNING, OK, FAILED, SKIPPED, CANCELLED, QUEUED = ("pending", "running", "ok", "failed", "skipped",
                                                            "cancelled", "queued")


def stem(path: str) -> str:
    name = os.path.basename(path)
    return name[:-len(".tileirbc")] if name.endswith(".tileirbc") else name


@dataclass
class Stage:
    status: str = PENDING
    started: float | None = None      # event clock
    elapsed: float = 0.0
    jobs: int = 0
    detail: str = ""                  # e.g. "2 files"

    def start(self, t: float) -> None:
        self.status, self.started = RUNNING, t

    def finish(self, ok: bool, elapsed: float) -> None:
        self.status = OK if ok else FAILED
        self.elapsed += elapsed
        self.jobs += 1

    def close(self, how: str) -> None:
        """The module finished: whatever still runs was stopped, whatever is pending never ran."""
        if self.status == RUNNING:
            self.status = how
        elif self.status == PENDING:
            self.status = SKIPPED


def _stages(names) -> dict[str, Stage]:
    return {n: Stage() for n in names}


@dataclass(eq=False)
class Row:
    """One (module, target, kernel) line of the table."""
    key: str
    module: "Module"
    target: "Target"
    ordinal: int
    kernel: str = ""
    stages: dict[str, Stage] = field(default_factory=lambda: _stages(KERNEL_STAGES))
    ok: bool | None = None            # KernelFinished
    elapsed: float = 0.0
    resources: object = None          # KernelFinished.resources (toolchain.resources.KernelResources)
    schedules: list = field(default_factory=list)   # ScheduleReport
    scheduled: bool = False
    ir_dumps: list = field(default_factory=list)    # IRDump: the tile-GPU IR before/after passes

    def stage(self, name: str) -> Stage:
        if name in MODULE_STAGES:
            return self.module.stages[name]
        if name in TARGET_STAGES:
            return self.target.stages[name]
        return self.stages[name]

    @property
    def status(self) -> str:
        m, t = self.module, self.target
        if m.status == CANCELLED:
            return CANCELLED
        if self.ok is False:
            return FAILED
        if t.exit_code is not None:
            return OK if t.exit_code == 0 else FAILED
        if m.exit_code is not None:
            return OK if m.exit_code == 0 else FAILED
        if m.status == QUEUED:
            return QUEUED
        return RUNNING

    @property
    def exit_code(self) -> int | None:
        if self.target.exit_code is not None:
            return self.target.exit_code
        return self.module.exit_code

    def time(self, now: float) -> float | None:
        """Seconds this row has taken: the module's parse plus its target, or so far."""
        m, t = self.module, self.target
        if t.elapsed is not None:
            return m.stages["parse"].elapsed + t.elapsed
        if m.elapsed is not None:
            return m.elapsed
        if m.started is not None:
            return max(0.0, now - m.started)
        return None


@dataclass(eq=False)
class Target:
    module: "Module"
    name: str
    stages: dict[str, Stage] = field(default_factory=lambda: _stages(TARGET_STAGES))
    rows: list[Row] = field(default_factory=list)
    exit_code: int | None = None
    elapsed: float | None = None
    started: float | None = None
    outputs: list[str] = field(default_factory=list)
    cached: bool = False              # served by the compile cache (CacheLookup hit): no stages ran


@dataclass(eq=False)
class Module:
    path: str
    index: int
    stem: str
    status: str = QUEUED              # queued | running | ok | failed | cancelled
    exit_code: int | None = None
    started: float | None = None
    elapsed: float | None = None
    version: str = ""
    kernels: list[str] = field(default_factory=list)
    stages: dict[str, Stage] = field(default_factory=lambda: _stages(MODULE_STAGES))
    targets: dict[str, Target] = field(default_factory=dict)
    attempts: int = 0                 # ModuleStarted count (retries)

    @property
    def finished(self) -> bool:
        return self.exit_code is not None

    @property
    def rows(self) -> list[Row]:
        return [r for t in self.targets.values() for r in t.rows]


@dataclass(eq=False)
class Diag:
    id: int
    event: ev.Diagnostic
    module: Module | None

    @property
    def row(self) -> Row | None:
        """The table row the diagnostic belongs to (its kernel's, else its target's first)."""
        m, e = self.module, self.event
        if m is None:
            return None
        targets = [m.targets[e.target]] if e.target in m.targets else list(m.targets.values())
        for t in targets:
            for r in t.rows:
                if e.kernel is None or r.kernel == e.kernel:
                    return r
        return None


@dataclass(eq=False)
class Worker:
    pid: int
    state: str = "idle"               # idle | busy | exited
    job: int | None = None
    stage: str = ""
    module: str = ""
    kernel: str = ""
    target: str = ""
    rss: int = 0
    peak_rss: int = 0
    cpu: float | None = None          # percent, sampled by the live dashboard (psutil)
    jobs: int = 0
    reason: str = ""                  # why it exited
    started: float = 0.0
    address: str = ""                 # its Dask worker's address (--cluster)


@dataclass
class Changes:
    rows: set = field(default_factory=set)            # Row objects whose cells changed
    added: list = field(default_factory=list)         # new Row objects
    removed: list = field(default_factory=list)       # keys of rows gone
    reorder: bool = False                             # kernels got their final order
    diagnostics: list = field(default_factory=list)   # new Diag objects
    diagnostics_reset: bool = False                   # some were removed (a retry)
    workers: bool = False
    header: bool = False
    schedules: set = field(default_factory=set)       # row keys with new schedule reports
    ir: set = field(default_factory=set)              # row keys with new IR snapshots
    charts: bool = False                              # the timeline / histogram / throughput changed
    events: int = 0

    def __bool__(self) -> bool:
        return bool(self.rows or self.added or self.removed or self.reorder or self.diagnostics
                    or self.diagnostics_reset or self.workers or self.header or self.schedules or self.ir)


class RunModel:
    def __init__(self):
        self.started: ev.RunStarted | None = None
        self.finished: ev.RunFinished | None = None
        self.targets: list[str] = []
        self.modules: dict[str, Module] = {}
        self.module_list: list[Module] = []
        self.rows: dict[str, Row] = {}
        self.diagnostics: list[Diag] = []
        self.workers: dict[int, Worker] = {}
        self.restarts = 0
        self.retries = 0                          # jobs Dask re-ran after their worker was lost
        self.worker_exits: list[ev.WorkerExited] = []
        self.cluster: ev.ClusterState | None = None   # --cluster runs: the Dask workers
        # for the charts: per job [worker label, stage, start, end | None, queued s]; stage times; finish times
        self.spans: dict[int, list] = {}
        self.stage_times: dict[str, list[float]] = {}
        self.finished_at: list[float] = []
        self.now = 0.0                 # the event clock: the latest `t` seen
        self.events = 0
        self._jobs: dict[int, tuple] = {}     # job -> (Stage, rows touched, worker pid)
        self._diag_ids = 0
        self._changes = Changes()

    # ------------------------------------------------------------------ queries

    @property
    def done(self) -> bool:
        """Every module has finished (the batch may still be held open for retries)."""
        if self.finished is not None:
            return True
        return bool(self.module_list) and all(m.finished for m in self.module_list)

    @property
    def exit_code(self) -> int:
        """The batch's exit status: RunFinished's, else the largest module status so far."""
        if self.finished is not None:
            return self.finished.exit_code
        return max((m.exit_code or 0 for m in self.module_list), default=0)

    def totals(self) -> dict:
        counts = {QUEUED: 0, RUNNING: 0, OK: 0, FAILED: 0, CANCELLED: 0}
        for m in self.module_list:
            counts[m.status] += 1
        rows = list(self.rows.values())
        kernels_done = sum(1 for r in rows if r.ok is not None)
        kernels_failed = sum(1 for r in rows if r.ok is False)
        elapsed = self.finished.elapsed_s if self.finished else self.now
        done = counts[OK] + counts[FAILED] + counts[CANCELLED]
        errors = sum(1 for d in self.diagnostics if d.event.severity == "error")
        warnings = sum(1 for d in self.diagnostics if d.event.severity == "warning")
        return {"modules": len(self.module_list), "done": done, **counts,
                "kernels_done": kernels_done, "kernels_failed": kernels_failed,
                "elapsed": elapsed, "modules_per_s": done / elapsed if elapsed > 0 else 0.0,
                "kernels_per_s": kernels_done / elapsed if elapsed > 0 else 0.0,
                "errors": errors, "warnings": warnings,
                "workers": sum(1 for w in self.workers.values() if w.state != "exited"),
                "busy": sum(1 for w in self.workers.values() if w.state == "busy"),
                "restarts": self.restarts, "retries": self.retries, "events": self.events}

    def row_for(self, module: str, target: str | None = None, kernel: str | None = None) -> Row | None:
        m = self.modules.get(module)
        if m is None:
            return None
        for t in m.targets.values():
            if target is not None and t.name != target:
                continue
            for r in t.rows:
                if kernel is None or r.kernel == kernel:
                    return r
        return None

    def diagnostics_of(self, module: str) -> list[Diag]:
        return [d for d in self.diagnostics if d.event.module == module]

    def take_changes(self) -> Changes:
        out, self._changes = self._changes, Changes()
        return out

    # ------------------------------------------------------------------ folding

    def apply_many(self, events) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e) -> None:
        self.events += 1
        self._changes.events += 1
        if e.t > self.now:
            self.now = e.t
        handler = _HANDLERS.get(type(e))
        if handler is not None:
            handler(self, e)

    def _on_run_started(self, e: ev.RunStarted) -> None:
        self.started = e
        self.targets = list(e.targets)
        for i, path in enumerate(e.modules):
            self._module(path, i)
        self._changes.header = True

    def _on_run_finished(self, e: ev.RunFinished) -> None:
        self.finished = e
        for w in self.workers.values():
            if w.state == "busy":
                w.state, w.job = "idle", None
        self._changes.header = self._changes.workers = True

    def _module(self, path: str, index: int | None = None) -> Module:
        m = self.modules.get(path)
        if m is not None:
            return m
        m = Module(path, len(self.module_list) if index is None else index, stem(path))
        self.modules[path] = m
        self.module_list.append(m)
        for target in self.targets:
            self._target(m, target)
        self._changes.header = True
        return m

    def _target(self, m: Module, name: str) -> Target:
        t = m.targets.get(name)
        if t is None:
            if name not in self.targets:
                self.targets.append(name)
            t = m.targets[name] = Target(m, name)
            self._new_row(m, t, "")
        return t

    def _new_row(self, m: Module, t: Target, kernel: str) -> Row:
        ordinal = len(t.rows)
        row = Row(f"{m.index}|{t.name}|{ordinal}", m, t, ordinal, kernel)
        t.rows.append(row)
        self.rows[row.key] = row
        self._changes.added.append(row)
        return row

    def _kernel_row(self, m: Module, target: str, kernel: str) -> Row:
        t = self._target(m, target)
        for r in t.rows:
            if r.kernel == kernel:
                return r
        for r in t.rows:
            if r.kernel == "":
                r.kernel = kernel
                self._changes.rows.add(r)
                return r
        return self._new_row(m, t, kernel)

    def _touch_module(self, m: Module) -> None:
        self._changes.rows.update(m.rows)

    def _touch_target(self, t: Target) -> None:
        self._changes.rows.update(t.rows)

    def _on_module_started(self, e: ev.ModuleStarted) -> None:
        m = self._module(e.module, e.index)
        if m.attempts:   # a retry: forget the previous attempt
            self._reset(m)
        m.attempts += 1
        m.status, m.started = RUNNING, e.t
        self._touch_module(m)
        self._changes.header = True

    def _reset(self, m: Module) -> None:
        m.exit_code = m.elapsed = None
        m.version, m.kernels = "", []
        m.stages = _stages(MODULE_STAGES)
        for t in m.targets.values():
            for r in t.rows[1:]:
                del self.rows[r.key]
                self._changes.removed.append(r.key)
            first = t.rows[0]
            t.rows[1:] = []
            t.stages = _stages(TARGET_STAGES)
            t.exit_code = t.elapsed = t.started = None
            t.outputs, t.cached = [], False
            first.kernel, first.ok, first.elapsed, first.resources = "", None, 0.0, None
            first.stages, first.schedules, first.scheduled = _stages(KERNEL_STAGES), [], False
            first.ir_dumps = []
            self._changes.schedules.add(first.key)
            self._changes.ir.add(first.key)
        before = len(self.diagnostics)
        self.diagnostics = [d for d in self.diagnostics if d.module is not m]
        if len(self.diagnostics) != before:
            self._changes.diagnostics_reset = True

    def _on_module_finished(self, e: ev.ModuleFinished) -> None:
        m = self._module(e.module)
        self.finished_at.append(e.t)
        m.exit_code, m.elapsed, m.version = e.exit_code, e.elapsed_s, e.version
        m.status = OK if e.ok else (CANCELLED if e.exit_code == EXIT_CANCELLED else FAILED)
        how = CANCELLED if m.status == CANCELLED else FAILED
        for s in m.stages.values():
            s.close(how)
        if e.kernels:
            m.kernels = list(e.kernels)
            rank = {k: i for i, k in enumerate(e.kernels)}
            for t in m.targets.values():
                for k in e.kernels:  # kernels that never started on this target still get a row
                    if not any(r.kernel == k for r in t.rows):
                        self._kernel_row(m, t.name, k)
                t.rows.sort(key=lambda r: rank.get(r.kernel, len(rank)))
            self._changes.reorder = True
        for t in m.targets.values():
            for s in t.stages.values():
                s.close(how)
            if t.exit_code is None and m.status != OK:
                t.exit_code = e.exit_code if m.status == CANCELLED or not t.started else t.exit_code
            for r in t.rows:
                for s in r.stages.values():
                    s.close(how)
        for pid, w in self.workers.items():
            if w.state == "busy" and w.module == e.module:
                w.state, w.job = "idle", None
                self._changes.workers = True
        self._touch_module(m)
        self._changes.header = True

    def _on_target_started(self, e: ev.TargetStarted) -> None:
        t = self._target(self._module(e.module), e.target)
        t.started = e.t
        self._touch_target(t)

    def _on_target_finished(self, e: ev.TargetFinished) -> None:
        t = self._target(self._module(e.module), e.target)
        t.exit_code, t.elapsed, t.outputs = e.exit_code, e.elapsed_s, list(e.outputs)
        write = t.stages["write"]
        if e.outputs:
            if write.status != FAILED:
                write.status = OK
            write.detail = f"{len(e.outputs)} file{'s' if len(e.outputs) != 1 else ''}"
        elif write.status == PENDING and e.ok:
            write.status = OK
        for s in t.stages.values():
            s.close(FAILED)
        for r in t.rows:
            for s in r.stages.values():
                s.close(FAILED)
        self._touch_target(t)

    def _on_kernel_started(self, e: ev.KernelStarted) -> None:
        r = self._kernel_row(self._module(e.module), e.target, e.kernel)
        if r.target.cached:
            _mark_cached(r.stages["lower"])
        self._changes.rows.add(r)

    def _on_cache_lookup(self, e: ev.CacheLookup) -> None:
        """A hit: the target's stage cells say "cached" (they never run)."""
        if not e.hit:
            return
        t = self._target(self._module(e.module), e.target)
        t.cached = True
        for name in ("codegen", "ptxas"):
            _mark_cached(t.stages[name])
        self._touch_target(t)

    def _on_kernel_finished(self, e: ev.KernelFinished) -> None:
        r = self._kernel_row(self._module(e.module), e.target, e.kernel)
        r.ok, r.elapsed, r.resources = e.ok, e.elapsed_s, e.resources
        self._changes.rows.add(r)
        self._changes.header = True

    def _on_kernel_scheduled(self, e: ev.KernelScheduled) -> None:
        r = self._kernel_row(self._module(e.module), e.target, e.kernel)
        r.schedules, r.scheduled = list(e.reports), True
        if r.target.cached:   # the cache entry's schedules: no schedule stage ran for them
            _mark_cached(r.stages["schedule"])
        self._changes.rows.add(r)
        self._changes.schedules.add(r.key)

    def _on_kernel_ir_dumped(self, e: ev.KernelIRDumped) -> None:
        r = self._kernel_row(self._module(e.module), e.target, e.kernel)
        r.ir_dumps = list(e.dumps)
        self._changes.ir.add(r.key)

    def _stage_of(self, e) -> tuple[Stage, list[Row]] | None:
        column = STAGE_COLUMN.get(e.stage)
        if column is None:
            return None
        m = self._module(e.module)
        if column in MODULE_STAGES:
            return m.stages[column], m.rows
        if e.target is None:
            return None
        if column in KERNEL_STAGES and e.kernel is not None:
            r = self._kernel_row(m, e.target, e.kernel)
            return r.stages[column], [r]
        t = self._target(m, e.target)
        return t.stages[column], list(t.rows)

    def _on_stage_started(self, e: ev.StageStarted) -> None:
        label = e.worker or (f"pid {e.worker_pid}" if e.worker_pid is not None else "supervisor")
        self.spans[e.job] = [label, e.stage, e.t, None, e.queued_s]
        self._changes.charts = True
        found = self._stage_of(e)
        if found is not None:
            stage, rows = found
            stage.start(e.t)
            self._jobs[e.job] = found
            self._changes.rows.update(rows)
        if e.worker_pid is not None:
            w = self._worker(e.worker_pid, e.t)
            w.state, w.job, w.stage, w.module = "busy", e.job, e.stage, e.module
            w.address = e.worker or w.address
            w.kernel, w.target = e.kernel or "", e.target or ""
            self._changes.workers = True
        self._changes.header = True

    def _on_stage_finished(self, e: ev.StageFinished) -> None:
        span = self.spans.get(e.job)
        if span is not None:
            span[3] = max(e.t, span[2])
        self.stage_times.setdefault(e.stage, []).append(e.elapsed_s)
        self._changes.charts = True
        found = self._jobs.pop(e.job, None) or self._stage_of(e)
        if found is not None:
            stage, rows = found
            stage.finish(e.ok, e.elapsed_s)
            self._changes.rows.update(rows)
        if e.worker_pid is not None:
            w = self._worker(e.worker_pid, e.t)
            if w.state != "exited":
                w.state, w.job = "idle", None
            w.jobs += 1
            if e.rss_bytes:
                w.rss = e.rss_bytes
            w.peak_rss = max(w.peak_rss, e.peak_rss_bytes, w.rss)
            self._changes.workers = True

    def _worker(self, pid: int, t: float) -> Worker:
        w = self.workers.get(pid)
        if w is None:
            w = self.workers[pid] = Worker(pid, started=t)
            self._changes.header = True
        return w

    def _on_worker_started(self, e: ev.WorkerStarted) -> None:
        w = self._worker(e.pid, e.t)
        w.address = e.worker or w.address
        self._changes.workers = True

    def _on_worker_exited(self, e: ev.WorkerExited) -> None:
        w = self._worker(e.pid, e.t)
        w.state, w.job = "exited", None
        w.reason = e.reason + (f" ({e.signal})" if e.signal else "")
        self.restarts += 1
        self.worker_exits.append(e)
        self._changes.workers = self._changes.header = True

    def _on_worker_sample(self, e: ev.WorkerSample) -> None:
        w = self._worker(e.pid, e.t)
        w.rss = e.rss_bytes
        w.peak_rss = max(w.peak_rss, e.rss_bytes)
        self._changes.workers = True

    def _on_cluster_state(self, e: ev.ClusterState) -> None:
        self.cluster = e
        self._changes.workers = self._changes.header = True

    def _on_stage_retried(self, e: ev.StageRetried) -> None:
        self.retries += 1
        span = self.spans.get(e.job)
        if span is not None:   # the job's time on the lost worker ends here; the rest is on the new one
            span[3] = e.t
            self.spans[-e.job] = span
            self.spans[e.job] = [e.worker, e.stage, e.t, None, 0.0]
        self._changes.header = self._changes.charts = True

    def _on_diagnostic(self, e: ev.Diagnostic) -> None:
        m = self._module(e.module)
        self._diag_ids += 1
        d = Diag(self._diag_ids, e, m)
        self.diagnostics.append(d)
        if e.stage == "write" and e.target in m.targets:
            m.targets[e.target].stages["write"].status = FAILED
        self._changes.diagnostics.append(d)
        self._touch_module(m)
        self._changes.header = True


def _mark_cached(stage: Stage) -> None:
    stage.status, stage.detail = OK, "cached"


_HANDLERS = {
    ev.RunStarted: RunModel._on_run_started,
    ev.RunFinished: RunModel._on_run_finished,
    ev.ModuleStarted: RunModel._on_module_started,
    ev.ModuleFinished: RunModel._on_module_finished,
    ev.TargetStarted: RunModel._on_target_started,
    ev.TargetFinished: RunModel._on_target_finished,
    ev.KernelStarted: RunModel._on_kernel_started,
    ev.KernelFinished: RunModel._on_kernel_finished,
    ev.KernelScheduled: RunModel._on_kernel_scheduled,
    ev.KernelIRDumped: RunModel._on_kernel_ir_dumped,
    ev.CacheLookup: RunModel._on_cache_lookup,
    ev.StageStarted: RunModel._on_stage_started,
    ev.StageFinished: RunModel._on_stage_finished,
    ev.WorkerStarted: RunModel._on_worker_started,
    ev.WorkerExited: RunModel._on_worker_exited,
    ev.WorkerSample: RunModel._on_worker_sample,
    ev.Diagnostic: RunModel._on_diagnostic,
    ev.ClusterState: RunModel._on_cluster_state,
    ev.StageRetried: RunModel._on_stage_retried,
}
