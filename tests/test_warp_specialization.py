"""Warp specialisation of TMA K-loops (issue 30; wgmma on sm_90, tcgen05 on sm_100): schedule-loops puts the
loop's TMA loads in a producer partition and the mma with the rest in a consumer one, its report gives the
partitions, the ring depth and the producer's registers, and the pipeline pass builds exactly that (a producer
warpgroup issuing the boxes, a consumer warpgroup running the mma, .reqntid 256).  The emitted code computes
the references in the PTX emulator with the race detector on at every --num-stages, and it needs each of its
mbarrier arrivals and waits: a PTX without one of them fails (a hang the emulator reports, a race or a wrong
result).  A wgmma consumer materialises its accumulator's init in registers (`tilegpu.materialize`), so
the loop's zero-trip path copies nothing into the epilogue's registers."""
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
SPLIT2 = "matmul_bf16_64x64x64"               # two chunks (at 4 stages): warp-specialised too
SPLIT4 = "matmul_f16_f16out_128x128x64"       # four chunks, a 128-register accumulator: split too


def _path(cid: str):
    return LAUNCH / f"{cid}.v13.4.tileirbc"


def _passes(cid: str, stages: int | None, until: str, gpu: str = "sm_90") -> KernelIR:
    m = read_module(_path(cid).read_bytes())
    opts = CodegenOptions(target=gpu, opt_level=3)
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
def test_two_chunks_per_iteration_are_split():
    """Two K chunks per iteration: the consumer waits for, runs and releases each unit in turn, the
    producer waits for a free slot before each unit's copies."""
    report = _k_loop_report(_passes(SPLIT2, None, "schedule-loops"))
    assert {p.name for p in report.partitions} == {"producer", "consumer"} and report.ring_depth == 4
    k = _passes(SPLIT2, None, "pipeline")
    ops = list(walk_ops(k.fn.body))
    ws = next(o for o in ops if o.name == "tilegpu.warp_specialize")
    inside = {id(o) for o in ws.regions[0].block.walk()}
    assert [o.attrs.get("empty") for o in ops if id(o) in inside and o.name == "tilegpu.tma_wait"] == [True, True]
    assert [o.name for o in ops if id(o) not in inside and o.name in ("tilegpu.tma_wait", "tilegpu.mma_staged",
                                                                      "tilegpu.tma_arrive")] \
        == ["tilegpu.tma_wait", "tilegpu.mma_staged", "tilegpu.tma_arrive"] * 2


@requires_corpus
@pytest.mark.parametrize("cid", [SPLIT, SPLIT4])
def test_tcgen05_mmas_release_their_slots(cid):
    """sm_100: the consumer does not wait for a unit's tcgen05 mmas; their commit releases the slot (an empty
    ring of one arrival), and the accumulator's release after the loop waits for all of them."""
    k = _passes(cid, None, "keep-accumulators-in-tensor-memory", "sm_100")
    ops = list(walk_ops(k.fn.body))
    bars = next(o for o in ops if o.name == "tilegpu.tma_barriers")
    assert bars.attrs["empty"] == 1
    staged = [o for o in ops if o.name == "tilegpu.tmem_mma_staged"]
    arrives = [o for o in ops if o.name == "tilegpu.tma_arrive"]
    assert staged and all(o.attrs.get("committed") for o in staged)
    assert len(arrives) == len(staged) and all(o.attrs.get("commit") for o in arrives)
    [release] = [o for o in ops if o.name == "tilegpu.tmem_release"]
    assert release.attrs.get("committed") is True
    assert "the consumer warpgroup runs the tcgen05 mma" in _k_loop_report(k).rule


@requires_corpus
def test_four_chunks_and_a_large_accumulator_are_split_with_the_init_materialised():
    """f16out on sm_90: four K chunks per iteration and 128 accumulator registers a thread.  The consumer's
    loop starts from a materialised accumulator, so the PTX has no 16-bit copies of the zero-trip path's
    epilogue values (128 a thread before the loop, where LLVM folded the f32 -> f16 conversion into them)."""
    report = _k_loop_report(_passes(SPLIT4, None, "schedule-loops"))
    assert {p.name for p in report.partitions} == {"producer", "consumer"} and report.ring_depth == 4
    assert not any(n.startswith("not warp-specialised") for n in report.notes)
    k = _passes(SPLIT4, None, "pipeline")
    ops = list(walk_ops(k.fn.body))
    [held] = [o for o in ops if o.name == "tilegpu.materialize"]
    consumer_loop = next(o for o in ops if o.name == "for" and o.attrs.get("pipelined"))
    assert consumer_loop.operands["initValues"][0] is held.result
    assert held.operands["source"].type.shape == (128, 128)


@requires_corpus
def test_the_materialised_init_keeps_the_zero_trip_copies_out(monkeypatch):
    """Without the materialised init (the loop started from the constant), the zero-trip path's 128 moves a
    thread come back: the op is what removes them."""
    from tileiras_async.driver import module_ptx
    from tileiras_async.targets import target
    from tileiras_async.tilegpu.passes import warp_specialized_loop as wsl
    module = read_module(_path(SPLIT4).read_bytes())
    ptx = module_ptx(module, target("sm_90"))
    assert "setmaxnreg" in ptx and len(re.findall(r"\bmov\.b16\b", ptx)) == 0
    monkeypatch.setattr(wsl.WarpSpecializedForm, "loop_inits", lambda self, out, inits: inits)
    ptx = module_ptx(module, target("sm_90"))
    assert len(re.findall(r"\bmov\.b16\b", ptx)) >= 128


def _ptx_ring(ptx: str, arrivals: int) -> int:
    """The empty ring's mbarriers in the PTX: those initialised for `arrivals` a phase (every consumer thread's
    with wgmma; with tcgen05 the mma's commit, one)."""
    return len(re.findall(rf"mbarrier\.init\.shared\.b64 \[%r\d+\+\d+\], {arrivals};", ptx))


@requires_corpus
@pytest.mark.parametrize("gpu,cid", [("sm_90", SPLIT), ("sm_90", SPLIT2), ("sm_90", SPLIT4), ("sm_100", SPLIT),
                                     ("sm_100", SPLIT2), ("sm_100", SPLIT4)])
@pytest.mark.parametrize("stages", [2, 3, 4, None])
def test_emulated_at_every_stage_count(refs, gpu, cid, stages):
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    run = run_compiled(_path(cid), refs.grid(cid, inputs), list(inputs.values()), gpu_name=gpu,
                       check_races=True, pipeline_stages=stages)
    assert not refs.check(cid, orig, inputs)
    assert ".reqntid 256" in run.ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in run.ptx
    # the consumer's registers (the accumulator's and 40): ptxas would otherwise assume 255
    assert f".maxnreg {168 if cid == SPLIT4 else 72}" in run.ptx
    if gpu == "sm_90":
        assert _ptx_ring(run.ptx, 128) == (stages or 4)
    else:   # the full ring's mbarriers count 2 (A's and B's expect_tx), the empty ring's 1: the mmas' commits
        # release the slots; the consumer threads arrive only on tcgen05's own mbarriers (after their stores,
        # with the release's commit, before the deallocation), initialised at the entry for 128 and 129
        assert _ptx_ring(run.ptx, 1) == (stages or 4)
        assert len(re.findall(r"mbarrier\.arrive\.shared\.b64 st, \[%r\d+\];", run.ptx)) == 3
        assert re.search(r"mbarrier\.init\.shared\.b64 \[%r\d+\], 129;", run.ptx)
    # one CTA barrier, publishing the mbarriers' initialisation (and on sm_100 the tensor memory's allocation,
    # once at the entry: mbarriers order its stores, mmas, loads and deallocation); none for the ring at the
    # end: its mbarriers have shared memory of their own, left as they are (no invalidation)
    barriers = re.findall(r"\bbar(?:rier)?\.sync\s+([^;]*);", run.ptx)
    assert barriers == ["0"]
    assert "mbarrier.inval" not in run.ptx
    # the producer's region is one thread's: its copies are issued without a thread-index predicate
    assert re.search(r"\{ \.reg \.b64 st; mbarrier\.arrive\.expect_tx\.shared\.b64 st, \[%r\d+\], \d+; "
                     r"cp\.async\.bulk\.tensor", run.ptx)


@requires_corpus
def test_on_sm100_the_producer_sees_the_initialised_mbarriers(refs):
    """sm_100 splits the loop too, its accumulator kept in tensor memory.  The accumulator's acquire (after the
    split) synchronises the consumer warpgroup alone (by mbarriers), so the mbarriers' initialisation keeps a
    CTA barrier of its own before the split, where a one-warpgroup tcgen05 loop needs only warp 0's lanes
    synchronised; the tensor memory is allocated before that barrier, which publishes its address; and the
    producer's region is one thread's code (no elect.sync: there is no warp to elect a lane from).  The
    emulated kernel computes the reference."""
    inputs, orig = refs.make_inputs(SPLIT), refs.make_inputs(SPLIT)
    run = run_compiled(_path(SPLIT), refs.grid(SPLIT, inputs), list(inputs.values()), gpu_name="sm_100",
                       check_races=True)
    assert not refs.check(SPLIT, orig, inputs)
    ptx = run.ptx
    assert ".reqntid 256" in ptx and "tcgen05.mma" in ptx and "elect.sync" not in ptx
    before_split = ptx[ptx.index("tcgen05.alloc"):ptx.index("setmaxnreg.dec")]
    assert "fence.mbarrier_init" in before_split and "bar.sync \t0;" in before_split
    assert "bar.warp.sync" not in ptx and "barrier.sync" not in ptx


RELEASE = r"mbarrier\.arrive\.shared\.b64 st, \[%r\d+\];"
# tcgen05's release of a slot: the commit of the unit's mmas to its empty mbarrier (the first commit in the
# PTX, predicated on thread 0; the last one is the consumer's own, before it loads the accumulator)
COMMIT = r"@%p\d+ tcgen05\.commit\.cta_group::1\.mbarrier::arrive::one\.shared::cluster\.b64 \[%r\d+\];"
WAIT = r"\$tmw\d+: mbarrier\.try_wait\.parity\.shared\.b64 w, \[%r\d+\], %r\d+; @!w bra \$tmw\d+;"


def _mutated(ptx: str, pattern: str, which: int | str) -> str:
    """`ptx` without match `which` (0: the first, -1: the last; "producer": every one in the producer's
    region, after its setmaxnreg) of `pattern`, inside its inline-asm braces."""
    matches = list(re.finditer(pattern, ptx))
    assert matches, pattern
    if which == "producer":
        start = ptx.index("setmaxnreg.dec")
        matches = [m for m in matches if m.start() > start]
        assert matches, "the producer's region has no match"
    else:
        matches = [matches[which]]
    for m in reversed(matches):
        ptx = ptx[:m.start()] + ptx[m.end():]
    return ptx


@requires_corpus
@pytest.mark.parametrize("gpu,cid,stages", [("sm_90", SPLIT, 2), ("sm_90", SPLIT2, 3), ("sm_90", SPLIT4, 3),
                                            ("sm_100", SPLIT, 2), ("sm_100", SPLIT2, 3),
                                            ("sm_100", SPLIT4, 3)])   # rings units wrap
@pytest.mark.parametrize("pattern,which", [("release", 0), (WAIT, 0), (WAIT, "producer")],
                         ids=["release", "first-wait", "producer-waits"])
def test_each_arrive_and_wait_is_needed(refs, monkeypatch, gpu, cid, stages, pattern, which):
    """Without the consumer's release the producer waits forever for a slot; without the consumer's wait for
    the copies or the producer's waits for a free slot (the PTX's first wait, the producer region's) the
    warpgroups run out of step (a race on a stage buffer, or more arrivals than a phase expects): the
    emulator reports each."""
    import tileiras_async.driver as driver
    if pattern == "release":
        pattern = RELEASE if gpu == "sm_90" else COMMIT
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), pattern, which))
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    try:
        run_compiled(_path(cid), refs.grid(cid, inputs), list(inputs.values()), gpu_name=gpu,
                     check_races=True, pipeline_stages=stages)
    except BarrierError:
        return
    assert refs.check(cid, orig, inputs), "the mutated PTX still computes the reference"


# tcgen05's own synchronisation once its tensor memory is allocated at the entry (tmem_alloc), where a barrier
# of the consumer warpgroup was: warp 0's wait for every thread's tcgen05.st (the acquire), every thread's
# wait for the mmas' commit (the release)
STORES_WAIT = r"setp\.ne\.u32 p, %r\d+, 0; @p bra \$tsd\d+; \$tsw\d+: mbarrier\.try_wait\.shared\.b64 w, \[%r\d+\], st; " \
              r"@!w bra \$tsw\d+;"
MMAS_WAIT = r"\.reg \.pred w; \.reg \.b64 st; mbarrier\.arrive\.shared\.b64 st, \[%r\d+\]; \$tsw\d+: " \
            r"mbarrier\.try_wait\.shared\.b64 w, \[%r\d+\], st; @!w bra \$tsw\d+;"


@requires_corpus
@pytest.mark.parametrize("stages", [2, 3, None])      # one K unit per iteration, two, two of a deeper ring
@pytest.mark.parametrize("pattern", [STORES_WAIT, MMAS_WAIT], ids=["stores-wait", "mmas-wait"])
def test_the_waits_that_replaced_the_tensor_memory_barriers_are_needed(refs, monkeypatch, stages, pattern):
    """The bf16 consumer acquires and releases its accumulator's tensor memory every iteration, with no CTA or
    consumer barrier left (the columns allocated once at the entry): without warp 0's wait for the stores'
    mbarrier thread 0's mma reads an accumulator other warps' tcgen05.st may not have written yet; without
    the release's wait for the mmas' commit the other warps load D and store the next iteration's
    accumulator while the mmas still write it (the race detector's tensor-memory race, each).  (Where the
    accumulator is acquired once, before the loop: test_where_the_accumulator_is_acquired_once_...)"""
    import tileiras_async.driver as driver
    from tileiras_async.emu.errors import EmuError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), pattern, 0))
    inputs, orig = refs.make_inputs(SPLIT2), refs.make_inputs(SPLIT2)
    try:
        run_compiled(_path(SPLIT2), refs.grid(SPLIT2, inputs), list(inputs.values()), gpu_name="sm_100",
                     check_races=True, pipeline_stages=stages)
    except EmuError:
        return
    assert refs.check(SPLIT2, orig, inputs), "the mutated PTX still computes the reference"


@requires_corpus
@pytest.mark.parametrize("cid", [SPLIT, SPLIT4])
@pytest.mark.parametrize("stages", [2, None])
def test_where_the_accumulator_is_acquired_once_its_stores_wait_is_needed(refs, monkeypatch, cid, stages):
    """The accumulator is acquired once, before the loop: without warp 0's wait for the stores' mbarrier thread
    0's first mma reads accumulator columns the other warps' tcgen05.st are not ordered before.  Its wait for
    the copies' mbarrier is no stand-in: only the copies and the issuing thread arrive on that one."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), STORES_WAIT, 0))
    inputs = refs.make_inputs(cid)
    with pytest.raises(RaceError, match=r"tensor-memory race: read at tensor-memory lane \d+ column \d+ by "
                                        r"tcgen05\.mma \(issued by thread 0, warp 0\) after thread \d+'s"):
        run_compiled(_path(cid), refs.grid(cid, inputs), list(inputs.values()), gpu_name="sm_100",
                     check_races=True, pipeline_stages=stages)


@requires_corpus
@pytest.mark.parametrize("cid", [SPLIT, SPLIT4])       # one K unit per iteration, four
@pytest.mark.parametrize("stages", [2, 3, None])
def test_on_sm100_warp_0_alone_runs_the_k_loop(refs, cid, stages):
    """Where the accumulator stays in tensor memory through the whole loop, the consumer's K-loop only waits
    for stage buffers, issues mmas and commits them (keep-accumulators-in-tensor-memory's `one_warp`): warp 0
    runs it alone, and within it thread 0 alone takes the branch into each group of mmas (one per 16 of K),
    so each executes once, not on all 32 lanes nor on all 128 consumer threads; the other warps wait for
    the release's commit.  Emulated with the race detector, it computes the reference."""
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    grid = refs.grid(cid, inputs)
    run = run_compiled(_path(cid), grid, list(inputs.values()), gpu_name="sm_100", check_races=True,
                       pipeline_stages=stages)
    assert not refs.check(cid, orig, inputs)
    ctas = grid[0] * grid[1] * grid[2]
    assert run.report.instruction_classes["tensor_core"] == ctas * inputs["A"].shape[1] // 16


@requires_corpus
@pytest.mark.parametrize("cid", [SPLIT, SPLIT4])
def test_without_the_release_wait_the_threads_past_the_loop_read_too_early(refs, monkeypatch, cid):
    """The consumer warps other than warp 0 branch past the K-loop straight to the release: its wait for the
    mmas' commit is all that keeps their tcgen05.ld after the mmas (the race detector's tensor-memory race,
    or a wrong result, without it)."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.errors import EmuError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), MMAS_WAIT, 0))
    inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
    try:
        run_compiled(_path(cid), refs.grid(cid, inputs), list(inputs.values()), gpu_name="sm_100",
                     check_races=True)
    except EmuError:
        return
    assert refs.check(cid, orig, inputs), "the mutated PTX still computes the reference"


# tmem_free's wait: warp 0 deallocates once every consumer thread arrived on the stores' mbarrier after its last
# tcgen05.ld
FREE_WAIT = r"\$tfw\d+: mbarrier\.try_wait\.shared\.b64 w, \[%r\d+\], st; @!w bra \$tfw\d+;"
FREE_RACE = (r"tensor-memory race: deallocation after a read at tensor-memory lane \d+ column \d+ by thread 0 "
             r"\(warp 0\) after thread \d+'s \(warp [123]\)")


@requires_corpus
@pytest.mark.parametrize("cid", [SPLIT, SPLIT2, SPLIT4])
def test_without_the_wait_before_the_free_the_columns_are_freed_under_the_loads(refs, monkeypatch, cid):
    """The consumer's columns are freed at its end (tmem_free): without warp 0's wait for every consumer
    thread's arrival after its last tcgen05.ld, warp 0 deallocates while the other warps' loads may still be
    in flight (the race detector's deallocation is a write of every freed cell).  With the wait the kernels
    run race-free (test_on_sm100_warp_0_alone_runs_the_k_loop)."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), FREE_WAIT, 0))
    inputs = refs.make_inputs(cid)
    with pytest.raises(RaceError, match=FREE_RACE):
        run_compiled(_path(cid), refs.grid(cid, inputs), list(inputs.values()), gpu_name="sm_100",
                     check_races=True)


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
