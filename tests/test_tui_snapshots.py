"""SVG snapshots of the dashboard: the main screen mid-run, a diagnostic's view, a schedule view.

The screens are rendered from synthetic events with fixed timings at a fixed size, so they are
deterministic; each is compared with tests/snapshots/tui_<name>.svg.  To accept new pictures:

    TUI_SNAPSHOT_UPDATE=1 .venv/bin/python -m pytest tests/test_tui_snapshots.py

(A failing comparison leaves the new picture next to the old one as tui_<name>.actual.svg.)
Snapshots depend on how Textual and Rich draw, so they are skipped under versions other than
the ones they were recorded with (tests/snapshots/tui_versions.json).
"""
from __future__ import annotations

import asyncio
import difflib
import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from tileiras_tui.app import DashboardApp, DiagnosticScreen, KernelScreen  # noqa: E402
from tileiras_tui.sources import ListSource  # noqa: E402
from tileiras_tui.synth import synthetic_run  # noqa: E402
from tileiras_tui.testing import screen_text, settle  # noqa: E402

SNAPSHOTS = REPO / "tests" / "snapshots"
VERSIONS = SNAPSHOTS / "tui_versions.json"
UPDATE = bool(os.environ.get("TUI_SNAPSHOT_UPDATE"))
SIZE = (130, 38)


def _versions() -> dict:
    return {"textual": version("textual"), "rich": version("rich")}


def _check_versions() -> None:
    if UPDATE:
        return
    if not VERSIONS.exists():
        pytest.skip("no recorded snapshots: run with TUI_SNAPSHOT_UPDATE=1")
    recorded = json.loads(VERSIONS.read_text())
    if recorded != _versions():
        pytest.skip(f"snapshots were recorded with {recorded}, this is {_versions()}: "
                    f"re-record with TUI_SNAPSHOT_UPDATE=1")


def compare(name: str, svg: str, text: str) -> None:
    path = SNAPSHOTS / f"tui_{name}.svg"
    actual = SNAPSHOTS / f"tui_{name}.actual.svg"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        (SNAPSHOTS / f"tui_{name}.txt").write_text(text)
        VERSIONS.write_text(json.dumps(_versions(), indent=2) + "\n")
        actual.unlink(missing_ok=True)
        return
    assert path.exists(), f"missing snapshot {path}: run with TUI_SNAPSHOT_UPDATE=1"
    if svg == path.read_text():
        actual.unlink(missing_ok=True)
        return
    actual.write_text(svg)
    txt = SNAPSHOTS / f"tui_{name}.txt"
    diff = "".join(difflib.unified_diff(txt.read_text().splitlines(True) if txt.exists() else [],
                                        text.splitlines(True), "recorded", "now")) or "(only styles differ)"
    raise AssertionError(f"snapshot {path.name} differs (new picture in {actual.name}):\n{diff}")


def shoot(events, name: str, steer=None) -> None:
    async def go():
        source = ListSource(events)
        source.end()
        app = DashboardApp(source)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            if steer is not None:
                await steer(app, pilot)
            await pilot.pause()
            return app.export_screenshot(), screen_text(app)

    svg, text = asyncio.run(go())
    compare(name, svg, text)


@pytest.fixture(autouse=True)
def _fixed(monkeypatch):
    _check_versions()
    monkeypatch.chdir(REPO)   # module and source paths are shown relative to the working directory


def test_snapshot_main_screen_mid_run():
    events = synthetic_run(16, jobs=3, parse_fail_every=6, ptxas_fail_every=9, crash_every=13, in_flight=8)
    shoot(events[:int(len(events) * 0.7)], "main")


def test_snapshot_diagnostic_view():
    modules = [f"examples/{n}.v13.4.tileirbc" for n in ("axpby_f32", "collatz_steps_i32", "clamp_count_i32")]
    events = synthetic_run(3, jobs=2, parse_fail_every=2, modules=modules, parse_fail_location="kernels.py:139:16")

    async def steer(app, pilot):
        await pilot.press("e", "enter")
        assert isinstance(app.screen, DiagnosticScreen)

    shoot(events, "diagnostic", steer)


def test_snapshot_charts_and_dask_workers():
    """The timeline / stage-time histogram / throughput pane (key t) over a Dask run's workers pane."""
    from test_tui_charts import cluster_events

    async def steer(app, pilot):
        await pilot.press("t")
        await settle(pilot, app)

    shoot(cluster_events(), "charts", steer)


def test_snapshot_schedule_view():
    events = synthetic_run(4, jobs=2, kernels=(2,))

    async def steer(app, pilot):
        await pilot.press("enter")
        assert isinstance(app.screen, KernelScreen) and app.screen.row.schedules

    shoot(events, "schedule", steer)


def test_snapshot_ir_view():
    """The kernel view's IR tab: the snapshot list (input, then after each pass) beside the newest one."""
    events = synthetic_run(2, jobs=1, kernels=(1,), ir_dumps=True)

    async def steer(app, pilot):
        await pilot.press("i")
        await settle(pilot, app)
        assert isinstance(app.screen, KernelScreen) and "IR Dump" in app.screen.query_one("#ir-text").text

    shoot(events, "ir", steer)
