"""Consumers of the event stream: JSON lines, per-module diagnostics on stderr, the summary table.

Each is a plain callable taking one event, so any number can listen to the same run (the
dashboard is one more).  The summary is folded from events only: what the table says is
exactly what --json would have shown.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import IO

from .events import (CacheLookup, Diagnostic, KernelFinished, ModuleFinished, ModuleStarted, RunFinished, RunStarted,
                     StageFinished, TargetFinished, WorkerExited, WorkerStarted, encode_json, format_diagnostic)
from .config import output_stem

STAGE_ORDER = ("parse", "schedule", "lower", "codegen", "assemble", "disasm")


class JsonLines:
    """--json: every event as one JSON object per line, flushed as it happens."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream

    def __call__(self, event) -> None:
        self.stream.write(encode_json(event) + b"\n")
        self.stream.flush()


class DiagnosticPrinter:
    """A module's diagnostics, printed together when the module finishes (never interleaved)."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream
        self._pending: dict[str, list[Diagnostic]] = defaultdict(list)
        self._targets: list[str] = []

    def __call__(self, event) -> None:
        if isinstance(event, Diagnostic):
            self._pending[event.module].append(event)
        elif isinstance(event, RunStarted):
            self._targets = list(event.targets)
        elif isinstance(event, ModuleFinished):
            self.flush(event.module, event.kernels)
        elif isinstance(event, RunFinished):
            for module in list(self._pending):
                self.flush(module)

    def flush(self, module: str, kernels: list[str] = ()) -> None:
        """Print in a stable order (target, kernel, stage), whatever order the jobs finished in."""
        stream = self.stream or sys.stderr
        pending = self._pending.pop(module, [])
        rank = {k: i for i, k in enumerate(kernels)}
        targets = {t: i for i, t in enumerate(self._targets)}
        stages = {s: i for i, s in enumerate(STAGE_ORDER)}
        order = sorted(range(len(pending)), key=lambda i: (
            targets.get(pending[i].target, -1), rank.get(pending[i].kernel, -1),
            stages.get(pending[i].stage, len(stages)), i))
        for d in (pending[i] for i in order):
            stream.write(format_diagnostic(d) + "\n")
            if d.tool_stderr:
                stream.write(d.tool_stderr if d.tool_stderr.endswith("\n") else d.tool_stderr + "\n")
        stream.flush()


class RemarkPrinter:
    """--remarks*: a module's remarks on stderr when it finishes, one drop-in line each (remarks.to_command_line)
    after `module: target: `, in target and kernel order."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream
        self._pending: dict[str, list] = defaultdict(list)
        self._targets: dict[str, int] = {}

    def __call__(self, event) -> None:
        from ..remarks import to_command_line
        if isinstance(event, RunStarted):
            self._targets = {t: i for i, t in enumerate(event.targets)}
        elif isinstance(event, KernelFinished) and event.remarks:
            self._pending[event.module].append(event)
        elif isinstance(event, ModuleFinished):
            stream = self.stream or sys.stderr
            finished = self._pending.pop(event.module, [])
            # stable: the kernels of one target finish in the module's order
            for e in sorted(finished, key=lambda e: self._targets.get(e.target, -1)):
                for line in to_command_line(e.remarks).splitlines():
                    stream.write(f"{e.module}: {e.target}: {line}\n")
            stream.flush()


@dataclass
class _Row:
    index: int
    stem: str
    kernels: int | None = None
    exit_code: int | None = None
    targets: dict[str, int] = field(default_factory=dict)
    stage_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cached: set[str] = field(default_factory=set)     # targets served by the compile cache


@dataclass
class _StageTotals:
    jobs: int = 0
    failed: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    overhead_s: float = 0.0


class Summary:
    """Folds events into the end-of-run table (modules, kernels, ok/failed, time per stage)."""

    def __init__(self):
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.rows: dict[str, _Row] = {}
        self.stages: dict[str, _StageTotals] = defaultdict(_StageTotals)
        self.workers: set[int] = set()
        self.worker_faults: list[WorkerExited] = []
        self.peak_rss = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.kernels: list[KernelFinished] = []   # the ones with resources, as they finished

    def __call__(self, event) -> None:
        if isinstance(event, RunStarted):
            self.started = event
            for i, m in enumerate(event.modules):
                self.rows[m] = _Row(i, output_stem(m))
        elif isinstance(event, ModuleStarted):
            self.rows.setdefault(event.module, _Row(event.index, output_stem(event.module)))
        elif isinstance(event, ModuleFinished):
            row = self.rows[event.module]
            row.exit_code = event.exit_code
            if event.version:
                row.kernels = len(event.kernels)
        elif isinstance(event, TargetFinished):
            self.rows[event.module].targets[event.target] = event.exit_code
        elif isinstance(event, CacheLookup):
            if event.hit:
                self.cache_hits += 1
                self.rows[event.module].cached.add(event.target)
            else:
                self.cache_misses += 1
        elif isinstance(event, StageFinished):
            st = self.stages[event.stage]
            st.jobs += 1
            st.failed += not event.ok
            st.total_s += event.elapsed_s
            st.max_s = max(st.max_s, event.elapsed_s)
            st.overhead_s += event.overhead_s
            if event.module in self.rows:
                self.rows[event.module].stage_s[event.stage] += event.elapsed_s
            if event.worker_pid:
                self.workers.add(event.worker_pid)
            self.peak_rss = max(self.peak_rss, event.peak_rss_bytes)
        elif isinstance(event, KernelFinished):
            if event.resources is not None:
                self.kernels.append(event)
        elif isinstance(event, WorkerStarted):
            self.workers.add(event.pid)
        elif isinstance(event, WorkerExited):
            self.worker_faults.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event

    # ------------------------------------------------------------------ rendering

    def render(self) -> str:
        targets = list(self.started.targets) if self.started else []
        stages = [s for s in STAGE_ORDER if s in self.stages] + sorted(set(self.stages) - set(STAGE_ORDER))
        rows = sorted(self.rows.values(), key=lambda r: r.index)
        width = max([len("module")] + [len(r.stem) for r in rows])
        tw = [max(len(t), 6) for t in targets]
        head = (f"{'module'.ljust(width)}  {'kernels':>7}  " + "  ".join(t.ljust(w) for t, w in zip(targets, tw))
                + "".join(f"  {s:>9}" for s in stages))
        lines = [head, "-" * len(head)]
        for r in rows:
            cells = "  ".join(_status(r, t).ljust(w) for t, w in zip(targets, tw))
            kern = "-" if r.kernels is None else str(r.kernels)
            times = "".join(f"  {_ms(r.stage_s[s]) if s in r.stage_s else '-':>9}" for s in stages)
            lines.append(f"{r.stem.ljust(width)}  {kern:>7}  {cells}{times}")
        lines.append("")
        lines.append(f"{'stage':<9} {'jobs':>6} {'failed':>6} {'total':>10} {'mean':>10} {'max':>10} {'overhead':>10}")
        for s in stages:
            st = self.stages[s]
            mean = st.total_s / st.jobs if st.jobs else 0.0
            over = _ms(st.overhead_s / st.jobs) if st.overhead_s else "-"
            lines.append(f"{s:<9} {st.jobs:>6} {st.failed:>6} {_secs(st.total_s):>10} {_ms(mean):>10} "
                         f"{_ms(st.max_s):>10} {over:>10}")
        lines.append("")
        lines.append(self.totals_line())
        for w in self.worker_faults:
            lines.append(describe_worker_exit(w))
        return "\n".join(lines) + "\n"

    def totals_line(self) -> str:
        f = self.finished
        if f is None:
            return "run did not finish"
        done = [r for r in self.rows.values() if r.exit_code is not None]
        modules_ok = sum(1 for r in done if r.exit_code == 0)
        parts = [f"{f.modules} modules: {modules_ok} ok, {f.modules_failed} failed"
                 + (f", {f.modules - len(done)} not finished" if len(done) < f.modules else ""),
                 f"{f.kernels} kernels x targets: {f.kernels - f.kernels_failed} ok, {f.kernels_failed} failed",
                 f"{len(f.outputs)} files written"
                 + (f" to {self.started.out_dir}" if self.started and f.outputs else ""),
                 *([f"cache {self.cache_hits} hits, {self.cache_misses} misses"]
                   if self.cache_hits or self.cache_misses else []),
                 f"wall {f.elapsed_s:.2f} s",
                 f"{len(self.workers)} workers" + (f" (peak RSS {self.peak_rss / (1 << 20):.0f} MiB)"
                                                  if self.peak_rss else "")]
        text = " | ".join(parts)
        if f.cancelled:
            text += f"\ninterrupted by {f.cancelled}: workers and tools stopped, no partial outputs"
        return text


    def resource_table(self) -> str:
        """--resources: one row per kernel x target that was assembled, in input, target and kernel order."""
        targets = {t: i for i, t in enumerate(self.started.targets)} if self.started else {}
        order = {m: r.index for m, r in self.rows.items()}
        seq = {id(e): i for i, e in enumerate(self.kernels)}
        events = sorted(self.kernels, key=lambda e: (order.get(e.module, -1), targets.get(e.target, -1), seq[id(e)]))
        rows = [[output_stem(e.module), e.target, *_resource_cells(e.resources), e.kernel] for e in events]
        if not rows:
            return "resources: no kernel was assembled\n"
        widths = [max(len(str(c)) for c in col) for col in zip(RESOURCE_COLUMNS, *rows)]
        left = {0, 1, len(RESOURCE_COLUMNS) - 4, len(RESOURCE_COLUMNS) - 3, len(RESOURCE_COLUMNS) - 2,
                len(RESOURCE_COLUMNS) - 1}

        def line(cells) -> str:
            return "  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        head = line(RESOURCE_COLUMNS)
        return "\n".join([head, "-" * len(head), *(line(r) for r in rows)]) + "\n"


# --resources: the table's columns (spills: bytes stored/loaded; smem: static shared bytes, "+dyn" when the
# launch adds dynamic shared memory; tmem: tensor-memory columns; limit: what bounds the CTAs per SM)
RESOURCE_COLUMNS = ("module", "target", "regs", "spills st/ld", "stack", "smem", "tmem", "threads", "CTAs/SM",
                    "limit", "tensor core", "copies", "kernel")


def _resource_cells(r) -> list:
    smem = f"{r.shared_static_bytes}" + ("+dyn" if r.shared_dynamic_bytes is None else "")
    return [r.registers, f"{r.spill_store_bytes}/{r.spill_load_bytes}", r.stack_frame_bytes, smem,
            "-" if r.tmem_columns is None else r.tmem_columns, r.threads or "-",
            "-" if r.ctas_per_sm is None else r.ctas_per_sm, r.occupancy_limit or "-", r.tensor_core, r.copy_engine]


def describe_worker_exit(w: WorkerExited) -> str:
    if w.reason == "lost":
        return f"Dask worker {w.worker or w.pid} left the cluster; the scheduler re-ran its tasks elsewhere"
    if w.reason == "timeout":
        why = "killed: stage timeout"
    elif w.reason == "memory":
        why = "killed: memory limit"
    elif w.signal:
        why = f"crashed ({w.signal})"
    else:
        why = f"{w.reason} (exit status {w.exit_code})"
    return f"worker {w.pid} {why} during job {w.job}; replaced"


def _status(row: _Row, target: str) -> str:
    if target in row.targets:
        code = row.targets[target]
        if code == 0:
            return "cached" if target in row.cached else "ok"
        return f"FAIL({code})"
    if row.exit_code is not None:
        return f"FAIL({row.exit_code})"
    return "-"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms"


def _secs(seconds: float) -> str:
    return f"{seconds:.2f}s"
