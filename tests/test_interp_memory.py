"""Interpreter memory: views (padding, masking, dim_map, strided, gather), pointers, atomics, globals,
allocas, argument layouts (strided numpy views, aliasing, read-only) and out-of-bounds detection."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK

from tileiras_async.interp import MemoryFault, UndefinedBehavior
from tileiras_async.interp import numerics as N
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import DenseElements
from tileiras_async.ir.builder import tile
from tileiras_async.ir.core import Global
from tileiras_async.ir.enums import AtomicRMWMode as M
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import MemoryScope
from tileiras_async.ir.enums import PaddingValue as PV


def copy_kernel(elem, n_tile, padding=None, version=(13, 4, 0)):
    tk = TK(version)
    x, y = tk.array(elem, 1), tk.array(elem, 1)
    with tk.body() as b:
        bid = b.bid()[0]
        v = b.load(x, (n_tile,), index=[bid], padding=padding)
        b.store(y, (n_tile,), v, index=[bid])
    return tk


@pytest.mark.parametrize("pad,want", [(PV.zero, 0.0), (PV.neg_zero, -0.0), (PV.nan, np.nan),
                                      (PV.pos_inf, np.inf), (PV.neg_inf, -np.inf), (None, 0.0)])
def test_partial_tile_padding_values(pad, want):
    tk = TK()
    x, y = tk.array(T.F32, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        b.store(y, (16,), b.load(x, (16,), padding=pad))
    xs = np.arange(10, dtype=np.float32) + 1
    ys = np.full(16, 7.0, np.float32)
    tk.run((1,), [xs, ys])
    assert (ys[:10] == xs).all()
    tail = ys[10:]
    if np.isnan(want):
        assert np.isnan(tail).all()
    else:
        assert (tail == want).all() and (np.signbit(tail) == np.signbit(want)).all()


def test_partial_tile_store_is_masked_and_grid_covers_array():
    tk = copy_kernel(T.I32, 64)
    xs = np.arange(1000, dtype=np.int32)
    ys = np.zeros(1000, np.int32)
    rep = tk.run((16,), [xs, ys])
    assert (ys == xs).all()
    assert rep.counters["tile_blocks"] == 16


def test_index_outside_index_space_is_reported():
    tk = copy_kernel(T.I32, 64)
    with pytest.raises(UndefinedBehavior) as ei:
        tk.run((17,), [np.arange(1000, dtype=np.int32), np.zeros(1000, np.int32)])
    msg = str(ei.value)
    assert "'load_view_tko'" in msg and "tile block (16, 0, 0)" in msg and "index space (16,)" in msg


def test_2d_partition_view_with_dim_map_and_padding():
    a = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    tk = TK()
    x, y = tk.array(T.F32, 2), tk.array(T.F32, 2)
    with tk.body() as b:
        # tile (4 x 8) with dim_map [1, 0]: tile dim 0 runs along tensor dim 1 (columns)
        v = b.load(x, (4, 8), index=[0, 0], padding=PV.neg_inf, dim_map=(1, 0))
        b.store(y, (4, 8), v)
    out = np.zeros((4, 8), np.float32)
    tk.run((1,), [a, out])
    want = np.full((4, 8), -np.inf, np.float32)
    want[:3, :5] = a.T
    assert (out == want).all()


def test_index_space_and_tensor_shape_queries():
    tk = TK()
    x, o = tk.array(T.F32, 2), tk.array(T.I32, 1)
    with tk.body() as b:
        pv = b.op("make_partition_view", [b.pview_type(x, (4, 8))], tensor_view=b.tv(x)).result
        s0, s1 = b.op("get_index_space_shape", [tile(T.I32)] * 2, src=pv).results
        t0, t1 = b.op("get_tensor_shape", [tile(T.I32)] * 2, src=b.tv(x)).results
        vals = [b.op("reshape", [tile(T.I32, 1)], source=v).result for v in (s0, s1, t0, t1)]
        c = b.op("cat", [tile(T.I32, 2)], lhs=vals[0], rhs=vals[1], dim=0).result
        d = b.op("cat", [tile(T.I32, 2)], lhs=vals[2], rhs=vals[3], dim=0).result
        b.store(o, (4,), b.op("cat", [tile(T.I32, 4)], lhs=c, rhs=d, dim=0).result)
    out = np.zeros(4, np.int32)
    tk.run((1,), [np.zeros((10, 17), np.float32), out])
    assert out.tolist() == [3, 3, 10, 17]


def test_strided_view_overlapping_tiles():
    tk = TK((13, 3, 0))
    x, y = tk.array(T.I32, 1), tk.array(T.I32, 2)
    with tk.body() as b:
        sv_t = T.StridedViewType((4,), (2,), b.tv(x).type, (0,), PV.zero)
        sv = b.op("make_strided_view", [sv_t], tensor_view=b.tv(x)).result
        bid = b.bid()[0]
        t = b.op("load_view_tko", [tile(T.I32, 4), T.TOKEN], view=sv, index=[bid], token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        b.store(y, (1, 4), b.op("reshape", [tile(T.I32, 1, 4)], source=t).result, index=[bid, 0])
    xs = np.arange(10, dtype=np.int32) * 10
    out = np.full((5, 4), -1, np.int32)
    tk.run((5,), [xs, out])
    want = np.array([[xs[i] if i < 10 else 0 for i in range(2 * k, 2 * k + 4)] for k in range(5)])
    assert (out == want).all()


def test_gather_scatter_view():
    tk = TK((13, 3, 0))
    x, idx, y = tk.array(T.F32, 2), tk.array(T.I32, 1), tk.array(T.F32, 2)
    with tk.body() as b:
        gv_t = T.GatherScatterViewType((4, 8), b.tv(x).type, 0, PV.nan)
        gv = b.op("make_gather_scatter_view", [gv_t], tensor_view=b.tv(x)).result
        rows = b.load(idx, (4,))
        t = b.op("load_view_tko", [tile(T.F32, 4, 8), T.TOKEN], view=gv, index=[rows, b.i32(0)],
                 token=b.token, memory_ordering_semantics=MO.weak).results[0]
        b.store(y, (4, 8), t)
    xs = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    out = np.zeros((4, 8), np.float32)
    tk.run((1,), [xs, np.array([5, 0, 9, 2], np.int32), out])
    assert (out[[0, 1, 3]] == xs[[5, 0, 2]]).all() and np.isnan(out[2]).all()


# ----------------------------------------------------------------------------- argument layouts
def test_non_contiguous_numpy_views_are_read_and_written_in_place():
    tk = TK()
    x, y = tk.array(T.F32, 2), tk.array(T.F32, 2)
    with tk.body() as b:
        v = b.load(x, (4, 4), padding=PV.zero)
        b.store(y, (4, 4), b.op("negf", [tile(T.F32, 4, 4)], source=v).result)
    base_x = np.arange(64, dtype=np.float32).reshape(8, 8)
    base_y = np.full((8, 8), 99.0, np.float32)
    xv = base_x[::2, 1::2]          # strides (2 rows, 2 elements)
    yv = base_y.T[1:5, 2:6]         # a transposed window
    tk.run((1,), [xv, yv])
    assert (yv == -xv).all()
    mask = np.ones((8, 8), bool)
    mask.T[1:5, 2:6] = False
    assert (base_y[mask] == 99.0).all()  # nothing outside the view was touched


def test_gaps_of_a_strided_argument_are_not_accessible():
    tk = TK()
    x, y = tk.array(T.F32, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        # treat the strided 1-D view as dense: the second element is in a gap
        pv_t = T.PartitionViewType((2,), T.TensorViewType(T.F32, (2,), (1,)), (0,))
        tv = b.op("make_tensor_view", [T.TensorViewType(T.F32, (2,), (1,))], base=b.ptr(x),
                  dynamicShape=[], dynamicStrides=[]).result
        pv = b.op("make_partition_view", [pv_t], tensor_view=tv).result
        v = b.op("load_view_tko", [tile(T.F32, 2), T.TOKEN], view=pv, index=[b.i32(0)], token=b.token,
                 memory_ordering_semantics=MO.weak, inbounds=(False,)).results[0]
        b.store(y, (2,), v)
    base = np.arange(8, dtype=np.float32)
    with pytest.raises(MemoryFault, match="between the elements of a strided array"):
        tk.run((1,), [base[::2], np.zeros(2, np.float32)])


def test_aliased_arguments_share_memory():
    tk = TK()
    x, y = tk.array(T.I32, 1), tk.array(T.I32, 1)
    with tk.body() as b:
        v = b.load(x, (8,))
        w = b.load(y, (8,))
        b.store(y, (8,), b.op("addi", [tile(T.I32, 8)], lhs=v, rhs=w, overflow=0).result)
        b.store(x, (8,), b.load(y, (8,)))
    a = np.arange(8, dtype=np.int32)
    tk.run((1,), [a, a])
    assert a.tolist() == [2 * i for i in range(8)]
    buf = np.arange(12, dtype=np.int32)
    tk.run((1,), [buf[0:8], buf[4:12]])  # overlapping windows
    assert buf.tolist() == [4, 6, 8, 10, 12, 14, 16, 18, 12, 14, 16, 18]


def test_read_only_and_broadcast_arguments():
    tk = copy_kernel(T.F32, 8)
    src = np.broadcast_to(np.float32(3.0), (8,))  # zero stride, read-only
    out = np.zeros(8, np.float32)
    tk.run((1,), [src, out])
    assert (out == 3.0).all()
    ro = np.zeros(8, np.float32)
    ro.setflags(write=False)
    with pytest.raises(MemoryFault, match="read-only"):
        tk.run((1,), [np.ones(8, np.float32), ro])


def test_negative_strides_are_rejected():
    from tileiras_async.interp import ArgumentError
    tk = copy_kernel(T.F32, 8)
    with pytest.raises(ArgumentError, match="negative stride"):
        tk.run((1,), [np.arange(8, dtype=np.float32)[::-1], np.zeros(8, np.float32)])


def test_i1_bf16_and_fp8_arrays():
    tk = copy_kernel(T.I1, 8)
    src = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.bool_)
    out = np.zeros(8, np.bool_)
    tk.run((1,), [src, out])
    assert (out == src).all()
    tk = copy_kernel(T.BF16, 4)
    bits = N.compute_to_bits(np.array([1.0, -2.5, 3.0, 0.5], np.float32), T.BF16)
    out = np.zeros(4, np.uint16)
    tk.run((1,), [bits, out])
    assert (out == bits).all()
    tk = TK()
    x, y = tk.array(T.F8E4M3FN, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        v = b.load(x, (4,))
        b.store(y, (4,), b.op("ftof", [tile(T.F32, 4)], **{"from": v}, rounding_mode=0).result)
    out = np.zeros(4, np.float32)
    tk.run((1,), [np.array([0x38, 0xC0, 0x7E, 0x01], np.uint8), out])
    assert out.tolist() == [1.0, -2.0, 448.0, 2.0 ** -9]


# ----------------------------------------------------------------------------- pointers
def ptr_tile(b, p, n, idx=None, elem_idx=T.I64):
    """A tile of n pointers: base + idx (an i64 tile; iota by default)."""
    base = b.op("reshape", [tile(T.PointerType(p.elem), 1)], source=b.ptr(p)).result
    base = b.op("broadcast", [tile(T.PointerType(p.elem), n)], source=base).result
    if idx is None:
        i32 = b.op("iota", [tile(T.I32, n)]).result
        idx = b.op("exti", [tile(T.I64, n)], **{"from": i32}, signedness=1).result
    return b.op("offset", [tile(T.PointerType(p.elem), n)], ptr=base, offset=idx).result


def test_pointer_load_store_with_mask_and_padding():
    tk = TK()
    x, y = tk.array(T.F32, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        px, py = ptr_tile(b, x, 8), ptr_tile(b, y, 8)
        i = b.op("iota", [tile(T.I32, 8)]).result
        m = b.op("cmpi", [tile(T.I1, 8)], lhs=i, rhs=b.const(np.int32(5), T.I32, (8,)),
                 comparison_predicate=2, signedness=1).result  # i < 5
        pad = b.const(np.float32(-1.0), T.F32, (8,))
        v = b.op("load_ptr_tko", [tile(T.F32, 8), T.TOKEN], source=px, mask=m, paddingValue=pad,
                 token=b.token, memory_ordering_semantics=MO.weak).results[0]
        b.op("store_ptr_tko", [T.TOKEN], destination=py, value=v, token=b.token,
             memory_ordering_semantics=MO.weak)
    xs = np.arange(5, dtype=np.float32)  # only 5 elements: masked lanes never touch memory
    ys = np.zeros(8, np.float32)
    tk.run((1,), [xs, ys])
    assert ys.tolist() == [0, 1, 2, 3, 4, -1, -1, -1]


def test_pointer_out_of_bounds_is_an_error_with_details():
    tk = TK()
    x, y = tk.array(T.F32, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        v = b.op("load_ptr_tko", [tile(T.F32, 8), T.TOKEN], source=ptr_tile(b, x, 8), token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        b.op("store_ptr_tko", [T.TOKEN], destination=ptr_tile(b, y, 8), value=v, token=b.token,
             memory_ordering_semantics=MO.weak)
    ys = np.zeros(8, np.float32)
    with pytest.raises(MemoryFault) as ei:
        tk.run((2,), [np.zeros(6, np.float32), ys])
    msg = str(ei.value)
    assert "'load_ptr_tko'" in msg and "tile block (0, 0, 0)" in msg and "tile element (6,)" in msg
    assert "past the end of argument 0" in msg and "2 offending elements" in msg
    assert (ys == 0).all()  # nothing copied back after a fault


def test_int_to_ptr_round_trip_and_foreign_addresses():
    tk = TK()
    x, y = tk.array(T.I64, 1), tk.array(T.I64, 1)
    with tk.body() as b:
        p = b.op("ptr_to_int", [tile(T.I64)], source=b.ptr(x)).result
        q = b.op("addi", [tile(T.I64)], lhs=p, rhs=b.const(np.int64(16), T.I64), overflow=0).result
        pp = b.op("int_to_ptr", [tile(T.PointerType(T.I64))], source=q).result
        r = b.op("reshape", [tile(T.PointerType(T.I64), 1)], source=pp).result
        v = b.op("load_ptr_tko", [tile(T.I64, 1), T.TOKEN], source=r, token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        b.store(y, (1,), v)
    out = np.zeros(1, np.int64)
    tk.run((1,), [np.array([10, 20, 30], np.int64), out])
    assert out[0] == 30
    with pytest.raises(MemoryFault, match="past the end"):
        tk.run((1,), [np.array([10, 20], np.int64), out])


@pytest.mark.parametrize("mode,fn", [(M.add, lambda o, a: o + a), (M.and_, lambda o, a: o & a),
                                     (M.or_, lambda o, a: o | a), (M.xor, lambda o, a: o ^ a),
                                     (M.max, max), (M.min, min), (M.xchg, lambda o, a: a),
                                     (M.umax, lambda o, a: o if (o & 0xFFFFFFFF) >= (a & 0xFFFFFFFF) else a),
                                     (M.umin, lambda o, a: o if (o & 0xFFFFFFFF) <= (a & 0xFFFFFFFF) else a)])
def test_atomic_rmw_modes_with_duplicate_addresses(mode, fn):
    tk = TK()
    mem, idx, arg, old = tk.array(T.I32, 1), tk.array(T.I64, 1), tk.array(T.I32, 1), tk.array(T.I32, 1)
    with tk.body() as b:
        ptrs = ptr_tile(b, mem, 8, b.load(idx, (8,)))
        r = b.op("atomic_rmw_tko", [tile(T.I32, 8), T.TOKEN], pointers=ptrs, arg=b.load(arg, (8,)), mode=mode,
                 token=b.token, memory_ordering_semantics=MO.acq_rel, memory_scope=MemoryScope.device).results[0]
        b.store(old, (8,), r)
    m = np.array([5, -3, 100, 7], np.int32)
    ix = np.array([0, 1, 0, 2, 0, 3, 1, 0], np.int64)
    ag = np.array([1, -2, 3, 4, -5, 6, 7, 8], np.int32)
    olds = np.zeros(8, np.int32)
    want_mem = [int(v) for v in m]
    want_old = []
    for i, a in zip(ix, ag):  # lanes in order
        want_old.append(want_mem[i])
        want_mem[i] = int(np.int32(fn(want_mem[i], int(a)) if mode != M.add else
                                   np.int64(fn(want_mem[i], int(a))).astype(np.int32)))
    mm = m.copy()
    tk.run((1,), [mm, ix, ag, olds])
    assert mm.tolist() == want_mem and olds.tolist() == want_old


def test_atomic_addf_and_cas():
    tk = TK()
    mem, arg, old = tk.array(T.F32, 1), tk.array(T.F32, 1), tk.array(T.F32, 1)
    with tk.body() as b:
        z = b.const(np.zeros(4, np.int64), T.I64, (4,))
        r = b.op("atomic_rmw_tko", [tile(T.F32, 4), T.TOKEN], pointers=ptr_tile(b, mem, 4, z),
                 arg=b.load(arg, (4,)), mode=M.addf, token=b.token, memory_ordering_semantics=MO.relaxed,
                 memory_scope=MemoryScope.device).results[0]
        b.store(old, (4,), r)
    m = np.array([1.0], np.float32)
    olds = np.zeros(4, np.float32)
    tk.run((1,), [m, np.array([1e8, 1.0, -1e8, 0.5], np.float32), olds])
    assert olds.tolist() == [1.0, np.float32(1e8 + 1), np.float32(np.float32(1e8 + 1) + 1), 0.0]
    assert m[0] == np.float32(0.5)

    tk = TK()
    mem, cmp, val, old = (tk.array(T.I32, 1) for _ in range(4))
    with tk.body() as b:
        z = b.const(np.zeros(4, np.int64), T.I64, (4,))
        r = b.op("atomic_cas_tko", [tile(T.I32, 4), T.TOKEN], pointers=ptr_tile(b, mem, 4, z),
                 cmp=b.load(cmp, (4,)), val=b.load(val, (4,)), token=b.token,
                 memory_ordering_semantics=MO.acq_rel, memory_scope=MemoryScope.device).results[0]
        b.store(old, (4,), r)
    m = np.array([0], np.int32)
    olds = np.zeros(4, np.int32)
    tk.run((1,), [m, np.array([0, 0, 1, 5], np.int32), np.array([1, 9, 2, 7], np.int32), olds])
    assert olds.tolist() == [0, 1, 1, 2] and m[0] == 2


# ----------------------------------------------------------------------------- globals, allocas
def test_globals_are_initialised_and_writable():
    tk = TK()
    y = tk.array(T.I32, 1)
    gt = tile(T.I32, 4)
    tk.mb.module.globals.append(Global(b"table", gt, DenseElements(gt, np.array([4, 3, 2, 1], np.int32).tobytes())))
    with tk.body() as b:
        g = b.op("get_global", [tile(T.PointerType(T.I32))], name=b"table").result
        base = b.op("reshape", [tile(T.PointerType(T.I32), 1)], source=g).result
        base = b.op("broadcast", [tile(T.PointerType(T.I32), 4)], source=base).result
        i32 = b.op("iota", [tile(T.I32, 4)]).result
        ptrs = b.op("offset", [tile(T.PointerType(T.I32), 4)], ptr=base, offset=i32).result
        v = b.op("load_ptr_tko", [tile(T.I32, 4), T.TOKEN], source=ptrs, token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        v2 = b.op("muli", [tile(T.I32, 4)], lhs=v, rhs=v, overflow=0).result
        b.op("store_ptr_tko", [T.TOKEN], destination=ptrs, value=v2, token=b.token,
             memory_ordering_semantics=MO.weak)
        b.store(y, (4,), v)
    out = np.zeros(4, np.int32)
    tk.run((1,), [out])
    assert out.tolist() == [4, 3, 2, 1]
    tk.run((2,), [out])  # the second tile block sees the first one's writes
    assert out.tolist() == [16, 9, 4, 1]


def test_alloca_is_private_scratch_memory():
    tk = TK((13, 3, 0))
    y = tk.array(T.F32, 1)
    with tk.body() as b:
        p = b.op("alloca", [tile(T.PointerType(T.F32))], num_elem=8, alignment=16).result
        base = b.op("reshape", [tile(T.PointerType(T.F32), 1)], source=p).result
        base = b.op("broadcast", [tile(T.PointerType(T.F32), 8)], source=base).result
        ptrs = b.op("offset", [tile(T.PointerType(T.F32), 8)], ptr=base, offset=b.op("iota", [tile(T.I32, 8)]).result).result
        b.op("store_ptr_tko", [T.TOKEN], destination=ptrs, value=b.const(np.float32(2.5), T.F32, (8,)),
             token=b.token, memory_ordering_semantics=MO.weak)
        v = b.op("load_ptr_tko", [tile(T.F32, 8), T.TOKEN], source=ptrs, token=b.token,
                 memory_ordering_semantics=MO.weak).results[0]
        b.store(y, (8,), v)
    out = np.zeros(8, np.float32)
    tk.run((3,), [out])
    assert (out == 2.5).all()


@pytest.mark.parametrize("engine", ["interpret", "emulate"])
def test_gather_scatter_view_dense_indices_are_element_offsets(engine):
    """Dense dimensions of a gather/scatter view take element offsets (cuTile's ct.Slice start): columns
    3..10 of the selected rows, the two past the end read the padding value; a scatter writes the same
    window back, skipping them (the emulator runs the compiled kernel: codegen/lower_gather.py)."""
    from tileiras_async import run_kernel
    tk = TK((13, 3, 0))
    x, idx, y = tk.array(T.F32, 2), tk.array(T.I32, 1), tk.array(T.F32, 2)
    with tk.body() as b:
        rows = b.load(idx, (4,))
        gv = b.op("make_gather_scatter_view", [T.GatherScatterViewType((4, 8), b.tv(x).type, 0, PV.neg_inf)],
                  tensor_view=b.tv(x)).result
        t, tok = b.op("load_view_tko", [tile(T.F32, 4, 8), T.TOKEN], view=gv, index=[rows, b.i32(3)],
                      token=b.token, memory_ordering_semantics=MO.weak).results
        sv = b.op("make_gather_scatter_view", [T.GatherScatterViewType((4, 8), b.tv(y).type, 0, None)],
                  tensor_view=b.tv(y)).result
        b.op("store_view_tko", [T.TOKEN], tile=t, view=sv, index=[rows, b.i32(3)], token=tok,
             memory_ordering_semantics=MO.weak)
    xs = np.arange(6 * 9, dtype=np.float32).reshape(6, 9)
    ys = np.zeros((6, 9), np.float32)
    sel = np.array([4, 0, 5, 2], np.int32)
    run_kernel(tk.bytes(), (1,), [xs, sel, ys], engine=engine, gpu_name="sm_90")
    want = np.zeros((6, 9), np.float32)
    want[sel, 3:9] = xs[sel, 3:9]
    assert (ys == want).all()
