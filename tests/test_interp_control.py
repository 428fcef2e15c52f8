"""Interpreter control flow (for, loop/break/continue, if, return), print and assert."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK

from tileiras_async.interp import AssertionFault
from tileiras_async.interp.printf import format_print
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import tile
from tileiras_async.ir.enums import ComparisonPredicate as CP
from tileiras_async.ir.enums import Signedness as S

I32 = tile(T.I32)


def scalar_out_kernel(build, version=(13, 4, 0), nout=1, scalars=()):
    """A kernel computing `nout` i32 scalars (stored into a 1-D output); build(b, *scalar_args) -> values."""
    tk = TK(version)
    sc = [tk.scalar(T.I32) for _ in scalars]
    o = tk.array(T.I32, 1)
    with tk.body() as b:
        vals = build(b, *[b.scalar(p) for p in sc])
        for i, v in enumerate(vals):
            b.store(o, (1,), b.op("reshape", [tile(T.I32, 1)], source=v).result, index=[i])
    out = np.full(nout, -999, np.int32)
    rep = tk.run((1,), list(scalars) + [out])
    return out, rep


def sum_loop(b, lb, ub, step, unsigned=False):
    with b.region([I32, I32]) as r:
        iv, acc = r.args
        nxt = r.op("addi", [I32], lhs=acc, rhs=iv, overflow=0).result
        r.op("continue", operands=[nxt])
    extra = {"unsignedCmp": True} if unsigned else {}
    return b.op("for", [I32], [r.built_region], lowerBound=lb, upperBound=ub, step=step,
                initValues=[b.i32(0)], **extra).results[0]


@pytest.mark.parametrize("lb,ub,step", [(0, 10, 1), (3, 17, 4), (-5, 5, 2), (10, 10, 1), (10, 0, 1),
                                        (2**31 - 3, 2**31 - 1, 1)])
def test_for_loop_signed(lb, ub, step):
    out, _ = scalar_out_kernel(lambda b, l, u, s: [sum_loop(b, l, u, s)], scalars=(lb, ub, step))
    want = sum(range(lb, ub, step)) & 0xFFFFFFFF
    assert int(out[0]) == (want - 2**32 if want >= 2**31 else want)


def test_for_loop_unsigned_compare():
    # -1 as an unsigned bound is 2^32-1: with a signed compare the loop is empty
    out, _ = scalar_out_kernel(lambda b, u: [sum_loop(b, b.i32(0), u, b.i32(1), unsigned=False)], scalars=(-1,),
                               version=(13, 2, 0))
    assert out[0] == 0
    out, _ = scalar_out_kernel(lambda b, u: [sum_loop(b, b.const(np.int32(-4), T.I32), u, b.i32(1), unsigned=True)],
                               scalars=(-1,), version=(13, 2, 0))
    assert out[0] == (-4 + -3 + -2)  # iv runs 2^32-4 .. 2^32-2


def test_loop_break_continue():
    # count = 0; i = 0; loop { i += 1; if i % 3 == 0: continue; count += i; if i >= 10: break }
    def build(b):
        with b.region([I32, I32]) as r:
            i, cnt = r.args
            i1 = r.op("addi", [I32], lhs=i, rhs=r.constant(np.int32(1), I32), overflow=0).result
            rem = r.op("remi", [I32], lhs=i1, rhs=r.constant(np.int32(3), I32), signedness=S.signed).result
            is0 = r.op("cmpi", [tile(T.I1)], lhs=rem, rhs=r.constant(np.int32(0), I32),
                       comparison_predicate=CP.equal, signedness=S.signed).result
            with r.region() as then:
                then.op("continue", operands=[i1, cnt])
            with r.region() as els:
                els.op("yield")
            r.op("if", [], [then.built_region, els.built_region], condition=is0)
            c2 = r.op("addi", [I32], lhs=cnt, rhs=i1, overflow=0).result
            done = r.op("cmpi", [tile(T.I1)], lhs=i1, rhs=r.constant(np.int32(10), I32),
                        comparison_predicate=CP.greater_than_or_equal, signedness=S.signed).result
            with r.region() as t2:
                t2.op("break", operands=[i1, c2])
            with r.region() as e2:
                e2.op("yield")
            r.op("if", [], [t2.built_region, e2.built_region], condition=done)
            r.op("continue", operands=[i1, c2])
        res = b.op("loop", [I32, I32], [r.built_region], initValues=[b.i32(0), b.i32(0)]).results
        return list(res)
    out, rep = scalar_out_kernel(build, nout=2)
    assert out.tolist() == [10, 1 + 2 + 4 + 5 + 7 + 8 + 10]
    assert rep.counters["ops"] > 50


def test_if_with_results_and_early_return():
    def build(b, x):
        pos = b.op("cmpi", [tile(T.I1)], lhs=x, rhs=b.i32(0), comparison_predicate=CP.greater_than,
                   signedness=S.signed).result
        with b.region() as t:
            t.op("yield", operands=[t.op("muli", [I32], lhs=x, rhs=t.constant(np.int32(2), I32), overflow=0).result])
        with b.region() as e:
            e.op("yield", operands=[e.op("negi", [I32], source=x, overflow=0).result])
        return [b.op("if", [I32], [t.built_region, e.built_region], condition=pos).results[0]]
    assert scalar_out_kernel(build, scalars=(21,))[0][0] == 42
    assert scalar_out_kernel(build, scalars=(-5,))[0][0] == 5

    tk = TK()
    s = tk.scalar(T.I32)
    o = tk.array(T.I32, 1)
    with tk.body() as b:
        c = b.op("cmpi", [tile(T.I1)], lhs=b.scalar(s), rhs=b.i32(0), comparison_predicate=CP.equal,
                 signedness=S.signed).result
        with b.region() as t:
            t.op("return")
        with b.region() as e:
            e.op("yield")
        b.op("if", [], [t.built_region, e.built_region], condition=c)
        b.store(o, (1,), b.op("reshape", [tile(T.I32, 1)], source=b.scalar(s)).result)
    out = np.zeros(1, np.int32)
    tk.run((1,), [0, out])
    assert out[0] == 0  # returned before the store
    tk.run((1,), [7, out])
    assert out[0] == 7


def test_print_formats_like_device_printf():
    tk = TK()
    x = tk.array(T.F32, 1)
    with tk.body() as b:
        v = b.load(x, (4,))
        bid = b.bid()[0]
        b.op("print_tko", [T.TOKEN], str=b"tile[%d]:%.5f\n", args=[bid, v], token=b.token)
        m = b.op("reshape", [tile(T.F32, 2, 2)], source=v).result
        b.op("print_tko", [T.TOKEN], str=b"m=%g %%\n", args=[m], token=b.token)
    rep = tk.run((2,), [np.arange(4, dtype=np.float32)])
    assert rep.stdout == ("tile[0]:[0.00000, 1.00000, 2.00000, 3.00000]\nm=[[0, 1], [2, 3]] %\n"
                          "tile[1]:[0.00000, 1.00000, 2.00000, 3.00000]\nm=[[0, 1], [2, 3]] %\n")


def test_printf_conversions():
    i8 = np.array([-1, 5], np.int8)
    assert format_print("%d %u %x", [(i8, T.I8), (i8, T.I8), (np.int32(255), T.I32)]) == "[-1, 5] [255, 5] ff"
    assert format_print("%5.1f|%-4d|%e", [(np.float16(1.5), T.F16), (np.int64(7), T.I64),
                                        (np.float64(1234.5), T.F64)]) == "  1.5|7   |1.234500e+03"
    assert format_print("%a %d", [(np.float32(1.0), T.F32), (np.array([True, False]), T.I1)]) == "0x1p+0 [1, 0]"
    assert format_print("%f %f", [(np.float32(np.nan), T.F32), (np.float32(-np.inf), T.F32)]) == "nan -inf"


def test_assert_stops_the_run_with_message_and_location():
    tk = TK()
    x = tk.array(T.I32, 1)
    with tk.body() as b:
        v = b.load(x, (4,))
        ok = b.op("cmpi", [tile(T.I1, 4)], lhs=v, rhs=b.const(np.int32(0), T.I32, (4,)),
                  comparison_predicate=CP.greater_than_or_equal, signedness=S.signed).result
        b.op("print_tko", [T.TOKEN], str=b"before\n", args=[], token=b.token)
        b.op("assert", [], condition=ok, message=b"values must be non-negative")
        b.store(x, (4,), b.const(np.zeros(4, np.int32), T.I32, (4,)))
    good = np.array([1, 2, 3, 4], np.int32)
    tk.run((1,), [good])
    assert (good == 0).all()
    bad = np.array([1, -2, 3, -4], np.int32)
    with pytest.raises(AssertionFault) as ei:
        tk.run((1,), [bad])
    msg = str(ei.value)
    assert "'assert'" in msg and "values must be non-negative" in msg and "tile element (1,)" in msg
    assert "2 of 4 elements false" in msg and "tile block (0, 0, 0)" in msg
    assert ei.value.stdout == "before\n"
    assert bad.tolist() == [1, -2, 3, -4]
