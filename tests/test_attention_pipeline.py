"""Pipelining of attention-shaped loops (issue 30, attention): cuTile's FMHA sample as cuTile launches it
(examples/suite/launch: D=64, 128x128 tiles, the launch hints that make its views TMA-able) on sm_90 and
sm_100.  schedule-loops accepts the attention loop (two wgmma / tcgen05 mmas whose B tiles, K through a
transposed view and V, the body loads) with a rule of its own and the loads a stage ahead; the pipeline pass lands K and V by TMA
(rank-4 maps) in a ring of --num-stages slots.  The emulated kernel computes the reference with the race
detector on at --num-stages 2, 3 and 4 (inputs whose loops run several iterations: the ring wraps), and it
needs each of its mbarrier waits and arrivals: without one the emulator reports a race, a hang or a wrong
result."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.emu.errors import EmuError
from tileiras_async.emu.runner import run_compiled
from tileiras_async.tilegpu.analysis.attention_pipeline import MAX_SLOTS
from tileiras_async.tilegpu.analysis.mma import recorded_plan
from tileiras_async.tilegpu.analysis.tensor_maps import kernel_hooks, param_layout
from tileiras_async.tilegpu.decisions import ATTENTION_PLAN, SCHEDULE_REPORT, STAGE_COPY
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import attention_loop, run_pipeline, tmem_accumulators
from tileiras_async.tilegpu.types import layout_of

from test_suite import SUITE
from test_tcgen05_lowering import record_mma_issuers
from test_warp_specialization import FREE_RACE, FREE_WAIT, MMAS_WAIT, STORES_WAIT, _mutated

LAUNCH_SUITE = SUITE / "launch"
CASES = ("fmha_f16", "fmha_causal_f16")


def _path(case: str):
    return LAUNCH_SUITE / f"{case}.v13.4.tileirbc"


def _kernel(case: str, gpu: str, until: str, stages: int | None = None, folder=LAUNCH_SUITE) -> KernelIR:
    """The kernel of `case` (the launch variant, or the one in `folder`) after the passes up to `until`."""
    m = read_module((folder / f"{case}.v13.4.tileirbc").read_bytes())
    given = {} if stages is None else {"pipeline_stages": stages}
    k = KernelIR(m, clone_function(m.functions[0]), CodegenOptions(target=gpu, opt_level=3, **given))
    run_pipeline(k, until=until)
    return k


def _long_inputs(case: str):
    """Inputs whose attention loops run several iterations (the corpus's run one): 640 keys, so a ring of 2
    to 4 slots wraps; the causal kernel's queries start at 512 (4 unmasked iterations, then the masked one)."""
    rng = np.random.default_rng(7)
    sq, sk, d = 128, 640, 64
    q, k, v = (rng.uniform(-1, 1, (1, 1, n, d)).astype(np.float16) for n in (sq, sk, sk))
    pos = 512 if case == "fmha_causal_f16" else 0
    return [q, k, v, np.zeros((1, 1, sq, d), np.float16), np.float32(1 / math.sqrt(d)), np.int32(pos)], pos


def _reference(q, k, v, scale, pos, causal):
    s = q[0, 0].astype(np.float64) @ k[0, 0].astype(np.float64).T * float(scale)
    if causal:
        s = np.where(np.arange(s.shape[1])[None, :] <= np.arange(s.shape[0])[:, None] + pos, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p @ v[0, 0].astype(np.float64) / p.sum(axis=-1, keepdims=True)


def _emulate(case: str, stages: int | None, gpu: str = "sm_90"):
    """Run the launch variant on `_long_inputs` in the emulator with the race detector on; (the run, whether
    the output is off the reference)."""
    args, pos = _long_inputs(case)
    run = run_compiled(_path(case), (1, 1), args, gpu_name=gpu, check_races=True, pipeline_stages=stages)
    want = _reference(args[0], args[1], args[2], args[4], pos, case == "fmha_causal_f16")
    return run, not np.allclose(args[3][0, 0].astype(np.float64), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
def test_the_schedule_accepts_the_attention_loop(case, gpu):
    k = _kernel(case, gpu, "schedule-loops")
    reports = [op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body) if op.name == "for"]
    assert reports and all(r.rule.startswith("attention-pipelined: the B tiles of 2 mmas land by TMA in a ring "
                                             "of 3 slots") for r in reports)
    for loop in (op for op in walk_ops(k.fn.body) if op.name == "for"):
        loads = [o for o in loop.regions[0].block.ops if o.name == "load_view_tko"]
        assert [o.attrs["stage"] for o in loads] == [0, 0]
        assert {o.attrs["stage"] for o in loop.regions[0].block.ops if o.name == "mmaf"} == {2}


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
def test_the_ring_keeps_the_b_majors_select_mma_chose(case, gpu):
    """K lands through its transposed view K-major and V N-major: the slot layout each TMA box writes is the
    one select-mma planned the mma's descriptor for (a B read through a transposing view stays K-major);
    choose-stage-copies, which decides K-loop copies before schedule-loops, leaves the attention loads to
    schedule-loops' own TMA decision."""
    k = _kernel(case, gpu, "schedule-loops")
    plans = [op.attrs[ATTENTION_PLAN] for op in walk_ops(k.fn.body) if ATTENTION_PLAN in op.attrs]
    landed = [ld for p in plans for ld in p.landed]
    assert [ld.plan.b_major for ld in landed] == ["k", "mn"] * len(plans)
    assert all(ld.plan.b_major == recorded_plan(ld.mma).b_major for ld in landed)
    assert all(STAGE_COPY not in o.attrs for o in walk_ops(k.fn.body) if o.name == "load_view_tko")


def test_unhinted_views_keep_the_loop_serial():
    """Without cuTile's launch hints nothing promises K's and V's views what a tensor map needs."""
    k = _kernel("fmha_f16", "sm_90", "schedule-loops", folder=SUITE)
    [report] = [op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body) if op.name == "for"]
    assert report.rule.startswith("kept serial:") and "cannot land by TMA" in report.rule


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_emulated_at_every_stage_count(case, stages, gpu):
    run, wrong = _emulate(case, stages, gpu)
    assert not wrong
    # K and V by rank-4 tensor copies: per loop the slots - 1 iterations of the prologue and one in the loop;
    # Q once, before the first loop, into the buffer both loops read: no global load into registers left
    loops, slots = 1 if case == "fmha_f16" else 2, min(stages, MAX_SLOTS)
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global", run.ptx)) == 2 * slots * loops + 1
    assert "ld.global" not in run.ptx
    # O leaves by TMA on sm_90 (select-tile-tensor-stores: stmatrix, then each warp's 4-D tensor store); on
    # sm_100 it comes out of tensor memory in another layout and keeps its per-thread stores
    stores = len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.global\.shared::cta", run.ptx))
    assert (stores, "st.global" in run.ptx) == ((1, False) if gpu == "sm_90" else (0, True))
    assert len(re.findall(r"mbarrier\.init\.shared\.b64 \[%r\d+\+\d+\], 2;", run.ptx)) == slots * loops
    # on sm_90 every slot's empty mbarrier counts the threads (256); sm_100 has none (the tcgen05 commits every
    # thread waits for order the slot's reads before its refill) and only the tcgen05 stores' mbarrier of the
    # entry's tensor-memory allocation counts them (128: choose-warps keeps its tensor-memory accumulators'
    # rows in 4 warps' threads; its mmas' one counts the commit too: threads + 1)
    tcgen05 = gpu == "sm_100"
    threads = 128 if tcgen05 else 256
    assert len(re.findall(rf"mbarrier\.init\.shared\.b64 \[%r\d+\+\d+\], {threads};", run.ptx)) == \
        (1 if tcgen05 else slots * loops)
    assert len(re.findall(rf"mbarrier\.init\.shared\.b64 \[%r\d+\], {threads + 1};", run.ptx)) == tcgen05
    if gpu == "sm_90":  # S's first K step (K-major B) with scale-d 0, per N tile and loop: no zeros moved into D
        assert len(re.findall(r"wgmma\.mma_async[^;]*, 0, 1, 1, 0, 0;", run.ptx)) == loops


@pytest.mark.parametrize(("gpu", "step"), [("sm_90", "landed"), ("sm_90", "release"), ("sm_100", "landed")])
def test_each_wait_and_arrive_is_needed(monkeypatch, gpu, step):
    """Without the wait for the tiles (`landed`) the mmas read a slot before its copies complete; without the
    release (`release`, sm_90: sm_100 has none) the ring's second round waits forever: the emulator reports
    each (a race, a hang or a wrong result).  (The wait for the release:
    test_without_the_wait_for_the_release_the_refill_races.)"""
    monkeypatch.setattr(attention_loop._Expansion, step, lambda self, out, unit: None)
    _expect_failure("fmha_f16", 2, gpu)


@pytest.mark.parametrize(("pattern", "which"), [(STORES_WAIT, 0), (MMAS_WAIT, 0), (MMAS_WAIT, 1)],
                         ids=["O-stores-wait", "S-mmas-wait", "O-mmas-wait"])
def test_on_sm100_the_waits_that_replaced_the_tensor_memory_barriers_are_needed(monkeypatch, pattern, which):
    """On sm_100 S's and O's columns are allocated once at the entry (keep-accumulators-in-tensor-memory's
    `tmem_column`), and mbarriers order what CTA barriers did each iteration: without warp 0's wait for the
    stores' mbarrier thread 0 issues before every thread's tcgen05.st of O is done; without the wait for the
    commit the threads load D while the mmas write it.  The emulator reports a race, or the result is wrong.
    (S has no stores wait -- `stores_ordered`: it stores and stages nothing, and O's stores wait, after
    every thread's load of S, orders those loads before thread 0's next S issue:
    test_on_sm100_s_has_no_stores_wait_of_its_own.)"""
    import tileiras_async.driver as driver
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), pattern, which))
    _expect_failure("fmha_f16", 2, "sm_100")


@pytest.mark.parametrize("case", CASES)
def test_on_sm100_the_free_waits_for_every_threads_last_load(monkeypatch, case):
    """S's and O's columns are freed once, after the loop (tmem_free): without warp 0's wait for every
    thread's arrival after its last tcgen05.ld (of O), warp 0 deallocates while the other warps' loads may
    still be in flight -- the race detector reports it.  With the wait the kernel runs race-free
    (test_on_sm100_no_barrier_runs_in_the_attention_loop_and_rows_reduce_in_their_thread)."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), FREE_WAIT, 0))
    with pytest.raises(RaceError, match=FREE_RACE):
        _emulate(case, 2, "sm_100")


@pytest.mark.parametrize("case", CASES)
def test_on_sm100_s_has_no_stores_wait_of_its_own(monkeypatch, case):
    """keep-accumulators-in-tensor-memory marks S's mma_landed (zero accumulator, A from Q's buffer)
    `stores_ordered` and not O's: each loop's PTX has one wait on the stores' mbarrier, O's, and the kernel
    computes the reference with the race detector on.  Without the decision S's wait comes back (two)."""
    k = _kernel(case, "sm_100", "keep-accumulators-in-tensor-memory")
    landed = [o for o in walk_ops(k.fn.body) if o.name == "tilegpu.mma_landed"]
    assert [bool(o.attrs.get("stores_ordered")) for o in landed] == [True, False] * (len(landed) // 2)
    run, wrong = _emulate(case, 3, "sm_100")
    assert not wrong
    assert len(re.findall(STORES_WAIT, run.ptx)) == len(landed) // 2
    monkeypatch.setattr(tmem_accumulators, "_stores_ordered_later", lambda block, op: False)
    run, wrong = _emulate(case, 3, "sm_100")
    assert not wrong and len(re.findall(STORES_WAIT, run.ptx)) == len(landed)


def test_on_sm100_the_ring_has_no_release():
    """Only the tensor core reads an sm_100 slot, and every thread (the one issuing the copies too) waits for
    the commit after each mma: the pipeline pass builds no "empty" mbarriers, no release and no wait for it
    (sm_90's wgmma threads keep theirs: test_without_the_wait_for_the_release_the_refill_races)."""
    for gpu, releases in (("sm_90", True), ("sm_100", False)):
        k = _kernel("fmha_f16", gpu, "pipeline", 2)
        ops = list(walk_ops(k.fn.body))
        [bars] = [o for o in ops if o.name == "tilegpu.tma_barriers" and o.attrs["count"] == 2]
        assert ("empty" in bars.attrs) == releases
        assert any(o.name == "tilegpu.tma_arrive" for o in ops) == releases
        assert any(o.name == "tilegpu.tma_wait" and o.attrs.get("empty") for o in ops) == releases


@pytest.mark.parametrize("case", CASES)
def test_on_sm100_thread_0_alone_issues_each_group_of_mmas(monkeypatch, case):
    """S's and O's mmas (their K steps) and the commit after them sit in one branch that thread 0 alone takes:
    each mma executes on thread 0 alone (as many tensor-core thread-instructions as mmas issued), and with
    the race detector on the result is the reference."""
    issuers = record_mma_issuers(monkeypatch)
    run, wrong = _emulate(case, 2, "sm_100")
    assert not wrong
    assert issuers and set(issuers) == {0}
    assert run.report.instruction_classes["tensor_core"] == len(issuers)


@pytest.mark.parametrize("case", CASES)
def test_on_sm100_no_barrier_runs_in_the_attention_loop_and_rows_reduce_in_their_thread(case):
    """At 4 warps (choose-warps) a tcgen05.ld 32x32b gives each thread whole rows of S (its 128 columns in
    registers): the softmax's row max and row sum reduce over registers alone -- no lane or warp of the
    reduced tile holds another column --, so no warp shuffle and no exchange through shared memory runs, and
    no CTA barrier is left in the loop: only the entry's (the publication of the mbarriers, the causal
    kernel's second ring's too, and of the columns).  No per-iteration allocation or free either."""
    k = _kernel(case, "sm_100", "insert-barriers")
    assert k.options.num_warps == 4
    loops = [op for op in walk_ops(k.fn.body) if op.name == "for"]
    assert len(loops) == (1 if case == "fmha_f16" else 2)
    for loop in loops:
        body = list(walk_ops(loop.regions[0].block))
        assert not [o for o in body if o.name == "tilegpu.barrier"]
        reduces = [o for o in body if o.name == "reduce"]
        assert len(reduces) == 2
        for r in reduces:
            layout = layout_of(r.operands["operands"][0].type)
            dim = r.attrs["dim"]
            assert all(b[dim] == 0 for b in layout.bases[1] + layout.bases[2])
    run, wrong = _emulate(case, 2, "sm_100")
    assert not wrong
    assert len(re.findall(r"tcgen05\.alloc\.", run.ptx)) == len(re.findall(r"tcgen05\.dealloc\.", run.ptx)) == 1
    assert len(re.findall(r"\bbar\.sync\b", run.ptx)) == 1
    assert "shfl" not in run.ptx and "red.shared" not in run.ptx
    assert len(re.findall(r"tcgen05\.ld\.sync\.aligned\.32x32b\.x128\.", run.ptx)) == len(loops)


@pytest.mark.parametrize("case", CASES)
def test_without_the_wait_for_the_release_the_refill_races(monkeypatch, case):
    """On sm_90 every thread reads K and V from a slot (its wgmmas' shared-memory operands) and then releases it;
    the copies that refill the slot wait for that release.  Without the wait they may land while other warps'
    wgmmas still read the slot: the race detector (happens-before through the mbarriers, not the emulator's lock
    step) reports the tensor copy's write after those reads.  (On sm_100 the slot's only reader is the tensor
    core, whose commit every thread -- the issuing one too -- waits for before the refill: the pipeline pass
    builds none there, test_on_sm100_the_ring_has_no_release.)"""
    from tileiras_async.emu.races import RaceError
    monkeypatch.setattr(attention_loop._Expansion, "released", lambda self, out, unit: None)
    with pytest.raises(RaceError, match=r"write after a read at shared address \d+ by a tensor copy \(issued by "
                                        r"thread 0, warp 0\) after thread \d+'s"):
        _emulate(case, 2, "sm_90")


TMA_WAIT = r"\$tmw\d+: mbarrier\.try_wait\.parity\.shared\.b64 w, \[%r\d+\], %r\d+; @!w bra \$tmw\d+;"


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_without_the_wait_for_q_the_mmas_read_its_buffer_before_it_lands(monkeypatch, gpu):
    """Q lands by a tensor copy of its own before the loop, and every thread waits for its mbarrier (the first
    tma_wait of the PTX: the prologue only issues copies): without the wait thread 0's first mmas read Q's
    buffer while the copy may still write it, which the race detector reports."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx
    monkeypatch.setattr(driver, "module_ptx", lambda *a, **kw: _mutated(compile_ptx(*a, **kw), TMA_WAIT, 0))
    with pytest.raises(RaceError, match=r"shared-memory race: write after a read at shared address \d+ by a tensor "
                                        r"copy \(issued by thread 0, warp 0\)"):
        _emulate("fmha_f16", 2, gpu)


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_without_the_entry_barrier_the_mbarriers_are_used_before_they_are_initialised(monkeypatch, gpu):
    """Thread 0 initialises the ring's mbarriers at the entry and a CTA barrier publishes them (with the
    tensor-memory columns on sm_100): without it the other threads may arrive on or wait for an mbarrier before
    its initialisation, which the race detector reports (an initialisation writes the mbarrier, every other use
    reads it)."""
    import tileiras_async.driver as driver
    from tileiras_async.emu.races import RaceError
    compile_ptx = driver.module_ptx

    def without_entry_barrier(*a, **kw):
        ptx = compile_ptx(*a, **kw)
        init = ptx.index("mbarrier.init")
        barrier = re.compile(r"\bbar\.sync\s+0;").search(ptx, init)
        assert barrier and "mbarrier.try_wait" not in ptx[init:barrier.start()]
        return ptx[:barrier.start()] + ptx[barrier.end():]
    monkeypatch.setattr(driver, "module_ptx", without_entry_barrier)
    with pytest.raises(RaceError, match=r"read at the mbarrier at shared address \d+ by thread \d+ \(warp \d\) "
                                        r"after thread 0's"):
        _emulate("fmha_f16", 2, gpu)


def _expect_failure(case: str, stages: int, gpu: str = "sm_90") -> None:
    try:
        _, wrong = _emulate(case, stages, gpu)
    except EmuError:
        return
    assert wrong, "the mutated kernel still computes the reference"


def _body_ops(case: str, until: str, stages: int | None = None) -> list:
    k = _kernel(case, "sm_90", until, stages)
    loop = next(op for op in walk_ops(k.fn.body) if op.name == "for")
    return loop.regions[0].block.ops


def test_without_the_wait_for_the_release_the_order_check_fails(monkeypatch):
    monkeypatch.setattr(attention_loop._Expansion, "released", lambda self, out, unit: None)
    with pytest.raises(StopIteration):
        test_the_loop_releases_its_slot_and_refills_it_after_the_release()


def test_the_loop_releases_its_slot_and_refills_it_after_the_release():
    """No CTA barrier in the loop: after its last mma every thread arrives on its slot's "empty" mbarrier,
    and every thread waits for the release of the slot the iteration ahead fills before its copies."""
    ops = _body_ops("fmha_f16", "insert-barriers", 2)
    names = [o.name for o in ops]
    copies = next(i for i, o in enumerate(ops) if o.name == "if")
    assert len([x for x in ops[copies].regions[0].block.ops if x.name == "tilegpu.async_copy"]) == 2
    release_wait = next(i for i, o in enumerate(ops) if o.name == "tilegpu.tma_wait" and o.attrs.get("empty"))
    assert release_wait < copies
    assert "tilegpu.barrier" not in names
    last_mma = max(i for i, n in enumerate(names) if n == "tilegpu.mma_landed")
    assert names[last_mma + 1] == "tilegpu.tma_arrive"
    full_wait = next(i for i, o in enumerate(ops) if o.name == "tilegpu.tma_wait" and not o.attrs.get("empty"))
    assert copies < full_wait < names.index("tilegpu.mma_landed")


def test_q_lands_once_and_p_stays_in_registers():
    ops = _body_ops("fmha_f16", "pipeline")
    first, second = [o for o in ops if o.name == "tilegpu.mma_landed"]
    assert "a_buffer" in first.operands and "lhs" not in first.operands and "scratch_bytes" not in first.attrs
    assert second.attrs.get("a_registers") and "scratch_bytes" not in second.attrs
    # S = Q K^T starts from zero: its first K step writes D with scale-d 0; O += P V accumulates
    assert first.attrs.get("acc_zero") and not second.attrs.get("acc_zero")
    assert not any(o.name == "tilegpu.stage_operand" for o in ops)


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
def test_the_maps_follow_the_arrays(case, gpu):
    """One map per array the loop lands (Q, K, V), in the hidden parameters after the entry's, numbered in the
    order of the arrays' parameters as NVIDIA's tool numbers them (its host object: Q, K, V, then O's store);
    on sm_90 O's store has the fourth (select-tile-tensor-stores), on sm_100 it stays per-thread."""
    k = _kernel(case, gpu, "select-access-forms")
    hooks = kernel_hooks(k)
    entry = len(param_layout(k.fn.type.inputs))
    arrays = 4 if gpu == "sm_90" else 3
    assert [m.param for m in hooks.maps] == [entry + i for i in range(arrays)]
    assert [m.base for m in hooks.maps] == sorted(m.base for m in hooks.maps)
    assert len({m.base for m in hooks.maps}) == arrays


def test_os_tma_store_clips_at_the_sequences_end():
    """sm_90 stores O by rank-4 tensor stores (select-tile-tensor-stores): with 208 queries the second tile's
    last 48 rows lie outside the output and two heads put the unit dimensions' coordinates to use.  Emulated
    with the race detector and strict memory checks (a store past O faults), every head's every row is
    written (O starts as NaN) and matches the reference."""
    rng = np.random.default_rng(3)
    heads, sq, sk, d = 2, 208, 640, 64
    q, k, v = (rng.uniform(-1, 1, (1, heads, n, d)).astype(np.float16) for n in (sq, sk, sk))
    o = np.full((1, heads, sq, d), np.nan, np.float16)
    scale = np.float32(1 / math.sqrt(d))
    run = run_compiled(_path("fmha_f16"), (-(-sq // 128), heads, 1), [q, k, v, o, scale, np.int32(0)],
                       gpu_name="sm_90", check_races=True)
    assert run.ptx.count("cp.async.bulk.tensor.4d.global.shared::cta") == 1 and "st.global" not in run.ptx
    for h in range(heads):
        want = _reference(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], scale, 0, False)
        np.testing.assert_allclose(o[0, h].astype(np.float64), want, rtol=1e-2, atol=1e-2)
