#!/usr/bin/env python
"""Build the per-op golden corpus in ``tests/data/ops``.

For each bytecode version 13.1-13.4 and each op family, emit a small VALID
TileIR bytecode module with cuTile's real bytecode writer (``cuda.tile._bytecode``,
cuda-tile 1.7.0), run NVIDIA's real ``tileirdisasm`` on it and store its stdout.
Also emits ``invalid/``: modules that pass the byte-level reader but fail the
verifier, with the real tools' rc/stderr.

    python tests/opgen/build_ops.py [--out tests/data/ops] [--only FAMILY] [--no-tools]

Deterministic: rerunning produces identical bytes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cuda.tile._bytecode as bc  # noqa: E402
from cuda.tile._bytecode.attribute import Dictionary  # noqa: E402
from tilebc import (  # noqa: E402
    DYN, MEM, ORD, OVF, PAD, PRED, PTRATTR, RM, RMW, SCOPE, SGN, VIS, VERSIONS,
    OPNAMES, Module, RawHints, SameElements, i32attr, run_tool, sha256, tool_env,
)

FAMILIES = []  # (name, since, fn, note)
DUMP_G = {"debug_info", "control_flow"}  # families also dumped with `tileirdisasm -g`


def family(name, since="13.1", note=""):
    def deco(fn):
        FAMILIES.append((name, since, fn, note))
        return fn
    return deco


def lshints(arch="sm_100", latency=None, allow_tma=None):
    items = []
    if allow_tma is not None:
        items.append(("allow_tma", bc.Bool(allow_tma)))
    if latency is not None:
        items.append(("latency", i32attr(latency)))
    return bc.OptimizationHints([(arch, Dictionary(items))])


# ---------------------------------------------------------------------------
# integer arithmetic
# ---------------------------------------------------------------------------
@family("int_arith")
def fam_int_arith(m: Module):
    e = m.e

    def body(x32, x64):
        t4 = m.tile("i32", (4,))
        a = m.const("i32", (4,), [7, -3, 100, 0])
        b = m.const("i32", (4,), 3)
        for ovf in (OVF.NONE, OVF.NSW, OVF.NUW, OVF.NW):
            e.AddI(t4, a, b, ovf)
        e.SubI(t4, a, b, OVF.NSW)
        e.MulI(t4, a, b, OVF.NUW)
        e.ShLI(t4, a, b, OVF.NW)
        e.MulhiI(t4, a, b)
        e.DivI(t4, a, b, SGN.Signed, RM.ZERO)
        e.DivI(t4, a, b, SGN.Signed, RM.NEGATIVE_INF)
        e.DivI(t4, a, b, SGN.Signed, RM.POSITIVE_INF)
        e.DivI(t4, a, b, SGN.Unsigned, RM.ZERO)
        e.DivI(t4, a, b, SGN.Unsigned, RM.POSITIVE_INF)
        e.RemI(t4, a, b, SGN.Signed)
        e.RemI(t4, a, b, SGN.Unsigned)
        e.AndI(t4, a, b)
        e.OrI(t4, a, b)
        e.XOrI(t4, a, b)
        e.ShRI(t4, a, b, SGN.Signed)
        e.ShRI(t4, a, b, SGN.Unsigned)
        e.MaxI(t4, a, b, SGN.Signed)
        e.MaxI(t4, a, b, SGN.Unsigned)
        e.MinI(t4, a, b, SGN.Signed)
        e.MinI(t4, a, b, SGN.Unsigned)
        e.AbsI(t4, a)
        e.NegI(t4, a, OVF.NSW if m.ge("13.2") else OVF.NONE)
        e.NegI(t4, a, OVF.NONE)
        # scalar (rank-0) i64 and narrow types
        s64 = m.tile("i64")
        e.AddI(s64, x64, x64, OVF.NONE)
        e.MulI(s64, x64, x64, OVF.NW)
        e.DivI(s64, x64, x64, SGN.Unsigned, RM.ZERO)
        e.SubI(m.tile("i32"), x32, x32, OVF.NUW)
        t8 = m.tile("i8", (8,))
        c8 = m.const("i8", (8,), [1, 2, 3, 4, -5, -6, 127, -128])
        e.AddI(t8, c8, c8, OVF.NONE)
        e.MulhiI(t8, c8, c8)
        t16 = m.tile("i16", (2, 2))
        c16 = m.const("i16", (2, 2), [1, -2, 300, -400])
        e.MulI(t16, c16, c16, OVF.NONE)
        e.ShRI(t16, c16, c16, SGN.Signed)
        t1 = m.tile("i1", (4,))
        c1 = m.const("i1", (4,), [1, 0, 1, 0])
        e.AndI(t1, c1, c1)
        e.XOrI(t1, c1, c1)

    m.kernel("int_arith", [m.tile("i32"), m.tile("i64")], body=body)


# ---------------------------------------------------------------------------
# floating point arithmetic
# ---------------------------------------------------------------------------
@family("float_arith")
def fam_float_arith(m: Module):
    e = m.e

    def body(xf):
        t = m.tile("f32", (4,))
        a = m.const("f32", (4,), [1.5, -2.25, 0.0, 3.0])
        b = m.const("f32", (4,), 0.5)
        for rm in (RM.NEAREST_EVEN, RM.ZERO, RM.NEGATIVE_INF, RM.POSITIVE_INF):
            e.AddF(t, a, b, rm, False)
        e.AddF(t, a, b, RM.NEAREST_EVEN, True)
        e.SubF(t, a, b, RM.ZERO, False)
        e.SubF(t, a, b, RM.NEAREST_EVEN, True)
        e.MulF(t, a, b, RM.POSITIVE_INF, True)
        for rm in (RM.NEAREST_EVEN, RM.ZERO, RM.NEGATIVE_INF, RM.POSITIVE_INF, RM.APPROX, RM.FULL):
            e.DivF(t, a, b, rm, False)
        e.DivF(t, a, b, RM.APPROX, True)
        e.DivF(t, a, b, RM.FULL, True)
        e.DivF(t, a, b, RM.NEAREST_EVEN, True)
        e.Fma(t, a, b, a, RM.NEAREST_EVEN, False)
        e.Fma(t, a, b, a, RM.NEGATIVE_INF, True)
        e.RemF(t, a, b)
        e.MaxF(t, a, b, False, False)
        e.MaxF(t, a, b, True, False)
        e.MaxF(t, a, b, False, True)
        e.MaxF(t, a, b, True, True)
        e.MinF(t, a, b, False, False)
        e.MinF(t, a, b, True, True)
        e.NegF(t, a)
        e.AbsF(t, a)
        e.Ceil(t, a)
        e.Floor(t, a)
        # other widths (no ftz/approx: f32 only)
        for ty, vals in (("f16", [1.0, 2.0]), ("bf16", [0.5, -1.0]), ("f64", [1e100, -2.5])):
            tt = m.tile(ty, (2,))
            c = m.const(ty, (2,), vals)
            e.AddF(tt, c, c, RM.ZERO, False)
            e.MulF(tt, c, c, RM.NEAREST_EVEN, False)
            e.DivF(tt, c, c, RM.POSITIVE_INF, False)
            e.MaxF(tt, c, c, True, False)
            e.NegF(tt, c)
        s = m.tile("f32")
        e.AddF(s, xf, xf, RM.NEAREST_EVEN, False)
        e.AbsF(m.tile("f64", (2,)), m.const("f64", (2,), [-1.0, 2.0]))

    m.kernel("float_arith", [m.tile("f32")], body=body)


# ---------------------------------------------------------------------------
# math functions
# ---------------------------------------------------------------------------
@family("math")
def fam_math(m: Module):
    e = m.e

    def body(xf):
        t = m.tile("f32", (4,))
        a = m.const("f32", (4,), [0.25, 0.5, 1.0, 2.0])
        e.Cos(t, a)
        e.CosH(t, a)
        e.Sin(t, a)
        e.SinH(t, a)
        e.Tan(t, a)
        e.TanH(t, a, RM.FULL)
        if m.ge("13.2"):
            e.TanH(t, a, RM.APPROX)
        e.Exp(t, a, RM.FULL)
        if m.ge("13.3"):
            e.Exp(t, a, RM.APPROX)
        e.Exp2(t, a, False)
        e.Exp2(t, a, True)
        e.Log(t, a)
        e.Log2(t, a)
        e.FPowF(t, a, a)
        e.Rsqrt(t, a, False)
        e.Rsqrt(t, a, True)
        for rm in (RM.NEAREST_EVEN, RM.ZERO, RM.NEGATIVE_INF, RM.POSITIVE_INF, RM.APPROX):
            e.Sqrt(t, a, rm, False)
        e.Sqrt(t, a, RM.APPROX, True)
        e.Sqrt(t, a, RM.NEAREST_EVEN, True)
        for ty in ("f16", "bf16", "f64"):
            tt = m.tile(ty, (2,))
            c = m.const(ty, (2,), [0.5, 1.5])
            e.Exp(tt, c, RM.FULL)
            e.Log(tt, c)
            e.Sqrt(tt, c, RM.ZERO, False)
            e.TanH(tt, c, RM.FULL)
            e.FPowF(tt, c, c)
        e.Sin(m.tile("f32"), xf)
        if m.ge("13.2"):
            e.Atan2(t, a, a)
            e.Atan2(m.tile("f64", (2,)), m.const("f64", (2,), 1.0), m.const("f64", (2,), 2.0))

    m.kernel("math", [m.tile("f32")], body=body)


# ---------------------------------------------------------------------------
# comparisons and select
# ---------------------------------------------------------------------------
@family("compare_select")
def fam_compare_select(m: Module):
    e = m.e
    preds = (PRED.EQUAL, PRED.NOT_EQUAL, PRED.LESS_THAN, PRED.LESS_THAN_OR_EQUAL,
             PRED.GREATER_THAN, PRED.GREATER_THAN_OR_EQUAL)

    def body(x, y):
        b4 = m.tile("i1", (4,))
        a = m.const("f32", (4,), [1.0, float("nan"), -1.0, 2.0])
        b = m.const("f32", (4,), 1.0)
        for p in preds:
            e.CmpF(b4, a, b, p, ORD.ORDERED)
            e.CmpF(b4, a, b, p, ORD.UNORDERED)
        ia = m.const("i32", (4,), [1, -1, 5, 0])
        ib = m.const("i32", (4,), 0)
        c = None
        for p in preds:
            c = e.CmpI(b4, ia, ib, p, SGN.Signed)
            e.CmpI(b4, ia, ib, p, SGN.Unsigned)
        e.Select(m.tile("f32", (4,)), c, a, b)
        e.Select(m.tile("i32", (4,)), c, ia, ib)
        s = e.CmpI(m.tile("i1"), x, y, PRED.LESS_THAN, SGN.Signed)
        e.Select(m.tile("i32"), s, x, y)
        h = m.const("f16", (2, 2), [1.0, 2.0, 3.0, 4.0])
        e.CmpF(m.tile("i1", (2, 2)), h, h, PRED.EQUAL, ORD.ORDERED)
        l = m.const("i64", (2,), [1, 2])
        e.CmpI(m.tile("i1", (2,)), l, l, PRED.GREATER_THAN, SGN.Unsigned)

    m.kernel("compare_select", [m.tile("i32"), m.tile("i32")], body=body)


# ---------------------------------------------------------------------------
# conversions
# ---------------------------------------------------------------------------
@family("convert")
def fam_convert(m: Module):
    e = m.e

    def body(p32, i64):
        i8 = m.const("i8", (4,), [1, -1, 2, -2])
        e.ExtI(m.tile("i32", (4,)), i8, SGN.Signed)
        e.ExtI(m.tile("i64", (4,)), i8, SGN.Unsigned)
        i1 = m.const("i1", (4,), [1, 0, 0, 1])
        e.ExtI(m.tile("i32", (4,)), i1, SGN.Unsigned)
        i32 = m.const("i32", (4,), [70000, -1, 3, 4])
        for ovf in (OVF.NONE, OVF.NSW, OVF.NUW, OVF.NW):
            e.TruncI(m.tile("i16", (4,)), i32, ovf)
        e.TruncI(m.tile("i1", (4,)), i32, OVF.NONE)
        f32 = m.const("f32", (4,), [1.0, -2.0, 3.5, 1e9])
        e.Bitcast(m.tile("i32", (4,)), f32)
        e.Bitcast(m.tile("f32", (4,)), i32)
        f16 = m.const("f16", (4,), [1.0, 2.0, -3.0, 0.5])
        e.Bitcast(m.tile("bf16", (4,)), f16)
        e.Bitcast(m.tile("i16", (4,)), f16)
        e.FToF(m.tile("f16", (4,)), f32, RM.NEAREST_EVEN)
        e.FToF(m.tile("bf16", (4,)), f32, RM.NEAREST_EVEN)
        e.FToF(m.tile("f64", (4,)), f32, RM.NEAREST_EVEN)
        e.FToF(m.tile("tf32", (4,)), f32, RM.NEAREST_EVEN)
        e.FToF(m.tile("f8E4M3FN", (4,)), f32, RM.NEAREST_EVEN)
        e.FToF(m.tile("f8E5M2", (4,)), f16, RM.NEAREST_EVEN)
        e.FToF(m.tile("f32", (4,)), f16, RM.NEAREST_EVEN)
        e.FToI(m.tile("i32", (4,)), f32, SGN.Signed, RM.NEAREST_INT_TO_ZERO, False)
        e.FToI(m.tile("i64", (4,)), f32, SGN.Unsigned, RM.NEAREST_INT_TO_ZERO, False)
        e.FToI(m.tile("i8", (4,)), f16, SGN.Signed, RM.NEAREST_INT_TO_ZERO, False)
        e.IToF(m.tile("f32", (4,)), i32, SGN.Signed, RM.NEAREST_EVEN)
        e.IToF(m.tile("f16", (4,)), i8, SGN.Unsigned, RM.NEAREST_EVEN)
        e.IToF(m.tile("f64", (4,)), i32, SGN.Unsigned, RM.NEAREST_EVEN)
        # pointers
        pi = e.PtrToInt(m.tile("i64"), p32)
        e.IntToPtr(m.tptr("f16"), i64)
        e.IntToPtr(m.tptr("i8"), pi)
        e.PtrToPtr(m.tptr("i32"), p32)
        e.PtrToPtr(m.tptr("f64"), p32)

    m.kernel("convert", [m.tptr("f32"), m.tile("i64")], body=body)


# ---------------------------------------------------------------------------
# constants of every element type
# ---------------------------------------------------------------------------
@family("constants")
def fam_constants(m: Module):
    def body():
        m.const("i1", (), [1])
        m.const("i1", (), [0])
        m.const("i1", (4,), 1)
        m.const("i1", (4,), 0)
        m.const("i1", (16,), [1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1])
        m.const("i1", (2, 4), [0, 1, 1, 0, 1, 0, 0, 1])
        m.const("i8", (4,), [-128, -1, 0, 127])
        m.const("i8", (), [42])
        m.const("i16", (2,), [-32768, 32767])
        m.const("i32", (), [0])
        m.const("i32", (), [-7])
        m.const("i32", (2, 2), [1, 2, 3, 4])
        m.const("i32", (8, 8), 5)
        m.const("i64", (2,), [-(1 << 63), (1 << 63) - 1])
        m.const("i64", (), [1 << 40])
        m.const("f16", (4,), [1.0, -0.0, float("inf"), 65504.0])
        m.const("f16", (), [0.0])
        m.const("bf16", (2,), [1.0, -3.0e38])
        m.const("f32", (), [float("nan")])
        m.const("f32", (), [float("-inf")])
        m.const("f32", (4,), [0.1, -0.0, 1e-45, 3.4028234663852886e38])
        m.const("f32", (2, 2), [1.0, 2.0, 3.0, 4.0])
        m.const("f32", (16, 16), 0.0)
        m.const("tf32", (4,), [1.0, 1.5, -2.0, 0.0078125])
        m.const("tf32", (), [3.0])
        m.const("f64", (2,), [3.141592653589793, -1e-300])
        m.const("f64", (), [2.0])
        m.const("f8E4M3FN", (4,), [1.0, -2.0, 448.0, 0.015625])
        m.const("f8E4M3FN", (), [1.0])
        m.const("f8E5M2", (4,), [1.0, -2.0, 57344.0, float("inf")])
        m.const("f8E5M2", (), [0.5])
        if m.ge("13.2"):
            m.const("f8E8M0FNU", (4,), [1.0, 2.0, 0.5, 2.0 ** 127])
        if m.ge("13.3"):
            m.const("f4E2M1FN", (4,), [1.0, -6.0, 0.5, 0.0])
            m.const("f4E2M1FN", (2,), [3.0, -0.5])
        if m.ge("13.4"):
            m.const("fnv8E5M3FNU", (4,), [1.0, 2.0, 0.5, 3.0])

    m.kernel("constants", [], body=body)


# ---------------------------------------------------------------------------
# shape manipulation
# ---------------------------------------------------------------------------
@family("shape")
def fam_shape(m: Module):
    e = m.e

    def body(x, idx):
        r = e.Reshape(m.tile("f32", (1,)), x)
        e.Reshape(m.tile("f32"), r)
        r2 = e.Reshape(m.tile("f32", (1, 1)), x)
        e.Broadcast(m.tile("f32", (4, 8)), r2)
        row = m.const("f32", (1, 4), [1.0, 2.0, 3.0, 4.0])
        e.Broadcast(m.tile("f32", (8, 4)), row)
        a = m.const("i32", (2, 4), [1, 2, 3, 4, 5, 6, 7, 8])
        e.Cat(m.tile("i32", (4, 4)), a, a, 0)
        e.Cat(m.tile("i32", (2, 8)), a, a, 1)
        e.Permute(m.tile("i32", (4, 2)), a, [1, 0])
        b3 = m.const("f16", (2, 4, 8), 1.0)
        e.Permute(m.tile("f16", (8, 2, 4)), b3, [2, 0, 1])
        e.Reshape(m.tile("f16", (64,)), b3)
        e.Reshape(m.tile("i32", (8,)), a)
        src = m.const("f32", (8, 16), 2.0)
        e.Extract(m.tile("f32", (4, 4)), src, [idx, idx])
        e.Extract(m.tile("f32", (8, 16)), src, [idx, idx])
        e.Iota(m.tile("i32", (128,)))
        e.Iota(m.tile("i64", (16,)))
        e.Iota(m.tile("i8", (256,)))

    m.kernel("shape", [m.tile("f32"), m.tile("i32")], body=body)


# ---------------------------------------------------------------------------
# tensor views / partition views
# ---------------------------------------------------------------------------
@family("views")
def fam_views(m: Module):
    e = m.e
    tok = m.token
    ib = (lambda n, v=False: [v] * n)

    def body(base, n32, s32, n64, hbase):
        # fully static
        tv_s = m.tv("f32", (64, 32), (32, 1))
        tvs = e.MakeTensorView(tv_s, base, [], [])
        # dynamic shape and stride, i32 values
        tv_d = m.tv("f32", (DYN, DYN), (DYN, 1))
        tvd = e.MakeTensorView(tv_d, base, [n32, n32], [s32])
        # dynamic with i64 values, 1-d
        tv_1 = m.tv("f32", (DYN,), (1,))
        tv1 = e.MakeTensorView(tv_1, base, [n64], [])
        tv_3 = m.tv("f16", (4, DYN, 16), (DYN, 16, 1))
        tv3 = e.MakeTensorView(tv_3, hbase, [n32], [s32])
        e.GetTensorShape([m.tile("i32")] * 2, tvs)
        e.GetTensorShape([m.tile("i64")] * 2, tvd)
        e.GetTensorShape([m.tile("i32")] * 3, tv3)
        # partition views: every padding value, dim_map
        pvs = []
        for pad in (PAD.Missing, PAD.Zero, PAD.NegZero, PAD.Nan, PAD.PosInf, PAD.NegInf):
            pvt = m.pv((8, 16), tv_d, None, pad)
            pvs.append((pvt, e.MakePartitionView(pvt, tvd)))
        pvt_t = m.pv((16, 8), tv_s, [1, 0])
        pv_t = e.MakePartitionView(pvt_t, tvs)
        pvt_1 = m.pv((32,), tv_1)
        pv_1 = e.MakePartitionView(pvt_1, tv1)
        pvt_3 = m.pv((2, 4, 16), tv_3, [0, 1, 2], PAD.Zero)
        pv_3 = e.MakePartitionView(pvt_3, tv3)
        e.GetIndexSpaceShape([m.tile("i32")] * 2, pvs[0][1])
        e.GetIndexSpaceShape([m.tile("i64")], pv_1)
        e.GetIndexSpaceShape([m.tile("i32")] * 3, pv_3)
        c0 = m.const("i32", (), [0])
        c1 = m.const("i64", (), [1])
        t0 = e.MakeToken(tok)
        T = m.tile("f32", (8, 16))
        # loads: every ordering x scope combination that is legal for loads
        x, t1 = e.LoadViewTko(T, tok, pvs[0][1], [c0, c0], None, MEM.WEAK, None, None, ib(2))
        e.LoadViewTko(T, tok, pvs[1][1], [c0, c0], t0, MEM.WEAK, None, None, ib(2))
        e.LoadViewTko(T, tok, pvs[2][1], [c0, c0], t1, MEM.RELAXED, SCOPE.TL_BLK, None, ib(2))
        e.LoadViewTko(T, tok, pvs[3][1], [c0, c0], None, MEM.RELAXED, SCOPE.DEVICE, None, ib(2))
        e.LoadViewTko(T, tok, pvs[4][1], [c0, c0], None, MEM.RELAXED, SCOPE.SYS, None, ib(2))
        e.LoadViewTko(T, tok, pvs[5][1], [c0, c0], None, MEM.ACQUIRE, SCOPE.TL_BLK, None, ib(2))
        e.LoadViewTko(T, tok, pvs[5][1], [c0, c0], None, MEM.ACQUIRE, SCOPE.DEVICE, None, ib(2))
        e.LoadViewTko(T, tok, pvs[5][1], [c0, c0], t0, MEM.ACQUIRE, SCOPE.SYS, None, ib(2))
        # optimization hints on view loads
        e.LoadViewTko(T, tok, pvs[0][1], [c0, c0], None, MEM.WEAK, None,
                      lshints("sm_100", latency=3, allow_tma=False), ib(2))
        e.LoadViewTko(T, tok, pvs[0][1], [c0, c0], None, MEM.WEAK, None,
                      lshints("sm_90", allow_tma=True), ib(2))
        if m.ge("13.3"):
            e.LoadViewTko(T, tok, pvs[0][1], [c0, c0], None, MEM.WEAK, None,
                          lshints("default", latency=2, allow_tma=False), ib(2))
        e.LoadViewTko(m.tile("f32", (16, 8)), tok, pv_t, [c0, c0], None, MEM.WEAK, None, None, ib(2))
        y, _ = e.LoadViewTko(m.tile("f32", (32,)), tok, pv_1, [c1], None, MEM.WEAK, None, None, ib(1))
        z, _ = e.LoadViewTko(m.tile("f16", (2, 4, 16)), tok, pv_3, [c0, c0, c0], None,
                             MEM.WEAK, None, None, ib(3))
        # stores
        pw = pvs[0][1]
        e.StoreViewTko(tok, x, pw, [c0, c0], None, MEM.WEAK, None, None, ib(2))
        e.StoreViewTko(tok, x, pw, [c0, c0], t0, MEM.RELAXED, SCOPE.TL_BLK, None, ib(2))
        e.StoreViewTko(tok, x, pw, [c0, c0], None, MEM.RELAXED, SCOPE.DEVICE, None, ib(2))
        e.StoreViewTko(tok, x, pw, [c0, c0], None, MEM.RELEASE, SCOPE.SYS, None, ib(2))
        e.StoreViewTko(tok, x, pw, [c0, c0], t1, MEM.RELEASE, SCOPE.DEVICE,
                       lshints("sm_100", latency=5), ib(2))
        e.StoreViewTko(tok, y, pv_1, [c1], None, MEM.WEAK, None,
                       lshints("sm_120", latency=1, allow_tma=False), ib(1))
        e.StoreViewTko(tok, z, pv_3, [c0, c0, c0], None, MEM.WEAK, None, None, ib(3))

    m.kernel("views", [m.tptr("f32"), m.tile("i32"), m.tile("i32"), m.tile("i64"), m.tptr("f16")],
             body=body)


# ---------------------------------------------------------------------------
# pointer arithmetic / pointer loads and stores
# ---------------------------------------------------------------------------
@family("ptr_memory")
def fam_ptr_memory(m: Module):
    e = m.e
    tok = m.token

    def body(p, q):
        pt = m.tptr("f32", (16,))
        pb = e.Broadcast(pt, e.Reshape(m.tptr("f32", (1,)), p))
        off32 = e.Iota(m.tile("i32", (16,)))
        off64 = e.Iota(m.tile("i64", (16,)))
        ps = e.Offset(pt, pb, off32)
        e.Offset(pt, pb, off64)
        e.Offset(m.tptr("f32"), p, m.const("i32", (), [4]))
        mask = m.const("i1", (16,), [1] * 8 + [0] * 8)
        pad = m.const("f32", (16,), 0.0)
        T = m.tile("f32", (16,))
        t0 = e.MakeToken(tok)
        v, t1 = e.LoadPtrTko(T, tok, ps, None, None, None, MEM.WEAK, None, None)
        e.LoadPtrTko(T, tok, ps, mask, None, None, MEM.WEAK, None, None)
        e.LoadPtrTko(T, tok, ps, mask, pad, None, MEM.WEAK, None, None)
        e.LoadPtrTko(T, tok, ps, mask, pad, t0, MEM.WEAK, None, None)
        e.LoadPtrTko(T, tok, ps, None, None, t1, MEM.RELAXED, SCOPE.TL_BLK, None)
        e.LoadPtrTko(T, tok, ps, None, None, None, MEM.RELAXED, SCOPE.DEVICE, None)
        e.LoadPtrTko(T, tok, ps, None, None, None, MEM.RELAXED, SCOPE.SYS, None)
        e.LoadPtrTko(T, tok, ps, mask, None, None, MEM.ACQUIRE, SCOPE.TL_BLK, None)
        e.LoadPtrTko(T, tok, ps, None, None, None, MEM.ACQUIRE, SCOPE.DEVICE, None)
        e.LoadPtrTko(T, tok, ps, None, None, t0, MEM.ACQUIRE, SCOPE.SYS, None)
        e.LoadPtrTko(T, tok, ps, None, None, None, MEM.WEAK, None, lshints("sm_100", latency=4))
        e.LoadPtrTko(m.tile("f32"), tok, p, None, None, None, MEM.WEAK, None, None)
        e.StorePtrTko(tok, ps, v, None, None, MEM.WEAK, None, None)
        e.StorePtrTko(tok, ps, v, mask, None, MEM.WEAK, None, None)
        e.StorePtrTko(tok, ps, v, mask, t1, MEM.WEAK, None, None)
        e.StorePtrTko(tok, ps, v, None, None, MEM.RELAXED, SCOPE.TL_BLK, None)
        e.StorePtrTko(tok, ps, v, None, t0, MEM.RELAXED, SCOPE.DEVICE, None)
        e.StorePtrTko(tok, ps, v, None, None, MEM.RELEASE, SCOPE.SYS, None)
        e.StorePtrTko(tok, ps, v, mask, t0, MEM.RELEASE, SCOPE.DEVICE, lshints("sm_90", latency=2))
        # i64 pointee, 2-d pointer tile
        q2 = e.Broadcast(m.tptr("i64", (2, 2)), e.Reshape(m.tptr("i64", (1, 1)), q))
        w, _ = e.LoadPtrTko(m.tile("i64", (2, 2)), tok, q2, None, None, None, MEM.WEAK, None, None)
        e.StorePtrTko(tok, q2, w, None, None, MEM.WEAK, None, None)

    m.kernel("ptr_memory", [m.tptr("f32"), m.tptr("i64")], body=body)


# ---------------------------------------------------------------------------
# atomics
# ---------------------------------------------------------------------------
@family("atomics")
def fam_atomics(m: Module):
    e = m.e
    tok = m.token

    def body(pi, pf, pl, ph):
        def spread(p, elem, n=4):
            pt = m.tptr(elem, (n,))
            b = e.Broadcast(pt, e.Reshape(m.tptr(elem, (1,)), p))
            return e.Offset(pt, b, e.Iota(m.tile("i32", (n,))))
        P = spread(pi, "i32")
        F = spread(pf, "f32")
        L = spread(pl, "i64")
        H = spread(ph, "f16")
        Ti = m.tile("i32", (4,))
        Tf = m.tile("f32", (4,))
        vi = m.const("i32", (4,), [1, 2, 3, 4])
        vf = m.const("f32", (4,), 1.0)
        vl = m.const("i64", (4,), 1)
        vh = m.const("f16", (4,), 1.0)
        mask = m.const("i1", (4,), [1, 1, 0, 1])
        t0 = e.MakeToken(tok)
        for mode in (RMW.AND, RMW.OR, RMW.XOR, RMW.ADD, RMW.MAX, RMW.MIN, RMW.UMAX, RMW.UMIN,
                     RMW.XCHG):
            e.AtomicRMWTko(Ti, tok, P, vi, None, None, MEM.RELAXED, SCOPE.DEVICE, mode)
        e.AtomicRMWTko(Tf, tok, F, vf, None, None, MEM.RELAXED, SCOPE.DEVICE, RMW.ADDF)
        e.AtomicRMWTko(Tf, tok, F, vf, None, None, MEM.ACQ_REL, SCOPE.SYS, RMW.XCHG)
        e.AtomicRMWTko(m.tile("i64", (4,)), tok, L, vl, mask, t0, MEM.ACQUIRE, SCOPE.TL_BLK, RMW.ADD)
        e.AtomicRMWTko(m.tile("f16", (4,)), tok, H, vh, None, None, MEM.RELAXED, SCOPE.DEVICE,
                       RMW.ADDF)
        for mem in (MEM.RELAXED, MEM.ACQUIRE, MEM.RELEASE, MEM.ACQ_REL):
            for sc in (SCOPE.TL_BLK, SCOPE.DEVICE, SCOPE.SYS):
                e.AtomicRMWTko(Ti, tok, P, vi, None, None, mem, sc, RMW.ADD)
        e.AtomicRMWTko(Ti, tok, P, vi, mask, None, MEM.RELAXED, SCOPE.DEVICE, RMW.MAX)
        e.AtomicRMWTko(Ti, tok, P, vi, None, t0, MEM.RELEASE, SCOPE.DEVICE, RMW.MIN)
        e.AtomicCASTko(Ti, tok, P, vi, vi, None, None, MEM.RELAXED, SCOPE.DEVICE)
        e.AtomicCASTko(Ti, tok, P, vi, vi, mask, None, MEM.ACQUIRE, SCOPE.TL_BLK)
        e.AtomicCASTko(Ti, tok, P, vi, vi, None, t0, MEM.RELEASE, SCOPE.SYS)
        e.AtomicCASTko(Tf, tok, F, vf, vf, mask, t0, MEM.ACQ_REL, SCOPE.DEVICE)
        e.AtomicCASTko(m.tile("i64", (4,)), tok, L, vl, vl, None, None, MEM.RELAXED, SCOPE.SYS)
        # scalar atomic
        e.AtomicRMWTko(m.tile("i32"), tok, pi, m.const("i32", (), [1]), None, None,
                       MEM.RELAXED, SCOPE.DEVICE, RMW.ADD)

    m.kernel("atomics", [m.tptr("i32"), m.tptr("f32"), m.tptr("i64"), m.tptr("f16")], body=body)


# ---------------------------------------------------------------------------
# structured control flow
# ---------------------------------------------------------------------------
@family("control_flow")
def fam_control_flow(m: Module):
    e = m.e

    def body(c, n, n64):
        i32 = m.tile("i32")
        f4 = m.tile("f32", (4,))
        z = m.const("i32", (), [0])
        one = m.const("i32", (), [1])
        acc0 = m.const("f32", (4,), 0.0)
        # if without results, without else
        nb = e.If([], c)
        with m.block(nb):
            m.yld()
        m.empty_region(nb)
        nb.done()
        # if without results, with else
        nb = e.If([], c)
        with m.block(nb):
            m.yld()
        with m.block(nb):
            m.yld()
        nb.done()
        # if with two results
        nb = e.If([i32, f4], c)
        with m.block(nb):
            m.yld(one, acc0)
        with m.block(nb):
            m.yld(z, acc0)
        r = nb.done()
        # for with iter args
        nb = e.For([f4, i32], z, n, one, [acc0, r[0]], False)
        with m.block(nb, [i32, f4, i32]) as (iv, a, k):
            a2 = e.AddF(f4, a, acc0, RM.NEAREST_EVEN, False)
            k2 = e.AddI(i32, k, iv, OVF.NONE)
            # continue from inside an if (early continue)
            cond = e.CmpI(m.tile("i1"), iv, one, PRED.EQUAL, SGN.Signed)
            inb = e.If([], cond)
            with m.block(inb):
                e.Continue([a, k])
            m.empty_region(inb)
            inb.done()
            e.Continue([a2, k2])
        nb.done()
        # for without iter args, i64 bounds
        l0 = m.const("i64", (), [0])
        l1 = m.const("i64", (), [1])
        nb = e.For([], l0, n64, l1, [], False)
        with m.block(nb, [m.tile("i64")]):
            e.Continue([])
        nb.done()
        if m.ge("13.2"):
            nb = e.For([i32], z, n, one, [z], True)
            with m.block(nb, [i32, i32]) as (iv, a):
                e.Continue([e.AddI(i32, a, iv, OVF.NONE)])
            nb.done()
        # loop with iter args and results; break from nested if
        nb = e.Loop([i32, f4], [z])
        with m.block(nb, [i32]) as (k,):
            k2 = e.AddI(i32, k, one, OVF.NSW)
            done = e.CmpI(m.tile("i1"), k2, n, PRED.GREATER_THAN_OR_EQUAL, SGN.Signed)
            inb = e.If([], done)
            with m.block(inb):
                e.Break([k2, acc0])
            m.empty_region(inb)
            inb.done()
            e.Continue([k2])
        nb.done()
        # loop without iter args / results
        nb = e.Loop([], [])
        with m.block(nb, []):
            inb = e.If([], c)
            with m.block(inb):
                e.Break([])
            with m.block(inb):
                e.Continue([])
            inb.done()
            e.Break([])
        nb.done()
        # loop with results but no iter args
        nb = e.Loop([f4], [])
        with m.block(nb, []):
            e.Break([acc0])
        nb.done()
        # early return inside if
        nb = e.If([], c)
        with m.block(nb):
            m.ret()
        with m.block(nb):
            m.yld()
        nb.done()

    m.kernel("control_flow", [m.tile("i1"), m.tile("i32"), m.tile("i64")], body=body)


# ---------------------------------------------------------------------------
# reduce / scan
# ---------------------------------------------------------------------------
@family("reduce_scan")
def fam_reduce_scan(m: Module):
    e = m.e

    def body():
        sf = m.tile("f32")
        si = m.tile("i32")
        a = m.const("f32", (8,), [1.0, 5.0, 2.0, 7.0, 3.0, 0.0, 4.0, 6.0])
        nb = e.Reduce([sf], [a], 0, [m.fattr(0.0, "f32")])
        with m.block(nb, [sf, sf]) as (x, y):
            m.yld(e.AddF(sf, x, y, RM.NEAREST_EVEN, False))
        nb.done()
        # 2-d, dim 1, two operands (argmax-like)
        v = m.const("f16", (4, 8), 1.0)
        idx = e.Broadcast(m.tile("i32", (4, 8)),
                          e.Reshape(m.tile("i32", (1, 8)), e.Iota(m.tile("i32", (8,)))))
        sh = m.tile("f16")
        nb = e.Reduce([m.tile("f16", (4,)), m.tile("i32", (4,))], [v, idx], 1,
                      [m.fattr(float("-inf"), "f16"), m.iattr(0, "i32")])
        with m.block(nb, [sh, sh, si, si]) as (lv, rv, li, ri):
            gt = e.CmpF(m.tile("i1"), lv, rv, PRED.GREATER_THAN, ORD.ORDERED)
            m.yld(e.Select(sh, gt, lv, rv), e.Select(si, gt, li, ri))
        nb.done()
        # integer reduce along dim 0, i64
        w = m.const("i64", (4, 2), [1, 2, 3, 4, 5, 6, 7, 8])
        sl = m.tile("i64")
        nb = e.Reduce([m.tile("i64", (2,))], [w], 0, [m.iattr(-(1 << 63), "i64")])
        with m.block(nb, [sl, sl]) as (x, y):
            m.yld(e.MaxI(sl, x, y, SGN.Signed))
        nb.done()
        # scan forward / reverse
        for rev in (False, True):
            nb = e.Scan([m.tile("f32", (8,))], [a], 0, rev, [m.fattr(1.0, "f32")])
            with m.block(nb, [sf, sf]) as (x, y):
                m.yld(e.MulF(sf, x, y, RM.NEAREST_EVEN, False))
            nb.done()
        # scan with two operands along dim 1
        ii = m.const("i32", (2, 4), [1, 2, 3, 4, 5, 6, 7, 8])
        ff = m.const("f32", (2, 4), 0.5)
        nb = e.Scan([m.tile("i32", (2, 4)), m.tile("f32", (2, 4))], [ii, ff], 1, False,
                    [m.iattr(0, "i32"), m.fattr(0.0, "f32")])
        with m.block(nb, [si, si, sf, sf]) as (a0, b0, a1, b1):
            m.yld(e.AddI(si, a0, b0, OVF.NONE), e.AddF(sf, a1, b1, RM.NEAREST_EVEN, False))
        nb.done()

    m.kernel("reduce_scan", [], body=body)


# ---------------------------------------------------------------------------
# matrix multiply-accumulate
# ---------------------------------------------------------------------------
@family("mma")
def fam_mma(m: Module):
    e = m.e

    def body():
        M, N, K = 16, 16, 16
        pairs = [("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("tf32", "f32"),
                 ("f32", "f32"), ("f64", "f64"), ("f8E4M3FN", "f32"), ("f8E4M3FN", "f16"),
                 ("f8E5M2", "f32"), ("f8E5M2", "f16")]
        for a_t, c_t in pairs:
            a = m.const(a_t, (M, K), 1.0)
            b = m.const(a_t, (K, N), 1.0)
            c = m.const(c_t, (M, N), 0.0)
            e.MmaF(m.tile(c_t, (M, N)), a, b, c, False)
        if m.ge("13.3"):
            a = m.const("f8E4M3FN", (M, K), 1.0)
            c = m.const("f32", (M, N), 0.0)
            e.MmaF(m.tile("f32", (M, N)), a, a, c, True)
        # batched 3-d, non-square
        a = m.const("f16", (2, 16, 32), 1.0)
        b = m.const("f16", (2, 32, 8), 1.0)
        c = m.const("f32", (2, 16, 8), 0.0)
        e.MmaF(m.tile("f32", (2, 16, 8)), a, b, c, False)
        ia = m.const("i8", (16, 32), 1)
        ib = m.const("i8", (32, 16), -1)
        ic = m.const("i32", (16, 16), 0)
        for sl in (SGN.Signed, SGN.Unsigned):
            for sr in (SGN.Signed, SGN.Unsigned):
                e.MmaI(m.tile("i32", (16, 16)), ia, ib, ic, sl, sr)
        ja = m.const("i8", (2, 8, 32), 1)
        jb = m.const("i8", (2, 32, 8), 1)
        jc = m.const("i32", (2, 8, 8), 0)
        e.MmaI(m.tile("i32", (2, 8, 8)), ja, jb, jc, SGN.Signed, SGN.Unsigned)

    m.kernel("mma", [], body=body)


# ---------------------------------------------------------------------------
# tokens, print, assert
# ---------------------------------------------------------------------------
@family("tokens_print_assert")
def fam_tokens_print_assert(m: Module):
    e = m.e
    tok = m.token

    def body(x, f):
        t0 = e.MakeToken(tok)
        t1 = e.MakeToken(tok)
        t2 = e.MakeToken(tok)
        j = e.JoinTokens(tok, [t0, t1])
        e.JoinTokens(tok, [t0, t1, t2, j])
        v = m.const("i32", (4,), [1, 2, 3, 4])
        if m.ge("13.2"):
            p = e.PrintTko(tok, [], None, "hello")
            p = e.PrintTko(tok, [x, f], p, "x=%d f=%f")
            e.PrintTko(tok, [v], j, "v=%lld %%")
        else:
            e.PrintTko(None, [], None, "hello")
            e.PrintTko(None, [x, f], None, "x=%d f=%f")
            e.PrintTko(None, [v], None, "v=%lld %%")
        c = e.CmpI(m.tile("i1"), x, x, PRED.EQUAL, SGN.Signed)
        e.Assert(c, "x must equal itself")
        e.Assert(m.const("i1", (4,), [1, 1, 1, 1]), "")

    m.kernel("tokens_print_assert", [m.tile("i32"), m.tile("f32")], body=body)


# ---------------------------------------------------------------------------
# globals
# ---------------------------------------------------------------------------
@family("globals")
def fam_globals(m: Module):
    e = m.e
    m.define_global("g_f32", "f32", (4,), [1.0, 2.0, 3.0, 4.0])
    m.define_global("g_i32", "i32", (1,), [0])
    m.define_global("g_i64_aligned", "i64", (2,), [5, -5], alignment=128)
    if m.ge("13.3"):
        m.define_global("g_const", "f16", (2,), [1.0, 0.5], constant=True)
        m.define_global("g_private", "i32", (1,), [7], visibility=VIS.Private)
        m.define_global("g_private_const", "f64", (1,), [2.5], alignment=64, constant=True,
                        visibility=VIS.Private)

    def body():
        e.GetGlobal(m.tptr("f32"), "g_f32")
        e.GetGlobal(m.tptr("i32"), "g_i32")
        e.GetGlobal(m.tptr("i64"), "g_i64_aligned")
        if m.ge("13.3"):
            e.GetGlobal(m.tptr("f16"), "g_const")
            e.GetGlobal(m.tptr("i32"), "g_private")
            e.GetGlobal(m.tptr("f64"), "g_private_const")

    m.kernel("globals", [], body=body)

    def body2():
        e.GetGlobal(m.tptr("f32"), "g_f32")

    m.kernel("globals_user2", [], body=body2)


# ---------------------------------------------------------------------------
# assume predicates, entry hints, grid queries
# ---------------------------------------------------------------------------
@family("hints_assume")
def fam_hints_assume(m: Module):
    e = m.e

    def body(p, n, l):
        e.Assume(m.tptr("f32"), p, bc.DivBy(16))
        e.Assume(m.tile("i32"), n, bc.DivBy(8))
        e.Assume(m.tile("i64"), l, bc.DivBy(1 << 62))
        e.Assume(m.tile("i32"), n, bc.Bounded(0, None))
        e.Assume(m.tile("i32"), n, bc.Bounded(None, 1024))
        e.Assume(m.tile("i32"), n, bc.Bounded(-4, 4))
        e.Assume(m.tile("i64"), l, bc.Bounded(-(1 << 40), 1 << 40))
        it = e.Iota(m.tile("i32", (8, )))
        t2 = e.Broadcast(m.tile("i32", (4, 8)), e.Reshape(m.tile("i32", (1, 8)), it))
        e.Assume(m.tile("i32", (4, 8)), t2, bc.DivBy(4, every=2, along=1))
        e.Assume(m.tile("i32", (4, 8)), t2, bc.DivBy(2, every=4, along=0))
        e.Assume(m.tile("i32", (4, 8)), t2, SameElements([4, 1]))
        e.Assume(m.tile("i32", (4, 8)), t2, SameElements([1, 8]))
        e.Assume(m.tile("i32", (8,)), it, bc.Bounded(0, 7))
        pt = e.Broadcast(m.tptr("f32", (8,)), e.Reshape(m.tptr("f32", (1,)), p))
        e.Assume(m.tptr("f32", (8,)), pt, bc.DivBy(32))
        e.Assume(m.tptr("f32", (8,)), pt, SameElements([8]))
        e.GetTileBlockId(m.tile("i32"), m.tile("i32"), m.tile("i32"))
        e.GetNumTileBlocks(m.tile("i32"), m.tile("i32"), m.tile("i32"))

    params = [m.tptr("f32"), m.tile("i32"), m.tile("i64")]
    m.kernel("assume_no_hints", params, body=body)
    m.kernel("hints_sm100", params, hints={"sm_100": bc.EntryHints(num_cta_in_cga=2, occupancy=4)},
             body=body)
    multi = {"sm_80": bc.EntryHints(occupancy=1), "sm_90": bc.EntryHints(num_cta_in_cga=16),
             "sm_100": bc.EntryHints(), "sm_120": bc.EntryHints(num_cta_in_cga=1, occupancy=8)}
    m.kernel("hints_multi_arch", params, hints=multi, body=lambda *a: None)
    m.kernel("hints_empty", [], hints={"sm_103": bc.EntryHints()}, body=lambda: None)
    other = [("sm_110", [("occupancy", i32attr(2))]), ("sm_121", [("num_cta_in_cga", i32attr(4))])]
    m.kernel("hints_raw", [], hints=RawHints(other), body=lambda: None)
    if m.ge("13.3"):
        # the 13.3+ frontend keys hints by "default"; num_worker_warps_per_cta is 13.3+
        m.kernel("hints_default", [], body=lambda: None,
                 hints={"default": bc.EntryHints(num_cta_in_cga=2, occupancy=2,
                                                 num_worker_warps_per_cta=8),
                        "sm_100": bc.EntryHints(num_worker_warps_per_cta=4)})


@family("hints_unchecked", note="hints the real tools accept without checking (unknown arch key, "
        "unknown hint key, non-power-of-2 num_cta_in_cga, wrong value types, entry-only hints "
        "on loads); the open-source verifier would reject some of these")
def fam_hints_unchecked(m: Module):
    e = m.e
    m.kernel("bad_arch_key", [], body=lambda: None,
             hints=RawHints([("sm_75", [("occupancy", i32attr(2))]), ("gfx90a", [])]))
    m.kernel("unknown_key", [], body=lambda: None,
             hints=RawHints([("sm_100", [("bogus", i32attr(1)), ("latency", i32attr(3))])]))
    m.kernel("num_cta_3", [], body=lambda: None,
             hints=RawHints([("sm_100", [("num_cta_in_cga", i32attr(3))]),
                             ("sm_90", [("num_cta_in_cga", i32attr(32)),
                                        ("occupancy", bc.Bool(True))])]))

    def body(p):
        pt = m.tptr("f32", (4,))
        ps = e.Offset(pt, e.Broadcast(pt, e.Reshape(m.tptr("f32", (1,)), p)),
                      e.Iota(m.tile("i32", (4,))))
        h = RawHints([("sm_100", [("allow_tma", bc.Bool(False)), ("occupancy", i32attr(2)),
                                  ("latency", bc.Bool(True))])])
        v, _ = e.LoadPtrTko(m.tile("f32", (4,)), m.token, ps, None, None, None, MEM.WEAK, None, h)
        e.StorePtrTko(m.token, ps, v, None, None, MEM.WEAK, None,
                      RawHints([("sm_80", [("latency", i32attr(1000))])]))

    m.kernel("ptr_hints", [m.tptr("f32")], body=body)


# ---------------------------------------------------------------------------
# debug info: explicit locations, lexical blocks, call sites, unknown locs
# (also dumped with ``tileirdisasm -g``)
# ---------------------------------------------------------------------------
@family("debug_info", note="also stored as .disasm-g.txt (tileirdisasm -g)")
def fam_debug_info(m: Module):
    e = m.e
    dt = m.w.debug_attr_table
    f = dt.file("dbg_kernel.py", "/src/proj")
    cu = dt.compile_unit(f)

    def kernel(name, line):
        sp = dt.subprogram(f, line, name.split("_K")[0], name, cu, line + 1)
        floc = dt.loc(sp, "dbg_kernel.py", line, 1)
        return sp, floc

    sp, floc = kernel("dbg_Kt1_i32", 100)
    lb = dt.lexical_block(sp, f, 110, 3)
    lb2 = dt.lexical_block(lb, f, 112, 5)
    l1 = dt.loc(sp, "dbg_kernel.py", 105, 7)
    l2 = dt.loc(lb, "dbg_kernel.py", 111, 9)
    l3 = dt.loc(lb2, "dbg_kernel.py", 113, 11)
    l4 = dt.loc(sp, "other_file.py", 7, 2)
    hsp = dt.subprogram(f, 200, "helper", "helper_Kt1", cu, 200)
    hl = dt.loc(hsp, "dbg_kernel.py", 201, 4)
    cs = dt.call_site(hl, l1)
    hl2 = dt.loc(hsp, "dbg_kernel.py", 202, 8)
    cs2 = dt.call_site(dt.call_site(hl2, hl), l2)

    def body(x, c):
        i32 = m.tile("i32")
        with m.at(l1):
            a = e.AddI(i32, x, x, OVF.NONE)
        with m.at(l2):
            b = e.MulI(i32, a, x, OVF.NONE)
        with m.at(cs):
            d = e.SubI(i32, b, x, OVF.NONE)
        with m.at(cs2):
            d = e.XOrI(i32, d, x)
        with m.at(bc.MISSING_DEBUG_ATTR_ID):
            d = e.AndI(i32, d, x)
        with m.at(l3):
            nb = e.If([i32], c)
        with m.block(nb):
            with m.at(l4):
                m.yld(d)
        with m.block(nb):
            with m.at(l3):
                m.yld(x)
        r = nb.done()
        with m.at(l4):
            e.OrI(i32, r[0], x)
        with m.at(l1):
            m.ret()

    m.kernel("dbg_Kt1_i32", [m.tile("i32"), m.tile("i1")], body=body, floc=floc, subprogram=sp,
             terminate=False)
    # a second function without any debug info at all
    m.kernel("nodebug", [], body=lambda: None, floc=bc.MISSING_DEBUG_ATTR_ID)
    # a third one whose ops all carry the function location
    sp3, floc3 = kernel("third_Kt1", 300)

    def body3():
        with m.at(floc3):
            m.const("i32", (), [3])
            m.ret()

    m.kernel("third_Kt1", [], body=body3, floc=floc3, subprogram=sp3, terminate=False)


# ---------------------------------------------------------------------------
# version-specific additions
# ---------------------------------------------------------------------------
@family("new_13_2", since="13.2")
def fam_new_13_2(m: Module):
    e = m.e
    tok = m.token

    def body(x):
        a = m.const("f32", (4,), [1.0, -1.0, 0.5, 2.0])
        e.Atan2(m.tile("f32", (4,)), a, a)
        e.Atan2(m.tile("f16", (2,)), m.const("f16", (2,), 1.0), m.const("f16", (2,), -1.0))
        e.Atan2(m.tile("bf16"), m.const("bf16", (), [1.0]), m.const("bf16", (), [1.0]))
        e.NegI(m.tile("i32", (4,)), m.const("i32", (4,), 3), OVF.NSW)
        e.NegI(m.tile("i32"), x, OVF.NW)
        e.TanH(m.tile("f32", (4,)), a, RM.APPROX)
        e.TanH(m.tile("f32", (4,)), a, RM.FULL)
        s8 = m.const("f8E8M0FNU", (4,), [1.0, 2.0, 4.0, 0.125])
        e.FToF(m.tile("f8E8M0FNU", (4,)), a, RM.ZERO)
        e.FToF(m.tile("f8E8M0FNU", (4,)), a, RM.POSITIVE_INF)
        e.FToF(m.tile("f32", (4,)), s8, RM.NEAREST_EVEN)
        z = m.const("i32", (), [0])
        n = m.const("i32", (), [8])
        one = m.const("i32", (), [1])
        nb = e.For([], z, n, one, [], True)
        with m.block(nb, [m.tile("i32")]):
            e.Continue([])
        nb.done()
        t = e.PrintTko(tok, [], None, "no args")
        t = e.PrintTko(tok, [x], t, "x=%d")
        e.PrintTko(tok, [a], None, "%f")

    m.kernel("new_13_2", [m.tile("i32")], body=body)


@family("new_13_3", since="13.3")
def fam_new_13_3(m: Module):
    e = m.e
    tok = m.token

    def body(pf, pi, n):
        a = m.const("f32", (4,), [1.0, 2.0, 3.0, 4.0])
        e.Exp(m.tile("f32", (4,)), a, RM.APPROX)
        e.Exp(m.tile("f32", (4,)), a, RM.FULL)
        # new element types
        f4 = m.const("f4E2M1FN", (8,), [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -6.0])
        # i4 cannot be a constant: produce it with trunci
        i4 = e.TruncI(m.tile("i4", (8,)), m.const("i8", (8,), [0, 1, 2, 3, -1, -2, -8, 7]),
                      OVF.NONE)
        e.FToF(m.tile("f32", (8,)), f4, RM.NEAREST_EVEN)
        e.ExtI(m.tile("i8", (8,)), i4, SGN.Signed)
        e.TruncI(m.tile("i4", (4,)), m.const("i32", (4,), 3), OVF.NONE)
        # pack / unpack
        b8 = m.const("i8", (64,), 1)
        e.Unpack(m.tile("i1", (512,)), b8)
        e.Unpack(m.tile("i4", (128,)), b8)
        e.Unpack(m.tile("f4E2M1FN", (128,)), b8)
        e.Pack(m.tile("i8", (2,)), m.const("i1", (16,), 1))
        e.Pack(m.tile("i8", (4,)), i4)
        e.Pack(m.tile("i8", (256,)), m.const("f32", (64,), 1.0))
        e.Pack(m.tile("i8", (16,)), m.const("f16", (8,), 1.0))
        # alloca
        e.Alloca(m.tptr("f32"), 64, 16, False)
        e.Alloca(m.tptr("i32"), 128, 128, True)
        # mmaf with fast accumulation, mmaf_scaled
        fa = m.const("f8E4M3FN", (16, 32), 1.0)
        fb = m.const("f8E4M3FN", (32, 16), 1.0)
        acc = m.const("f32", (16, 16), 0.0)
        e.MmaF(m.tile("f32", (16, 16)), fa, fb, acc, True)
        # (plain mmaf does not accept f4E2M1FN in the 13.5 tools; only mmaf_scaled does)
        lhs = m.const("f8E5M2", (64, 64), 1.0)
        ls = m.const("f8E8M0FNU", (64, 2), 1.0)
        rs = m.const("f8E8M0FNU", (2, 64), 1.0)
        acc2 = m.const("f32", (64, 64), 0.0)
        e.MmaFScaled(m.tile("f32", (64, 64)), lhs, lhs, acc2, ls, rs)
        fl = m.const("f4E2M1FN", (64, 64), 1.0)
        ls4 = m.const("f8E4M3FN", (64, 4), 1.0)
        rs4 = m.const("f8E4M3FN", (4, 64), 1.0)
        e.MmaFScaled(m.tile("f32", (64, 64)), fl, fl, acc2, ls4, rs4)
        # strided and gather/scatter views
        tvt = m.tv("f32", (64, 64), (64, 1))
        tv = e.MakeTensorView(tvt, pf, [], [])
        c0 = m.const("i32", (), [0])
        svt = m.tt.strided_view([4, 4], [8, 8], tvt, [0, 1], PAD.Missing)
        sv = e.MakeStridedView(svt, tv)
        svt2 = m.tt.strided_view([4, 8], [2, 4], tvt, [1, 0], PAD.NegInf)
        sv2 = e.MakeStridedView(svt2, tv)
        x, t1 = e.LoadViewTko(m.tile("f32", (4, 4)), tok, sv, [c0, c0], None, MEM.WEAK, None,
                              None, [False, False])
        e.LoadViewTko(m.tile("f32", (4, 8)), tok, sv2, [c0, c0], None, MEM.WEAK, None,
                      None, [False, False])
        e.StoreViewTko(tok, x, sv, [c0, c0], t1, MEM.WEAK, None, None, [False, False])
        e.GetIndexSpaceShape([m.tile("i32")] * 2, sv)
        gst = m.tt.gather_scatter_view([8, 16], tvt, 0, PAD.Missing)
        gs = e.MakeGatherScatterView(gst, tv)
        gst2 = m.tt.gather_scatter_view([16, 8], tvt, 1, PAD.Zero)
        gs2 = e.MakeGatherScatterView(gst2, tv)
        rows = e.Iota(m.tile("i32", (8,)))
        cols = e.Iota(m.tile("i32", (8,)))
        g, t2 = e.LoadViewTko(m.tile("f32", (8, 16)), tok, gs, [rows, c0], None, MEM.WEAK, None,
                              None, [False, False])
        e.StoreViewTko(tok, g, gs, [rows, c0], t2, MEM.WEAK, None, None, [False, False])
        e.LoadViewTko(m.tile("f32", (16, 8)), tok, gs2, [c0, cols], None, MEM.WEAK, None,
                      None, [False, False])
        e.GetIndexSpaceShape([m.tile("i32")] * 2, gs)
        # atomic reductions through a view
        ivt = m.tv("i32", (64, 64), (64, 1))
        iv = e.MakeTensorView(ivt, pi, [], [])
        ipv = e.MakePartitionView(m.pv((4, 4), ivt), iv)
        vi = m.const("i32", (4, 4), 1)
        for mode in (RMW.AND, RMW.OR, RMW.XOR, RMW.ADD, RMW.MAX, RMW.MIN, RMW.UMAX, RMW.UMIN):
            e.AtomicRedViewTko(tok, ipv, [c0, c0], vi, None, MEM.RELAXED, SCOPE.DEVICE, mode,
                               [False, False])
        t3 = e.MakeToken(tok)
        e.AtomicRedViewTko(tok, ipv, [c0, c0], vi, t3, MEM.RELAXED, SCOPE.TL_BLK, RMW.ADD,
                           [False, False])
        fpv = e.MakePartitionView(m.pv((4, 4), tvt), tv)
        e.AtomicRedViewTko(tok, fpv, [c0, c0], m.const("f32", (4, 4), 1.0), None, MEM.RELAXED,
                           SCOPE.DEVICE, RMW.ADDF, [False, False])
        e.AtomicRedViewTko(tok, sv, [c0, c0], x, None, MEM.RELAXED, SCOPE.DEVICE, RMW.ADDF,
                           [False, False])

    m.kernel("new_13_3", [m.tptr("f32"), m.tptr("i32"), m.tile("i32")], body=body)


@family("new_13_4", since="13.4")
def fam_new_13_4(m: Module):
    e = m.e
    tok = m.token

    def body(pf, pg):
        a = m.const("f32", (4,), [1.0, 2.0, 3.0, 4.0])
        e.FPowI(m.tile("f32", (4,)), a, m.const("i32", (4,), 2))
        e.FPowI(m.tile("f64"), m.const("f64", (), [2.0]), m.const("i32", (), [-3]))
        e.FToI(m.tile("i8", (4,)), a, SGN.Signed, RM.NEAREST_INT_TO_ZERO, True)
        e.FToI(m.tile("i32", (4,)), a, SGN.Unsigned, RM.NEAREST_INT_TO_ZERO, True)
        e.FToI(m.tile("i32", (4,)), a, SGN.Signed, RM.NEAREST_INT_TO_ZERO, False)
        # insert
        dst = m.const("f32", (8, 8), 0.0)
        src = m.const("f32", (4, 4), 1.0)
        c0 = m.const("i32", (), [0])
        c1 = m.const("i32", (), [1])
        e.Insert(m.tile("f32", (8, 8)), src, dst, [c0, c1])
        # grid dependency control / fences
        t0 = e.MakeToken(tok)
        e.GdcLaunchDependentsTko(tok, None)
        g = e.GdcLaunchDependentsTko(tok, t0)
        e.GdcWaitTko(tok, None)
        w = e.GdcWaitTko(tok, g)
        e.MemoryFenceAliasTko(tok, w)
        # inbounds arrays on view loads/stores; ptr attr on pointer / tensor_view types
        tvt = m.tv("f32", (64, 64), (64, 1), PTRATTR.Default)
        tv = e.MakeTensorView(tvt, pg, [], [])
        pvt = m.pv((8, 8), tvt)
        pv = e.MakePartitionView(pvt, tv)
        x, t1 = e.LoadViewTko(m.tile("f32", (8, 8)), tok, pv, [c0, c1], None, MEM.WEAK, None,
                              None, [True, False])
        e.LoadViewTko(m.tile("f32", (8, 8)), tok, pv, [c0, c1], None, MEM.WEAK, None,
                      None, [True, True])
        e.StoreViewTko(tok, x, pv, [c0, c1], t1, MEM.WEAK, None, None, [False, True])
        e.StoreViewTko(tok, x, pv, [c0, c1], None, MEM.WEAK, None, None, [True, True])
        e.PtrToPtr(m.tptr("f32"), pf)
        # fnv8E5M3FNU conversions (the type is 13.4+)
        nv = e.FToF(m.tile("fnv8E5M3FNU", (4,)), a, RM.NEAREST_EVEN)
        e.FToF(m.tile("f16", (4,)), nv, RM.NEAREST_EVEN)
        # narrowing ftof with rounding<zero> (accepted by the 13.5 tools; the 13.3 OSS
        # verifier only allowed nearest_even)
        e.FToF(m.tile("f16", (4,)), a, RM.ZERO)

    m.kernel("new_13_4", [m.tptr("f32"), m.tptr("f32", (), PTRATTR.Default)], body=body)


# ===========================================================================
# driver
# ===========================================================================
def build_valid(out: Path, only=None, use_tools=True):
    home, env = tool_env()
    disasm = str(home / "bin" / "tileirdisasm")
    entries = []
    failures = []
    for vs in VERSIONS:
        for name, since, fn, _note in FAMILIES:
            if only and name not in only:
                continue
            if VERSIONS[vs] < VERSIONS[since]:
                continue
            m = Module(vs, name)
            data = m.build(fn)
            base = f"{name}.v{vs}"
            bc_path = out / f"{base}.tileirbc"
            bc_path.write_bytes(data)
            entry = {"file": bc_path.name, "kind": "bytecode", "version": vs, "family": name,
                     "opcodes": sorted(m.opcodes), "num_ops": m.op_count,
                     "num_functions": m.num_functions, "size": len(data), "sha256": sha256(data)}
            entries.append(entry)
            if not use_tools:
                continue
            rc, so, se = run_tool([disasm, bc_path.name], env, cwd=out)
            entry["tileirdisasm_rc"] = rc
            txt = out / f"{base}.disasm.txt"
            if rc == 0:
                txt.write_text(so)
                entries.append({"file": txt.name, "kind": "disasm", "version": vs,
                                "family": name, "opcodes": sorted(m.opcodes),
                                "size": len(so.encode()), "sha256": sha256(so.encode())})
                if name in DUMP_G:
                    rc_g, so_g, se_g = run_tool([disasm, "-g", bc_path.name], env, cwd=out)
                    gtxt = out / f"{base}.disasm-g.txt"
                    if rc_g == 0:
                        gtxt.write_text(so_g)
                        entries.append({"file": gtxt.name, "kind": "disasm-g", "version": vs,
                                        "family": name, "opcodes": sorted(m.opcodes),
                                        "size": len(so_g.encode()),
                                        "sha256": sha256(so_g.encode())})
                    else:
                        failures.append((base + " -g", rc_g, se_g))
            else:
                if txt.exists():
                    txt.unlink()
                failures.append((base, rc, se))
                print(f"FAIL {base}: rc={rc}\n{se}", file=sys.stderr)
    return entries, failures


SECTION_OPS = {22: "entry", 75: "module"}  # always present, arrive through sections


def expected_opcodes(vs: str) -> set:
    ops = set(range(0, 110)) - set(range(25, 37)) - set(range(52, 58))
    if VERSIONS[vs] >= VERSIONS["13.2"]:
        ops.add(110)
    if VERSIONS[vs] >= VERSIONS["13.3"]:
        ops |= set(range(111, 118))
    if VERSIONS[vs] >= VERSIONS["13.4"]:
        ops |= set(range(118, 123))
    return ops


def coverage(entries):
    cov = {}
    for vs in VERSIONS:
        got = set(SECTION_OPS)
        for e in entries:
            if e["version"] == vs and e["kind"] == "bytecode":
                got |= set(e["opcodes"])
        exp = expected_opcodes(vs)
        cov[vs] = {"expected": len(exp), "covered": len(exp & got),
                   "missing": sorted(exp - got), "extra": sorted(got - exp)}
    return cov


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent / "data" / "ops"))
    ap.add_argument("--only", nargs="*", help="only these families (valid set)")
    ap.add_argument("--no-tools", action="store_true", help="do not run the NVIDIA tools")
    ap.add_argument("--skip-invalid", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries, failures = build_valid(out, args.only, not args.no_tools)
    inv_entries = []
    if not args.skip_invalid and not args.only:
        import build_invalid
        inv_entries = build_invalid.build(out / "invalid", not args.no_tools)
    if not args.only:
        # drop stale outputs of families/versions that no longer exist
        produced = {e["file"] for e in entries}
        for p in sorted(out.iterdir()):
            if p.is_file() and (p.name.endswith(".tileirbc") or p.name.endswith(".txt")) \
                    and p.name not in produced:
                p.unlink()
        write_manifest(out, entries, inv_entries)
    if not args.only:
        for vs, c in coverage(entries).items():
            print(f"opcode coverage {vs}: {c['covered']}/{c['expected']} missing={c['missing']}")
    print(f"{len(entries)} valid files, {len(failures)} failures, {len(inv_entries)} invalid files")
    return 1 if failures else 0


def write_manifest(out: Path, entries, inv_entries):
    home, env = tool_env()
    rc, ver, _ = run_tool([str(home / "bin" / "tileirdisasm"), "--version"], env)
    import importlib.metadata as md
    manifest = {
        "generator": "tests/opgen/build_ops.py",
        "producer": f"cuda-tile {md.version('cuda-tile')} (cuda.tile._bytecode writer)",
        "tools": {"tileirdisasm_version": ver.strip().splitlines()[-2:] if ver else []},
        "families": [{"name": n, "since": s, "note": note} for n, s, _f, note in FAMILIES],
        "section_ops": {str(k): v for k, v in SECTION_OPS.items()},
        "opcode_names": {str(k): v for k, v in sorted(OPNAMES.items())},
        "opcode_coverage": coverage(entries),
        "files": entries,
        "invalid": inv_entries,
    }
    (out / "manifest.json").write_text(dump_manifest(manifest))


def dump_manifest(manifest) -> str:
    """JSON with one line per file entry (keeps the manifest small and diffable)."""
    lines = ["{"]
    keys = list(manifest)
    for i, k in enumerate(keys):
        v = manifest[k]
        comma = "," if i + 1 < len(keys) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f" {json.dumps(k)}: [")
            for j, item in enumerate(v):
                lines.append("  " + json.dumps(item, sort_keys=False) + ("," if j + 1 < len(v) else ""))
            lines.append(" ]" + comma)
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
