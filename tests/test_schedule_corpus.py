"""Schedule generation over the corpus: a report per loop per target family, matmul K-loops, the trace."""
from __future__ import annotations

import json
from functools import cache

import msgspec
import pytest
from conftest import corpus_files, requires_corpus

from tileiras_async.bytecode.reader import read_module
from tileiras_async.schedule import (
    ScheduleOptions,
    ScheduleReport,
    chrome_trace,
    format_report,
    machine_model,
    schedule_module,
    schedule_trace_json,
    write_schedule_trace,
)
from tileiras_async.schedule.analyze import module_loops

GPUS = ("sm_80", "sm_90", "sm_100", "sm_120")
pytestmark = requires_corpus


@cache
def module(path):
    return read_module(path.read_bytes())


def loop_count(m) -> int:
    return sum(1 for fn in m.functions for op in fn.walk() if op.name in ("for", "loop"))


def check_report(r: ScheduleReport) -> None:
    """What the dashboard sees is a consistent schedule: dependences, 64-bit RRT rows, stages."""
    assert r.ok, r.message
    assert r.ii >= 1 and r.ii >= r.mii >= 1
    assert r.mii == max(r.res_mii, r.rec_mii, r.fine_mii, r.dep_mii, 1)
    assert r.num_ops == len(r.ops)
    start = {o.index: o.start for o in r.ops}
    for e in r.edges:
        assert start[e.dst] >= start[e.src] + e.latency - r.ii * e.distance, (r.kernel, e)
    assert len(r.rrt) == r.ii
    rows = [0] * r.ii
    for o in r.ops:
        assert o.stage == (o.start // r.ii if r.strategy == "modulo" else 0)
        assert o.cycle == o.start % r.ii
        for s in o.slots:
            for c in range(s.offset, s.offset + s.duration):
                rows[(o.start + c) % r.ii] |= 1 << (s.slot - 1)
    assert [row.mask for row in r.rrt] == rows
    for row in r.rrt:
        assert 0 <= row.mask < 1 << 64
        for cell in row.cells:
            assert cell.used <= cell.capacity
    keys = sorted((o.stage, o.order) for o in r.ops)
    assert len(set(keys)) == len(keys)                 # (stage, order) is a total order
    assert r.stage_count == max([o.stage for o in r.ops], default=0) + 1
    assert [a.ii for a in r.attempts][-1] == r.ii and r.attempts[-1].ok


@pytest.mark.parametrize("gpu", GPUS)
def test_every_corpus_loop_gets_a_report(gpu):
    files = corpus_files("*.tileirbc")
    assert files
    total = 0
    for path in files:
        m = module(path)
        reports = schedule_module(m, gpu)
        assert len(reports) == loop_count(m), path.name
        for r in reports:
            assert r.gpu_name == gpu and r.family == gpu
            check_report(r)
        total += len(reports)
    assert total > 50


@pytest.mark.parametrize("gpu", GPUS)
def test_corpus_loops_forced_modulo(gpu):
    for path in corpus_files("*.v13.4.tileirbc"):
        for r in schedule_module(module(path), gpu, ScheduleOptions(strategy="modulo")):
            assert r.strategy == "modulo"
            check_report(r)


def matmul_loops(gpu, options=None):
    out = []
    for path in corpus_files("*.tileirbc"):
        if not path.name.startswith(("matmul", "bmm")):
            continue
        for r in schedule_module(module(path), gpu, options):
            names = [o.name for o in r.ops]
            if names.count("load_view_tko") == 2 and "mmaf" in names:
                out.append((path.name, r))
    return out


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("strategy", ["auto", "modulo"])
def test_matmul_k_loops(gpu, strategy):
    loops = matmul_loops(gpu, ScheduleOptions(strategy=strategy))
    assert len(loops) >= 40
    for name, r in loops:
        check_report(r)
        assert r.ii >= 1
        ops = {o.index: o for o in r.ops}
        loads = [o for o in r.ops if o.name == "load_view_tko"]
        mma = next(o for o in r.ops if o.name == "mmaf")
        assert all(o.rclass == "cp_async_load" for o in loads), name    # what a pipelined K-loop's code does
        # no instruction recorded outside the compiler: the family's tensor-core default
        assert mma.rclass == {"sm_90": "wgmma", "sm_100": "tcgen05"}.get(gpu, "mma_sync")
        # each load feeds the mma (directly or through a reshape/ftof) and the mma waits for it
        for ld in loads:
            assert mma.start >= ld.start + ld.latency, (name, gpu)
        # the accumulator recurrence: the accumulating op (the mma, or an addf of its converted
        # result) feeds itself in the next iteration
        acc = [e for e in r.edges if e.kind == "carried" and e.src == e.dst and e.distance == 1
               and ops[e.src].name in ("mmaf", "addf")]
        assert acc, name
        assert r.rec_mii >= ops[acc[0].src].latency
        if strategy == "auto":
            # the seeds' selector: fewer than 8 ops -> serial; else the loads are async-capable
            # (TMA / cp.async) -> cost-based (older producers keep make_partition_view in the loop)
            if r.num_ops < 8:
                assert (r.strategy, r.rule) == ("serial", f"op count {r.num_ops} < 8")
            else:
                assert (r.strategy, r.rule) == ("modulo", "cost-based")


def test_matmul_modulo_overlaps_on_hopper_and_blackwell():
    for gpu in ("sm_90", "sm_100"):
        serial = matmul_loops(gpu)
        modulo = matmul_loops(gpu, ScheduleOptions(strategy="modulo"))
        assert [(n, r.kernel, r.loop) for n, r in serial] == [(n, r.kernel, r.loop) for n, r in modulo]
        for (name, s), (_, m) in zip(serial, modulo):
            assert m.ii <= s.ii, name
            assert m.ii == m.mii, name           # two TMA loads + an MMA reach the bound


def test_schedule_is_deterministic():
    paths = corpus_files("*.v13.4.tileirbc")
    for gpu in GPUS:
        a = [msgspec.json.encode(r) for p in paths for r in schedule_module(module(p), gpu)]
        b = [msgspec.json.encode(r) for p in paths for r in schedule_module(read_module(p.read_bytes()), gpu)]
        assert a == b
        ta = schedule_trace_json(r for p in paths for r in schedule_module(module(p), gpu))
        tb = schedule_trace_json(r for p in paths for r in schedule_module(module(p), gpu))
        assert ta == tb


def test_report_roundtrips_msgpack():
    path = next(p for p in corpus_files("layernorm_f16_128.v13.4.tileirbc"))
    for r in schedule_module(module(path), "sm_100"):
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(r), type=ScheduleReport) == r
        assert "II=" in format_report(r)


def test_trace_json(tmp_path):
    paths = [p for p in corpus_files("*.v13.4.tileirbc")
             if p.name.startswith(("matmul_f16_f32acc", "layernorm_f16", "first_exceed_f32_16", "cumsum_carry"))]
    reports = [r for p in paths for gpu in ("sm_80", "sm_100") for r in schedule_module(module(p), gpu)]
    assert any(r.stage_count > 1 for r in reports)
    out = tmp_path / "trace.json"
    write_schedule_trace(str(out), reports)
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for ev in events:
        for key in ("ph", "ts", "dur", "name", "args", "pid", "tid"):
            assert key in ev, (key, ev)
        assert ev["ph"] in ("X", "M")
        assert isinstance(ev["ts"], int) and isinstance(ev["dur"], int) and ev["dur"] >= 0
        assert "ii" in ev["args"] and "stage_count" in ev["args"]
    loops = [ev for ev in events if ev.get("cat") == "loop"]
    assert len(loops) == len(reports)
    for ev, r in zip(loops, reports):
        assert (ev["args"]["ii"], ev["args"]["stage_count"], ev["args"]["loop"]) == (r.ii, r.stage_count, r.loop)
        assert ev["args"]["mii"] == r.mii and ev["args"]["strategy"] == r.strategy
    op_events = [ev for ev in events if ev.get("cat") == "op"]
    assert len(op_events) == sum(r.num_ops * r.stage_count for r in reports)   # one per op per stage
    for ev in op_events:
        a = ev["args"]
        assert ev["ts"] == a["iteration"] * a["ii"] + a["start"] and ev["dur"] >= 1
    assert doc == chrome_trace(reports)


def test_module_loops_nesting():
    path = next(p for p in corpus_files("first_exceed_f32_16.v13.4.tileirbc"))
    [(_, loops)] = module_loops(module(path))
    assert [(op.name, depth, parent) for op, depth, parent in loops] == [("for", 0, -1)]
    r = schedule_module(module(path), "sm_100")[0]
    kinds = {e.kind for e in r.edges}
    assert {"data", "carried", "control"} <= kinds
    assert machine_model("sm_100").family == "sm_100"
