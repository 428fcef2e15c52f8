"""The tileiras-async dashboard: a Textual terminal UI over the batch pipeline's event stream.

    tileiras-async compile FILES... --gpu-name G --tui     watch a compile
    tileiras-async tui FILES...                            the same, schedules and PTX kept
    tileiras-async tui --replay events.jsonl               replay a `compile --json` stream
    python -m tileiras_tui ...                                      = tileiras-async tui ...

    model.py    RunModel: the events folded into rows, diagnostics, workers, totals (no UI)
    sources.py  LiveSource (compile_batch in a thread + BatchControl), ReplaySource, ListSource
    app.py      DashboardApp and its screens (kernel detail, diagnostic, help)
    lookup.py   IR around an op, source lines, PTX and cubin resource usage of a kernel
    synth.py    deterministic synthetic event streams (benchmark, snapshot tests)
    cli.py      the `tui` subcommand and `compile --tui`

The dashboard is a pure consumer of the events `--json` prints; retry and cancel go back to the
supervisor through `tileiras_async.pipeline.supervisor.BatchControl`.
"""
from __future__ import annotations

__all__ = ["RunModel", "DashboardApp"]


def __getattr__(name: str):
    if name == "RunModel":
        from .model import RunModel
        return RunModel
    if name == "DashboardApp":
        from .app import DashboardApp
        return DashboardApp
    raise AttributeError(name)
