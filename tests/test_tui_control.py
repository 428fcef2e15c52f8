"""The supervisor's control channel (BatchControl), which the dashboard's retry / cancel / quit use."""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.config import BatchConfig
from tileiras_async.pipeline.messages import FaultSpec
from tileiras_async.pipeline.supervisor import EXIT_CANCELLED, BatchControl, compile_batch

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "clamp_count_i32.v13.4.tileirbc"


def test_cancel_queued_and_running_modules_then_cancel_all(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / f"{'hang' if i == 0 else 'm'}{i}.tileirbc"
        shutil.copy(EXAMPLE, p)
        paths.append(str(p))
    events: list = []
    control = BatchControl()
    control.cancel(paths[5])            # before the run starts: queued, then finished as cancelled
    config = BatchConfig(paths, ["sm_100"], jobs=1, out_dir=str(tmp_path / "out"), handle_signals=False,
                         fault=FaultSpec("parse", "hang", "hang0"))
    done: list = []
    thread = threading.Thread(target=lambda: done.append(compile_batch(config, [events.append], control)))
    thread.start()
    deadline = time.monotonic() + 60
    while not any(isinstance(e, ev.StageStarted) and e.module == paths[0] for e in list(events)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    control.cancel_all()                # the hanging parse (its worker is killed) and everything queued
    thread.join(60)
    assert not thread.is_alive()
    finished = done[0]
    assert finished.exit_code == EXIT_CANCELLED and finished.cancelled is None
    ends = {e.module: e for e in events if isinstance(e, ev.ModuleFinished)}
    starts = [e.module for e in events if isinstance(e, ev.ModuleStarted)]
    assert sorted(starts) == sorted(ends) == sorted(paths)    # every module started and finished once
    assert ends[paths[0]].exit_code == ends[paths[5]].exit_code == EXIT_CANCELLED
    control.retry(paths[0])             # after the run: ignored, no error
