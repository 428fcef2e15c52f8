"""Warp-level instructions in the PTX emulator against results computed by hand, lane by lane: redux.sync
(every operation, .u32/.s32/.b32, .f32 min/max with .abs/.NaN), shfl.sync (up/down/bfly/idx with clamp
and segment values, partial member masks), vote.sync, match.sync, activemask, elect.sync.

Each case runs one (or two) warps of `emu.testing.run_ptx_op`: thread i reads element i of the inputs;
`%a1 != 0` selects the threads that execute the instruction (the others branch around it).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tileiras_async.emu import ConvergenceError
from tileiras_async.emu.testing import run_ptx_op

LANES = np.arange(32)


def warp_op(instr: str, vals, active=None, in_type="u32", out_types=("u32",), regs=""):
    """Run `instr` (reading %a0, writing %d0/%d1/...) in the lanes where `active` is set."""
    active = np.ones(len(vals), bool) if active is None else np.asarray(active, bool)
    body = f"""
    setp.eq.u32 %guard, %a1, 0;
    @%guard bra $OUT;
    {instr}
$OUT:
"""
    return run_ptx_op(body, [(in_type, vals), ("u32", active.astype(np.uint32))], list(out_types),
                      regs=regs, block=32)


def mask_of(lanes) -> int:
    return sum(1 << int(i) for i in lanes)


# ---------------------------------------------------------------------------- redux.sync

S32 = [((i * 37) % 101) - 50 for i in range(32)]
U32 = [(i * 2654435761) & 0xFFFFFFFF for i in range(32)]


def _fold(op, xs):
    r = xs[0]
    for x in xs[1:]:
        r = {"add": r + x, "min": min(r, x), "max": max(r, x), "and": r & x, "or": r | x, "xor": r ^ x}[op]
    return r


@pytest.mark.parametrize("op,ty", [("add", "u32"), ("add", "s32"), ("min", "u32"), ("min", "s32"),
                                   ("max", "u32"), ("max", "s32"), ("and", "b32"), ("or", "b32"),
                                   ("xor", "b32")])
@pytest.mark.parametrize("lanes", [range(32), range(0, 32, 2), [3, 17, 30]])
def test_redux_integer(op, ty, lanes):
    vals = S32 if ty == "s32" else U32
    active = np.isin(LANES, list(lanes))
    out_t = "s32" if ty == "s32" else "u32"
    (d,) = warp_op(f"redux.sync.{op}.{ty} %d0, %a0, {mask_of(lanes)};", vals, active, in_type=out_t,
                   out_types=(out_t,))
    expect = _fold(op, [vals[i] for i in lanes])
    expect = expect if ty == "s32" else expect & 0xFFFFFFFF
    assert all(int(d[i]) == expect for i in lanes)
    assert all(d[i] == 0 for i in range(32) if i not in lanes)


F = [3.5, -7.25, float("nan"), 1.0, -0.0, 12.0, -12.5, 0.25] * 4


@pytest.mark.parametrize("instr,pick", [
    ("min", lambda xs: min(x for x in xs if not math.isnan(x))),
    ("max", lambda xs: max(x for x in xs if not math.isnan(x))),
    ("min.abs", lambda xs: min(abs(x) for x in xs if not math.isnan(x))),
    ("max.abs", lambda xs: max(abs(x) for x in xs if not math.isnan(x))),
    ("max.NaN", lambda xs: float("nan") if any(math.isnan(x) for x in xs) else max(xs)),
    ("min.abs.NaN", lambda xs: float("nan") if any(math.isnan(x) for x in xs) else min(abs(x) for x in xs)),
])
@pytest.mark.parametrize("lanes", [range(32), [0, 1, 3, 4, 5]])
def test_redux_f32(instr, pick, lanes):
    active = np.isin(LANES, list(lanes))
    (d,) = warp_op(f"redux.sync.{instr}.f32 %d0, %a0, {mask_of(lanes)};", F, active, in_type="f32",
                   out_types=("f32",))
    expect = pick([F[i] for i in lanes])
    for i in lanes:
        if math.isnan(expect):
            assert np.float32(d[i]).view(np.uint32) == 0x7FFFFFFF         # the canonical NaN
        else:
            assert d[i] == expect and math.copysign(1, d[i]) == math.copysign(1, expect)


def test_redux_with_a_mask_naming_an_inactive_lane_is_an_error():
    with pytest.raises(ConvergenceError, match="not converged"):
        warp_op("redux.sync.add.u32 %d0, %a0, 0xffffffff;", U32, LANES < 16)


# ---------------------------------------------------------------------------- shfl.sync

def shfl(mode, b, c, lanes=range(32), mask=None):
    active = np.isin(LANES, list(lanes))
    vals = [1000 + i for i in range(32)]
    d, p = warp_op(f"shfl.sync.{mode}.b32 %d0|%d1, %a0, {b}, {c}, {mask if mask is not None else mask_of(lanes)};",
                   vals, active, out_types=("u32", "pred"))
    return {i: (int(d[i]) - 1000, bool(p[i])) for i in lanes}


def test_shfl_up_down_with_clamps():
    up = shfl("up", 3, 0)
    assert up == {i: (i - 3, True) if i >= 3 else (i, False) for i in range(32)}
    down = shfl("down", 4, 0x1F)
    assert down == {i: (i + 4, True) if i + 4 <= 31 else (i, False) for i in range(32)}
    # down with a clamp of 7 in segments of 8 lanes: (32 - 8) << 8 | 7
    seg = shfl("down", 1, 0x1807)
    assert seg == {i: (i + 1, True) if i % 8 < 7 else (i, False) for i in range(32)}
    # up within segments of 16 lanes: (32 - 16) << 8 | 0
    seg = shfl("up", 2, 0x1000)
    assert seg == {i: (i - 2, True) if i % 16 >= 2 else (i, False) for i in range(32)}


def test_shfl_bfly_and_idx_with_segments():
    assert shfl("bfly", 5, 0x1F) == {i: (i ^ 5, True) for i in range(32)}
    # butterfly within 8-lane segments: sources past the segment's clamp keep their own value
    assert shfl("bfly", 9, 0x181F) == {i: (i ^ 9, True) if (i ^ 9) <= (i | 7) else (i, False)
                                       for i in range(32)}
    assert shfl("idx", 1, 0x181F) == {i: ((i & ~7) | 1, True) for i in range(32)}
    assert shfl("idx", 35, 0x1F) == {i: (3, True) for i in range(32)}          # the lane index is 5 bits
    assert shfl("idx", 12, 0x1E01) == {i: (i & ~1, True) for i in range(32)}   # pairs: lane 12 & 1 = 0
    assert shfl("idx", 0, 0x1F00) == {i: (i, True) for i in range(32)}         # one-lane segments


def test_shfl_with_a_partial_member_mask():
    half = range(16)
    assert shfl("bfly", 4, 0x1F, half) == {i: (i ^ 4, True) for i in half}
    assert shfl("idx", 3, 0x1F, half) == {i: (3, True) for i in half}
    # lanes 4-6 in a 4-lane segment (4..7): lane 4 has no source below it in the segment
    assert shfl("up", 1, 0x1C00, [4, 5, 6]) == {4: (4, False), 5: (4, True), 6: (5, True)}
    # a source lane outside the executing set is an error
    with pytest.raises(ConvergenceError, match="does not execute the shuffle"):
        shfl("up", 1, 0, [4, 5, 6])
    with pytest.raises(ConvergenceError, match="does not execute the shuffle"):
        shfl("down", 8, 0x1F, half)


# ---------------------------------------------------------------------------- vote / match / activemask / elect

def test_vote_with_partial_masks():
    pred_vals = [1 if i % 3 == 0 else 0 for i in range(32)]
    lanes = list(range(0, 32, 3))                 # exactly the lanes whose predicate is true
    body = ("setp.ne.u32 %q, %a0, 0;\n    vote.sync.ballot.b32 %d0, %q, {m};\n    vote.sync.all.pred %d1, %q, {m};\n"
            "    vote.sync.any.pred %d2, %q, {m};\n    vote.sync.uni.pred %d3, %q, {m};")
    for ls, all_, uni in ((range(32), False, False), (lanes, True, True)):
        active = np.isin(LANES, list(ls))
        d0, d1, d2, d3 = warp_op(body.format(m=mask_of(ls)), pred_vals, active,
                                 out_types=("u32", "pred", "pred", "pred"), regs=".reg .pred %q;")
        ballot = mask_of(i for i in ls if pred_vals[i])
        for i in ls:
            assert (int(d0[i]), bool(d1[i]), bool(d2[i]), bool(d3[i])) == (ballot, all_, True, uni)


def test_match_any_and_all():
    vals = [i % 3 for i in range(32)]
    for ls in (range(32), range(1, 32, 4)):
        active = np.isin(LANES, list(ls))
        d, = warp_op(f"match.any.sync.b32 %d0, %a0, {mask_of(ls)};", vals, active)
        for i in ls:
            assert int(d[i]) == mask_of(j for j in ls if vals[j] == vals[i])
    same = [7] * 32
    d, p = warp_op(f"match.all.sync.b32 %d0|%d1, %a0, {mask_of(range(8))};", same, LANES < 8,
                   out_types=("u32", "pred"))
    assert all(int(d[i]) == 0xFF and p[i] for i in range(8))
    d, p = warp_op("match.all.sync.b32 %d0|%d1, %a0, 0xffffffff;", vals, None, out_types=("u32", "pred"))
    assert not d.any() and not p.any()
    wide = [(i % 2) << 40 for i in range(32)]          # b64: the values differ only above bit 32
    d, = warp_op("match.any.sync.b64 %d0, %a0, 0xffffffff;", wide, None, in_type="u64")
    assert all(int(d[i]) == mask_of(range(i % 2, 32, 2)) for i in range(32))


def test_activemask_and_elect_in_divergent_code():
    lanes = [2, 5, 6, 31]
    active = np.isin(LANES, lanes)
    d0, d1, d2 = warp_op(f"activemask.b32 %d0;\n    elect.sync %d1|%d2, {mask_of(lanes)};", [0] * 32, active,
                         out_types=("u32", "u32", "pred"))
    for i in lanes:
        assert (int(d0[i]), int(d1[i]), bool(d2[i])) == (mask_of(lanes), 2, i == 2)
