"""The dashboard driven with Textual's Pilot: navigation, live updates, a failing module, retry,
cancel and quit -- on replayed events, and on a real batch compiling in the background."""
from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from textual.widgets import DataTable, TabbedContent  # noqa: E402

from tileiras_async.pipeline.config import BatchConfig  # noqa: E402
from tileiras_async.pipeline.messages import FaultSpec  # noqa: E402
from tileiras_async.stages import PrintIR  # noqa: E402
from tileiras_async.tilegpu.parser import parse_kernel  # noqa: E402
from tileiras_async.tilegpu.passes import PASS_NAMES  # noqa: E402
from tileiras_async.tilegpu.printer import print_kernel  # noqa: E402

from tileiras_tui.app import CHART_TICKS, DashboardApp, DiagnosticScreen, HelpScreen, KernelScreen  # noqa: E402
from tileiras_tui.model import CANCELLED, FAILED, OK, RUNNING  # noqa: E402
from tileiras_tui.sources import ListSource, LiveSource, ReplaySource, read_events  # noqa: E402
from tileiras_tui.synth import synthetic_run  # noqa: E402
from tileiras_tui.testing import screen_text, settle  # noqa: E402

EXAMPLES = REPO / "examples"
RECORDED = REPO / "tests" / "tui_data" / "recorded_run.jsonl"
SIZE = (150, 40)


def run(coro):
    return asyncio.run(coro)


def replay_app(events, **kw) -> DashboardApp:
    source = ListSource(events)
    source.end()
    return DashboardApp(source, **kw)


def select(app: DashboardApp, row_key: str) -> None:
    table = app.query_one("#modules", DataTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(row_key))


async def wait_for(pilot, app, condition, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.pump(limit=None)
        await pilot.pause(0.05)
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what or condition}\n{screen_text(app)}")


# ---------------------------------------------------------------------------- replayed events


def test_navigation_screens_and_keys():
    events = synthetic_run(12, jobs=2, parse_fail_every=5, ptxas_fail_every=7, crash_every=11)

    async def go():
        app = replay_app(events)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            text = screen_text(app)
            assert "done: exit 5" in text and "modules 12/12" in text
            table = app.query_one("#modules", DataTable)
            assert table.row_count == len(app.model.rows) == 16
            await pilot.press("down", "enter")
            await pilot.pause()
            assert isinstance(app.screen, KernelScreen) and app.screen.row.module.index == 1
            assert "II 4" in screen_text(app) and "modulo reservation table" in screen_text(app)
            tabs = app.screen.query_one(TabbedContent)
            await pilot.press("p")
            await pilot.pause()
            assert tabs.active == "ptx" and "resources (from the cubin): registers" in screen_text(app)
            await pilot.press("i")
            await pilot.pause()
            assert tabs.active == "ir"
            await pilot.press("s")
            await pilot.pause()
            assert tabs.active == "schedules"
            await pilot.press("escape")
            assert not isinstance(app.screen, KernelScreen)
            await pilot.press("e")              # the first error in the diagnostics pane
            assert app.focused.id == "diagnostics"
            await pilot.press("enter")
            assert isinstance(app.screen, DiagnosticScreen)
            assert "rounding mode 'negative_inf'" in screen_text(app) and "gen_0004.py:14:8" in screen_text(app)
            await pilot.press("k")              # its kernel (the module's first row)
            assert isinstance(app.screen, KernelScreen)
            await pilot.press("escape", "escape")
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen) and "retry the selected module" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("d")
            assert not app.query_one("#diagnostics").display
            await pilot.press("w")
            assert not app.query_one("#workers").display
            await pilot.press("d", "w")
            assert app.query_one("#diagnostics").display and app.query_one("#workers").display
            await pilot.press("q")
        assert app.exit_status == 5

    run(go())


def test_ir_tab_lists_the_snapshots_and_shows_the_chosen_one():
    """The kernel view's IR tab: the input's cuda_tile IR, then each tile-GPU snapshot the kernel reported
    (KernelIRDumped); the newest is shown first, ↑ ↓ choose another."""
    events = synthetic_run(2, jobs=1, kernels=(1,), ir_dumps=True)

    async def go():
        app = replay_app(events)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            await pilot.press("i")
            await wait_for(pilot, app, lambda: isinstance(app.screen, KernelScreen)
                           and app.screen.query_one(TabbedContent).active == "ir"
                           and "IR Dump" in app.screen.query_one("#ir-text").text, what="the kernel view's IR tab")
            screen = app.screen
            assert screen.ir_entries() == ["cuda_tile (input)", "after convert-to-tilegpu", "after assign-layouts",
                                           "after insert-barriers"]
            text = screen.query_one("#ir-text").text
            assert text.startswith("// -----// IR Dump After insert-barriers (kernel0000_0)") and "tilegpu.barrier" in text
            # the printer's text as it is (the banner on top): it reads back and prints the same
            dump = screen.row.ir_dumps[-1]
            assert text == dump.banner() + "\n" + dump.text
            assert print_kernel(parse_kernel(text)) == dump.text
            assert app.focused.id == "ir-passes" and "3 tile-GPU IR snapshots" in screen_text(app)
            await pilot.press("up")
            await wait_for(pilot, app, lambda: "IR Dump After assign-layouts" in screen.query_one("#ir-text").text,
                           what="the assign-layouts snapshot")
            assert "tilegpu.barrier" not in screen.query_one("#ir-text").text
            await pilot.press("up", "up", "up")
            await wait_for(pilot, app, lambda: screen.query_one("#ir-passes").cursor_row == 0, what="the input")
            assert "IR Dump" not in screen.query_one("#ir-text").text   # the module's own IR (not readable here)
            await pilot.press("escape", "q")

    run(go())


def test_a_tick_while_the_screen_is_torn_down_does_nothing():
    """The refresh timer can fire after the app started removing its widgets (a snapshot test failed on
    it under load): the tick finds no chart pane and returns instead of raising NoMatches."""
    events = synthetic_run(6, jobs=2, in_flight=4)

    async def go():
        source = ListSource(events[: len(events) // 2])
        app = DashboardApp(source)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            await app.query_one("#charts").remove()
            app.stats["ticks"] = CHART_TICKS - 1        # the next tick (pump counts it) redraws the charts
            app._tick()
            assert app.model.started is not None and not app.model.done
            source.end()
            await pilot.press("q")

    run(go())


def test_live_updates_are_batched_and_the_failing_module_shows():
    events = synthetic_run(30, jobs=3, parse_fail_every=10, in_flight=6)
    third = len(events) // 3

    async def go():
        source = ListSource(events[:third])
        app = DashboardApp(source)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            text = screen_text(app)
            assert " running " in text and "queued" in text
            assert any(r.status == RUNNING for r in app.model.rows.values())
            updates = []
            table = app.query_one("#modules", DataTable)
            original = table.update_cell
            table.update_cell = lambda *a, **k: (updates.append(a[:2]), original(*a, **k))
            source.feed(events[third:])
            source.end()
            assert app.pump(limit=None) == len(events) - third   # one batch, one UI update
            await pilot.pause()
            # only cells that changed were touched: never a full redraw (30 rows x 12 columns)
            assert 0 < len(updates) < len(app.model.rows) * 12
            text = screen_text(app)
            assert "done: exit 3" in text and "modules 30/30" in text and "failed 3" in text
            bad = app.model.modules["corpus/m0009.v13.4.tileirbc"]
            assert bad.status == FAILED
            assert "FAIL(3)" in text and "'cuda_tile.divi' op rounding mode" in text
            # failed only, filter, sort
            await pilot.press("f")
            assert table.row_count == 3
            await pilot.press("f", "slash")
            await pilot.press(*"m0019", "enter")
            assert table.row_count == 1 and app.filter_text == "m0019"
            await pilot.press("escape")
            assert table.row_count == len(app.model.rows)
            await pilot.press("s")                 # status: failures first
            first = app.model.rows[table.coordinate_to_cell_key((0, 0)).row_key.value]
            assert app.sort_mode == "status" and first.status == FAILED
            # retry and cancel need a live batch: a replay says so and goes on
            await pilot.press("r", "c", "C")
            await pilot.press("q")
        assert app.exit_status == 3

    run(go())


def test_recorded_stream_replay_paced():
    events, _ = read_events(str(RECORDED))

    async def go():
        app = DashboardApp(ReplaySource(events, speed=20.0), exit_when_done=True)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, app, lambda: app.model.done, timeout=20, what="replay done")
            await pilot.pause(0.3)
        assert app.exit_status == 3
        assert app.model.modules["truncated.tileirbc"].status == FAILED

    run(go())


def test_500_modules_in_flight_stay_responsive():
    events = synthetic_run(500, jobs=8, parse_fail_every=97)

    async def go():
        app = replay_app(events)
        async with app.run_test(size=SIZE) as pilot:
            worst = 0.0
            while not app.source.exhausted:
                t0 = time.perf_counter()
                app.pump(limit=2000)
                worst = max(worst, time.perf_counter() - t0)
                await pilot.pause()
            await pilot.pause()
            assert "modules 500/500" in screen_text(app)
            assert app.query_one("#modules", DataTable).row_count == len(app.model.rows)
            table = app.query_one("#modules", DataTable)
            table.focus()
            await pilot.press("ctrl+end")
            await pilot.pause(0.5)   # scrolling is animated
            assert table.cursor_row == table.row_count - 1 and "m0499" in screen_text(app)
        assert worst < 2.0, worst   # a frame's work stays bounded (the benchmark measures it)

    run(go())


# ---------------------------------------------------------------------------- a live batch


@pytest.fixture
def inputs(tmp_path):
    good = tmp_path / "collatz.tileirbc"
    shutil.copy(EXAMPLES / "collatz_steps_i32.v13.4.tileirbc", good)
    broken = tmp_path / "broken.tileirbc"
    broken.write_bytes(b"this is not bytecode\n")
    slow = tmp_path / "slow.tileirbc"
    shutil.copy(EXAMPLES / "clamp_count_i32.v13.4.tileirbc", slow)
    return good, broken, slow


def test_live_batch_fail_retry_cancel_quit(inputs, tmp_path):
    good, broken, slow = (str(p) for p in inputs)
    config = BatchConfig([good, broken, slow], ["sm_100"], jobs=2, out_dir=str(tmp_path / "out"), keep_ptx=True,
                         schedules=True, fault=FaultSpec("lower", "hang", "slow"), print_ir=PrintIR((), (), True))
    source = LiveSource(config, hold_open=True)

    async def go():
        app = DashboardApp(source, sample_workers=True)
        async with app.run_test(size=SIZE) as pilot:
            source.start()
            m = app.model.modules
            await wait_for(pilot, app, lambda: good in m and m[good].status == OK and broken in m
                           and m[broken].status == FAILED and m[slow].rows[0].stage("lower").status == RUNNING,
                           what="collatz ok, broken failed, slow hanging in lower")
            text = screen_text(app)
            assert "FAIL(3)" in text and "running" in text
            assert any(d.event.module == broken for d in app.model.diagnostics)
            # cancel the hanging module: its worker is killed, the module finishes as cancelled
            select(app, m[slow].rows[0].key)
            await pilot.press("c")
            await wait_for(pilot, app, lambda: m[slow].status == CANCELLED, what="slow cancelled")
            assert "cancelled" in screen_text(app)
            # fix the broken input and retry it: the batch was held open for this
            shutil.copy(EXAMPLES / "axpby_f32.v13.4.tileirbc", broken)
            select(app, m[broken].rows[0].key)
            await pilot.press("r")
            await wait_for(pilot, app, lambda: m[broken].status == OK, what="retried module ok")
            assert m[broken].attempts == 2 and not app.model.diagnostics_of(broken)
            # the kernel view of a finished kernel: schedules, PTX, ptxas resource usage
            select(app, m[good].rows[0].key)
            await pilot.press("enter")
            assert isinstance(app.screen, KernelScreen)
            await pilot.pause()
            await pilot.press("p")
            await wait_for(pilot, app, lambda: ".entry collatz_steps" in screen_text(app), what="the PTX tab")
            assert "resources (from the cubin): registers" in screen_text(app)
            assert "threads per CTA" in screen_text(app) and "copies" in screen_text(app)
            await pilot.press("i")                # the tile-GPU IR after the last pass, as the worker printed it
            last = f"IR Dump After {PASS_NAMES[-1]}"
            await wait_for(pilot, app, lambda: last in screen_text(app), what="the IR tab")
            assert "tilegpu.kernel @collatz_steps" in app.screen.query_one("#ir-text").text
            await pilot.press("escape")
            await pilot.press("q")
        return app

    app = run(go())
    source.join(timeout=60)
    assert not source.running
    finished = source.finished
    assert finished is not None and finished.cancelled is None
    assert finished.exit_code == app.exit_status == 130      # the cancelled module
    assert finished.modules_failed == 1


def test_quit_while_running_cancels_the_batch(inputs, tmp_path):
    _good, _broken, slow = (str(p) for p in inputs)
    config = BatchConfig([slow], ["sm_100"], jobs=1, out_dir=str(tmp_path / "out"),
                         fault=FaultSpec("parse", "hang", "slow"))
    source = LiveSource(config, hold_open=True)

    async def go():
        app = DashboardApp(source)
        async with app.run_test(size=SIZE) as pilot:
            source.start()
            await wait_for(pilot, app, lambda: slow in app.model.modules
                           and app.model.modules[slow].stages["parse"].status == RUNNING, what="parse running")
            await pilot.press("q")

    run(go())
    source.join(timeout=60)
    assert source.finished is not None and source.finished.cancelled == "user"
    assert source.finished.exit_code == 130
