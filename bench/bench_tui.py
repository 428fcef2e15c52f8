"""Benchmark: does the dashboard keep up with 500 modules in flight?

    python bench/bench_tui.py [--modules 500] [--jobs 8] [--rate 5000] [--size 160x50]

Replays a synthetic batch (tui/synth.py: 500 modules admitted at once, fixed timings, a few parse /
ptxas failures and worker crashes; ~19 events per module) into the real app, headless
(Textual's run_test), and measures:

  burst      every event queued at once, drained by the app's own pump in ticks of at most
             N events: events/s handled (fold + widget updates), the work per tick (p50 / p95 /
             max) and the time to compose a full frame afterwards
  stream     a feeder thread delivers the events at --rate events/s while the app runs on its
             10 Hz refresh timer: per-tick work and frame composition (p50 / p95 / max), the
             backlog a tick finds, and the lag from the last event fed to it being on screen
  redraw     what the dashboard avoids: one full rebuild of the table (every row re-added), the
             cost a per-event redraw would pay for every event

Always exits 0: this reports, it does not gate.  Load on the machine skews the figures.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tileiras_tui.app import DashboardApp  # noqa: E402
from tileiras_tui.sources import ListSource  # noqa: E402
from tileiras_tui.synth import synthetic_run  # noqa: E402
from tileiras_tui.testing import render_time, screen_text  # noqa: E402


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def ms(x: float) -> str:
    return f"{x * 1000:7.2f} ms"


def measure(app, source, ticks: list, frames: list, backlog: list) -> None:
    """Time every pump of the app (its timer's and ours) and compose a frame after each."""
    original = app.pump

    def measured(limit=-1):
        backlog.append(len(source._queue))
        s = time.perf_counter()
        n = original(limit)
        if n:
            ticks.append(time.perf_counter() - s)
            frames.append(render_time(app))
        return n

    app.pump = measured


async def burst(events, size, limit: int) -> dict:
    source = ListSource()
    app = DashboardApp(source)
    app.max_events_per_tick = limit
    ticks, frames, backlog = [], [], []
    measure(app, source, ticks, frames, backlog)
    async with app.run_test(size=size) as pilot:
        source.feed(events)
        source.end()
        t0 = time.perf_counter()
        while not source.exhausted:
            app.pump()
            await pilot.pause()
        wall = time.perf_counter() - t0
        assert f"modules {len(app.model.module_list)}/" in screen_text(app)
        s = time.perf_counter()
        app._rebuild_table()
        rebuild = time.perf_counter() - s
        rows = len(app.model.rows)
    return {"wall": wall, "ticks": ticks, "frames": frames, "rebuild": rebuild, "rows": rows}


async def stream(events, size, rate: float) -> dict:
    source = ListSource()
    app = DashboardApp(source)
    ticks, frames, backlog = [], [], []
    measure(app, source, ticks, frames, backlog)
    fed_all = threading.Event()
    fed_at = [0.0]

    def feeder():
        chunk = max(1, int(rate / 100))        # every 10 ms
        for i in range(0, len(events), chunk):
            source.feed(events[i:i + chunk])
            time.sleep(chunk / rate)
        fed_at[0] = time.perf_counter()
        source.end()
        fed_all.set()

    async with app.run_test(size=size) as pilot:
        t0 = time.perf_counter()
        thread = threading.Thread(target=feeder, daemon=True)
        thread.start()
        while not (fed_all.is_set() and source.exhausted):
            await pilot.pause(0.02)
        await pilot.pause()
        shown = time.perf_counter()
        wall = shown - t0
        assert "modules" in screen_text(app)
    return {"wall": wall, "ticks": ticks, "frames": frames, "backlog": backlog, "lag": shown - fed_at[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modules", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--rate", type=float, default=5000.0, help="stream: events per second fed")
    ap.add_argument("--tick-limit", type=int, default=2000, help="burst: events per tick at most")
    ap.add_argument("--size", default="160x50")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    events = synthetic_run(args.modules, jobs=args.jobs, parse_fail_every=50, ptxas_fail_every=40, crash_every=70)
    print(f"{args.modules} modules in flight, {len(events)} events, terminal {w}x{h}, "
          f"load {os.getloadavg()[0]:.2f}")

    b = asyncio.run(burst(events, (w, h), args.tick_limit))
    work = sum(b["ticks"])
    print(f"\nburst ({args.tick_limit} events per tick at most): {len(events)} events on screen after "
          f"{b['wall']:.2f} s, {len(b['ticks'])} ticks, {b['rows']} rows; the UI's own work {work:.3f} s = "
          f"{len(events) / work:,.0f} events/s handled")
    print(f"  work per tick   p50 {ms(pct(b['ticks'], 50))}  p95 {ms(pct(b['ticks'], 95))}  max {ms(max(b['ticks']))}")
    print(f"  frame compose   p50 {ms(pct(b['frames'], 50))}  p95 {ms(pct(b['frames'], 95))}  max {ms(max(b['frames']))}")

    s = asyncio.run(stream(events, (w, h), args.rate))
    busy = [x for x in s["backlog"] if x]
    print(f"\nstream ({args.rate:,.0f} events/s fed, 10 Hz refresh): {len(events)} events in {s['wall']:.2f} s, "
          f"{len(s['ticks'])} ticks with events")
    print(f"  work per tick   p50 {ms(pct(s['ticks'], 50))}  p95 {ms(pct(s['ticks'], 95))}  max {ms(max(s['ticks']))}")
    print(f"  frame compose   p50 {ms(pct(s['frames'], 50))}  p95 {ms(pct(s['frames'], 95))}  max {ms(max(s['frames']))}")
    print(f"  backlog a tick finds: mean {statistics.mean(busy) if busy else 0:,.0f}  max {max(busy) if busy else 0:,} "
          f"events;  last event fed -> on screen {s['lag'] * 1000:.0f} ms")
    share = sum(s["ticks"]) / s["wall"] if s["wall"] else 0.0
    print(f"  UI thread busy with events {share * 100:.1f} % of the time")

    print(f"\nredraw (avoided): one full table rebuild of {b['rows']} rows {ms(b['rebuild'])}; per event that "
          f"would be {b['rebuild'] * len(events):.0f} s for this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
