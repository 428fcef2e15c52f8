"""PTX emulator: instruction semantics against hand-computed values.

One small kernel per case (thread i runs the instruction on element i of each
input; see `tileiras_async.emu.testing`).  Floating-point cases pin rounding
modes, ties, overflow, subnormals, signed zeros and NaN handling (the GPU's
canonical NaN is 0x7fffffff / 0x7fff).
"""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tileiras_async.emu import UnsupportedInstruction
from tileiras_async.emu.testing import run_ptx_op

NAN32 = 0x7FFFFFFF
NAN16 = 0x7FFF


def R(body, inputs, outs, **kw):
    return run_ptx_op(body, inputs, outs, **kw)


def f32bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def bits32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def f64bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.uint64)


# ============================================================================ integer arithmetic


def test_add_sub_wrap_and_saturate():
    a = [1, 0x7FFFFFFF, -5, -2 ** 31]
    b = [2, 1, 7, -1]
    assert R("add.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["s32"])[0].tolist() == [3, -2 ** 31, 2, 2 ** 31 - 1]
    assert R("add.sat.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["s32"])[0].tolist() == \
        [3, 2 ** 31 - 1, 2, -2 ** 31]
    assert R("sub.u32 %d0, %a0, %a1;", [("u32", [0, 5]), ("u32", [1, 3])], ["u32"])[0].tolist() == [0xFFFFFFFF, 2]
    assert R("sub.s64 %d0, %a0, %a1;", [("s64", [-2 ** 63]), ("s64", [1])], ["s64"])[0].tolist() == [2 ** 63 - 1]
    assert R("add.u16 %d0, %a0, %a1;", [("u16", [0xFFFF]), ("u16", [2])], ["u16"])[0].tolist() == [1]


def test_carry_chain_64bit_add_and_sub():
    # (hi:lo) 0x1_ffffffff + 0x0_00000001 = 0x2_00000000
    out = R("add.cc.u32 %d0, %a0, %a2;\naddc.u32 %d1, %a1, %a3;",
            [("u32", [0xFFFFFFFF, 5]), ("u32", [1, 7]), ("u32", [1, 6]), ("u32", [0, 1])], ["u32", "u32"])
    assert out[0].tolist() == [0, 11] and out[1].tolist() == [2, 8]
    # 0x2_00000000 - 0x0_00000001 = 0x1_ffffffff (borrow)
    out = R("sub.cc.u32 %d0, %a0, %a2;\nsubc.u32 %d1, %a1, %a3;",
            [("u32", [0]), ("u32", [2]), ("u32", [1]), ("u32", [0])], ["u32", "u32"])
    assert out[0].tolist() == [0xFFFFFFFF] and out[1].tolist() == [1]


def test_mul_lo_hi_wide():
    assert R("mul.lo.s32 %d0, %a0, %a1;", [("s32", [70000, -3]), ("s32", [70000, 5])], ["s32"])[0].tolist() == \
        [(70000 * 70000) - 2 ** 32, -15]
    assert R("mul.hi.u32 %d0, %a0, %a1;", [("u32", [0xFFFFFFFF]), ("u32", [0xFFFFFFFF])], ["u32"])[0].tolist() == \
        [0xFFFFFFFE]
    assert R("mul.hi.s32 %d0, %a0, %a1;", [("s32", [-1, -2 ** 31]), ("s32", [-1, 2])], ["s32"])[0].tolist() == [0, -1]
    assert R("mul.wide.s32 %d0, %a0, %a1;", [("s32", [-2, 2 ** 31 - 1]), ("s32", [3, 2 ** 31 - 1])], ["s64"])[0] \
        .tolist() == [-6, (2 ** 31 - 1) ** 2]
    assert R("mul.wide.u32 %d0, %a0, %a1;", [("u32", [0xFFFFFFFF]), ("u32", [0xFFFFFFFF])], ["u64"])[0].tolist() == \
        [0xFFFFFFFF ** 2]
    assert R("mul.wide.u16 %d0, %a0, %a1;", [("u16", [0xFFFF]), ("u16", [0xFFFF])], ["u32"])[0].tolist() == \
        [0xFFFF ** 2]
    m64 = 2 ** 64 - 1
    assert R("mul.hi.u64 %d0, %a0, %a1;", [("u64", [m64, 2 ** 32]), ("u64", [m64, 2 ** 33])], ["u64"])[0] \
        .tolist() == [(m64 * m64) >> 64, 2]
    assert R("mul.hi.s64 %d0, %a0, %a1;", [("s64", [-1, -2 ** 63, 2 ** 63 - 1]), ("s64", [-1, 2, 2])], ["s64"])[0] \
        .tolist() == [0, -1, 0]
    assert R("mul.lo.s64 %d0, %a0, %a1;", [("s64", [2 ** 62]), ("s64", [4])], ["s64"])[0].tolist() == [0]


def test_mad_variants():
    assert R("mad.lo.s32 %d0, %a0, %a1, %a2;", [("s32", [3, -4]), ("s32", [5, 5]), ("s32", [1, 1])], ["s32"])[0] \
        .tolist() == [16, -19]
    assert R("mad.wide.u32 %d0, %a0, %a1, %a2;", [("u32", [0xFFFFFFFF]), ("u32", [2]), ("u64", [1])], ["u64"])[0] \
        .tolist() == [0x1FFFFFFFF]
    assert R("mad.hi.u32 %d0, %a0, %a1, %a2;", [("u32", [0x80000000]), ("u32", [4]), ("u32", [5])], ["u32"])[0] \
        .tolist() == [7]
    # carry chain: lo/hi of a 32x32 product plus a 64-bit addend
    out = R("mad.lo.cc.u32 %d0, %a0, %a1, %a2;\nmadc.hi.u32 %d1, %a0, %a1, %a3;",
            [("u32", [0xFFFFFFFF]), ("u32", [0xFFFFFFFF]), ("u32", [0xFFFFFFFF]), ("u32", [0])], ["u32", "u32"])
    full = 0xFFFFFFFF * 0xFFFFFFFF + 0xFFFFFFFF
    assert out[0].tolist() == [full & 0xFFFFFFFF] and out[1].tolist() == [full >> 32]
    assert R("mul24.lo.s32 %d0, %a0, %a1;", [("s32", [0x00FFFFFF]), ("s32", [2])], ["s32"])[0].tolist() == [-2]


def test_div_rem_truncate_and_edge_cases():
    a = [7, -7, 7, -7, -2 ** 31]
    b = [2, 2, -2, -2, -1]
    assert R("div.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["s32"])[0].tolist() == [3, -3, -3, 3, -2 ** 31]
    assert R("rem.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["s32"])[0].tolist() == [1, -1, 1, -1, 0]
    assert R("div.u32 %d0, %a0, %a1;", [("u32", [7, 5]), ("u32", [2, 0])], ["u32"])[0].tolist() == [3, 0xFFFFFFFF]
    assert R("div.s64 %d0, %a0, %a1;", [("s64", [-2 ** 63, -9, 2 ** 62 + 1]), ("s64", [-1, 4, 3])], ["s64"])[0] \
        .tolist() == [-2 ** 63, -2, (2 ** 62 + 1) // 3]
    assert R("rem.u64 %d0, %a0, %a1;", [("u64", [2 ** 64 - 1]), ("u64", [10])], ["u64"])[0].tolist() == \
        [(2 ** 64 - 1) % 10]


def test_min_max_abs_neg():
    assert R("min.u32 %d0, %a0, %a1;", [("u32", [0xFFFFFFFF]), ("u32", [1])], ["u32"])[0].tolist() == [1]
    assert R("min.s32 %d0, %a0, %a1;", [("s32", [-1]), ("s32", [1])], ["s32"])[0].tolist() == [-1]
    assert R("max.s64 %d0, %a0, %a1;", [("s64", [-2 ** 63]), ("s64", [3])], ["s64"])[0].tolist() == [3]
    assert R("max.relu.s32 %d0, %a0, %a1;", [("s32", [-7, 4]), ("s32", [-3, 2])], ["s32"])[0].tolist() == [0, 4]
    assert R("abs.s32 %d0, %a0;", [("s32", [-5, -2 ** 31])], ["s32"])[0].tolist() == [5, -2 ** 31]
    assert R("neg.s32 %d0, %a0;", [("s32", [5, -2 ** 31])], ["s32"])[0].tolist() == [-5, -2 ** 31]
    assert R("max.u16x2 %d0, %a0, %a1;", [("u32", [0x0001FFFF]), ("u32", [0x00020001])], ["u32"])[0].tolist() == \
        [0x0002FFFF]


def test_logic_and_shifts():
    a = [0xF0F0F0F0]
    b = [0xFF00FF00]
    assert R("and.b32 %d0, %a0, %a1;", [("b32", a), ("b32", b)], ["b32"])[0].tolist() == [0xF000F000]
    assert R("or.b32 %d0, %a0, %a1;", [("b32", a), ("b32", b)], ["b32"])[0].tolist() == [0xFFF0FFF0]
    assert R("xor.b32 %d0, %a0, %a1;", [("b32", a), ("b32", b)], ["b32"])[0].tolist() == [0x0FF00FF0]
    assert R("not.b32 %d0, %a0;", [("b32", a)], ["b32"])[0].tolist() == [0x0F0F0F0F]
    assert R("cnot.b32 %d0, %a0;", [("b32", [0, 7])], ["b32"])[0].tolist() == [1, 0]
    sh = [0, 1, 31, 32, 33, 200]
    x = [0x80000001] * len(sh)
    assert R("shl.b32 %d0, %a0, %a1;", [("b32", x), ("u32", sh)], ["b32"])[0].tolist() == \
        [0x80000001, 2, 0x80000000, 0, 0, 0]
    assert R("shr.u32 %d0, %a0, %a1;", [("u32", x), ("u32", sh)], ["u32"])[0].tolist() == \
        [0x80000001, 0x40000000, 1, 0, 0, 0]
    assert R("shr.s32 %d0, %a0, %a1;", [("s32", x), ("u32", sh)], ["s32"])[0].tolist() == \
        [-0x7FFFFFFF, -0x40000000, -1, -1, -1, -1]
    assert R("shr.b32 %d0, %a0, 4;", [("b32", [0x80000000])], ["b32"])[0].tolist() == [0x08000000]
    assert R("shl.b64 %d0, %a0, %a1;", [("b64", [1, 1]), ("u32", [63, 64])], ["b64"])[0].tolist() == [2 ** 63, 0]
    assert R("shr.s64 %d0, %a0, 70;", [("s64", [-16])], ["s64"])[0].tolist() == [-1]


def test_bit_manipulation():
    assert R("popc.b32 %d0, %a0;", [("b32", [0, 0xFFFFFFFF, 0x80000001])], ["u32"])[0].tolist() == [0, 32, 2]
    assert R("popc.b64 %d0, %a0;", [("b64", [2 ** 64 - 1])], ["u32"])[0].tolist() == [64]
    assert R("clz.b32 %d0, %a0;", [("b32", [0, 1, 0x80000000, 0x00010000])], ["u32"])[0].tolist() == [32, 31, 0, 15]
    assert R("clz.b64 %d0, %a0;", [("b64", [1, 2 ** 64 - 1, 0])], ["u32"])[0].tolist() == [63, 0, 64]
    assert R("brev.b32 %d0, %a0;", [("b32", [1, 0x12345678])], ["b32"])[0].tolist() == [0x80000000, 0x1E6A2C48]
    assert R("bfind.u32 %d0, %a0;", [("u32", [0, 1, 0x10, 0xFFFFFFFF])], ["u32"])[0].tolist() == \
        [0xFFFFFFFF, 0, 4, 31]
    assert R("bfind.s32 %d0, %a0;", [("s32", [-1, -2, 5])], ["u32"])[0].tolist() == [0xFFFFFFFF, 0, 2]
    assert R("bfind.shiftamt.u32 %d0, %a0;", [("u32", [0x10])], ["u32"])[0].tolist() == [27]


def test_bfe_bfi_prmt_shf_lop3():
    x = [0x12345678] * 5
    pos = [4, 28, 0, 40, 30]
    ln = [8, 8, 0, 4, 8]
    assert R("bfe.u32 %d0, %a0, %a1, %a2;", [("u32", x), ("u32", pos), ("u32", ln)], ["u32"])[0].tolist() == \
        [0x67, 0x1, 0, 0, 0]
    # signed: field 0xF at [4, 8) sign-extends; field past bit 31 replicates bit 31 (0 here)
    assert R("bfe.s32 %d0, %a0, %a1, %a2;", [("s32", [0xF0, 0x80000000, 0x70]), ("u32", [4, 28, 4]),
                                                  ("u32", [4, 8, 4])], ["s32"])[0].tolist() == [-1, -8, 7]
    assert R("bfi.b32 %d0, %a0, %a1, %a2, %a3;", [("b32", [0xF, 0xFF]), ("b32", [0xFFFF0000, 0]),
                                                      ("u32", [4, 28]), ("u32", [8, 8])], ["b32"])[0].tolist() == \
        [0xFFFF00F0, 0xF0000000]
    assert R("prmt.b32 %d0, %a0, %a1, %a2;", [("b32", [0x33221100, 0x00000080]), ("b32", [0x77665544, 0]),
                                                  ("b32", [0x5410, 0x8888])], ["b32"])[0].tolist() == \
        [0x55441100, 0xFFFFFFFF]
    assert R("shf.l.wrap.b32 %d0, %a0, %a1, %a2;", [("b32", [0x80000000]), ("b32", [1]), ("u32", [33])],
             ["b32"])[0].tolist() == [3]
    assert R("shf.r.clamp.b32 %d0, %a0, %a1, %a2;", [("b32", [0x1]), ("b32", [0xABCD]), ("u32", [40])],
             ["b32"])[0].tolist() == [0xABCD]
    assert R("shf.r.wrap.b32 %d0, %a0, %a1, %a2;", [("b32", [0x0]), ("b32", [0x1]), ("u32", [1])],
             ["b32"])[0].tolist() == [0x80000000]
    a, b, c = 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA
    assert R("lop3.b32 %d0, %a0, %a1, %a2, 0x96;", [("b32", [a]), ("b32", [b]), ("b32", [c])], ["b32"])[0] \
        .tolist() == [a ^ b ^ c]
    assert R("lop3.b32 %d0, %a0, %a1, %a2, 0xE8;", [("b32", [a]), ("b32", [b]), ("b32", [c])], ["b32"])[0] \
        .tolist() == [(a & b) | (a & c) | (b & c)]


# ============================================================================ comparisons / selection


def test_setp_integer_and_bool_combine():
    a = [1, -1, 5]
    b = [2, 1, 5]
    assert R("setp.lt.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["pred"])[0].tolist() == [True, True, False]
    assert R("setp.lo.u32 %d0, %a0, %a1;", [("u32", a), ("u32", b)], ["pred"])[0].tolist() == [True, False, False]
    out = R("setp.ge.and.s32 %d0|%d1, %a0, %a1, %a2;", [("s32", a), ("s32", b), ("pred", [1, 1, 0])],
            ["pred", "pred"])
    assert out[0].tolist() == [False, False, False] and out[1].tolist() == [True, True, False]
    out = R("setp.eq.or.b32 %d0, %a0, %a1, !%a2;", [("b32", [1, 2]), ("b32", [1, 3]), ("pred", [1, 0])],
            ["pred"])
    assert out[0].tolist() == [True, True]


def test_setp_float_ordered_unordered_nan():
    nan = float("nan")
    a = [1.0, nan, 2.0, -0.0]
    b = [2.0, 1.0, 2.0, 0.0]
    exp = {"lt": [1, 0, 0, 0], "ltu": [1, 1, 0, 0], "ne": [1, 0, 0, 0], "neu": [1, 1, 0, 0],
           "eq": [0, 0, 1, 1], "equ": [0, 1, 1, 1], "ge": [0, 0, 1, 1], "geu": [0, 1, 1, 1],
           "num": [1, 0, 1, 1], "nan": [0, 1, 0, 0], "gtu": [0, 1, 0, 0], "le": [1, 0, 1, 1]}
    for cmp, want in exp.items():
        got = R(f"setp.{cmp}.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["pred"])[0]
        assert got.tolist() == [bool(x) for x in want], cmp
    got = R("setp.lt.ftz.f32 %d0, %a0, %a1;", [("f32", [-1e-40]), ("f32", [0.0])], ["pred"])[0]
    assert got.tolist() == [False]          # the subnormal flushes to -0 == 0


def test_selp_slct_set():
    assert R("selp.b32 %d0, %a0, %a1, %a2;", [("b32", [1, 1]), ("b32", [2, 2]), ("pred", [1, 0])], ["b32"])[0] \
        .tolist() == [1, 2]
    assert R("selp.f64 %d0, 0d3FF0000000000000, 0dC000000000000000, %a0;", [("pred", [1, 0])], ["f64"])[0] \
        .tolist() == [1.0, -2.0]
    assert R("slct.s32.s32 %d0, %a0, %a1, %a2;", [("s32", [1, 1]), ("s32", [2, 2]), ("s32", [0, -1])], ["s32"])[0] \
        .tolist() == [1, 2]
    assert R("set.lt.u32.s32 %d0, %a0, %a1;", [("s32", [1, 3]), ("s32", [2, 2])], ["u32"])[0].tolist() == \
        [0xFFFFFFFF, 0]
    assert R("set.gt.f32.f32 %d0, %a0, %a1;", [("f32", [3.0]), ("f32", [2.0])], ["f32"])[0].tolist() == [1.0]


# ============================================================================ floating point


def test_f32_add_rounding_modes_and_ties():
    one = 1.0
    ulp = 2.0 ** -23
    a = [one, one, one, -one]
    b = [ulp / 2, 1.5 * ulp, 0.75 * ulp, -0.25 * ulp]
    rn = R("add.rn.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert rn.tolist() == [1.0, 1.0 + 2 * ulp, 1.0 + ulp, -1.0]        # ties to even
    rz = R("add.rz.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert rz.tolist() == [1.0, 1.0 + ulp, 1.0, -1.0]
    rm = R("add.rm.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert rm.tolist() == [1.0, 1.0 + ulp, 1.0, -1.0 - ulp]
    rp = R("add.rp.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert rp.tolist() == [1.0 + ulp, 1.0 + 2 * ulp, 1.0 + ulp, -1.0]
    # a tiny addend far below the rounding point still decides directed rounding (sticky bit)
    rp = R("add.rp.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [2.0 ** -100])], ["f32"])[0]
    assert rp.tolist() == [1.0 + ulp]


def test_f32_signed_zero_nan_inf():
    inf = float("inf")
    nan = float("nan")
    out = R("sub.rn.f32 %d0, %a0, %a1;", [("f32", [1.0, -0.0, inf, 1.0]), ("f32", [1.0, 0.0, inf, nan])], ["f32"])[0]
    assert f32bits(out).tolist() == [0, 0x80000000, NAN32, NAN32]
    out = R("sub.rm.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [1.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [0x80000000]                          # x - x = -0 toward -inf
    # NaN inputs (any payload, any sign) give the canonical NaN
    out = R("add.f32 %d0, %a0, %a1;", [("u32", [0xFFC00001]), ("f32", [1.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [NAN32]
    out = R("mul.rn.f32 %d0, %a0, %a1;", [("f32", [3e38, 0.0]), ("f32", [10.0, inf])], ["f32"])[0]
    assert f32bits(out).tolist() == [bits32(inf), NAN32]
    out = R("mul.rz.f32 %d0, %a0, %a1;", [("f32", [3e38]), ("f32", [10.0])], ["f32"])[0]
    assert out.tolist() == [np.finfo(np.float32).max]


def test_f32_ftz_and_sat():
    tiny = 1e-40                                                 # subnormal f32
    out = R("add.ftz.f32 %d0, %a0, %a1;", [("f32", [tiny, -tiny]), ("f32", [0.0, 0.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [0, 0]                        # -sub + 0 -> -0 + 0 = +0
    out = R("add.f32 %d0, %a0, %a1;", [("f32", [tiny]), ("f32", [0.0])], ["f32"])[0]
    assert out.tolist() == [np.float32(tiny)]
    out = R("mul.rn.ftz.f32 %d0, %a0, %a1;", [("f32", [2.0 ** -70]), ("f32", [-2.0 ** -70])], ["f32"])[0]
    assert f32bits(out).tolist() == [0x80000000]                  # subnormal result flushed, sign kept
    out = R("add.sat.f32 %d0, %a0, %a1;", [("f32", [0.75, -3.0, float("nan")]), ("f32", [0.5, 1.0, 1.0])],
            ["f32"])[0]
    assert out.tolist() == [1.0, 0.0, 0.0]


def test_fma_single_rounding():
    # a*b = 1 + 2^-11 + 2^-24 (an f32 midpoint) and c nudges it up by 2^-60: double rounding
    # through float64 would tie to even (down); the fused result rounds up.
    a = 1 + 2.0 ** -12
    out = R("fma.rn.f32 %d0, %a0, %a1, %a2;", [("f32", [a, a, 2.0]), ("f32", [a, a, 3.0]),
                                                ("f32", [2.0 ** -60, -2.0 ** -60, 1.0])], ["f32"])[0]
    assert out.tolist() == [1 + 2.0 ** -11 + 2.0 ** -23, 1 + 2.0 ** -11, 7.0]
    out = R("fma.rz.f32 %d0, %a0, %a1, %a2;", [("f32", [a]), ("f32", [a]), ("f32", [2.0 ** -60])], ["f32"])[0]
    assert out.tolist() == [1 + 2.0 ** -11]
    # f64 fma is exact before its one rounding: (1+2^-30)^2 - 1 keeps the 2^-60 term
    x = 1 + 2.0 ** -30
    out = R("fma.rn.f64 %d0, %a0, %a1, %a2;", [("f64", [x]), ("f64", [x]), ("f64", [-1.0])], ["f64"])[0]
    assert out.tolist() == [2.0 ** -29 + 2.0 ** -60]
    out = R("fma.rm.f64 %d0, %a0, %a1, %a2;", [("f64", [x]), ("f64", [-x]), ("f64", [1.0])], ["f64"])[0]
    assert out.tolist() == [-(2.0 ** -29 + 2.0 ** -60)]


def test_div_rcp_sqrt():
    out = R("div.rn.f32 %d0, %a0, %a1;", [("f32", [1.0, 1.0, 0.0, -1.0]), ("f32", [3.0, 0.0, 0.0, 0.0])],
            ["f32"])[0]
    assert f32bits(out).tolist() == [bits32(np.float32(1) / np.float32(3)), bits32(float("inf")), NAN32,
                                     bits32(float("-inf"))]
    third_rn = np.float32(1) / np.float32(3)              # 0x3EAAAAAB (rounded up)
    out = R("div.rz.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [3.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [int(f32bits(third_rn)) - 1]
    out = R("div.rp.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [3.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [int(f32bits(third_rn))]
    out = R("div.rn.f64 %d0, %a0, %a1;", [("f64", [1.0]), ("f64", [3.0])], ["f64"])[0]
    assert out.tolist() == [1.0 / 3.0]
    out = R("rcp.rn.f32 %d0, %a0;", [("f32", [4.0, -0.0])], ["f32"])[0]
    assert out.tolist() == [0.25, float("-inf")]
    out = R("sqrt.rn.f32 %d0, %a0;", [("f32", [2.0, -1.0, -0.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [0x3FB504F3, NAN32, 0x80000000]       # sqrt(2) = 0x3FB504F3.33.. rounds down
    out = R("sqrt.rz.f32 %d0, %a0;", [("f32", [2.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [0x3FB504F3]                            # sqrt(2) = 0x3FB504F3.33..
    out = R("sqrt.rp.f32 %d0, %a0;", [("f32", [2.0])], ["f32"])[0]
    assert f32bits(out).tolist() == [0x3FB504F4]


def test_approximate_math():
    out = R("ex2.approx.f32 %d0, %a0;", [("f32", [1.0, 10.0, float("-inf"), -0.5])], ["f32"])[0]
    assert out.tolist() == [2.0, 1024.0, 0.0, np.float32(2 ** -0.5)]
    out = R("ex2.approx.ftz.f32 %d0, %a0;", [("f32", [-130.0])], ["f32"])[0]
    assert out.tolist() == [0.0]                                            # subnormal result flushed
    out = R("lg2.approx.f32 %d0, %a0;", [("f32", [8.0, 0.0, -1.0])], ["f32"])[0]
    assert out[0] == 3.0 and out[1] == float("-inf") and f32bits(out[2:]).tolist() == [NAN32]
    out = R("rsqrt.approx.f32 %d0, %a0;", [("f32", [4.0, 0.0])], ["f32"])[0]
    assert out.tolist() == [0.5, float("inf")]
    out = R("sin.approx.f32 %d0, %a0;\ncos.approx.f32 %d1, %a0;", [("f32", [0.0, math.pi / 2])], ["f32", "f32"])
    assert out[0][0] == 0.0 and abs(out[0][1] - 1.0) < 1e-6 and out[1][0] == 1.0
    out = R("tanh.approx.f32 %d0, %a0;", [("f32", [0.5])], ["f32"])[0]
    assert abs(out[0] - math.tanh(0.5)) < 1e-6
    out = R("div.approx.f32 %d0, %a0, %a1;", [("f32", [1.0, 1.0]), ("f32", [4.0, 2.0 ** 127])], ["f32"])[0]
    assert out.tolist() == [0.25, 0.0]                                      # |b| > 2^126 gives zero
    out = R("div.full.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [3.0])], ["f32"])[0]
    assert abs(float(out[0]) - 1 / 3) < 1e-7
    out = R("rcp.approx.ftz.f64 %d0, %a0;", [("f64", [4.0])], ["f64"])[0]
    assert out.tolist() == [0.25]


def test_min_max_nan_and_signed_zero():
    nan = float("nan")
    a = [nan, 1.0, nan, -0.0, 0.0, 2.0]
    b = [1.0, nan, nan, 0.0, -0.0, 3.0]
    mx = R("max.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert f32bits(mx).tolist() == [bits32(1.0), bits32(1.0), NAN32, 0, 0, bits32(3.0)]
    mn = R("min.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert f32bits(mn).tolist() == [bits32(1.0), bits32(1.0), NAN32, 0x80000000, 0x80000000, bits32(2.0)]
    mx = R("max.NaN.f32 %d0, %a0, %a1;", [("f32", a), ("f32", b)], ["f32"])[0]
    assert f32bits(mx).tolist()[:3] == [NAN32] * 3
    h = R("max.f16 %d0, %a0, %a1;", [("f16", [nan, 1.5]), ("f16", [2.0, -1.0])], ["f16"])[0]
    assert h.tolist() == [2.0, 1.5]
    x = R("min.xorsign.abs.f32 %d0, %a0, %a1;", [("f32", [-3.0]), ("f32", [2.0])], ["f32"])[0]
    assert x.tolist() == [-2.0]
    m3 = R("max.f32 %d0, %a0, %a1, %a2;", [("f32", [1.0]), ("f32", [5.0]), ("f32", [3.0])], ["f32"])[0]
    assert m3.tolist() == [5.0]


def test_abs_neg_copysign_testp():
    out = R("abs.f32 %d0, %a0;\nneg.f32 %d1, %a0;", [("f32", [-2.0, 0.0])], ["f32", "f32"])
    assert out[0].tolist() == [2.0, 0.0] and f32bits(out[1]).tolist() == [bits32(2.0), 0x80000000]
    out = R("abs.ftz.f32 %d0, %a0;", [("f32", [-1e-40])], ["f32"])[0]
    assert f32bits(out).tolist() == [0]
    out = R("copysign.f32 %d0, %a0, %a1;", [("f32", [-1.0, 1.0]), ("f32", [3.0, -3.0])], ["f32"])[0]
    assert out.tolist() == [-3.0, 3.0]
    vals = [1.0, float("inf"), float("nan"), 1e-40, 0.0]
    for op_, want in (("finite", [1, 0, 0, 1, 1]), ("infinite", [0, 1, 0, 0, 0]), ("notanumber", [0, 0, 1, 0, 0]),
                      ("normal", [1, 0, 0, 0, 1]), ("subnormal", [0, 0, 0, 1, 0])):
        got = R(f"testp.{op_}.f32 %d0, %a0;", [("f32", vals)], ["pred"])[0]
        assert got.tolist() == [bool(w) for w in want], op_


def test_f16_bf16_arithmetic():
    out = R("add.rn.f16 %d0, %a0, %a1;", [("f16", [1.0, 1.0, 65504.0]), ("f16", [2.0 ** -11, 3 * 2.0 ** -11, 16.0])],
            ["f16"])[0]
    assert out.tolist() == [1.0, 1.0 + 2.0 ** -9, float("inf")]         # tie-to-even, overflow
    out = R("add.rz.f16 %d0, %a0, %a1;", [("f16", [65504.0]), ("f16", [16.0])], ["f16"])[0]
    assert out.tolist() == [65504.0]
    out = R("mul.rn.f16 %d0, %a0, %a1;", [("f16", [0.0]), ("f16", [float("inf")])], ["f16"])[0]
    assert out.view(np.uint16).tolist() == [NAN16]
    a, b = 1 + 2.0 ** -5, 1 + 2.0 ** -6
    out = R("fma.rn.f16 %d0, %a0, %a1, %a2;", [("f16", [a, a]), ("f16", [b, b]), ("f16", [2.0 ** -24, 0.0])],
            ["f16"])[0]
    # a*b = 1 + 2^-5 + 2^-6 + 2^-11 is an f16 midpoint: + 2^-24 rounds it up in a fused operation,
    # without the addend it ties to even (down)
    assert out.tolist() == [1 + 2.0 ** -5 + 2.0 ** -6 + 2.0 ** -10, 1 + 2.0 ** -5 + 2.0 ** -6]
    one = 0x3F80                                               # bf16 1.0
    out = R("add.rn.bf16 %d0, %a0, %a1;", [("u16", [one, one]), ("u16", [0x3B80, 0x3C40])], ["u16"])[0]
    # 1 + 2^-8 ties to even (1.0); 1 + 3*2^-8 ties to even (1 + 2^-6)
    assert out.tolist() == [0x3F80, 0x3F82]
    out = R("fma.rn.bf16 %d0, %a0, %a1, %a2;", [("u16", [0x4000]), ("u16", [0x4040]), ("u16", [0x3F80])],
            ["u16"])[0]
    assert out.tolist() == [0x40E0]                            # 2*3+1 = 7
    # f16x2: both halves, lower half first
    x = np.array([1.0, 2.0], np.float16).view(np.uint32)
    y = np.array([0.5, -4.0], np.float16).view(np.uint32)
    out = R("add.rn.f16x2 %d0, %a0, %a1;", [("u32", x), ("u32", y)], ["u32"])[0]
    assert out.view(np.float16).tolist() == [1.5, -2.0]
    out = R("add.rn.f32.f16 %d0, %a0, %a1;", [("f16", [0.1]), ("f32", [1.0])], ["f32"])[0]
    assert out.tolist() == [np.float32(np.float16(0.1)) + np.float32(1.0)]
    out = R("fma.rn.f32.f16 %d0, %a0, %a1, %a2;", [("f16", [3.0]), ("f16", [0.5]), ("f32", [1.0])], ["f32"])[0]
    assert out.tolist() == [2.5]
    out = R("ex2.approx.f16 %d0, %a0;", [("f16", [3.0])], ["f16"])[0]
    assert out.tolist() == [8.0]


def test_f32x2_packed():
    x = np.array([1.0, 2.0], np.float32).view(np.uint64)
    y = np.array([0.5, 0.25], np.float32).view(np.uint64)
    out = R("add.rn.f32x2 %d0, %a0, %a1;", [("u64", x), ("u64", y)], ["u64"])[0]
    assert out.view(np.float32).tolist() == [1.5, 2.25]


# ============================================================================ conversions


def test_cvt_float_to_int_rounding_and_saturation():
    v = [2.5, 3.5, -2.5, -2.7, float("nan"), 1e10, -1e10]
    exp = {"rni": [2, 4, -2, -3, 0, 2 ** 31 - 1, -2 ** 31], "rzi": [2, 3, -2, -2, 0, 2 ** 31 - 1, -2 ** 31],
           "rmi": [2, 3, -3, -3, 0, 2 ** 31 - 1, -2 ** 31], "rpi": [3, 4, -2, -2, 0, 2 ** 31 - 1, -2 ** 31]}
    for m, want in exp.items():
        assert R(f"cvt.{m}.s32.f32 %d0, %a0;", [("f32", v)], ["s32"])[0].tolist() == want, m
    assert R("cvt.rzi.u32.f32 %d0, %a0;", [("f32", [-1.0, 5e9])], ["u32"])[0].tolist() == [0, 0xFFFFFFFF]
    assert R("cvt.rzi.s64.f64 %d0, %a0;", [("f64", [1e19, -1e19, -3.9])], ["s64"])[0].tolist() == \
        [2 ** 63 - 1, -2 ** 63, -3]
    assert R("cvt.rni.u8.f32 %d0, %a0;", [("f32", [300.0, -4.0, 7.5])], ["u8"])[0].tolist() == [255, 0, 8]


def test_cvt_int_to_float_rounding():
    v = [16777217, -16777217, 16777219]
    assert R("cvt.rn.f32.s32 %d0, %a0;", [("s32", v)], ["f32"])[0].tolist() == [16777216.0, -16777216.0, 16777220.0]
    assert R("cvt.rz.f32.s32 %d0, %a0;", [("s32", v)], ["f32"])[0].tolist() == [16777216.0, -16777216.0, 16777218.0]
    assert R("cvt.rp.f32.s32 %d0, %a0;", [("s32", v)], ["f32"])[0].tolist() == [16777218.0, -16777216.0, 16777220.0]
    assert R("cvt.rm.f32.s32 %d0, %a0;", [("s32", v)], ["f32"])[0].tolist() == [16777216.0, -16777218.0, 16777218.0]
    assert R("cvt.rn.f32.u64 %d0, %a0;", [("u64", [2 ** 64 - 1])], ["f32"])[0].tolist() == [2.0 ** 64]
    assert R("cvt.rn.f64.s64 %d0, %a0;", [("s64", [2 ** 53 + 1, 2 ** 53 + 3])], ["f64"])[0].tolist() == \
        [2.0 ** 53, 2.0 ** 53 + 4]
    assert R("cvt.rz.f64.u64 %d0, %a0;", [("u64", [2 ** 64 - 1])], ["f64"])[0].tolist() == [2.0 ** 64 - 2048]
    assert R("cvt.rn.f16.s32 %d0, %a0;", [("s32", [2049, 70000])], ["f16"])[0].tolist() == [2048.0, float("inf")]
    assert R("cvt.rn.bf16.s32 %d0, %a0;", [("s32", [257])], ["u16"])[0].tolist() == [0x4380]   # 256


def test_cvt_int_to_int():
    assert R("cvt.u32.u64 %d0, %a0;", [("u64", [0x1_2345_6789])], ["u32"])[0].tolist() == [0x23456789]
    assert R("cvt.s64.s32 %d0, %a0;", [("s32", [-5])], ["s64"])[0].tolist() == [-5]
    assert R("cvt.u64.u32 %d0, %a0;", [("u32", [0xFFFFFFFF])], ["u64"])[0].tolist() == [0xFFFFFFFF]
    assert R("cvt.s32.s16 %d0, %a0;", [("s16", [-2])], ["s32"])[0].tolist() == [-2]
    assert R("cvt.s32.s8 %d0, %a0;", [("s32", [0x1FF])], ["s32"])[0].tolist() == [-1]      # low byte 0xFF
    assert R("cvt.sat.s8.s32 %d0, %a0;", [("s32", [300, -300, 5])], ["s16"])[0].tolist() == [127, -128, 5]
    assert R("cvt.sat.u16.s32 %d0, %a0;", [("s32", [-1, 70000])], ["u16"])[0].tolist() == [0, 65535]


def test_cvt_float_to_float():
    out = R("cvt.rn.f16.f32 %d0, %a0;", [("f32", [65519.0, 65520.0, 2.0 ** -25, 3 * 2.0 ** -26, float("nan")])],
            ["f16"])[0]
    assert out.view(np.uint16).tolist() == [0x7BFF, 0x7C00, 0x0000, 0x0001, NAN16]
    out = R("cvt.rz.f16.f32 %d0, %a0;", [("f32", [65520.0, 1e6])], ["f16"])[0]
    assert out.tolist() == [65504.0, 65504.0]
    out = R("cvt.rm.f16.f32 %d0, %a0;", [("f32", [-1e6])], ["f16"])[0]
    assert out.tolist() == [float("-inf")]
    out = R("cvt.rn.bf16.f32 %d0, %a0;", [("u32", [0x3F808000, 0x3F818000, 0x7FC00001, 0x3F80FFFF])], ["u16"])[0]
    assert out.tolist() == [0x3F80, 0x3F82, NAN16, 0x3F81]
    out = R("cvt.rz.bf16.f32 %d0, %a0;", [("u32", [0x3F80FFFF])], ["u16"])[0]
    assert out.tolist() == [0x3F80]
    out = R("cvt.f32.bf16 %d0, %a0;", [("u16", [0xC0A0])], ["f32"])[0]
    assert out.tolist() == [-5.0]
    out = R("cvt.f32.f16 %d0, %a0;", [("u16", [0x0001, 0xFE01])], ["f32"])[0]
    assert f32bits(out).tolist() == [bits32(2.0 ** -24), NAN32]
    out = R("cvt.rn.f32.f64 %d0, %a0;\ncvt.rz.f32.f64 %d1, %a0;", [("f64", [1e39, 1 + 2.0 ** -24])],
            ["f32", "f32"])
    assert out[0].tolist() == [float("inf"), 1.0] and out[1].tolist() == [np.finfo(np.float32).max, 1.0]
    out = R("cvt.rn.bf16.f64 %d0, %a0;", [("f64", [1 + 2.0 ** -8 + 2.0 ** -40])], ["u16"])[0]
    assert out.tolist() == [0x3F81]           # no double rounding through f32
    out = R("cvt.f64.f32 %d0, %a0;", [("f32", [0.1])], ["f64"])[0]
    assert out.tolist() == [float(np.float32(0.1))]
    out = R("cvt.sat.f32.f32 %d0, %a0;\ncvt.rni.f32.f32 %d1, %a0;", [("f32", [1.5, -0.5, 2.5])], ["f32", "f32"])
    assert out[0].tolist() == [1.0, 0.0, 1.0] and out[1].tolist() == [2.0, -0.0, 2.0]
    out = R("cvt.rn.relu.f16.f32 %d0, %a0;", [("f32", [-3.0, 3.0])], ["f16"])[0]
    assert out.tolist() == [0.0, 3.0]
    out = R("cvt.ftz.f32.f32 %d0, %a0;", [("f32", [1e-40])], ["f32"])[0]
    assert out.tolist() == [0.0]


def test_cvt_tf32_and_packed_formats():
    one_half_ulp = bits32(1.0) | 0x1000                       # 1 + 2^-11: tf32 tie
    out = R("cvt.rna.tf32.f32 %d0, %a0;", [("u32", [one_half_ulp, bits32(1.0) | 0x0FFF])], ["u32"])[0]
    assert out.tolist() == [bits32(1.0) | 0x2000, bits32(1.0)]
    out = R("cvt.rn.tf32.f32 %d0, %a0;", [("u32", [one_half_ulp, bits32(1.0) | 0x3000])], ["u32"])[0]
    assert out.tolist() == [bits32(1.0), bits32(1.0) | 0x4000]
    out = R("cvt.rn.f16x2.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [-2.0])], ["u32"])[0]
    assert out.tolist() == [(0x3C00 << 16) | 0xC000]             # first source in the upper half
    out = R("cvt.rn.bf16x2.f32 %d0, %a0, %a1;", [("f32", [1.0]), ("f32", [-2.0])], ["u32"])[0]
    assert out.tolist() == [(0x3F80 << 16) | 0xC000]
    out = R("cvt.rn.satfinite.e4m3x2.f32 %d0, %a0, %a1;",
            [("f32", [1.0, 448.0, 1000.0, float("nan")]), ("f32", [-1.0, 0.0, -1000.0, 2.0 ** -9])], ["u16"])[0]
    assert out.tolist() == [0x38B8, 0x7E00, 0x7EFE, 0x7F01]
    out = R("cvt.rn.satfinite.e5m2x2.f32 %d0, %a0, %a1;", [("f32", [1.0, 1e6]), ("f32", [1.5, -2.0 ** -16])],
            ["u16"])[0]
    assert out.tolist() == [0x3C3E, 0x7B81]
    out = R("cvt.rn.f16x2.e4m3x2 %d0, %a0;", [("u16", [0x38B8])], ["u32"])[0]
    assert out.tolist() == [(0x3C00 << 16) | 0xBC00]


def test_mov_pack_unpack_and_immediates():
    out = R("mov.b32 {%d0, %d1}, %a0;", [("b32", [0xAAAABBBB])], ["b16", "b16"])
    assert out[0].tolist() == [0xBBBB] and out[1].tolist() == [0xAAAA]
    out = R("mov.b64 %d0, {%a0, %a1};", [("b32", [0x11111111]), ("b32", [0x22222222])], ["b64"])[0]
    assert out.tolist() == [0x2222222211111111]
    out = R("mov.b32 %d0, 0fBF800000;\nmov.b32 %d1, -8388608;", [("b32", [0])], ["f32", "b32"])
    assert out[0].tolist() == [-1.0] and out[1].tolist() == [0xFF800000]
    out = R("mov.f64 %d0, 0d4000000000000000;", [("b32", [0])], ["f64"])[0]
    assert out.tolist() == [2.0]


# ============================================================================ errors


def test_unknown_instruction_and_modifier_are_errors_naming_the_line():
    with pytest.raises(UnsupportedInstruction) as ei:
        R("frobnicate.b32 %d0, %a0;", [("b32", [1])], ["b32"])
    assert "frobnicate.b32" in str(ei.value) and "PTX line" in str(ei.value) and ei.value.line is not None
    with pytest.raises(UnsupportedInstruction) as ei:
        R("add.bogus.s32 %d0, %a0, %a0;", [("s32", [1])], ["s32"])
    assert ".bogus" in str(ei.value)
