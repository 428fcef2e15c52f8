"""The seeds' worked example (wiki "Worked Example: Four-Op Loop Body", ~line 18225, and "Worked
Scoring Example", ~line 17942): II = 8, the smem_write clashes with the tiled TMA load on tp_smem_wr
and goes to stage 1, order 0.

Reading of the resource vectors (the wiki's literal numbers admit no II = 8 schedule; see
src/tileiras_async/schedule/README.md):

* tiled_tma_load = (tma, 0, 8) + (tp_smem_wr, 7, 1): the descriptor is parked on `tma` for the 8-cycle
  round trip, the payload's SMEM write-transport beat is its tail cycle;
* smem_write = (tp_smem_wr, 0, 7); wgmma = (tc_and_mma, 0, 8) + (tp_mma, 0, 8); smem_read =
  (tp_smem_rd, 0, 7); every transport has capacity 1 (the sm_100 machine model's own classes);
* edges: load -> read (the read consumes %0, latency 8 -- the scoring example's D[load, read] = 8);
  load -> write, write-after-write on shared memory (latency 1, issue order).

The example is about the cost-based generator; four ops would pick the serial generator (rule 2,
fewer than 8 ops), so the tests force the modulo strategy.
"""
from __future__ import annotations

from tileiras_async.schedule import (
    DepGraph,
    Edge,
    Node,
    OpResources,
    ResourceUse,
    ScheduleOptions,
    check_schedule,
    compute_mii,
    format_report,
    machine_model,
    report_from_result,
    schedule_graph,
)
from tileiras_async.schedule.machine import SLOT

MODEL = machine_model("sm_100", copies="tma")   # the seeds' model: tiled loads as TMA (the compiler's use cp.async)
TILE_BYTES = 128 * 64 * 2
MODULO = ScheduleOptions(strategy="modulo")


def worked_graph(tma=None) -> DepGraph:
    nodes = [Node(0, "tiled_tma_load", tma or MODEL.resources("tma_load", TILE_BYTES)),
             Node(1, "smem_write", MODEL.resources("smem_write", TILE_BYTES)),
             Node(2, "wgmma", MODEL.resources("tcgen05")),   # the seeds' wgmma vector is sm_100's tcgen05
             Node(3, "smem_read", MODEL.resources("smem_read"))]
    return DepGraph(nodes, [Edge(0, 3, 8, 0, "data"), Edge(0, 1, 1, 0, "memory")])


def test_vectors_are_the_seeds_reading():
    tma = MODEL.resources("tma_load")
    assert tma.uses == (ResourceUse(SLOT["tma"], 0, 8), ResourceUse(SLOT["tp_smem_wr"], 7, 1))
    assert tma.latency == 8 and tma.length == 8
    assert MODEL.resources("smem_write").uses == (ResourceUse(SLOT["tp_smem_wr"], 0, 7),)
    assert MODEL.resources("smem_read").uses == (ResourceUse(SLOT["tp_smem_rd"], 0, 7),)
    assert MODEL.resources("tcgen05").uses == (ResourceUse(SLOT["tc_and_mma"], 0, 8), ResourceUse(SLOT["tp_mma"], 0, 8))
    assert all(MODEL.cap(SLOT[s]) == 1 for s in ("tma", "tp_smem_wr", "tp_smem_rd", "tp_mma", "tc_and_mma"))
    # slot ids are one-based, row bit = id - 1
    assert (SLOT["tma"], SLOT["tp_smem_wr"], SLOT["tc_and_mma"], SLOT["tp_mma"]) == (12, 16, 11, 19)


def test_worked_example_ii8_smem_write_in_stage1():
    g = worked_graph()
    mii = compute_mii(g, MODEL)
    assert (mii.res, mii.rec, mii.mii) == (8, 0, 8)
    r = schedule_graph(g, MODEL, MODULO)
    assert r.ok and r.strategy == "modulo"
    assert r.ii == 8
    assert [a.ii for a in r.attempts] == [8]
    assert check_schedule(g, MODEL, r.ii, r.starts) == []
    # the TMA load and the wgmma in stage 0, at cycle 0
    assert (r.starts[0], r.stages[0], r.orders[0]) == (0, 0, 0)
    assert (r.starts[2], r.stages[2]) == (0, 0)
    # the smem write: pushed to cycle 8 = stage 1, order 0
    assert (r.starts[1], r.stages[1], r.orders[1]) == (8, 1, 0)
    # ... because every earlier seat 1..7 clashed with the TMA load's tp_smem_wr beat (row 7)
    assert r.rejections[1] == 7
    assert r.stage_count == 2
    # the read waits for the load's 8-cycle latency
    assert r.starts[3] >= r.starts[0] + 8


def test_rrt_matches_the_wiki_figure():
    g = worked_graph()
    r = schedule_graph(g, MODEL, MODULO)
    rep = report_from_result(g, r, MODEL, kernel="worked")
    assert len(rep.rrt) == 8
    bit = {s: 1 << (SLOT[s] - 1) for s in SLOT}
    for row in rep.rrt:
        cells = {c.name: c.ops for c in row.cells}
        assert cells["tma"] == [0]                       # tma held by the load at cycles 0..7
        assert cells["tc_and_mma"] == [2] and cells["tp_mma"] == [2]
        assert cells["tp_smem_wr"] == ([0] if row.cycle == 7 else [1])
        assert row.mask & bit["tp_smem_wr"] and row.full & bit["tp_smem_wr"]
        assert row.mask < 1 << 64
    text = format_report(rep)
    assert "II=8" in text and "tp_smem_wr" in text


def test_the_clash_is_the_reason():
    # the same body without the TMA load's tp_smem_wr beat: the write sits right after the load
    no_beat = OpResources("tma_load", (ResourceUse(SLOT["tma"], 0, 8),), 8)
    r = schedule_graph(worked_graph(no_beat), MODEL, MODULO)
    assert r.ii == 8
    assert (r.starts[1], r.stages[1]) == (1, 0)
    assert r.rejections[1] == 0


def test_literal_reading_has_no_ii8_schedule():
    literal = OpResources("tma_load", (ResourceUse(SLOT["tma"], 0, 8), ResourceUse(SLOT["tp_smem_wr"], 0, 8)), 8)
    g = worked_graph(literal)
    mii = compute_mii(g, MODEL)
    assert mii.res == 15 and mii.res_bottleneck == "tp_smem_wr"
    r = schedule_graph(g, MODEL, MODULO)
    assert r.ok and r.ii >= 15
    assert check_schedule(g, MODEL, r.ii, r.starts) == []


def test_serial_rule_would_pick_serial():
    r = schedule_graph(worked_graph(), MODEL)
    assert r.strategy == "serial" and r.rule == "op count 4 < 8"
    assert r.stages == [0, 0, 0, 0] and sorted(r.orders) == [0, 1, 2, 3]
