"""The kernel view's pipelined-loop picture (tui/loopview.py): iterations x steps with the prologue, the
steady state and the drain, and the ops of each stage as the pipeline pass placed them."""
from __future__ import annotations

import io

from conftest import requires_corpus
from rich.console import Console

from tileiras_tui import loopview
from tileiras_tui.synth import sample_schedule


def _text(renderables) -> str:
    console = Console(width=140, file=io.StringIO(), color_system=None, record=True)
    for r in renderables:
        console.print(r)
    return console.export_text()


def test_phases_of_a_three_stage_loop():
    s, n = 3, 4
    assert [loopview.phase(t, s, n) for t in range(n + s - 1)] == [
        "prologue", "prologue", "steady", "steady", "drain", "drain"]
    assert [loopview.phase(t, 2, 2) for t in range(3)] == ["prologue", "steady", "drain"]


def test_grid_staggers_each_iteration_by_one_step():
    report = sample_schedule("k")          # 3 stages: loads and addi in stage 0, mma/addf/store in stage 2
    text = _text(loopview.pipelined_loop(report))
    assert "pipelined loop (3 stages; a step is II = 4 cycles" in text
    lines = [line.split() for line in text.splitlines()]
    phase = next(words for words in lines if words[:1] == ["phase"])
    assert phase[1:] == ["pro", "pro", "steady", "steady", "drain", "drain"]
    grid = {int(w[1]): w[2:] for w in lines if w[:1] == ["iteration"] and w[1].isdigit()}
    assert grid[0] == ["s0", "s1", "s2", "·", "·", "·"]
    assert grid[3] == ["·", "·", "·", "s0", "s1", "s2"]
    assert "s0  #0 load_view_tko, #5 addi, #1 load_view_tko" in text
    assert "s1  (no ops)" in text and "s2  #2 mmaf, #3 addf, #4 store_view_tko" in text


def test_a_serial_loop_says_why_it_is_not_pipelined():
    import msgspec
    report = msgspec.structs.replace(sample_schedule("k"), strategy="serial", stage_count=1,
                                     rule="kept serial: not a K-loop (no mma fed by loads of its body)")
    assert _text(loopview.pipelined_loop(report)).strip() == \
        "not software-pipelined: kept serial: not a K-loop (no mma fed by loads of its body)"


@requires_corpus
def test_the_picture_is_the_stage_assignment_the_pipeline_pass_followed():
    """For a corpus matmul's K-loop, the stages the view draws the loads and the mma in are the stages the
    pipeline pass placed them in (their `stage` attributes), and the view has as many stages as the ring."""
    from test_tilegpu_passes import _pipelined
    k = _pipelined("matmul_f16_f32acc_64x64x32", "sm_90", 3)
    from tileiras_async.tilegpu.decisions import pipelined_loops
    (cand, report, geom, _ring), = pipelined_loops(k.fn.body)
    by_stage = loopview.stage_ops(report)
    placed = {o.name: stage for stage, ops in by_stage.items() for o in ops}
    assert placed["load_view_tko"] == cand.a.load.attrs["stage"] == cand.b.load.attrs["stage"]
    assert placed["mmaf"] == cand.mma.attrs["stage"]
    text = _text(loopview.pipelined_loop(report))
    assert f"pipelined loop ({geom.stages} stages" in text
    assert f"s{cand.mma.attrs['stage']}  " in text and "mmaf" in text
