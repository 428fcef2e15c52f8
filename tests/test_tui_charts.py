"""The dashboard's pictures: the per-worker timeline, the stage-time histogram, throughput, the Dask
workers pane, and a main table whose time column fits a 160-column terminal."""
from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from tileiras_async.pipeline import events as ev
from tileiras_tui import charts
from tileiras_tui.app import DashboardApp
from tileiras_tui.sources import ListSource
from tileiras_tui.synth import synthetic_run
from tileiras_tui.testing import screen_text, settle


def test_timeline_draws_each_worker_and_the_queue():
    spans = [["pid 11", "parse", 0.0, 1.0, 0.0], ["pid 11", "lower", 1.0, 3.0, 0.5],
             ["pid 12", "codegen", 2.0, 4.0, 2.0], ["supervisor", "assemble", 4.0, 5.0, 0.0]]
    lines = charts.timeline(spans, 5.0, 22 + 1 + 10).plain.splitlines()
    assert lines[0] == "pid 11".ljust(22) + " " + "ppllll····"
    assert lines[1] == "pid 12".ljust(22) + " " + "····cccc··"
    assert lines[2] == "supervisor".ljust(22) + " " + "········aa"
    assert lines[3] == "queued (jobs waiting)".ljust(22) + " " + "1211      "   # lower waited 0.5 s, codegen 2 s
    assert lines[4].endswith("0 s  5.0 s")


def test_running_job_reaches_now():
    line = charts.timeline([["w", "lower", 1.0, None, 0.0]], 4.0, 22 + 1 + 12).plain.splitlines()[0]
    assert line.endswith("···lllllllll")


def test_histogram_buckets_by_log_time():
    assert [charts.bucket(t) for t in (0.0005, 0.002, 0.05, 0.5, 2.0, 20.0)] == [0, 1, 4, 6, 7, 9]
    text = charts.histogram({"lower": [0.002, 0.002, 0.05], "parse": [0.0005]}).plain.splitlines()
    assert text[0].split() == ["stage", *charts.BUCKET_LABELS, "jobs"]
    assert text[1].startswith("parse") and text[1].rstrip().endswith("1")
    assert text[2].startswith("lower") and "·███2··▄▄▄1·" in text[2].replace(" ", "") and text[2].rstrip().endswith("3")


def test_throughput_rates():
    text = charts.throughput([1.0, 2.0, 2.5, 9.5], 10.0, 22 + 52 + 10).plain
    assert text.startswith("modules/s".ljust(22)) and "mean 0.4/s" in text


def cluster_events():
    events = synthetic_run(6, jobs=2)
    workers = [ev.ClusterWorker(address="tcp://127.0.0.1:40001", name="w1", pid=101, nthreads=1,
                                memory_bytes=300 << 20, memory_limit_bytes=4 << 30, executing=1, tasks_done=7),
               ev.ClusterWorker(address="tcp://127.0.0.1:40002", name="w2", nthreads=1, memory_bytes=250 << 20)]
    state = ev.ClusterState(t=0.05, scheduler="tcp://127.0.0.1:8786", workers=workers)
    retried = ev.StageRetried(t=0.3, job=3, stage="lower", module=events[0].modules[0], worker=workers[1].address,
                              previous_worker="tcp://127.0.0.1:40003")
    return events[:3] + [state] + events[3:20] + [retried] + events[20:]


def shows(events, size, keys=()):
    async def go():
        source = ListSource(events)
        source.end()
        app = DashboardApp(source)
        async with app.run_test(size=size) as pilot:
            await settle(pilot, app)
            for k in keys:
                await pilot.press(k)
            await settle(pilot, app)
            columns = [c.label.plain for c in app.query_one("#workers", DataTable).columns.values()]
            return columns, screen_text(app)
    return asyncio.run(go())


def test_dask_workers_pane_and_charts():
    columns, text = shows(cluster_events(), (160, 60), keys=("t",))
    assert "Dask workers" in text and "tcp://127.0.0.1:40001" in text and "300 MiB / 4096 MiB" in text
    assert "scheduler tcp://127.0.0.1:8786" in text and "1 tasks re-run" in text
    assert "queued (jobs waiting)" in text and "modules/s" in text and "<10ms" in text
    assert columns[:6] == ["address", "name", "thr", "tasks", "done", "memory"]


def test_time_column_fits_160_columns():
    _columns, text = shows(synthetic_run(4, jobs=2), (160, 30))
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#"))
    # whole, with the resource columns after it (they may be cut there)
    assert " time " in header and header.index(" time ") < header.index(" regs")
