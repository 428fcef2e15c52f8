"""The dashboard's model and helpers (no UI): folding events, replays, IR / source / PTX lookups."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from tileiras_async.pipeline import events as ev  # noqa: E402

from tileiras_tui import lookup  # noqa: E402
from tileiras_tui.model import CANCELLED, FAILED, OK, QUEUED, RUNNING, SKIPPED, RunModel  # noqa: E402
from tileiras_tui.sources import ListSource, ReplaySource, read_events  # noqa: E402
from tileiras_tui.synth import sample_schedule, synthetic_run  # noqa: E402

RECORDED = REPO / "tests" / "tui_data" / "recorded_run.jsonl"
COLLATZ = REPO / "examples" / "collatz_steps_i32.v13.4.tileirbc"


def fold(events) -> RunModel:
    model = RunModel()
    model.apply_many(events)
    return model


def test_synthetic_run_folds_to_the_right_totals():
    events = synthetic_run(40, jobs=3, parse_fail_every=10, ptxas_fail_every=15, crash_every=0)
    model = fold(events)
    tot = model.totals()
    assert tot["modules"] == tot["done"] == 40
    assert tot["failed"] == 5 and tot["ok"] == 35   # parse: 9, 19, 29, 39; ptxas: 14 (29 fails in parse first)
    assert model.done and model.exit_code == events[-1].exit_code == 5
    assert len(model.rows) == sum(len(m.rows) for m in model.module_list)
    bad = model.modules["corpus/m0009.v13.4.tileirbc"]
    assert bad.status == FAILED and bad.exit_code == 3
    row = bad.rows[0]
    assert row.status == FAILED and row.stage("parse").status == FAILED
    assert all(row.stage(s).status == SKIPPED for s in ("lower", "codegen", "ptxas", "write"))
    assert [d.event.location for d in model.diagnostics_of(bad.path)][0] == "gen_0009.py:19:4"
    ptxas = model.modules["corpus/m0014.v13.4.tileirbc"].rows[0]
    assert ptxas.status == FAILED and ptxas.stage("ptxas").status == FAILED and ptxas.stage("codegen").status == OK


def test_rows_are_modules_by_targets_by_kernels():
    model = fold(synthetic_run(6, targets=("sm_100", "sm_90"), kernels=(1, 3)))
    m = model.modules["corpus/m0001.v13.4.tileirbc"]
    assert [t for t in m.targets] == ["sm_100", "sm_90"]
    assert [r.kernel for r in m.targets["sm_90"].rows] == [f"kernel0001_{k}" for k in range(3)]
    assert len(model.rows) == 2 * (1 + 3 + 1 + 3 + 1 + 3)
    r = m.targets["sm_100"].rows[0]
    assert r.schedules and r.schedules[0].ii == 4 and r.stage("schedule").status == OK


def test_live_progress_and_changes_are_incremental():
    events = synthetic_run(10, jobs=2)
    model = RunModel()
    half = next(i for i in range(len(events) // 2, len(events)) if isinstance(events[i], ev.StageFinished))
    model.apply_many(events[:half])
    first = model.take_changes()
    assert len(first.added) >= 10 and first.header   # 10 modules (some with a second kernel)
    statuses = {m.status for m in model.module_list}
    assert RUNNING in statuses or QUEUED in statuses
    model.apply(events[half])
    one = model.take_changes()
    assert one.events == 1 and len(one.rows) <= 3 and not one.added   # one event touches a few rows only
    model.apply_many(events[half + 1:])
    assert model.done and all(m.status == OK for m in model.module_list)
    rest = model.take_changes()
    assert all(r.ordinal > 0 for r in rest.added)   # later rows are only second kernels


def test_retry_resets_a_module_and_cancel_marks_it():
    path = "m.tileirbc"
    base = [ev.RunStarted(t=0, version="x", modules=[path], targets=["sm_100"], jobs=1, opt_level=3, out_dir=".",
                          supervisor_pid=1, stage_timeout_s=1, memory_limit_bytes=1),
            ev.ModuleStarted(t=0.1, module=path, index=0),
            ev.StageStarted(t=0.1, job=1, stage="parse", module=path, worker_pid=7),
            ev.Diagnostic(t=0.2, module=path, severity="error", message="bad", stage="parse"),
            ev.StageFinished(t=0.2, job=1, stage="parse", module=path, ok=False, elapsed_s=0.1, worker_pid=7),
            ev.ModuleFinished(t=0.2, module=path, ok=False, exit_code=3, elapsed_s=0.1)]
    model = fold(base)
    assert model.modules[path].status == FAILED and len(model.diagnostics) == 1
    model.take_changes()
    # retried: the module starts again, its old diagnostics go; then it is cancelled mid-lower
    model.apply_many([
        ev.ModuleStarted(t=1.0, module=path, index=0),
        ev.StageStarted(t=1.0, job=2, stage="parse", module=path, worker_pid=7),
        ev.StageFinished(t=1.1, job=2, stage="parse", module=path, ok=True, elapsed_s=0.1, worker_pid=7),
        ev.TargetStarted(t=1.1, module=path, target="sm_100"),
        ev.KernelStarted(t=1.1, module=path, target="sm_100", kernel="k"),
        ev.StageStarted(t=1.1, job=3, stage="lower", module=path, target="sm_100", kernel="k", worker_pid=7)])
    changes = model.take_changes()
    assert changes.diagnostics_reset and not model.diagnostics
    m = model.modules[path]
    assert m.status == RUNNING and m.attempts == 2 and m.rows[0].kernel == "k"
    assert model.workers[7].state == "busy" and model.workers[7].kernel == "k"
    model.apply(ev.ModuleFinished(t=1.5, module=path, ok=False, exit_code=130, elapsed_s=0.5))
    assert m.status == CANCELLED and m.rows[0].status == CANCELLED
    assert m.rows[0].stage("lower").status == CANCELLED and m.rows[0].stage("codegen").status == SKIPPED
    assert model.workers[7].state == "idle"
    assert model.exit_code == 130


def test_worker_pane_state():
    model = fold(synthetic_run(30, jobs=2, crash_every=10))
    exited = [w for w in model.workers.values() if w.state == "exited"]
    assert model.restarts == 3 and len(exited) == 3 and all("SIGSEGV" in w.reason for w in exited)
    assert all(w.rss > 0 for w in model.workers.values() if w.jobs)
    crashed = model.modules["corpus/m0009.v13.4.tileirbc"]
    assert crashed.exit_code == 4 and crashed.rows[0].stage("lower").status == FAILED


def test_recorded_stream_replays():
    events, skipped = read_events(str(RECORDED))
    assert skipped == 0 and isinstance(events[0], ev.RunStarted) and isinstance(events[-1], ev.RunFinished)
    model = fold(events)
    assert model.exit_code == events[-1].exit_code == 3
    assert model.modules["truncated.tileirbc"].status == FAILED
    ok = model.modules["matmul_bias_relu_f16.v13.4.tileirbc"]
    assert ok.status == OK and {t for t in ok.targets} == {"sm_100", "sm_90"}
    assert all(r.scheduled and r.schedules for r in ok.rows)
    assert all(any(o.endswith(".ptx") for o in t.outputs) for t in ok.targets.values())


def test_replay_pacing_and_batches():
    events = synthetic_run(5)
    now = [0.0]
    paced = ReplaySource(events, speed=2.0, clock=lambda: now[0])
    assert paced.drain() == [e for e in events if e.t <= 0]
    now[0] = 0.1   # 0.2 s of recorded time
    got = paced.drain()
    assert got and all(e.t <= 0.2 for e in got) and not paced.exhausted
    now[0] = 1e6
    assert len(paced.drain(limit=3)) == 3
    paced.drain()
    assert paced.exhausted
    src = ListSource(events)
    assert len(src.drain(10)) == 10 and not src.exhausted
    src.drain()
    src.end()
    assert src.exhausted


def test_ir_around_a_location_and_the_source_line(monkeypatch):
    monkeypatch.chdir(REPO)
    view = lookup.ir_around(str(COLLATZ.relative_to(REPO)), "kernels.py:139:16")
    assert not view.error and view.marked
    assert all("divi" in view.lines[i] for i in view.marked)
    assert not any(" loc(" in line for line in view.lines)   # printed as `disasm` prints it
    window = lookup.window(view, 3)
    assert [marked for _n, _t, marked in window].count(True) == len(view.marked)
    found = lookup.source_line("kernels.py:139:16", str(COLLATZ.relative_to(REPO)))
    assert found is not None
    file, lines = found
    assert file == "examples/kernels.py" and ("            n = n // 2" in [t for _n, t, m in lines if m])
    assert lookup.source_line("nowhere.py:3:1", str(COLLATZ)) is None
    missing = lookup.ir_around("no/such/file.tileirbc", "x.py:1:1")
    assert missing.error.startswith("cannot read")


def test_kernel_ir_and_ptx_slices():
    ir = lookup.kernel_ir(str(COLLATZ), "collatz_steps_Kt1_A1i32_1l0_Si32")
    assert ir.startswith("entry @collatz_steps_Kt1_A1i32_1l0_Si32(") and ir.rstrip().endswith("}")
    ptx = ("//\n// header\n.version 8.6\n.target sm_100a\n\n\t// .globl\ta\n.visible .entry a(\n)\n{\n\tret;\n}\n"
           "\t// .globl\tb\n.visible .entry b(\n)\n{\n\texit;\n}\n")
    b = lookup.kernel_ptx(ptx, "b")
    assert ".version 8.6" in b and ".entry b(" in b and ".entry a(" not in b and "exit;" in b
    assert lookup.kernel_ptx(ptx, "zzz") == ptx


def test_sample_schedule_is_consistent():
    r = sample_schedule("k")
    assert r.ii == 4 and len(r.rrt) == r.ii and r.attempts[-1].ok and r.attempts[-1].ii == r.ii
    for row in r.rrt:
        for cell in row.cells:
            assert cell.used == len(cell.ops) <= cell.capacity


def test_ir_snapshots_are_kept_per_kernel_and_cleared_on_retry():
    """KernelIRDumped (--print-ir-*) lands on its kernel's row; a retry of the module forgets it."""
    events = synthetic_run(2, jobs=1, kernels=(2,), ir_dumps=True, run_finished=False)
    model = fold(events)
    rows = model.modules["corpus/m0000.v13.4.tileirbc"].rows
    assert [r.kernel for r in rows] == ["kernel0000_0", "kernel0000_1"]
    for r in rows:
        assert [(d.when, d.pass_name) for d in r.ir_dumps] == [
            ("after", "convert-to-tilegpu"), ("after", "assign-layouts"), ("after", "insert-barriers")]
        assert all(d.kernel == r.kernel for d in r.ir_dumps)
    assert "tilegpu.barrier" in rows[0].ir_dumps[-1].text
    model.take_changes()
    model.apply(ev.ModuleStarted(t=99.0, module="corpus/m0000.v13.4.tileirbc", index=0))
    changes = model.take_changes()
    first = model.modules["corpus/m0000.v13.4.tileirbc"].rows[0]
    assert first.ir_dumps == [] and first.key in changes.ir


@pytest.mark.parametrize("flags,after_all", [([], True), (["--no-ir"], False)])
def test_tui_command_takes_ir_snapshots_unless_told_not_to(tmp_path, flags, after_all):
    """`tileiras-async tui` asks the workers for the IR after every pass (the kernel view's IR tab), as it
    keeps PTX; --no-ir turns that off (and its compiles go through the compile cache again)."""
    import argparse

    from tileiras_async.pipeline.cli_compile import build_config
    from tileiras_tui.cli import add_tui_parser
    parser = argparse.ArgumentParser()
    add_tui_parser(parser.add_subparsers())
    args = parser.parse_args(["tui", str(COLLATZ), "--gpu-name", "sm_100", "--out-dir", str(tmp_path), *flags])
    config = build_config(args, handle_signals=False)
    assert (config.print_ir is not None and config.print_ir.after_all) == after_all


def test_resources_come_with_kernel_finished_and_fill_the_row_cells():
    """A kernel's resources are its KernelFinished's (sent once the target's cubin exists): a kernel whose
    target failed in ptxas has none, and the table's resource cells are blank for it."""
    from tileiras_tui.app import RESOURCE_COLUMNS, row_cells
    events = synthetic_run(9, jobs=2, ptxas_fail_every=3)
    model = fold(events)
    rows = list(model.rows.values())
    assembled = [r for r in rows if r.target.exit_code == 0]
    failed = [r for r in rows if r.target.exit_code == 5]
    assert assembled and failed
    finished = {(e.module, e.target, e.kernel): e.resources for e in events if isinstance(e, ev.KernelFinished)}
    for r in assembled:
        res = finished[(r.module.path, r.target.name, r.kernel)]
        assert r.resources == res and res is not None
        cells = [c.plain for c in row_cells(r, 1.0)[-len(RESOURCE_COLUMNS):]]
        assert cells[0] == str(res.registers) and cells[-2:] == [res.tensor_core, res.copy_engine]
    assert all(r.resources is None for r in failed)
    assert all(c.plain == "" for r in failed for c in row_cells(r, 1.0)[-len(RESOURCE_COLUMNS):])
