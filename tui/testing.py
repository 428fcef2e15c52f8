"""Helpers for driving the dashboard headless (tests, the benchmark)."""
from __future__ import annotations

import asyncio
import io

from rich.console import Console


def screen_text(app) -> str:
    """What the current screen shows, as plain text (what a person would read)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, color_system=None,
                      record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def render_time(app) -> float:
    """Seconds to compose one full frame of the current screen (the compositor's work for a redraw)."""
    import time
    t0 = time.perf_counter()
    app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return time.perf_counter() - t0


async def settle(pilot, app, rounds: int = 3) -> None:
    """Pump every waiting event into the UI and let Textual process the resulting messages."""
    for _ in range(rounds):
        app.pump(limit=None)
        await pilot.pause()


def run(coro):
    return asyncio.run(coro)
