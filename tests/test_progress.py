"""The headless progress line: drawn on a terminal only, erased before diagnostics and the summary."""
from __future__ import annotations

import io

from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.progress import Progress


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_progress_line_counts_rate_and_eta():
    out, clock = io.StringIO(), FakeClock()
    p = Progress(out, clock=clock)
    p(ev.RunStarted(version="0", modules=["a", "b", "c", "d"], targets=["sm_90"], jobs=2, opt_level=3, out_dir=".",
                    supervisor_pid=1, stage_timeout_s=1.0, memory_limit_bytes=1))
    assert out.getvalue() == "\r[0/4 modules]    0%"
    clock.t += 2.0
    p.before(ev.ModuleFinished(module="a", ok=True, exit_code=0, elapsed_s=1.0))
    p(ev.ModuleFinished(module="a", ok=True, exit_code=0, elapsed_s=1.0))
    clock.t += 2.0
    p.before(ev.ModuleFinished(module="b", ok=False, exit_code=3, elapsed_s=1.0))
    p(ev.ModuleFinished(module="b", ok=False, exit_code=3, elapsed_s=1.0))
    assert p.line() == "[2/4 modules]   50%  0.5 modules/s  ETA 4 s  (1 failed)"
    text = out.getvalue()
    assert text.endswith("\r" + p.line())
    # before the module's diagnostics are printed, the line is erased
    assert "\r" + " " * len("[1/4 modules]   25%  0.5 modules/s  ETA 6 s") + "\r" in text
    p.before(ev.RunFinished(ok=False, exit_code=3, elapsed_s=5.0, modules=4, modules_failed=1, kernels=1,
                            kernels_failed=0))
    assert out.getvalue().endswith(" " * len(p.line()) + "\r")


def test_not_a_terminal_means_no_progress():
    assert not Progress.wanted(io.StringIO())
