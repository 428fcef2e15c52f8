"""Interpreter: constants, iota, shape ops, reduce/scan with their combiner regions, mmaf/mmai."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK, f32attr, intattr

from tileiras_async.interp import numerics as N
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import DenseElements
from tileiras_async.ir.builder import tile
from tileiras_async.ir.enums import ComparisonOrdering as CO
from tileiras_async.ir.enums import ComparisonPredicate as CP
from tileiras_async.ir.enums import RoundingMode as RM
from tileiras_async.ir.enums import Signedness as S


def run1(build, out_elem, out_shape, inputs=(), version=(13, 4, 0), grid=(1,)):
    """Build a kernel with array inputs [(elem, data)] and one output array; returns the output."""
    tk = TK(version)
    ps = [tk.array(e, np.ndim(d)) for e, d in inputs]
    o = tk.array(out_elem, len(out_shape))
    with tk.body() as b:
        vals = [b.load(p, np.shape(d)) for p, (e, d) in zip(ps, inputs)]
        r = build(b, *vals)
        b.store(o, out_shape, r)
    dt = {T.F32: np.float32, T.I32: np.int32, T.I64: np.int64, T.F16: np.float16, T.I1: np.bool_,
          T.I8: np.int8, T.F64: np.float64, T.BF16: np.uint16}[out_elem]
    out = np.zeros(out_shape, dt)
    tk.run(grid, [np.ascontiguousarray(d) for _, d in inputs] + [out])
    return out


def test_constants_splat_dense_i1_and_tf32():
    vals = np.arange(8, dtype=np.int32) * 3 - 5
    out = run1(lambda b: b.const(vals, T.I32, (8,)), T.I32, (8,))
    assert out.tolist() == vals.tolist()
    out = run1(lambda b: b.const(np.float32(2.5), T.F32, (4,)), T.F32, (4,))
    assert out.tolist() == [2.5] * 4
    mask = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1], bool)
    out = run1(lambda b: b.const(mask, T.I1, (16,)), T.I1, (16,))
    assert out.tolist() == mask.tolist()
    # a tf32 constant is 3 bytes per element: sign, 8 exponent and 10 mantissa bits
    f = np.array([1.5, -2.0, 3.001953125, 0.0], np.float32)
    bits = N.compute_to_bits(f, T.TF32)
    raw = b"".join(int(v).to_bytes(3, "little") for v in bits)
    assert N.bits_to_compute(bits, T.TF32).tolist() == f.tolist()

    def build(b):
        c = b.op("constant", [tile(T.TF32, 4)], value=DenseElements(tile(T.TF32, 4), raw)).result
        return b.op("ftof", [tile(T.F32, 4)], **{"from": c}, rounding_mode=RM.nearest_even).result
    assert run1(build, T.F32, (4,)).tolist() == f.tolist()


def test_iota_broadcast_reshape_permute():
    def build(b):
        i = b.op("iota", [tile(T.I32, 8)]).result
        r = b.op("reshape", [tile(T.I32, 1, 8)], source=i).result
        bc = b.op("broadcast", [tile(T.I32, 4, 8)], source=r).result
        return b.op("permute", [tile(T.I32, 8, 4)], source=bc, permutation=(1, 0)).result
    out = run1(build, T.I32, (8, 4))
    assert (out == np.arange(8)[:, None]).all()
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    x = np.arange(2 * 4 * 8, dtype=np.int32).reshape(2, 4, 8)
    out = run1(lambda b, v: b.op("permute", [tile(T.I32, 8, 2, 4)], source=v, permutation=(2, 0, 1)).result,
               T.I32, (8, 2, 4), [(T.I32, x)])
    assert (out == np.transpose(x, (2, 0, 1))).all()


def test_cat_extract_insert():
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    bb = -np.arange(8, dtype=np.float32).reshape(2, 4)
    out = run1(lambda b, x, y: b.op("cat", [tile(T.F32, 4, 4)], lhs=x, rhs=y, dim=0).result,
               T.F32, (4, 4), [(T.F32, a), (T.F32, bb)])
    assert (out == np.concatenate([a, bb], 0)).all()
    out = run1(lambda b, x, y: b.op("cat", [tile(T.F32, 2, 8)], lhs=x, rhs=y, dim=1).result,
               T.F32, (2, 8), [(T.F32, a), (T.F32, bb)])
    assert (out == np.concatenate([a, bb], 1)).all()
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    out = run1(lambda b, v: b.op("extract", [tile(T.I32, 2, 4)], source=v, indices=[b.i32(1), b.i32(1)]).results[0],
               T.I32, (2, 4), [(T.I32, x)])
    assert (out == x[2:4, 4:8]).all()

    def build(b, v):
        small = b.const(np.full((2, 4), -1, np.int32), T.I32, (2, 4))
        return b.op("insert", [tile(T.I32, 4, 8)], source=small, destination=v,
                    indices=[b.i32(0), b.i32(1)]).results[0]
    out = run1(build, T.I32, (4, 8), [(T.I32, x)])
    want = x.copy()
    want[0:2, 4:8] = -1
    assert (out == want).all()


def _sum_region(b, elem):
    with b.region([tile(elem), tile(elem)]) as r:
        lhs, rhs = r.args
        name = "addf" if isinstance(elem, T.FloatType) else "addi"
        extra = {"rounding_mode": RM.nearest_even} if name == "addf" else {"overflow": 0}
        s = r.op(name, [tile(elem)], lhs=lhs, rhs=rhs, **extra).result
        r.op("yield", operands=[s])
    return r.built_region


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_sum_and_max(dim):
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    shape = (16,) if dim == 0 else (8,)

    def build(b, v):
        return b.op("reduce", [tile(T.F32, *shape)], [_sum_region(b, T.F32)], operands=[v], dim=dim,
                    identities=(f32attr(0.0),)).results[0]
    out = run1(build, T.F32, shape, [(T.F32, x)])
    np.testing.assert_allclose(out, x.sum(axis=dim), rtol=1e-5)

    def build_max(b, v):
        with b.region([tile(T.F32), tile(T.F32)]) as r:
            m = r.op("maxf", [tile(T.F32)], lhs=r.args[0], rhs=r.args[1]).result
            r.op("yield", operands=[m])
        return b.op("reduce", [tile(T.F32, *shape)], [r.built_region], operands=[v], dim=dim,
                    identities=(f32attr(-np.inf),)).results[0]
    out = run1(build_max, T.F32, shape, [(T.F32, x)])
    assert (out == x.max(axis=dim)).all()


def test_reduce_two_operands_argmax():
    x = np.array([[3.0, 7.0, 7.0, 1.0], [np.nan, 2.0, 5.0, 5.0]], np.float32)

    def build(b, v):
        idx = b.op("reshape", [tile(T.I32, 1, 4)], source=b.op("iota", [tile(T.I32, 4)]).result).result
        idx = b.op("broadcast", [tile(T.I32, 2, 4)], source=idx).result
        with b.region([tile(T.F32), tile(T.F32), tile(T.I32), tile(T.I32)]) as r:
            a0, b0, a1, b1 = r.args
            gt = r.op("cmpf", [tile(T.I1)], lhs=a0, rhs=b0, comparison_predicate=CP.greater_than,
                      comparison_ordering=CO.ordered).result
            eq = r.op("cmpf", [tile(T.I1)], lhs=a0, rhs=b0, comparison_predicate=CP.equal,
                      comparison_ordering=CO.ordered).result
            lt = r.op("cmpi", [tile(T.I1)], lhs=a1, rhs=b1, comparison_predicate=CP.less_than,
                      signedness=S.signed).result
            tie = r.op("andi", [tile(T.I1)], lhs=eq, rhs=lt).result
            pick = r.op("ori", [tile(T.I1)], lhs=gt, rhs=tie).result
            v0 = r.op("select", [tile(T.F32)], cond=pick, val_if_true=a0, val_if_false=b0).result
            v1 = r.op("select", [tile(T.I32)], cond=pick, val_if_true=a1, val_if_false=b1).result
            r.op("yield", operands=[v0, v1])
        res = b.op("reduce", [tile(T.F32, 2), tile(T.I32, 2)], [r.built_region], operands=[v, idx], dim=1,
                   identities=(f32attr(-np.inf), intattr(0))).results
        return res[1]
    out = run1(build, T.I32, (2,), [(T.F32, x)])
    assert out.tolist() == [1, 2]  # first maximum wins ties; NaN never wins a greater_than


def test_reduce_and_scan_with_a_non_elementwise_body_fall_back_to_serial():
    x = np.arange(16, dtype=np.int32).reshape(2, 8)

    def body(b):
        with b.region([tile(T.I32), tile(T.I32)]) as r:
            lhs = r.op("reshape", [tile(T.I32, 1)], source=r.args[0]).result
            rhs = r.op("reshape", [tile(T.I32, 1)], source=r.args[1]).result
            s = r.op("addi", [tile(T.I32, 1)], lhs=lhs, rhs=rhs, overflow=0).result
            r.op("yield", operands=[r.op("reshape", [tile(T.I32)], source=s).result])
        return r.built_region
    out = run1(lambda b, v: b.op("reduce", [tile(T.I32, 2)], [body(b)], operands=[v], dim=1,
                                 identities=(intattr(0),)).results[0], T.I32, (2,), [(T.I32, x)])
    assert out.tolist() == x.sum(1).tolist()
    out = run1(lambda b, v: b.op("scan", [tile(T.I32, 2, 8)], [body(b)], operands=[v], dim=1, reverse=False,
                                 identities=(intattr(0),)).results[0], T.I32, (2, 8), [(T.I32, x)])
    assert (out == np.cumsum(x, 1)).all()


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_scan_cumsum(reverse, dim):
    x = np.random.default_rng(3).integers(-100, 100, (8, 16)).astype(np.int32)

    def build(b, v):
        return b.op("scan", [tile(T.I32, 8, 16)], [_sum_region(b, T.I32)], operands=[v], dim=dim,
                    reverse=reverse, identities=(intattr(0),)).results[0]
    out = run1(build, T.I32, (8, 16), [(T.I32, x)])
    want = np.flip(np.cumsum(np.flip(x, dim), dim), dim) if reverse else np.cumsum(x, dim)
    assert (out == want).all()


def test_scan_non_commutative_order():
    # an associative, non-commutative combiner: f(cur, prev) = prev if prev != 0 else cur
    # ("first non-zero so far"); swapping the argument roles would give "last non-zero"
    x = np.array([0, 0, 3, 0, 5, 0, 7, 2], np.int32)

    def build(b, v):
        with b.region([tile(T.I32), tile(T.I32)]) as r:
            cur, prev = r.args
            z = r.op("constant", [tile(T.I32)], value=DenseElements(tile(T.I32), b"\0\0\0\0")).result
            nz = r.op("cmpi", [tile(T.I1)], lhs=prev, rhs=z, comparison_predicate=CP.not_equal,
                      signedness=S.signed).result
            r.op("yield", operands=[r.op("select", [tile(T.I32)], cond=nz, val_if_true=prev,
                                         val_if_false=cur).result])
        return b.op("scan", [tile(T.I32, 8)], [r.built_region], operands=[v], dim=0, reverse=False,
                    identities=(intattr(0),)).results[0]
    out = run1(build, T.I32, (8,), [(T.I32, x)])
    assert out.tolist() == [0, 0, 3, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("in_t,acc_t", [(T.F16, T.F32), (T.F16, T.F16), (T.BF16, T.F32), (T.TF32, T.F32),
                                        (T.F32, T.F32), (T.F64, T.F64), (T.F8E4M3FN, T.F32), (T.F8E5M2, T.F16)],
                         ids=str)
def test_mmaf(in_t, acc_t):
    rng = np.random.default_rng(5)
    a = (rng.integers(-8, 9, (16, 32)) / 8).astype(np.float32)
    bm = (rng.integers(-8, 9, (32, 8)) / 8).astype(np.float32)
    c = (rng.integers(-8, 9, (16, 8)) / 4).astype(np.float32)
    store_t = T.F32 if in_t == T.TF32 else in_t
    conv = {T.F16: np.float16, T.F32: np.float32, T.F64: np.float64}

    def stored(x, t):
        return x.astype(conv[t]) if t in conv else N.to_storage(N.to_float(x, t), t)

    def build(b, va, vb, vc):
        if in_t == T.TF32:
            va = b.op("ftof", [tile(T.TF32, 16, 32)], **{"from": va}, rounding_mode=RM.nearest_even).result
            vb = b.op("ftof", [tile(T.TF32, 32, 8)], **{"from": vb}, rounding_mode=RM.nearest_even).result
        return b.op("mmaf", [tile(acc_t, 16, 8)], lhs=va, rhs=vb, acc=vc).result
    out = run1(build, acc_t, (16, 8), [(store_t, stored(a, store_t)), (store_t, stored(bm, store_t)),
                                       (acc_t, stored(c, acc_t))])
    np.testing.assert_array_equal(out.astype(np.float64), a.astype(np.float64) @ bm + c)


def test_mmaf_tf32_truncates_and_batched():
    a = np.array([[1 + 2.0 ** -12]], np.float32)  # not representable in tf32: ftof rounds (RNE) to 1.0
    a = np.broadcast_to(a, (16, 16)).copy()
    bm = np.eye(16, dtype=np.float32)

    def build(b, va, vb):
        ta = b.op("ftof", [tile(T.TF32, 16, 16)], **{"from": va}, rounding_mode=RM.nearest_even).result
        tb = b.op("ftof", [tile(T.TF32, 16, 16)], **{"from": vb}, rounding_mode=RM.nearest_even).result
        z = b.const(np.float32(0), T.F32, (16, 16))
        return b.op("mmaf", [tile(T.F32, 16, 16)], lhs=ta, rhs=tb, acc=z).result
    out = run1(build, T.F32, (16, 16), [(T.F32, a), (T.F32, bm)])
    assert (out == 1.0).all()
    x = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8) / 16
    y = np.arange(2 * 8 * 4, dtype=np.float32).reshape(2, 8, 4) / 16

    def bmm(b, va, vb):
        z = b.const(np.float32(0), T.F32, (2, 4, 4))
        return b.op("mmaf", [tile(T.F32, 2, 4, 4)], lhs=va, rhs=vb, acc=z).result
    out = run1(bmm, T.F32, (2, 4, 4), [(T.F32, x), (T.F32, y)])
    np.testing.assert_array_equal(out, np.matmul(x, y))


@pytest.mark.parametrize("sl,sr", [(S.signed, S.signed), (S.unsigned, S.signed), (S.unsigned, S.unsigned)])
def test_mmai(sl, sr):
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    bm = rng.integers(-128, 128, (32, 16)).astype(np.int8)
    c = np.full((16, 16), 2**31 - 100, np.int32)
    out = run1(lambda b, va, vb, vc: b.op("mmai", [tile(T.I32, 16, 16)], lhs=va, rhs=vb, acc=vc,
                                          signedness_lhs=sl, signedness_rhs=sr).result,
               T.I32, (16, 16), [(T.I8, a), (T.I8, bm), (T.I32, c)])
    av = a.astype(np.int64) if sl == S.signed else a.view(np.uint8).astype(np.int64)
    bv = bm.astype(np.int64) if sr == S.signed else bm.view(np.uint8).astype(np.int64)
    want = (av @ bv + c).astype(np.int64)
    want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)  # wraps in i32
    assert (out == want).all()
