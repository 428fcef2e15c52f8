"""Warp specialisation of Hopper TMA K-loops (issue 30): schedule-loops puts the loop's TMA loads in a producer
partition and the mma with the rest in a consumer one, its report gives the partitions, the ring depth and the
producer's registers, and the pipeline pass builds exactly that (a producer warpgroup issuing the boxes, a
consumer warpgroup running the wgmma, .reqntid 256).  The emitted code computes the references in the PTX
emulator with the race detector on at every --num-stages, and it needs each of its mbarrier arrivals and waits:
a PTX without one of them fails (a hang the emulator reports, a race or a wrong result).  Where the rule
declines (more than one K chunk per iteration, measured worse), the loop keeps the single-warpgroup form."""
from __future__ import annotations

import re

import pytest
from conftest import LAUNCH, requires_corpus

from tileiras_async.bytecode.reader import read_module
from tileiras_async.emu.errors import BarrierError
from tileiras_async.emu.runner import run_compiled
from tileiras_async.schedule.report import chrome_trace, format_report
from tileiras_async.tilegpu.decisions import SCHEDULE_REPORT
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import run_pipeline
from tileiras_tui.loopview import pipelined_loop

SPLIT = "matmul_f16_f32acc_64x64x32"          # one K chunk per iteration: warp-specialised
KEPT = "matmul_f16_f16out_128x128x64"         # four chunks: the rule keeps one warpgroup


def _path(cid: str):
    return LAUNCH / f"{cid}.v13.4.tileirbc"


def _passes(cid: str, stages: int | None, until: str) -> KernelIR:
    m = read_module(_path(cid).read_bytes())
    opts = CodegenOptions(target="sm_90", opt_level=3)
    if stages is not None:
        opts.pipeline_stages = stages
    k = KernelIR(m, clone_function(m.functions[0]), opts)
    run_pipeline(k, until=until)
    return k


def _k_loop_report(k: KernelIR):
    return next(op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body)
                if SCHEDULE_REPORT in op.attrs and op.attrs[SCHEDULE_REPORT].strategy == "modulo")


@requires_corpus
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_expansion_is_the_schedules_partitions_and_ring(stages):
    scheduled = _passes(SPLIT, stages, "schedule-loops")
    report = _k_loop_report(scheduled)
    parts = {p.name: p for p in report.partitions}
    assert set(parts) == {"producer", "consumer"} and report.ring_depth >= 2
    body = {r.index: r for r in report.ops}
    assert {body[i].name for i in parts["producer"].ops} == {"load_view_tko"}
    assert "mmaf" in {body[i].name for i in parts["consumer"].ops}
    assert all(r.partition in parts for r in report.ops)

    k = _passes(SPLIT, stages, "pipeline")
    assert _k_loop_report(k) == report
    ops = list(walk_ops(k.fn.body))
    bars = next(o for o in ops if o.name == "tilegpu.tma_barriers")
    assert bars.attrs["stages"] == report.ring_depth and bars.attrs["empty"] == 128
    ws = [o for o in ops if o.name == "tilegpu.warp_specialize"]
    assert len(ws) == 1 and ws[0].attrs["producer_regs"] == parts["producer"].registers
    assert ws[0].attrs["consumer_regs"] == parts["consumer"].registers
    assert ws[0].attrs["producer_warpgroup"] == parts["producer"].warpgroup
    producer = list(ws[0].regions[0].block.walk())
    inside = {id(o) for o in producer}
    copies = [o for o in ops if o.name == "tilegpu.async_copy"]
    assert copies and all(id(o) in inside and o.attrs.get("tma") is not None for o in copies)
    assert sorted(o.attrs["role"] for o in copies) == ["a", "b"]
    assert [o.attrs.get("empty") for o in producer if o.name == "tilegpu.tma_wait"] == [True]
    consumer = [o for o in ops if id(o) not in inside]
    assert [o.name for o in consumer if o.name in ("tilegpu.tma_wait", "tilegpu.mma_staged", "tilegpu.tma_arrive")] \
        == ["tilegpu.tma_wait", "tilegpu.mma_staged", "tilegpu.tma_arrive"]
    assert not any(o.name in ("tilegpu.async_wait", "tilegpu.async_commit", "tilegpu.barrier") for o in consumer)


@requires_corpus
def test_num_stages_changes_the_ring_depth():
    depths = {n: _k_loop_report(_passes(SPLIT, n, "schedule-loops")).ring_depth for n in (2, 3, 4)}
    assert depths == {2: 2, 3: 3, 4: 4}


@requires_corpus
def test_the_rule_keeps_one_warpgroup_for_several_chunks():
    report = _k_loop_report(_passes(KEPT, None, "schedule-loops"))
    assert report.partitions == [] and report.ring_depth == 0
    assert any(n.startswith("not warp-specialised: 4 K chunks per iteration") for n in report.notes)
    assert all(r.partition == "" for r in report.ops)


def _ptx_ring(ptx: str) -> int:
    """The empty ring's mbarriers in the PTX: those initialised for the consumer warpgroup's 128 arrivals."""
    return len(re.findall(r"mbarrier\.init\.shared\.b64 \[[^]]*\], 128;", ptx))


@requires_corpus
@pytest.mark.parametrize("stages", [2, 3, 4, None])
def test_emulated_at_every_stage_count(refs, stages):
    inputs, orig = refs.make_inputs(SPLIT), refs.make_inputs(SPLIT)
    run = run_compiled(_path(SPLIT), refs.grid(SPLIT, inputs), list(inputs.values()), gpu_name="sm_90",
                       check_races=True, pipeline_stages=stages)
    assert not refs.check(SPLIT, orig, inputs)
    assert ".reqntid 256" in run.ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in run.ptx
    assert ".maxnreg 72" in run.ptx      # the consumer's registers: ptxas would otherwise assume 255
    assert _ptx_ring(run.ptx) == (stages or 4)
    assert "barrier.sync \t1, 128;" in run.ptx       # the consumer's barriers count its own threads


@requires_corpus
def test_on_sm100_the_producer_sees_the_initialised_mbarriers(refs):
    """sm_100 splits the loop too, its accumulator kept in tensor memory.  The accumulator's acquire (after the
    split) synchronises the consumer warpgroup alone, so the mbarriers' initialisation keeps a CTA barrier of
    its own before the split, where a one-warpgroup tcgen05 loop needs only warp 0's lanes synchronised; and
    the producer's first thread issues the copies (no elect.sync, whose warp ptxas cannot see converged
    there).  The emulated kernel computes the reference."""
    inputs, orig = refs.make_inputs(SPLIT), refs.make_inputs(SPLIT)
    run = run_compiled(_path(SPLIT), refs.grid(SPLIT, inputs), list(inputs.values()), gpu_name="sm_100",
                       check_races=True)
    assert not refs.check(SPLIT, orig, inputs)
    ptx = run.ptx
    assert ".reqntid 256" in ptx and "tcgen05.mma" in ptx and "elect.sync" not in ptx
    before_split = ptx[ptx.index("fence.mbarrier_init"):ptx.index("barrier.sync \t1, 128;")]
    assert "bar.sync \t0;" in before_split and "bar.warp.sync" not in ptx


RELEASE = r"mbarrier\.arrive\.shared\.b64 st, \[%r\d+\];"
WAIT = r"\$tmw\d+: mbarrier\.try_wait\.parity\.shared\.b64 w, \[%r\d+\], %r\d+; @!w bra \$tmw\d+;"


def _mutated(ptx: str, pattern: str, which: int) -> str:
    """`ptx` without match `which` (0: the first, -1: the last) of `pattern`, inside its inline-asm braces."""
    matches = list(re.finditer(pattern, ptx))
    assert matches, pattern
    m = matches[which]
    return ptx[:m.start()] + ptx[m.end():]


@requires_corpus
@pytest.mark.parametrize("pattern,which", [(RELEASE, 0), (WAIT, 0), (WAIT, -1)],
                         ids=["release", "first-wait", "last-wait"])
def test_each_arrive_and_wait_is_needed(refs, monkeypatch, pattern, which):
    """Without the consumer's release the producer waits forever for a slot; without the consumer's wait for
    the copies or the producer's wait for a free slot (the PTX's first and last waits) the warpgroups run out
    of step (an mbarrier used after it is invalidated, or more arrivals than a phase expects): the emulator
    reports each."""
    import tileiras_async.driver as driver
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), pattern, which))
    inputs, orig = refs.make_inputs(SPLIT), refs.make_inputs(SPLIT)
    try:
        run_compiled(_path(SPLIT), refs.grid(SPLIT, inputs), list(inputs.values()), gpu_name="sm_90",
                     check_races=True, pipeline_stages=2)
    except BarrierError:
        return
    assert refs.check(SPLIT, orig, inputs), "the mutated PTX still computes the reference"


@requires_corpus
def test_the_trace_and_the_text_show_the_partitions():
    report = _k_loop_report(_passes(SPLIT, None, "schedule-loops"))
    trace = chrome_trace([report])["traceEvents"]
    loop = next(e for e in trace if e.get("cat") == "loop")
    assert loop["args"]["ring_depth"] == 4
    assert [(p["name"], p["registers"]) for p in loop["args"]["partitions"]] == [("consumer", 72), ("producer", 40)]
    ops = {(e["name"], e["args"]["partition"]) for e in trace if e.get("cat") == "op"}
    assert ops == {("load_view_tko", "producer"), ("mmaf", "consumer")}
    text = format_report(report)
    assert "partition producer: warpgroup 1, setmaxnreg 40, ring depth 4, ops 0,1" in text
    assert "partition consumer: warpgroup 0, 72 registers (.maxnreg), ring depth 4, ops 2" in text
    assert "warp-specialised" in report.rule
    legend = pipelined_loop(report)[1].plain          # the dashboard's schedules tab
    assert "#0 load_view_tko [producer]" in legend and "[consumer]" in legend
    assert "producer  warpgroup 1 (setmaxnreg 40), ring of 4 stage buffers" in legend


@requires_corpus
def test_a_write_before_the_loop_keeps_one_warpgroup():
    """Both warpgroups run what precedes the loop: a store there would be done twice, so the rule declines."""
    k = _passes(SPLIT, None, "materialize-shared-memory")
    top = k.fn.body.ops
    store = next(o for o in top if o.name == "store_view_tko")
    top.remove(store)
    top.insert(next(i for i, o in enumerate(top) if o.name == "for"), store)
    run_pipeline(k, after="materialize-shared-memory", until="schedule-loops")
    report = _k_loop_report(k)
    assert report.partitions == []
    assert "not warp-specialised: what runs before the loop writes memory, prints or is warp-specialised " \
           "already" in report.notes


@requires_corpus
def test_partitions_without_their_report_are_an_error():
    """The pipeline builds what the report says: ops with partitions whose report names none are rejected."""
    import msgspec

    from tileiras_async.tilegpu.errors import LoweringError
    k = _passes(SPLIT, None, "schedule-loops")
    loop = next(op for op in walk_ops(k.fn.body) if SCHEDULE_REPORT in op.attrs and "pipeline_plan" in op.attrs)
    loop.attrs[SCHEDULE_REPORT] = msgspec.structs.replace(loop.attrs[SCHEDULE_REPORT], partitions=[])
    with pytest.raises(LoweringError, match="names no producer and consumer with a ring of 4 stage buffers"):
        run_pipeline(k, after="schedule-loops", until="pipeline")
