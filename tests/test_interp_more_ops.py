"""Interpreter: the remaining ops (grid queries, assume, pack/unpack, view reductions, gdc and fence
tokens, scaled MMA) and unsupported types."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK

from tileiras_async.interp import UndefinedBehavior, UnsupportedOp
from tileiras_async.interp import numerics as N
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import BoundedAttr, DivByAttr
from tileiras_async.ir.builder import tile
from tileiras_async.ir.enums import AtomicRMWMode as M
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import MemoryScope
from tileiras_async.ir.enums import RoundingMode as RM


def test_grid_queries():
    tk = TK()
    o = tk.array(T.I32, 2)
    with tk.body() as b:
        ids = b.bid()
        nums = b.op("get_num_tile_blocks", [tile(T.I32)] * 3).results
        vals = [b.op("reshape", [tile(T.I32, 1)], source=v).result for v in list(ids[:2]) + list(nums[:2])]
        row = b.op("cat", [tile(T.I32, 2)], lhs=vals[0], rhs=vals[1], dim=0).result
        row2 = b.op("cat", [tile(T.I32, 2)], lhs=vals[2], rhs=vals[3], dim=0).result
        four = b.op("cat", [tile(T.I32, 4)], lhs=row, rhs=row2, dim=0).result
        lin = b.op("addi", [tile(T.I32)], lhs=ids[0], rhs=b.op("muli", [tile(T.I32)], lhs=ids[1],
                   rhs=nums[0], overflow=0).result, overflow=0).result
        b.store(o, (1, 4), b.op("reshape", [tile(T.I32, 1, 4)], source=four).result, index=[lin, b.i32(0)])
    out = np.zeros((6, 4), np.int32)
    tk.run((3, 2), [out])
    assert out.tolist() == [[x, y, 3, 2] for y in range(2) for x in range(3)]


def test_assume_violations_are_reported():
    tk = TK()
    s = tk.scalar(T.I32)
    with tk.body() as b:
        b.op("assume", [tile(T.I32)], value=b.scalar(s), predicate=BoundedAttr(0, 100))
        b.op("assume", [tile(T.I32)], value=b.scalar(s), predicate=DivByAttr(4))
    tk.run((1,), [8])
    with pytest.raises(UndefinedBehavior, match=r"bounded<0, 100> does not hold: value -4"):
        tk.run((1,), [-4])
    with pytest.raises(UndefinedBehavior, match=r"div_by<4> does not hold: value 6"):
        tk.run((1,), [6])


def test_pack_unpack():
    tk = TK((13, 3, 0))
    x, y, z = tk.array(T.F32, 1), tk.array(T.I8, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        v = b.load(x, (4,))
        packed = b.op("pack", [tile(T.I8, 16)], source=v).result
        b.store(y, (16,), packed)
        b.store(z, (4,), b.op("unpack", [tile(T.F32, 4)], source=packed).result)
    xs = np.array([1.0, -2.0, 3.5, 1e-3], np.float32)
    ys, zs = np.zeros(16, np.int8), np.zeros(4, np.float32)
    tk.run((1,), [xs, ys, zs])
    assert ys.tobytes() == xs.tobytes() and (zs == xs).all()


def test_atomic_reduction_into_a_view():
    tk = TK((13, 3, 0))
    x, acc = tk.array(T.I32, 1), tk.array(T.I32, 1)
    with tk.body() as b:
        v = b.load(x, (8,), index=[b.bid()[0]])
        pv = b.op("make_partition_view", [b.pview_type(acc, (8,))], tensor_view=b.tv(acc)).result
        b.op("atomic_red_view_tko", [T.TOKEN], view=pv, index=[b.i32(0)], value=v, mode=M.add, token=b.token,
             memory_ordering_semantics=MO.relaxed, memory_scope=MemoryScope.device)
    xs = np.arange(32, dtype=np.int32)
    total = np.full(8, 100, np.int32)
    tk.run((4,), [xs, total])
    assert (total == 100 + xs.reshape(4, 8).sum(0)).all()


def test_gdc_and_fence_ops_are_ordering_only():
    tk = TK((13, 4, 0))
    x = tk.array(T.I32, 1)
    with tk.body() as b:
        t1 = b.op("gdc_wait_tko", [T.TOKEN], token=b.token).result
        t2 = b.op("gdc_launch_dependents_tko", [T.TOKEN], token=t1).result
        b.op("memory_fence_alias_tko", [T.TOKEN], token=t2)
        b.op("join_tokens", [T.TOKEN], tokens=[t1, t2])
        b.store(x, (4,), b.const(np.arange(4, dtype=np.int32), T.I32, (4,)))
    out = np.zeros(4, np.int32)
    tk.run((1,), [out])
    assert out.tolist() == [0, 1, 2, 3]


def test_mmaf_scaled():
    rng = np.random.default_rng(2)
    a = rng.integers(-4, 5, (16, 64)).astype(np.float32)
    bm = rng.integers(-4, 5, (64, 16)).astype(np.float32)
    sa = 2.0 ** rng.integers(-2, 3, (16, 2))
    sb = 2.0 ** rng.integers(-2, 3, (2, 16))
    tk = TK((13, 3, 0))
    pa, pb, psa, psb, po = (tk.array(T.F8E4M3FN, 2), tk.array(T.F8E4M3FN, 2), tk.array(T.F8E8M0FNU, 2),
                            tk.array(T.F8E8M0FNU, 2), tk.array(T.F32, 2))
    with tk.body() as b:
        z = b.const(np.float32(0), T.F32, (16, 16))
        r = b.op("mmaf_scaled", [tile(T.F32, 16, 16)], lhs=b.load(pa, (16, 64)), rhs=b.load(pb, (64, 16)), acc=z,
                 lhs_scale=b.load(psa, (16, 2)), rhs_scale=b.load(psb, (2, 16))).result
        b.store(po, (16, 16), r)
    out = np.zeros((16, 16), np.float32)
    enc = lambda v, t: N.to_storage(N.to_float(v, t), t)
    tk.run((1,), [enc(a, T.F8E4M3FN), enc(bm, T.F8E4M3FN), enc(sa, T.F8E8M0FNU), enc(sb, T.F8E8M0FNU), out])
    want = (a * np.repeat(sa, 32, axis=1)) @ (bm * np.repeat(sb, 32, axis=0))
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_e8m0_conversions_round_up_or_down():
    x = np.array([3.0, 4.0, 0.3, 2.0 ** 130, -1.0])
    rz = N.round_to_format(x, N.FORMATS["f8E8M0FNU"], RM.zero)
    ru = N.round_to_format(x, N.FORMATS["f8E8M0FNU"], RM.positive_inf)
    assert rz[:4].tolist() == [2.0, 4.0, 0.25, 2.0 ** 127] and np.isnan(rz[4])
    assert ru[:4].tolist() == [4.0, 4.0, 0.5, 2.0 ** 127]


def test_unsupported_types_are_refused_up_front():
    tk = TK((13, 3, 0))
    x = tk.array(T.F32, 1)
    with tk.body() as b:
        tv = b.op("make_tensor_view", [T.TensorViewType(T.F4E2M1FN, (8,), (1,))],
                  base=b.op("ptr_to_ptr", [tile(T.PointerType(T.F4E2M1FN))], source=b.ptr(x)).result,
                  dynamicShape=[], dynamicStrides=[]).result
        del tv
    with pytest.raises(UnsupportedOp, match="f4E2M1FN elements in memory are not supported"):
        tk.run((1,), [np.zeros(8, np.float32)])


def test_ptr_to_i1_offsets_by_bytes():
    tk = TK()
    x, y = tk.array(T.I1, 1), tk.array(T.I1, 1)
    with tk.body() as b:
        base = b.op("reshape", [tile(T.PointerType(T.I1), 1)], source=b.ptr(x)).result
        base = b.op("broadcast", [tile(T.PointerType(T.I1), 4)], source=base).result
        ptrs = b.op("offset", [tile(T.PointerType(T.I1), 4)], ptr=base,
                    offset=b.const(np.array([3, 2, 1, 0], np.int32), T.I32, (4,))).result
        v = b.op("load_ptr_tko", [tile(T.I1, 4), T.TOKEN], source=ptrs, token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        b.store(y, (4,), v)
    out = np.zeros(4, np.bool_)
    tk.run((1,), [np.array([1, 0, 0, 1], np.uint8), out])  # any non-zero byte loads as true
    assert out.tolist() == [True, False, False, True]
