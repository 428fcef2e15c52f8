"""Pipelining of attention-shaped loops (issue 30, attention): cuTile's FMHA sample as cuTile launches it
(examples/suite/launch: D=64, 128x128 tiles, the launch hints that make its views TMA-able) on sm_90 and
sm_100.  schedule-loops accepts the attention loop (two wgmma / tcgen05 mmas whose B tiles, K through a
transposed view and V, the body loads) with a rule of its own and the loads a stage ahead; the pipeline pass lands K and V by TMA
(rank-4 maps) in a ring of --num-stages slots.  The emulated kernel computes the reference with the race
detector on at --num-stages 2, 3 and 4, and it needs its mbarrier wait: without it the emulator reports a
race or the result is wrong."""
from __future__ import annotations

import re

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.emu.errors import EmuError
from tileiras_async.emu.runner import run_compiled
from tileiras_async.tilegpu.decisions import SCHEDULE_REPORT
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import run_pipeline

from test_suite import SUITE, refs

LAUNCH_SUITE = SUITE / "launch"
CASES = ("fmha_f16", "fmha_causal_f16")
WAIT = r"\$tmw\d+: mbarrier\.try_wait\.parity\.shared\.b64 w, \[%r\d+\], %r\d+; @!w bra \$tmw\d+;"


def _path(case: str):
    return LAUNCH_SUITE / f"{case}.v13.4.tileirbc"


def _kernel(case: str, gpu: str, until: str, stages: int | None = None) -> KernelIR:
    m = read_module(_path(case).read_bytes())
    opts = CodegenOptions(target=gpu, opt_level=3)
    if stages is not None:
        opts.pipeline_stages = stages
    k = KernelIR(m, clone_function(m.functions[0]), opts)
    run_pipeline(k, until=until)
    return k


def _emulate(case: str, stages: int | None, gpu: str = "sm_90"):
    """Run the launch variant in the emulator with the race detector on; the reference's problems."""
    inputs, pristine = refs.make_inputs(case), refs.make_inputs(case)
    args = list(inputs.values())
    run = run_compiled(_path(case), refs.grid(case, inputs), args, gpu_name=gpu, check_races=True,
                       pipeline_stages=stages)
    return run, refs.check(case, pristine, dict(zip(inputs, args)))


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
def test_the_schedule_accepts_the_attention_loop(case, gpu):
    k = _kernel(case, gpu, "schedule-loops")
    reports = [op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body) if op.name == "for"]
    assert reports and all(r.rule.startswith("attention-pipelined: the B tiles of 2 mmas land by TMA in a ring "
                                             "of 4 slots") for r in reports)
    for loop in (op for op in walk_ops(k.fn.body) if op.name == "for"):
        loads = [o for o in loop.regions[0].block.ops if o.name == "load_view_tko"]
        assert [o.attrs["stage"] for o in loads] == [0, 0]
        assert {o.attrs["stage"] for o in loop.regions[0].block.ops if o.name == "mmaf"} == {3}


def test_unhinted_views_keep_the_loop_serial():
    """Without cuTile's launch hints nothing promises K's and V's views what a tensor map needs."""
    m = read_module((SUITE / "fmha_f16.v13.4.tileirbc").read_bytes())
    k = KernelIR(m, clone_function(m.functions[0]), CodegenOptions(target="sm_90", opt_level=3))
    run_pipeline(k, until="schedule-loops")
    [report] = [op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body) if op.name == "for"]
    assert report.rule.startswith("kept serial:") and "cannot land by TMA" in report.rule


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_emulated_at_every_stage_count(case, stages, gpu):
    run, problems = _emulate(case, stages, gpu)
    assert not problems, problems
    # K and V by rank-4 tensor copies: per loop the stages - 1 iterations of the prologue and one in the loop
    loops = 1 if case == "fmha_f16" else 2
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.4d", run.ptx)) == 2 * stages * loops
    assert len(re.findall(r"mbarrier\.init\.shared\.b64 \[%r\d+\+\d+\], 2;", run.ptx)) == stages * loops


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_without_the_mbarrier_wait_the_mmas_read_early(monkeypatch, gpu):
    import tileiras_async.driver as driver
    compile_ptx = driver.module_ptx

    def without_wait(*a, **kw):
        ptx = compile_ptx(*a, **kw)
        m = re.search(WAIT, ptx)
        assert m, "no mbarrier wait in the PTX"
        return ptx[:m.start()] + ptx[m.end():]

    monkeypatch.setattr(driver, "module_ptx", without_wait)
    _expect_failure("fmha_f16", 2, gpu)


def _expect_failure(case: str, stages: int, gpu: str = "sm_90") -> None:
    try:
        _, problems = _emulate(case, stages, gpu)
    except EmuError:
        return
    assert problems, "the mutated kernel still computes the reference"


def _body_ops(case: str, until: str, stages: int | None = None) -> list:
    k = _kernel(case, "sm_90", until, stages)
    loop = next(op for op in walk_ops(k.fn.body) if op.name == "for")
    return loop.regions[0].block.ops


def test_the_copies_into_a_slot_follow_the_barrier_that_frees_it():
    """The emulator runs a CTA's warps in step, so a copy issued before the other warps are done with the
    slot shows there as no race; the order is held here instead: after insert-barriers the iteration's one
    barrier comes first, then the copies of the iteration ahead, the wait for this one's slot, the mmas."""
    ops = _body_ops("fmha_f16", "insert-barriers", 2)
    names = [o.name for o in ops]
    copies = next(i for i, o in enumerate(ops) if o.name == "if"
                  and any(x.name == "tilegpu.async_copy" for x in o.regions[0].block.ops))
    assert names.count("tilegpu.barrier") == 1
    assert names.index("tilegpu.barrier") < copies < names.index("tilegpu.tma_wait") < \
        names.index("tilegpu.mma_landed")


def test_q_is_staged_once_and_p_stays_in_registers():
    ops = _body_ops("fmha_f16", "pipeline")
    first, second = [o for o in ops if o.name == "tilegpu.mma_landed"]
    assert "a_buffer" in first.operands and "scratch_bytes" not in first.attrs
    assert second.attrs.get("a_registers") and "scratch_bytes" not in second.attrs
    assert not any(o.name == "tilegpu.stage_operand" for o in ops)
