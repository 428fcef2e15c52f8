"""The Textual dashboard: modules x targets x kernels, diagnostics, workers, kernel details.

The app owns no compiler logic: a `Source` hands it batches of pipeline events, a `RunModel`
folds them, and a refresh timer (10 Hz) applies only what changed -- cells of the rows that
moved, new diagnostics, the workers pane, the header -- so hundreds of modules in flight cost
a handful of cell updates per frame, never a redraw per event.  Retry and cancel go back to the
supervisor through the live source's `BatchControl`.
"""
from __future__ import annotations

import os
import time

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane, TextArea

from . import charts, lookup, loopview
from .model import (CANCELLED, FAILED, OK, PENDING, QUEUED, RUNNING, SKIPPED, STAGES, Diag, Row, RunModel)
from .sources import Source

TICK_S = 0.1                 # UI refresh period
MAX_EVENTS_PER_TICK = 20000  # bound one frame's work; the rest waits for the next tick
SAMPLE_S = 1.0               # psutil sampling period (live runs)
CHART_TICKS = 5              # redraw the charts of a running batch every CHART_TICKS ticks

STYLE = {OK: "green", FAILED: "bold red", RUNNING: "yellow", QUEUED: "dim", PENDING: "dim",
         SKIPPED: "dim", CANCELLED: "magenta"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "note": "cyan", "remark": "blue"}
STAGE_TITLES = {"parse": "parse", "lower": "lower", "schedule": "sched", "codegen": "codegen", "ptxas": "ptxas",
                "write": "write"}
SORTS = ("input", "status", "time", "name")
STATUS_RANK = {FAILED: 0, CANCELLED: 1, RUNNING: 2, QUEUED: 3, OK: 4}
OP_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta",
             "bright_green", "bright_yellow", "bright_blue", "bright_red")


def _ms(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.1f}s"
    if seconds >= 1:
        return f"{seconds:.2f}s"
    return f"{seconds * 1000:.0f}ms"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n else "-"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


class _Key(str):
    """The "#" cell: displays the module's number, carries the row key (for sorting)."""
    row_key: str

    def __new__(cls, text: str, row_key: str):
        obj = super().__new__(cls, text)
        obj.row_key = row_key
        return obj


def stage_cell(row: Row, name: str, now: float) -> Text:
    st = row.stage(name)
    if st.status == OK:
        return Text(f"✓ {st.detail or _ms(st.elapsed)}", style="green")
    if st.status == FAILED:
        return Text(f"✗ {_ms(st.elapsed)}" if st.jobs else "✗", style="bold red")
    if st.status == RUNNING:
        since = max(0.0, now - st.started) if st.started is not None else 0.0
        return Text(f"▶ {_ms(since)}", style="yellow")
    if st.status == CANCELLED:
        return Text("⊘", style="magenta")
    if st.status == SKIPPED:
        return Text("–", style="dim")
    return Text("·", style="dim")


def status_cell(row: Row) -> Text:
    s = row.status
    if s == FAILED:
        code = row.exit_code
        return Text(f"FAIL({code})" if code is not None else "FAIL", style=STYLE[s])
    return Text({OK: "ok", RUNNING: "running", QUEUED: "queued", CANCELLED: "cancelled"}[s], style=STYLE[s])


def row_cells(row: Row, now: float, kernel_width: int = 24) -> tuple:
    m = row.module
    number = _Key(str(m.index + 1) if row.ordinal == 0 else "", row.key)
    t = row.time(now)
    return (number, Text(_short(m.stem, 28)), Text(row.target.name),
            Text(_short(row.kernel, kernel_width) if row.kernel else ("…" if m.status == RUNNING else ""),
                 style="" if row.kernel else "dim"),
            status_cell(row), *(stage_cell(row, s, now) for s in STAGES),
            Text(_ms(t) if t is not None else "", style="dim" if row.status == RUNNING else ""),
            *resource_cells(row.resources))


# what limits the CTAs per SM, in a few letters
_LIMIT_ABBREV = {"registers": "reg", "shared memory": "smem", "threads": "thr", "blocks": "blk"}


def resource_cells(r) -> tuple:
    """The resource columns of a kernel's row (KernelFinished.resources; blank until the cubin exists)."""
    if r is None:
        return tuple(Text("") for _ in RESOURCE_COLUMNS)
    spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
    occ = "-" if r.ctas_per_sm is None else f"{r.ctas_per_sm} {_LIMIT_ABBREV.get(r.occupancy_limit, '?')}"
    smem = f"{r.shared_static_bytes}" + ("+" if r.shared_dynamic_bytes is None else "")
    return (Text(str(r.registers), style="yellow"),
            Text(spills, style="bold red" if r.spill_store_bytes or r.spill_load_bytes else "dim"),
            Text(smem), Text("-" if r.tmem_columns is None else str(r.tmem_columns), style="dim" if
                             r.tmem_columns is None else ""),
            Text(occ), Text(r.tensor_core, style="dim" if r.tensor_core == "none" else ""),
            Text(r.copy_engine, style="dim" if r.copy_engine == "plain" else ""))


# after the time column: registers, spill bytes stored/loaded, static shared bytes ("+": and dynamic, set at
# launch), tensor-memory columns, CTAs per SM and what limits them, tensor-core instruction, copy engine
RESOURCE_COLUMNS = (("regs", "regs"), ("spill st/ld", "spills"), ("smem", "smem"), ("tmem", "tmem"),
                    ("CTAs/SM", "occ"), ("mma", "mma"), ("copy", "copy"))
COLUMNS = (("#", "num"), ("module", "module"), ("target", "target"), ("kernel", "kernel"), ("status", "status"),
           *((STAGE_TITLES[s], s) for s in STAGES), ("time", "time"), *RESOURCE_COLUMNS)
# fixed widths: cells change as the run goes, a column must not have to grow (or cut "FAIL(5)")
# (up to the time column they add up, with the cells' padding, to less than 160 columns: the time column is
# never cut there; the resource columns follow it)
WIDTHS = {"num": 4, "module": 28, "target": 7, "kernel": 24, "status": 9, "parse": 8, "lower": 8, "schedule": 8,
          "codegen": 8, "ptxas": 8, "write": 9, "time": 7, "regs": 4, "spills": 11, "smem": 7, "tmem": 4,
          "occ": 7, "mma": 8, "copy": 8}


LOCAL_WORKER_COLUMNS = (("pid", "pid", 7), ("state", "state", 20), ("stage", "stage", 8), ("module", "module", 34),
                        ("kernel", "kernel", 40), ("RSS", "rss", 8), ("CPU", "cpu", 5), ("jobs", "jobs", 5))
CLUSTER_WORKER_COLUMNS = (("address", "address", 26), ("name", "name", 10), ("thr", "threads", 3),
                          ("tasks", "tasks", 5), ("done", "done", 5), ("memory", "memory", 20),
                          ("stage", "stage", 8), ("module", "module", 30))


class SummaryBar(Static):
    pass


class DashboardApp(App):
    """`DashboardApp(source).run()`; the batch's exit status is `app.exit_status` afterwards."""

    TITLE = "tileiras-async"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit_dashboard", "Quit"),
        Binding("ctrl+c", "quit_dashboard", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("enter", "open", "Open", show=False),
        Binding("r", "retry", "Retry"),
        Binding("c", "cancel", "Cancel"),
        Binding("C", "cancel_all", "Cancel all"),
        Binding("p", "open_ptx", "PTX"),
        Binding("i", "open_ir", "IR"),
        Binding("s", "sort", "Sort"),
        Binding("slash", "filter", "Filter"),
        Binding("f", "failed_only", "Failed only"),
        Binding("d", "toggle('diagnostics')", "Diags"),
        Binding("w", "toggle('workers')", "Workers"),
        Binding("t", "toggle('charts')", "Timeline"),
        Binding("e", "next_error", "Next error", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    MAIN_ONLY = {"open", "retry", "cancel", "open_ptx", "open_ir", "sort", "filter", "failed_only", "toggle",
                 "next_error", "clear_filter"}

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """The table's keys belong to the main screen (the detail screens have their own)."""
        if action in self.MAIN_ONLY and len(self.screen_stack) > 1:
            return False
        return True

    def __init__(self, source: Source, *, exit_when_done: bool = False, title: str | None = None,
                 clock=None, sample_workers: bool | None = None):
        super().__init__()
        self.source = source
        self.model = RunModel()
        self.exit_when_done = exit_when_done
        self.sort_mode = "input"
        self.filter_text = ""
        self.failed_only = False
        self.exit_status: int | None = None
        self.live = source.live
        self.sample_workers = self.live if sample_workers is None else sample_workers
        self._clock = clock or time.monotonic
        self._t0 = self._clock()
        self._cells: dict[str, tuple] = {}
        self._last_sample = 0.0
        self._procs: dict = {}
        self._worker_mode = LOCAL_WORKER_COLUMNS
        self._quitting = False
        self._done_announced = False
        self.stats = {"ticks": 0, "events": 0, "tick_s": [], "max_batch": 0}
        self.max_events_per_tick = MAX_EVENTS_PER_TICK
        if title:
            self.title = title

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield SummaryBar(id="summary")
        yield Input(placeholder="filter: text in module / target / kernel (Enter to apply, Esc to clear)",
                    id="filter")
        with Vertical(id="main"):
            yield DataTable(id="modules", cursor_type="row", zebra_stripes=True)
            yield DataTable(id="workers", cursor_type="none")
            yield Static(id="charts")
            yield DataTable(id="diagnostics", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#modules", DataTable)
        for label, key in COLUMNS:
            table.add_column(label, key=key, width=WIDTHS[key])
        diags = self.query_one("#diagnostics", DataTable)
        diags.border_title = "diagnostics"
        for label, key, width in (("sev", "sev", 7), ("module", "module", 28), ("stage", "where", 8),
                                  ("location", "loc", 24), ("message", "message", None)):
            diags.add_column(label, key=key, width=width)
        self._worker_columns(LOCAL_WORKER_COLUMNS)
        charts_pane = self.query_one("#charts", Static)
        charts_pane.border_title = "timeline · stage times · throughput"
        charts_pane.display = False
        self.query_one("#filter", Input).display = False
        table.focus()
        self._tick()
        self.set_interval(TICK_S, self._tick)

    # ------------------------------------------------------------------ the refresh loop

    def pump(self, limit: int | None = -1) -> int:
        """Fold the events waiting in the source into the model and update the widgets."""
        t0 = time.perf_counter()
        batch = self.source.drain(self.max_events_per_tick if limit == -1 else limit)
        if batch:
            self.model.apply_many(batch)
        changes = self.model.take_changes()
        if changes or batch:
            self._apply(changes)
        running = self.model.started is not None and not self.model.done
        if changes or running:
            self._update_summary()
        n = len(batch)
        self.stats["ticks"] += 1
        self.stats["events"] += n
        self.stats["max_batch"] = max(self.stats["max_batch"], n)
        if n:
            self.stats["tick_s"].append(time.perf_counter() - t0)
        return n

    def _tick(self) -> None:
        if self._quitting:
            return
        try:
            self._tick_once()
        except NoMatches:   # the timer fired while the app tears its screen down: its widgets are gone
            pass

    def _tick_once(self) -> None:
        self.pump()
        error = getattr(self.source, "error", None)
        if error is not None and not getattr(self, "_error_shown", False):
            self._error_shown = True
            self.notify(f"the batch stopped with an internal error: {type(error).__name__}: {error}",
                        severity="error", timeout=30)
        running = self.model.started is not None and not self.model.done
        if running and self.stats["ticks"] % CHART_TICKS == 0:
            self._rebuild_charts()   # running jobs' bars grow with the clock
        if self.sample_workers and self._clock() - self._last_sample >= SAMPLE_S:
            self._last_sample = self._clock()
            self._sample_workers()
        if self.model.done and self.source.exhausted or (self.live and self.model.done):
            if not self._done_announced:
                self._done_announced = True
                self._update_summary()
            if self.exit_when_done and self.source.exhausted:
                self._finish()

    def now(self) -> float:
        """The clock running cells are measured against: the events' own clock (replays are
        deterministic), advanced by wall time between events of a live run."""
        return self.model.now

    # ------------------------------------------------------------------ applying changes

    def _visible(self, row: Row) -> bool:
        if self.failed_only and row.status not in (FAILED, CANCELLED):
            return False
        if self.filter_text:
            hay = f"{row.module.path} {row.target.name} {row.kernel} {row.status}".lower()
            return all(word in hay for word in self.filter_text.lower().split())
        return True

    def _apply(self, changes) -> None:
        table = self.query_one("#modules", DataTable)
        now = self.now()
        need_sort = changes.reorder or self.sort_mode in ("status", "time") and bool(changes.rows)
        for key in changes.removed:
            if key in table.rows:
                table.remove_row(key)
            self._cells.pop(key, None)
        for row in changes.added:
            if row.key not in self.model.rows or row.key in table.rows or not self._visible(row):
                continue
            cells = row_cells(row, now)
            table.add_row(*cells, key=row.key)
            self._cells[row.key] = cells
            need_sort = True
        for row in set(changes.rows) | self._ticking_rows(table):
            if row.key not in self.model.rows:
                continue
            present = row.key in table.rows
            if not self._visible(row):
                if present:
                    table.remove_row(row.key)
                    self._cells.pop(row.key, None)
                continue
            cells = row_cells(row, now)
            if not present:
                table.add_row(*cells, key=row.key)
                need_sort = True
            else:
                old = self._cells.get(row.key, ())
                for (label, col), new, prev in zip(COLUMNS, cells, old or (None,) * len(cells)):
                    if prev is None or str(new) != str(prev) or getattr(new, "style", None) != getattr(prev, "style", None):
                        table.update_cell(row.key, col, new)
            self._cells[row.key] = cells
        if need_sort:
            self._sort(table)
        if changes.diagnostics_reset:
            self._rebuild_diagnostics()
        elif changes.diagnostics:
            diags = self.query_one("#diagnostics", DataTable)
            for d in changes.diagnostics:
                if d in self.model.diagnostics:
                    diags.add_row(*self._diag_cells(d), key=str(d.id))
        if changes.workers:
            self._rebuild_workers()
        if changes.charts or changes.header:
            self._rebuild_charts()
        for screen in self.screen_stack:
            if isinstance(screen, KernelScreen) and \
                    screen.row.key in changes.schedules | changes.ir | {r.key for r in changes.rows}:
                screen.refresh_content()

    def _ticking_rows(self, table: DataTable) -> set:
        """Running rows on screen: their clocks move every tick (rows scrolled away catch up when
        they come into view, so 500 modules in flight cost a screenful of cell updates)."""
        top = int(table.scroll_y)
        height = max(1, table.size.height)
        out = set()
        for i in range(top, min(table.row_count, top + height)):
            key = table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value
            row = self.model.rows.get(key)
            if row is not None and row.status == RUNNING:
                out.add(row)
        return out

    def _sort_key(self, cell: _Key):
        row = self.model.rows.get(cell.row_key)
        if row is None:
            return (9,)
        m = row.module
        base = (m.index, self.model.targets.index(row.target.name) if row.target.name in self.model.targets else 0,
                row.target.rows.index(row) if row in row.target.rows else row.ordinal)
        if self.sort_mode == "status":
            return (STATUS_RANK.get(row.status, 9), *base)
        if self.sort_mode == "time":
            t = row.time(self.now())
            return (-(t or 0.0), *base)
        if self.sort_mode == "name":
            return (m.stem, *base)
        return base

    def _sort(self, table: DataTable) -> None:
        key = self._selected_key(table)
        table.sort("num", key=self._sort_key)
        if key is not None and key in table.rows:
            table.move_cursor(row=table.get_row_index(key), animate=False, scroll=False)

    def _rebuild_table(self) -> None:
        table = self.query_one("#modules", DataTable)
        key = self._selected_key(table)
        table.clear()
        self._cells.clear()
        now = self.now()
        for row in self.model.rows.values():
            if self._visible(row):
                cells = row_cells(row, now)
                table.add_row(*cells, key=row.key)
                self._cells[row.key] = cells
        self._sort(table)
        if key is not None and key in table.rows:
            table.move_cursor(row=table.get_row_index(key), animate=False)

    def _diag_cells(self, d: Diag) -> tuple:
        e = d.event
        message = e.message.splitlines()[0] if e.message else ""
        return (Text(e.severity, style=SEVERITY_STYLE.get(e.severity, "")),
                Text(_short(d.module.stem if d.module else e.module, 28)), Text(e.stage or "", style="dim"),
                Text(_short(e.location or "", 24), style="cyan"), Text(_short(message, 200)))

    def _rebuild_diagnostics(self) -> None:
        diags = self.query_one("#diagnostics", DataTable)
        diags.clear()
        for d in self.model.diagnostics:
            diags.add_row(*self._diag_cells(d), key=str(d.id))

    def _worker_columns(self, columns) -> None:
        workers = self.query_one("#workers", DataTable)
        workers.clear(columns=True)
        workers.border_title = "workers" if columns is LOCAL_WORKER_COLUMNS else "Dask workers"
        for label, key, width in columns:
            workers.add_column(label, key=key, width=width)
        self._worker_mode = columns

    def _rebuild_workers(self) -> None:
        if self.model.cluster is not None:
            self._rebuild_cluster_workers()
            return
        workers = self.query_one("#workers", DataTable)
        workers.clear()
        items = sorted(self.model.workers.values(), key=lambda w: (w.state == "exited", w.pid))
        for w in items:
            busy = w.state == "busy"
            state = Text(w.state if w.state != "exited" else f"✗ {w.reason}",
                         style={"busy": "yellow", "idle": "green", "exited": "red"}[w.state])
            cpu = f"{w.cpu:.0f}%" if w.cpu is not None and w.state != "exited" else "-"
            workers.add_row(str(w.pid), state, w.stage if busy else "",
                            _short(os.path.basename(w.module), 34) if busy else "",
                            _short(w.kernel, 40) if busy else "", _mib(w.rss), cpu, str(w.jobs), key=str(w.pid))
        workers.border_subtitle = f"{self.model.restarts} restart{'s' if self.model.restarts != 1 else ''}"

    def _rebuild_cluster_workers(self) -> None:
        """--cluster: the Dask scheduler's view of its workers (address, tasks, memory), and what each
        is running for this batch."""
        if self._worker_mode is not CLUSTER_WORKER_COLUMNS:
            self._worker_columns(CLUSTER_WORKER_COLUMNS)
        workers = self.query_one("#workers", DataTable)
        workers.clear()
        running = {}
        for w in self.model.workers.values():   # sandboxes, named by their Dask worker's address
            if w.state == "busy":
                running[w.address] = w
        cluster = self.model.cluster
        for cw in cluster.workers:
            busy = running.get(cw.address)
            memory = _mib(cw.memory_bytes) + (f" / {_mib(cw.memory_limit_bytes)}" if cw.memory_limit_bytes else "")
            workers.add_row(_short(cw.address, 26), _short(cw.name, 10), str(cw.nthreads), str(cw.executing),
                            str(cw.tasks_done), memory, busy.stage if busy else "",
                            _short(os.path.basename(busy.module), 30) if busy else "", key=cw.address)
        lost = sum(1 for e in self.model.worker_exits if e.reason == "lost")
        workers.border_subtitle = (f"scheduler {cluster.scheduler}  │ {len(cluster.workers)} workers"
                                   + (f", {lost} lost" if lost else "")
                                   + (f", {self.model.retries} tasks re-run" if self.model.retries else ""))

    def _rebuild_charts(self) -> None:
        pane = self.query_one("#charts", Static)
        if not pane.display:
            return
        width = max(40, (pane.size.width or self.size.width) - 4)
        m = self.model
        text = charts.timeline(list(m.spans.values()), self.now(), width)
        text.append("\n\n")
        text.append_text(charts.histogram(m.stage_times))
        text.append("\n")
        text.append_text(charts.throughput(m.finished_at, self.now(), width))
        pane.update(text)

    def _sample_workers(self) -> None:
        if self.model.started is not None and self.model.started.cluster:
            return   # Dask workers may be on other hosts: the scheduler's figures (ClusterState) are shown
        try:
            import psutil
        except ImportError:
            return
        changed = False
        for w in self.model.workers.values():
            if w.state == "exited":
                continue
            proc = self._procs.get(w.pid)
            try:
                if proc is None:
                    proc = self._procs[w.pid] = psutil.Process(w.pid)
                    proc.cpu_percent(None)
                    continue
                w.cpu = proc.cpu_percent(None)
                w.rss = proc.memory_info().rss
                w.peak_rss = max(w.peak_rss, w.rss)
                changed = True
            except (psutil.Error, OSError):
                w.state, w.reason = "exited", w.reason or "gone"
                changed = True
        if changed:
            self._rebuild_workers()

    def summary_text(self) -> Text:
        m = self.model
        tot = m.totals()
        text = Text()
        if m.started is None:
            text.append("waiting for the batch to start…", style="dim")
            return text
        if m.finished is not None and m.finished.cancelled:
            text.append(f" interrupted ({m.finished.cancelled}) ", style="bold white on magenta")
        elif m.done:
            code = m.exit_code
            text.append(f" done: exit {code} ", style="bold white on green" if code == 0 else "bold white on red")
        else:
            text.append(" running ", style="bold black on yellow")
        text.append(f"  modules {tot['done']}/{tot['modules']}  ")
        text.append(f"ok {tot['ok']}", style="green")
        text.append("  ")
        text.append(f"failed {tot['failed']}", style="bold red" if tot["failed"] else "dim")
        if tot["cancelled"]:
            text.append(f"  cancelled {tot['cancelled']}", style="magenta")
        text.append(f"  running {tot['running']}  queued {tot['queued']}", style="")
        text.append(f"  │ kernels {tot['kernels_done']}" + (f" ({tot['kernels_failed']} failed)"
                                                            if tot["kernels_failed"] else ""))
        text.append(f"  │ {tot['modules_per_s']:.1f} modules/s  {tot['kernels_per_s']:.1f} kernels/s")
        text.append(f"  │ {tot['elapsed']:.1f} s")
        text.append(f"  │ workers {tot['busy']}/{tot['workers']} busy")
        if tot["restarts"]:
            text.append(f", {tot['restarts']} restarted", style="red")
        if tot["retries"]:
            text.append(f", {tot['retries']} re-run", style="yellow")
        text.append(f"  │ {tot['errors']} errors", style="red" if tot["errors"] else "dim")
        if tot["warnings"]:
            text.append(f", {tot['warnings']} warnings", style="yellow")
        extra = []
        if self.sort_mode != "input":
            extra.append(f"sort: {self.sort_mode}")
        if self.filter_text:
            extra.append(f"filter: {self.filter_text}")
        if self.failed_only:
            extra.append("failed only")
        if not self.live:
            extra.append("replay")
        if extra:
            text.append("  │ " + ", ".join(extra), style="cyan")
        return text

    def _update_summary(self) -> None:
        try:
            bar = self.query_one("#summary", SummaryBar)
        except NoMatches:       # a tick while the app tears its screen down: nothing to update
            return
        bar.update(self.summary_text())

    # ------------------------------------------------------------------ selection helpers

    def _selected_key(self, table: DataTable) -> str | None:
        if table.row_count == 0:
            return None
        try:
            return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        except Exception:  # noqa: BLE001 - no rows
            return None

    def selected_row(self) -> Row | None:
        focused = self.focused
        if isinstance(focused, DataTable) and focused.id == "diagnostics":
            d = self.selected_diag()
            return d.row if d else None
        key = self._selected_key(self.query_one("#modules", DataTable))
        return self.model.rows.get(key) if key else None

    def selected_diag(self) -> Diag | None:
        key = self._selected_key(self.query_one("#diagnostics", DataTable))
        if key is None:
            return None
        return next((d for d in self.model.diagnostics if str(d.id) == key), None)

    # ------------------------------------------------------------------ actions

    @on(DataTable.RowSelected, "#modules")
    def _module_selected(self, event: DataTable.RowSelected) -> None:
        row = self.model.rows.get(event.row_key.value)
        if row is not None:
            self.push_screen(KernelScreen(self, row))

    @on(DataTable.RowSelected, "#diagnostics")
    def _diag_selected(self, event: DataTable.RowSelected) -> None:
        d = next((d for d in self.model.diagnostics if str(d.id) == event.row_key.value), None)
        if d is not None:
            self.push_screen(DiagnosticScreen(self, d))

    def action_open(self) -> None:
        focused = self.focused
        if isinstance(focused, DataTable) and focused.id == "diagnostics":
            d = self.selected_diag()
            if d:
                self.push_screen(DiagnosticScreen(self, d))
            return
        row = self.selected_row()
        if row is not None:
            self.push_screen(KernelScreen(self, row))

    def action_open_ptx(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.push_screen(KernelScreen(self, row, tab="ptx"))

    def action_open_ir(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.push_screen(KernelScreen(self, row, tab="ir"))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_retry(self) -> None:
        row = self.selected_row()
        if row is None:
            return
        m = row.module
        if self.source.control is None:
            self.notify("retry needs a live run (this is a replay)", severity="warning")
        elif not m.finished:
            self.notify(f"{m.stem} is still running", severity="warning")
        elif m.status == OK:
            self.notify(f"{m.stem} compiled: nothing to retry", severity="information")
        else:
            self.source.control.retry(m.path)
            self.notify(f"retrying {m.stem}")

    def action_cancel(self) -> None:
        row = self.selected_row()
        if row is None:
            return
        m = row.module
        if self.source.control is None:
            self.notify("cancel needs a live run (this is a replay)", severity="warning")
        elif m.finished:
            self.notify(f"{m.stem} has already finished", severity="information")
        else:
            self.source.control.cancel(m.path)
            self.notify(f"cancelling {m.stem}")

    def action_retry_row(self, row: Row) -> None:
        self._select(row)
        self.action_retry()

    def action_cancel_row(self, row: Row) -> None:
        self._select(row)
        self.action_cancel()

    def _select(self, row: Row) -> None:
        table = self.query_one("#modules", DataTable)
        if row.key in table.rows:
            table.move_cursor(row=table.get_row_index(row.key))

    def action_cancel_all(self) -> None:
        if self.source.control is None:
            self.notify("cancel needs a live run (this is a replay)", severity="warning")
            return
        self.source.control.cancel_all()
        self.notify("cancelling every module still queued or running")

    def action_sort(self) -> None:
        self.sort_mode = SORTS[(SORTS.index(self.sort_mode) + 1) % len(SORTS)]
        self._sort(self.query_one("#modules", DataTable))
        self._update_summary()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.filter_text
        box.focus()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.set_filter(event.value.strip())
        if not self.filter_text:
            event.input.display = False
        self.query_one("#modules", DataTable).focus()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._rebuild_table()
        self._update_summary()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = False
        if self.filter_text or self.failed_only:
            self.failed_only = False
            self.set_filter("")
        self.query_one("#modules", DataTable).focus()

    def action_failed_only(self) -> None:
        self.failed_only = not self.failed_only
        self._rebuild_table()
        self._update_summary()

    def action_toggle(self, pane: str) -> None:
        widget = self.query_one(f"#{pane}")
        widget.display = not widget.display
        if pane == "charts":
            self._rebuild_charts()

    def action_next_error(self) -> None:
        diags = self.query_one("#diagnostics", DataTable)
        if diags.row_count:
            if not diags.display:
                self.action_toggle("diagnostics")
            diags.focus()
            start = diags.cursor_row + 1 if self.focused is diags else 0
            for offset in range(diags.row_count):
                i = (start + offset) % diags.row_count
                key = diags.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value
                d = next((d for d in self.model.diagnostics if str(d.id) == key), None)
                if d is not None and d.event.severity == "error":
                    diags.move_cursor(row=i)
                    return

    def action_quit_dashboard(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        if self.source.live:
            self.source.close(cancel=not self.model.done)
        self.exit_status = self.model.exit_code
        self.exit(self.exit_status)


# ---------------------------------------------------------------------- kernel detail


def schedule_renderables(report) -> list:
    """A loop's schedule: summary, op order, reservation table (slots x cycles), the pipelined loop as it
    runs (iterations x steps: prologue, steady state, drain), II search."""
    out: list = []
    head = Text()
    head.append(f"loop {report.loop} ({report.loop_op})", style="bold")
    head.append(f"  {report.strategy}", style="cyan")
    head.append(f" [{report.rule}]", style="dim")
    if not report.ok:
        head.append(f"  FAILED: {report.message}", style="bold red")
    out.append(head)
    line = Text()
    line.append(f"II {report.ii}", style="bold yellow")
    line.append(f"   MII {report.mii} = max(res {report.res_mii}"
                + (f" [{report.res_bottleneck}]" if report.res_bottleneck else "")
                + f", rec {report.rec_mii}, fine {report.fine_mii}, dep {report.dep_mii})")
    line.append(f"   stages {report.stage_count}   ops {report.num_ops}   II cap {report.ii_cap}"
                + (f"   depth {report.depth}" if report.depth else "")
                + (f"   parent loop {report.parent}" if report.parent >= 0 else ""))
    out.append(line)
    for note in report.notes:
        out.append(Text(f"note: {note}", style="dim"))
    colors = {o.index: OP_COLORS[o.index % len(OP_COLORS)] for o in report.ops}
    ops = Table(title="op order", title_justify="left", title_style="bold", expand=False, box=None,
                padding=(0, 1), header_style="bold dim")
    for col in ("stage", "order", "start", "cycle", "#", "op", "class", "lat", "slots"):
        ops.add_column(col, justify="right" if col in ("stage", "order", "start", "cycle", "#", "lat") else "left")
    for o in sorted(report.ops, key=lambda o: (o.stage, o.order)):
        slots = ", ".join(f"{s.name}@{s.offset}+{s.duration}" for s in o.slots) or "-"
        ops.add_row(str(o.stage), str(o.order), str(o.start), str(o.cycle), Text(str(o.index), style=colors[o.index]),
                    Text(o.name, style=colors[o.index]), o.rclass, str(o.latency), slots)
    out.append(ops)
    if report.rrt and report.rrt_slots:
        cycles = sorted({r.cycle for r in report.rrt})
        cells = {(r.cycle, c.name): c for r in report.rrt for c in r.cells}
        grid = Table(title=f"modulo reservation table ({len(report.rrt_slots)} slots × {len(cycles)} cycles)",
                     title_justify="left", title_style="bold", box=None, padding=(0, 1), header_style="bold dim")
        grid.add_column("slot \\ cycle", justify="left")
        for c in cycles:
            grid.add_column(str(c), justify="center")
        for name in report.rrt_slots:
            row = [Text(name, style="bold")]
            for c in cycles:
                cell = cells.get((c, name))
                if cell is None:
                    row.append(Text("·", style="dim"))
                    continue
                t = Text()
                for k, op in enumerate(cell.ops):
                    if k:
                        t.append(",")
                    t.append(str(op), style=colors.get(op, ""))
                if cell.used >= cell.capacity:
                    t.stylize("bold reverse")
                row.append(t)
            grid.add_row(*row)
        out.append(grid)
    elif report.ok:
        out.append(Text("(no reservation table: serial schedule or no resources)", style="dim"))
    out.extend(loopview.pipelined_loop(report))
    if report.attempts:
        hist = Table(title="II search", title_justify="left", title_style="bold", box=None, padding=(0, 1),
                     header_style="bold dim")
        for col in ("II", "result", "arm", "why / conflict", "arms"):
            hist.add_column(col)
        for a in report.attempts:
            conflict = ""
            if a.conflict_op >= 0:
                conflict = (f"op {a.conflict_op} at {a.conflict_start}: row {a.conflict_row} "
                            f"{a.conflict_resource} held by {','.join(map(str, a.conflict_holders)) or '-'}")
            why = a.reason + ("; " if a.reason and conflict else "") + conflict
            arms = "  ".join(f"{r.arm}:{'ok' if r.ok else 'no'}({r.steps})" for r in a.arms)
            hist.add_row(str(a.ii), Text("ok" if a.ok else "failed", style="green" if a.ok else "red"), a.arm,
                         why, arms)
        out.append(hist)
    return out


class KernelScreen(Screen):
    """One (module, target, kernel): its loops and their schedules, its PTX, IR and resources."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("q", "back", "Back", show=False),
        Binding("s", "tab('schedules')", "Schedules"),
        Binding("p", "tab('ptx')", "PTX"),
        Binding("i", "tab('ir')", "IR"),
        Binding("r", "retry", "Retry"),
        Binding("c", "cancel", "Cancel"),
        Binding("question_mark", "help", "Help"),
    ]

    TAB_FOCUS = {"schedules": "#loops", "ptx": "#ptx-text", "ir": "#ir-passes"}   # what takes the keys

    def __init__(self, dashboard: DashboardApp, row: Row, tab: str = "schedules"):
        super().__init__()
        self.dashboard = dashboard
        self.row = row
        self.initial_tab = tab
        self._loaded: set[str] = set()
        self._ir_listed: tuple | None = None    # (snapshot count, still running) the IR tab lists
        self._ir_index = -1                     # the entry the IR tab shows

    def compose(self) -> ComposeResult:
        yield Static(id="kernel-head")
        with TabbedContent(initial=self.initial_tab, id="kernel-tabs"):
            with TabPane("Schedules", id="schedules"):
                with Horizontal():
                    yield DataTable(id="loops", cursor_type="row")
                    with VerticalScroll(id="loop-detail"):
                        yield Static(id="loop-view")
            with TabPane("PTX", id="ptx"):
                yield Static(id="resources")
                yield TextArea(id="ptx-text", read_only=True, show_line_numbers=True, soft_wrap=False)
            with TabPane("IR", id="ir"):
                yield Static(id="ir-note")
                with Horizontal():
                    yield DataTable(id="ir-passes", cursor_type="row")
                    yield TextArea(id="ir-text", read_only=True, show_line_numbers=True, soft_wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        loops = self.query_one("#loops", DataTable)
        for col in ("loop", "op", "strategy", "II", "MII", "stages", "ops", "ok"):
            loops.add_column(col, key=col)
        self.query_one("#ir-passes", DataTable).add_column("IR", key="ir")
        self.refresh_content()
        self._load_tab(self.initial_tab)
        # focus inside the shown pane: a focused widget left in a hidden pane would pull it back
        self.query_one(self.TAB_FOCUS[self.initial_tab]).focus()

    def refresh_content(self) -> None:
        row = self.row
        m = row.module
        head = Text()
        head.append(f"{m.stem}", style="bold")
        head.append(f"  {row.target.name}  ", style="cyan")
        head.append(row.kernel or "(kernels not known yet)")
        head.append("  ")
        head.append_text(status_cell(row))
        head.append("\n")
        now = self.dashboard.now()
        for s in STAGES:
            head.append(f"{STAGE_TITLES[s]} ")
            head.append_text(stage_cell(row, s, now))
            head.append("   ")
        self.query_one("#kernel-head", Static).update(head)
        loops = self.query_one("#loops", DataTable)
        selected = loops.cursor_row
        loops.clear()
        for r in row.schedules:
            loops.add_row(str(r.loop), r.loop_op, r.strategy, str(r.ii), str(r.mii), str(r.stage_count),
                          str(r.num_ops), Text("ok", style="green") if r.ok else Text("failed", style="red"))
        if row.schedules:
            loops.move_cursor(row=min(selected, len(row.schedules) - 1))
        self._show_loop()
        self._loaded.discard("ptx")
        if self.query_one("#kernel-tabs", TabbedContent).active == "ptx":
            self._load_tab("ptx")
        if "ir" in self._loaded:
            self._fill_ir_list()

    def _show_loop(self) -> None:
        view = self.query_one("#loop-view", Static)
        row = self.row
        if not row.schedules:
            if row.scheduled:
                view.update(Text("this kernel has no loops", style="dim"))
            elif row.status in (QUEUED, RUNNING):
                view.update(Text("schedules arrive when the schedule stage finishes", style="dim"))
            else:
                view.update(Text("not scheduled: compile with --schedules (the `tui` command does by default)",
                                 style="dim"))
            return
        loops = self.query_one("#loops", DataTable)
        index = min(max(loops.cursor_row, 0), len(row.schedules) - 1)
        view.update(Group(*schedule_renderables(row.schedules[index])))

    @on(DataTable.RowHighlighted, "#loops")
    def _loop_highlighted(self, _event) -> None:
        self._show_loop()

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id or ""
        self._load_tab(tab)
        target = self.TAB_FOCUS.get(tab)
        if target:
            self.query_one(target).focus()

    def _load_tab(self, tab: str) -> None:
        if tab in self._loaded:
            return
        self._loaded.add(tab)
        row = self.row
        if tab == "ptx":
            outputs = row.target.outputs
            ptx_files = [o for o in outputs if o.endswith(".ptx")]
            text = lookup.read_text(ptx_files[0]) if ptx_files else None
            if text is not None:
                text = lookup.kernel_ptx(text, row.kernel) if row.kernel else text
            elif ptx_files:
                text = f"cannot read {ptx_files[0]}"
            elif row.target.exit_code is None:
                text = "the PTX is shown once the target finishes"
            else:
                text = "no PTX kept: compile with --keep-ptx (the `tui` command keeps it by default)"
            self.query_one("#ptx-text", TextArea).load_text(text)
            self.query_one("#resources", Static).update(self._resources_text())
        elif tab == "ir":
            self._fill_ir_list()

    # -- the IR tab: the input's cuda_tile IR, then the tile-GPU IR before/after each pass ---------------

    def ir_entries(self) -> list[str]:
        return ["cuda_tile (input)"] + [f"{d.when} {d.pass_name}" for d in self.row.ir_dumps]

    def _fill_ir_list(self) -> None:
        """(Re)list the snapshots when their number changed; the newest is shown until one is chosen."""
        dumps = self.row.ir_dumps
        waiting = self.row.status in (QUEUED, RUNNING)
        if self._ir_listed == (len(dumps), waiting):
            return
        self._ir_listed = (len(dumps), waiting)
        table = self.query_one("#ir-passes", DataTable)
        table.clear()
        for i, label in enumerate(self.ir_entries()):
            table.add_row(label, key=str(i))
        note = self.query_one("#ir-note", Static)
        if dumps:
            note.update(Text(f"{len(dumps)} tile-GPU IR snapshots (--print-ir-*); ↑ ↓ choose one", style="dim"))
        elif waiting:
            note.update(Text("tile-GPU IR snapshots arrive when the lower stage finishes (with --print-ir-*)",
                             style="dim"))
        else:
            note.update(Text("no tile-GPU IR snapshots: compile with --print-ir-after-all (the `tui` command "
                             "takes them by default)", style="dim"))
        self._ir_index = -1
        table.move_cursor(row=len(dumps))
        self._show_ir(len(dumps))

    def _show_ir(self, index: int) -> None:
        if self._ir_listed is None or self._ir_index == index:
            return
        self._ir_index = index
        row = self.row
        if index == 0 or not row.ir_dumps:
            text = lookup.kernel_ir(row.module.path, row.kernel)
        else:
            d = row.ir_dumps[index - 1]
            text = d.banner() + "\n" + d.text
        self.query_one("#ir-text", TextArea).load_text(text)

    @on(DataTable.RowHighlighted, "#ir-passes")
    def _ir_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._show_ir(int(event.row_key.value))

    def _resources_text(self) -> Text:
        row = self.row
        text = Text()
        text.append("resources (from the cubin): ", style="bold")
        r = row.resources
        if r is None:
            text.append("once the target's cubin exists" if row.target.exit_code is None else "no cubin was made",
                        style="dim")
            return text
        text.append(f"registers {r.registers}", style="yellow")
        text.append(f"   spills {r.spill_store_bytes} bytes stored, {r.spill_load_bytes} loaded",
                    style="bold red" if r.spill_store_bytes or r.spill_load_bytes else "")
        text.append(f"   stack frame {r.stack_frame_bytes} bytes")
        text.append(f"   shared memory {r.shared_static_bytes} bytes"
                    + (" + dynamic" if r.shared_dynamic_bytes is None else ""))
        if r.tmem_columns is not None:
            text.append(f"   tensor memory {r.tmem_columns} columns")
        text.append(f"\n{r.threads or '?'} threads per CTA")
        if r.ctas_per_sm is not None:
            text.append(f"   {r.ctas_per_sm} CTAs per SM (limited by {r.occupancy_limit})")
        text.append(f"   tensor cores {r.tensor_core}   copies {r.copy_engine}")
        return text

    def action_tab(self, tab: str) -> None:
        self.query_one("#kernel-tabs", TabbedContent).active = tab

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_retry(self) -> None:
        self.dashboard.action_retry_row(self.row)

    def action_cancel(self) -> None:
        self.dashboard.action_cancel_row(self.row)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())


# ---------------------------------------------------------------------- diagnostics


def diagnostic_renderables(d: Diag, context: int = 6) -> list:
    e = d.event
    out: list = []
    head = Text()
    head.append(e.severity, style=SEVERITY_STYLE.get(e.severity, "bold"))
    head.append(": ")
    head.append(e.message, style="bold")
    out.append(head)
    where = Text(style="dim")
    where.append(f"module {e.module}")
    for label, value in (("target", e.target), ("kernel", e.kernel), ("stage", e.stage)):
        if value:
            where.append(f"   {label} {value}")
    out.append(where)
    if e.location:
        out.append(Text(f"location {e.location}", style="cyan"))
    if e.tool_stderr:
        out.append(Text("\ntool stderr", style="bold"))
        out.append(Text(e.tool_stderr.rstrip("\n")))
    out.append(Text("\nIR around the op (as `disasm` prints it)", style="bold"))
    if e.location or e.kernel:
        view = lookup.ir_around(e.module, e.location, e.kernel)
        if view.error:
            out.append(Text(view.error, style="dim"))
        elif not view.marked:
            out.append(Text(f"no op of the module has location {e.location}" if e.location
                            else "no op to show", style="dim"))
        else:
            lines = lookup.window(view, context)
            width = len(str(lines[-1][0]))
            for n, line, marked in lines:
                t = Text(f"{'▶' if marked else ' '} {n:>{width}} │ ", style="bold red" if marked else "dim")
                t.append(line, style="bold" if marked else "")
                out.append(t)
    else:
        out.append(Text("(the diagnostic names no op)", style="dim"))
    out.append(Text("\nsource", style="bold"))
    src = lookup.source_line(e.location, e.module)
    if src is None:
        out.append(Text("(no source location)" if not e.location else f"{e.location.rsplit(':', 2)[0]} is not "
                        f"readable from here", style="dim"))
    else:
        file, lines = src
        out.append(Text(file, style="dim"))
        width = len(str(lines[-1][0]))
        for n, line, marked in lines:
            t = Text(f"{'▶' if marked else ' '} {n:>{width}} │ ", style="bold red" if marked else "dim")
            t.append(line, style="bold" if marked else "")
            out.append(t)
    return out


class DiagnosticScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("q", "back", "Back", show=False),
        Binding("k", "kernel", "Kernel"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, dashboard: DashboardApp, diag: Diag):
        super().__init__()
        self.dashboard = dashboard
        self.diag = diag

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="diag-scroll"):
            yield Static(Group(*diagnostic_renderables(self.diag)), id="diag-view")
        yield Footer()

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_kernel(self) -> None:
        row = self.diag.row
        if row is not None:
            self.app.push_screen(KernelScreen(self.dashboard, row))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())


# ---------------------------------------------------------------------- help

HELP = """\
[b]tileiras-async dashboard[/b]

[b]main screen[/b]
  ↑ ↓ PgUp PgDn   move in the table (ctrl+Home / ctrl+End: first / last row)    Tab   next pane
  Enter           open the kernel (or the selected diagnostic)
  p / i           open the kernel's PTX / IR
  r               retry the selected module (a failed or cancelled one)
  c / C           cancel the selected module / every module not finished
  s               sort: input order → status → time → name
  /               filter (words in module, target, kernel, status); Esc clears
  f               only failed and cancelled rows
  d / w           show or hide the diagnostics / workers pane
  t               show or hide the timeline (stages per worker, waiting jobs), stage times, throughput
  e               jump to the next error
  q               quit (a batch still running is cancelled); the exit status is the batch's
  ?               this help

[b]kernel view[/b]
  s / p / i       schedules (per loop: op order, II, MII, reservation table, the pipelined loop's
                  prologue / steady state / drain, II search) / PTX and ptxas resource usage / IR
                  (the input's cuda_tile IR, then the tile-GPU IR before / after each pass: ↑ ↓)
                  r / c   retry / cancel its module
  Esc or q        back

[b]diagnostic view[/b]
  the message, the tool's stderr, the IR around the op and the source line;  k  its kernel;  Esc back

[b]cells[/b]   ✓ done (time)   ▶ running   ✗ failed   ⊘ cancelled   – not run   · pending
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("q", "dismiss", "Close", show=False),
                Binding("question_mark", "dismiss", "Close", show=False)]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP, id="help-text")
