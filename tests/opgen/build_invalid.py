"""Invalid-module corpus: bytecode that the byte-level reader parses but the
verifier (or the reader's type/attribute checks) rejects.

Each case is built with the real producer (cuda.tile._bytecode) and run through
the real ``tileirdisasm`` and ``tileiras --gpu-name sm_100``; the rc/stderr are
stored as ``<name>.expected.json``.  Cases whose stderr is not a verifier/reader
diagnostic (or that the tools accept) are dropped and reported.

Called from build_ops.py; can also run standalone:
    python tests/opgen/build_invalid.py [--out tests/data/ops/invalid]
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cuda.tile._bytecode as bc  # noqa: E402
from tilebc import (  # noqa: E402
    MEM, ORD, OVF, PAD, PRED, RM, RMW, SCOPE, SGN, Module, run_tool, sha256,
    tool_env,
)

CASES = []  # (name, version, debug, description, fn)


def case(name, desc, version="13.4", debug=False):
    def deco(fn):
        CASES.append((name, version, debug, desc, fn))
        return fn
    return deco


def simple(m: Module, body, params=(), hints=None, name="bad"):
    m.kernel(name, [p(m) if callable(p) else p for p in params], hints=hints,
             body=lambda *a: body(m, *a))


# ---------------------------------------------------------------- types
@case("tile_dim_not_pow2", "tile<3xf32> (dimension not a power of two)")
def _(m):
    simple(m, lambda m: m.const("f32", (3,), 1.0))


@case("tile_zero_dim", "tile<0xi32> (zero dimension)")
def _(m):
    simple(m, lambda m: m.e.Iota(m.tile("i32", (0,))))


@case("tile_too_many_elements", "tile<4096x8192xi8> (> 16777216 elements)")
def _(m):
    simple(m, lambda m: m.const("i8", (4096, 8192), 0))


@case("tile_f4_odd_elements", "tile<1xf4E2M1FN> (odd f4 element count)", version="13.3")
def _(m):
    simple(m, lambda m: m.e.FToF(m.tile("f4E2M1FN", (1,)), m.const("f32", (1,), 1.0),
                                 RM.NEAREST_EVEN))


@case("entry_nonscalar_arg", "entry parameter of type tile<4xf32>")
def _(m):
    simple(m, lambda m, x: None, params=[lambda m: m.tile("f32", (4,))])


# ---------------------------------------------------------------- float modifiers
@case("ftz_on_f16", "addf flush_to_zero on f16", debug=True)
def _(m):
    def b(m):
        c = m.const("f16", (4,), 1.0)
        m.e.AddF(m.tile("f16", (4,)), c, c, RM.NEAREST_EVEN, True)
    simple(m, b)


@case("approx_on_f16", "divf rounding<approx> on f16")
def _(m):
    def b(m):
        c = m.const("f16", (4,), 1.0)
        m.e.DivF(m.tile("f16", (4,)), c, c, RM.APPROX, False)
    simple(m, b)


@case("full_on_f64", "divf rounding<full> on f64")
def _(m):
    def b(m):
        c = m.const("f64", (4,), 1.0)
        m.e.DivF(m.tile("f64", (4,)), c, c, RM.FULL, False)
    simple(m, b)


@case("addf_rounding_approx", "addf rounding<approx> (IEEE modes only)")
def _(m):
    def b(m):
        c = m.const("f32", (4,), 1.0)
        m.e.AddF(m.tile("f32", (4,)), c, c, RM.APPROX, False)
    simple(m, b)


@case("sqrt_rounding_full", "sqrt rounding<full>")
def _(m):
    def b(m):
        c = m.const("f32", (4,), 1.0)
        m.e.Sqrt(m.tile("f32", (4,)), c, RM.FULL, False)
    simple(m, b)


@case("exp_rounding_nearest_even", "exp rounding<nearest_even> (approx/full only)", version="13.3")
def _(m):
    def b(m):
        c = m.const("f32", (4,), 1.0)
        m.e.Exp(m.tile("f32", (4,)), c, RM.NEAREST_EVEN)
    simple(m, b)


@case("tanh_approx_on_f64", "tanh rounding<approx> on f64", version="13.2")
def _(m):
    def b(m):
        c = m.const("f64", (4,), 1.0)
        m.e.TanH(m.tile("f64", (4,)), c, RM.APPROX)
    simple(m, b)


# ---------------------------------------------------------------- integer / conversions
@case("divi_unsigned_negative_inf", "divi unsigned rounding<negative_inf>", debug=True)
def _(m):
    def b(m):
        c = m.const("i32", (4,), 7)
        m.e.DivI(m.tile("i32", (4,)), c, c, SGN.Unsigned, RM.NEGATIVE_INF)
    simple(m, b)


@case("divi_rounding_nearest_even", "divi rounding<nearest_even>")
def _(m):
    def b(m):
        c = m.const("i32", (4,), 7)
        m.e.DivI(m.tile("i32", (4,)), c, c, SGN.Signed, RM.NEAREST_EVEN)
    simple(m, b)


@case("negi_no_unsigned_wrap", "negi overflow<no_unsigned_wrap>", version="13.2")
def _(m):
    def b(m):
        c = m.const("i32", (4,), 7)
        m.e.NegI(m.tile("i32", (4,)), c, OVF.NUW)
    simple(m, b)


@case("exti_narrowing", "exti i32 -> i16")
def _(m):
    simple(m, lambda m: m.e.ExtI(m.tile("i16", (4,)), m.const("i32", (4,), 1), SGN.Signed))


@case("trunci_widening", "trunci i16 -> i32")
def _(m):
    simple(m, lambda m: m.e.TruncI(m.tile("i32", (4,)), m.const("i16", (4,), 1), OVF.NONE))


@case("bitcast_width_mismatch", "bitcast f32 -> i16")
def _(m):
    simple(m, lambda m: m.e.Bitcast(m.tile("i16", (4,)), m.const("f32", (4,), 1.0)))


@case("ftof_noop", "ftof f32 -> f32")
def _(m):
    simple(m, lambda m: m.e.FToF(m.tile("f32", (4,)), m.const("f32", (4,), 1.0), RM.NEAREST_EVEN))


@case("itof_rounding_zero", "itof rounding<zero>")
def _(m):
    simple(m, lambda m: m.e.IToF(m.tile("f32", (4,)), m.const("i32", (4,), 1), SGN.Signed,
                                 RM.ZERO))


@case("ftoi_rounding_nearest_even", "ftoi rounding<nearest_even>")
def _(m):
    simple(m, lambda m: m.e.FToI(m.tile("i32", (4,)), m.const("f32", (4,), 1.0), SGN.Signed,
                                 RM.NEAREST_EVEN, False))


# ---------------------------------------------------------------- shapes
@case("cat_dim_out_of_range", "cat dim = 2 on rank-2 tiles")
def _(m):
    def b(m):
        c = m.const("i32", (2, 4), 1)
        m.e.Cat(m.tile("i32", (4, 4)), c, c, 2)
    simple(m, b)


@case("permute_not_a_permutation", "permute [0, 0]")
def _(m):
    simple(m, lambda m: m.e.Permute(m.tile("i32", (2, 4)), m.const("i32", (2, 4), 1), [0, 0]))


@case("permute_rank1", "permute on a rank-1 tile")
def _(m):
    simple(m, lambda m: m.e.Permute(m.tile("i32", (4,)), m.const("i32", (4,), 1), [0]))


@case("reshape_count_mismatch", "reshape tile<8xf32> -> tile<4xf32>")
def _(m):
    simple(m, lambda m: m.e.Reshape(m.tile("f32", (4,)), m.const("f32", (8,), 1.0)))


@case("broadcast_incompatible", "broadcast tile<2x4> -> tile<4x8>")
def _(m):
    simple(m, lambda m: m.e.Broadcast(m.tile("f32", (4, 8)), m.const("f32", (2, 4), 1.0)))


@case("extract_not_divisible", "extract tile<8xf32> -> tile<16xf32>")
def _(m):
    def b(m):
        i = m.const("i32", (), [0])
        m.e.Extract(m.tile("f32", (16,)), m.const("f32", (8,), 1.0), [i])
    simple(m, b)


@case("iota_rank2", "iota producing a rank-2 tile")
def _(m):
    simple(m, lambda m: m.e.Iota(m.tile("i32", (2, 4))))


@case("iota_overflow_i8", "iota tile<512xi8> (more elements than i8 values)")
def _(m):
    simple(m, lambda m: m.e.Iota(m.tile("i8", (512,))))


# ---------------------------------------------------------------- memory
def _ptrs(m, p, elem="f32", n=4):
    pt = m.tptr(elem, (n,))
    b = m.e.Broadcast(pt, m.e.Reshape(m.tptr(elem, (1,)), p))
    return m.e.Offset(pt, b, m.e.Iota(m.tile("i32", (n,))))


@case("load_weak_with_scope", "load_ptr_tko weak with memory scope")
def _(m):
    def b(m, p):
        m.e.LoadPtrTko(m.tile("f32", (4,)), m.token, _ptrs(m, p), None, None, None,
                       MEM.WEAK, SCOPE.DEVICE, None)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("load_relaxed_without_scope", "load_ptr_tko relaxed without memory scope")
def _(m):
    def b(m, p):
        m.e.LoadPtrTko(m.tile("f32", (4,)), m.token, _ptrs(m, p), None, None, None,
                       MEM.RELAXED, None, None)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("load_ordering_release", "load_ptr_tko release device")
def _(m):
    def b(m, p):
        m.e.LoadPtrTko(m.tile("f32", (4,)), m.token, _ptrs(m, p), None, None, None,
                       MEM.RELEASE, SCOPE.DEVICE, None)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("store_ordering_acquire", "store_ptr_tko acquire device", debug=True)
def _(m):
    def b(m, p):
        m.e.StorePtrTko(m.token, _ptrs(m, p), m.const("f32", (4,), 1.0), None, None,
                        MEM.ACQUIRE, SCOPE.DEVICE, None)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("store_mask_shape_mismatch", "store_ptr_tko with mask of a different shape")
def _(m):
    def b(m, p):
        m.e.StorePtrTko(m.token, _ptrs(m, p), m.const("f32", (4,), 1.0),
                        m.const("i1", (8,), 1), None, MEM.WEAK, None, None)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("atomic_rmw_weak", "atomic_rmw_tko with weak ordering")
def _(m):
    def b(m, p):
        m.e.AtomicRMWTko(m.tile("i32", (4,)), m.token, _ptrs(m, p, "i32"), m.const("i32", (4,), 1),
                         None, None, MEM.WEAK, SCOPE.DEVICE, RMW.ADD)
    simple(m, b, params=[lambda m: m.tptr("i32")])


@case("atomic_rmw_addf_on_i32", "atomic_rmw_tko addf on i32")
def _(m):
    def b(m, p):
        m.e.AtomicRMWTko(m.tile("i32", (4,)), m.token, _ptrs(m, p, "i32"), m.const("i32", (4,), 1),
                         None, None, MEM.RELAXED, SCOPE.DEVICE, RMW.ADDF)
    simple(m, b, params=[lambda m: m.tptr("i32")])


@case("atomic_cas_i16", "atomic_cas_tko on 16-bit elements")
def _(m):
    def b(m, p):
        v = m.const("i16", (4,), 1)
        m.e.AtomicCASTko(m.tile("i16", (4,)), m.token, _ptrs(m, p, "i16"), v, v, None, None,
                         MEM.RELAXED, SCOPE.DEVICE)
    simple(m, b, params=[lambda m: m.tptr("i16")])


@case("atomic_red_view_xchg", "atomic_red_view_tko with xchg", version="13.3")
def _(m):
    def b(m, p):
        tvt = m.tv("i32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        pv = m.e.MakePartitionView(m.pv((4, 4), tvt), tv)
        c0 = m.const("i32", (), [0])
        m.e.AtomicRedViewTko(m.token, pv, [c0, c0], m.const("i32", (4, 4), 1), None, MEM.RELAXED,
                             SCOPE.DEVICE, RMW.XCHG, [False, False])
    simple(m, b, params=[lambda m: m.tptr("i32")])


@case("int_padding_pos_inf", "partition_view padding_value = pos_inf on an i32 tensor_view")
def _(m):
    def b(m, p):
        tvt = m.tv("i32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        m.e.MakePartitionView(m.pv((4, 4), tvt, None, PAD.PosInf), tv)
    simple(m, b, params=[lambda m: m.tptr("i32")])


@case("partition_dim_map_not_injective", "partition_view dim_map = [0, 0]")
def _(m):
    def b(m, p):
        tvt = m.tv("f32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        m.e.MakePartitionView(m.pv((4, 4), tvt, [0, 0]), tv)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("partition_tile_not_pow2", "partition_view tile=(3x4)")
def _(m):
    def b(m, p):
        tvt = m.tv("f32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        m.e.MakePartitionView(m.pv((3, 4), tvt), tv)
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("make_tensor_view_wrong_pointee", "make_tensor_view of f16 from ptr<f32>")
def _(m):
    def b(m, p):
        m.e.MakeTensorView(m.tv("f16", (16,), (1,)), p, [], [])
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("make_tensor_view_dyn_count", "make_tensor_view with one dynamic dim but no operand")
def _(m):
    def b(m, p):
        m.e.MakeTensorView(m.tv("f32", (bc.DYNAMIC_SHAPE,), (1,)), p, [], [])
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("load_view_index_count", "load_view_tko with 1 index on a rank-2 view")
def _(m):
    def b(m, p):
        tvt = m.tv("f32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        pvt = m.pv((4, 4), tvt)
        pv = m.e.MakePartitionView(pvt, tv)
        c0 = m.const("i32", (), [0])
        m.e.LoadViewTko(m.tile("f32", (4, 4)), m.token, pv, [c0], None, MEM.WEAK, None, None,
                        [False])
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("load_view_wrong_tile", "load_view_tko result tile<8x8> from a 4x4 partition")
def _(m):
    def b(m, p):
        tvt = m.tv("f32", (16, 16), (16, 1))
        tv = m.e.MakeTensorView(tvt, p, [], [])
        pv = m.e.MakePartitionView(m.pv((4, 4), tvt), tv)
        c0 = m.const("i32", (), [0])
        m.e.LoadViewTko(m.tile("f32", (8, 8)), m.token, pv, [c0, c0], None, MEM.WEAK, None, None,
                        [False, False])
    simple(m, b, params=[lambda m: m.tptr("f32")])


# ---------------------------------------------------------------- mma
@case("mmaf_bad_type_pair", "mmaf bf16 x bf16 -> f16 accumulator")
def _(m):
    def b(m):
        a = m.const("bf16", (16, 16), 1.0)
        c = m.const("f16", (16, 16), 0.0)
        m.e.MmaF(m.tile("f16", (16, 16)), a, a, c, False)
    simple(m, b)


@case("mmaf_k_mismatch", "mmaf lhs 16x32 rhs 16x16")
def _(m):
    def b(m):
        a = m.const("f16", (16, 32), 1.0)
        bb = m.const("f16", (16, 16), 1.0)
        c = m.const("f32", (16, 16), 0.0)
        m.e.MmaF(m.tile("f32", (16, 16)), a, bb, c, False)
    simple(m, b)


@case("mmai_rank1", "mmai on rank-1 tiles")
def _(m):
    def b(m):
        a = m.const("i8", (16,), 1)
        c = m.const("i32", (16,), 0)
        m.e.MmaI(m.tile("i32", (16,)), a, a, c, SGN.Signed, SGN.Signed)
    simple(m, b)


# ---------------------------------------------------------------- regions
@case("reduce_body_wrong_arg_count", "reduce body with 1 block argument instead of 2")
def _(m):
    def b(m):
        sf = m.tile("f32")
        nb = m.e.Reduce([sf], [m.const("f32", (8,), 1.0)], 0, [m.fattr(0.0, "f32")])
        with m.block(nb, [sf]) as (x,):
            m.yld(x)
        nb.done()
    simple(m, b)


@case("reduce_identity_type_mismatch", "reduce over f32 with an i32 identity")
def _(m):
    def b(m):
        sf = m.tile("f32")
        nb = m.e.Reduce([sf], [m.const("f32", (8,), 1.0)], 0, [m.iattr(0, "i32")])
        with m.block(nb, [sf, sf]) as (x, y):
            m.yld(m.e.AddF(sf, x, y, RM.NEAREST_EVEN, False))
        nb.done()
    simple(m, b)


@case("scan_impure_body", "scan body containing a load (not pure)")
def _(m):
    def b(m, p):
        sf = m.tile("f32")
        nb = m.e.Scan([m.tile("f32", (8,))], [m.const("f32", (8,), 1.0)], 0, False,
                      [m.fattr(0.0, "f32")])
        with m.block(nb, [sf, sf]) as (x, y):
            v, _ = m.e.LoadPtrTko(sf, m.token, p, None, None, None, MEM.WEAK, None, None)
            m.yld(v)
        nb.done()
    simple(m, b, params=[lambda m: m.tptr("f32")])


@case("if_results_missing_else", "if with results and an empty else region")
def _(m):
    def b(m, c):
        i32 = m.tile("i32")
        nb = m.e.If([i32], c)
        with m.block(nb):
            m.yld(m.const("i32", (), [1]))
        m.empty_region(nb)
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i1")])


@case("if_yield_count_mismatch", "if with 1 result whose then-branch yields 2 values")
def _(m):
    def b(m, c):
        i32 = m.tile("i32")
        one = m.const("i32", (), [1])
        nb = m.e.If([i32], c)
        with m.block(nb):
            m.yld(one, one)
        with m.block(nb):
            m.yld(one)
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i1")])


@case("non_terminated_block", "if then-block whose last op is not a terminator")
def _(m):
    def b(m, c):
        nb = m.e.If([], c)
        with m.block(nb):
            m.const("i32", (), [1])
        m.empty_region(nb)
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i1")])


@case("break_outside_loop", "break directly inside an if in the entry body")
def _(m):
    def b(m, c):
        nb = m.e.If([], c)
        with m.block(nb):
            m.e.Break([])
        m.empty_region(nb)
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i1")])


@case("for_continue_type_mismatch", "for with an i32 iter value continued with an f32")
def _(m):
    def b(m, n):
        i32 = m.tile("i32")
        z = m.const("i32", (), [0])
        one = m.const("i32", (), [1])
        f = m.const("f32", (), [1.0])
        nb = m.e.For([i32], z, n, one, [z], False)
        with m.block(nb, [i32, i32]):
            m.e.Continue([f])
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i32")])


@case("for_bound_type_mismatch", "for with i32 lower bound and i64 upper bound")
def _(m):
    def b(m, n):
        z = m.const("i32", (), [0])
        one = m.const("i32", (), [1])
        nb = m.e.For([], z, n, one, [], False)
        with m.block(nb, [m.tile("i32")]):
            m.e.Continue([])
        nb.done()
    simple(m, b, params=[lambda m: m.tile("i64")])


# ---------------------------------------------------------------- misc
@case("div_by_not_pow2", "assume div_by<12>")
def _(m):
    simple(m, lambda m, x: m.e.Assume(m.tile("i32"), x, bc.DivBy(12)),
           params=[lambda m: m.tile("i32")])


@case("div_by_every_without_along", "assume div_by<4, every 2> without along")
def _(m):
    def b(m):
        it = m.e.Iota(m.tile("i32", (8,)))
        m.e.Assume(m.tile("i32", (8,)), it, bc.DivBy(4, every=2))
    simple(m, b)


@case("bounded_lb_gt_ub", "assume bounded<5, 1>", debug=True)
def _(m):
    simple(m, lambda m, x: m.e.Assume(m.tile("i32"), x, bc.Bounded(5, 1)),
           params=[lambda m: m.tile("i32")])


@case("bounded_on_float", "assume bounded<0, 1> on an f32 value")
def _(m):
    simple(m, lambda m, x: m.e.Assume(m.tile("f32"), x, bc.Bounded(0, 1)),
           params=[lambda m: m.tile("f32")])


@case("join_tokens_single", "join_tokens with a single token")
def _(m):
    def b(m):
        t = m.e.MakeToken(m.token)
        m.e.JoinTokens(m.token, [t])
    simple(m, b)


@case("print_arg_count", "print_tko with two format specifiers and one argument")
def _(m):
    simple(m, lambda m, x: m.e.PrintTko(m.token, [x], None, "%d %d"),
           params=[lambda m: m.tile("i32")])


@case("get_global_undefined", "get_global of a symbol that is not defined")
def _(m):
    simple(m, lambda m: m.e.GetGlobal(m.tptr("f32"), "nope"))


@case("get_global_wrong_pointee", "get_global as ptr<i32> of an f32 global")
def _(m):
    m.define_global("g", "f32", (4,), [1.0, 2.0, 3.0, 4.0])
    simple(m, lambda m: m.e.GetGlobal(m.tptr("i32"), "g"))


# (entry/load hints are NOT verified by the real tools -- sm_75 keys, unknown keys,
#  num_cta_in_cga = 3 are all accepted -- see the valid family `hints_unchecked`.)


@case("select_type_mismatch", "select of an f32 and an i32 tile")
def _(m):
    def b(m):
        c = m.const("i1", (4,), 1)
        m.e.Select(m.tile("f32", (4,)), c, m.const("f32", (4,), 1.0), m.const("i32", (4,), 1))
    simple(m, b)


@case("cmpf_on_integers", "cmpf applied to i32 tiles")
def _(m):
    def b(m):
        c = m.const("i32", (4,), 1)
        m.e.CmpF(m.tile("i1", (4,)), c, c, PRED.EQUAL, ORD.ORDERED)
    simple(m, b)


@case("alloca_alignment_not_pow2", "alloca alignment = 24", version="13.3")
def _(m):
    simple(m, lambda m: m.e.Alloca(m.tptr("f32"), 64, 24, False))


@case("pack_same_width", "pack tile<8xi8> -> tile<8xi8>", version="13.3")
def _(m):
    simple(m, lambda m: m.e.Pack(m.tile("i8", (8,)), m.const("i8", (8,), 1)))


# ---------------------------------------------------------------- debug info
@case("debug_linkage_mismatch", "entry whose DISubprogram linkageName differs from its name",
      debug=True)
def _(m):
    dt = m.w.debug_attr_table
    f = dt.file("k.py", "/src")
    sp = dt.subprogram(f, 10, "kern", "kern_mangled", dt.compile_unit(f), 10)
    floc = dt.loc(sp, "k.py", 10, 1)
    m.kernel("kern", [], body=lambda: None, floc=floc, subprogram=sp)


@case("debug_op_foreign_scope", "op location scoped in another function's DISubprogram",
      debug=True)
def _(m):
    dt = m.w.debug_attr_table
    f = dt.file("k.py", "/src")
    cu = dt.compile_unit(f)
    sp = dt.subprogram(f, 10, "kern", "kern", cu, 10)
    other = dt.subprogram(f, 50, "other", "other", cu, 50)
    floc = dt.loc(sp, "k.py", 10, 1)

    def body():
        with m.at(dt.loc(other, "k.py", 51, 3)):
            m.const("i32", (), [1])
        with m.at(floc):
            m.ret()
    m.kernel("kern", [], body=body, floc=floc, subprogram=sp, terminate=False)


# ---------------------------------------------------------------- driver
def is_diagnostic(stderr: str) -> bool:
    return "error" in stderr and ("failed to read provided Tile IR bytecode" in stderr
                                  or "input does not correspond" in stderr)


def build(out: Path, use_tools=True):
    out.mkdir(parents=True, exist_ok=True)
    home, env = tool_env()
    disasm = str(home / "bin" / "tileirdisasm")
    tileiras = str(home / "bin" / "tileiras")
    entries = []
    dropped = []
    keep_names = set()
    for name, vs, debug, desc, fn in CASES:
        m = Module(vs, name, debug=debug)
        data = m.build(fn)
        path = out / f"{name}.tileirbc"
        path.write_bytes(data)
        entry = {"file": f"invalid/{path.name}", "kind": "invalid_bytecode", "version": vs,
                 "family": "invalid", "case": name, "description": desc,
                 "opcodes": sorted(m.opcodes), "size": len(data), "sha256": sha256(data)}
        if use_tools:
            rc, _so, se = run_tool([disasm, path.name], env, cwd=out)
            with tempfile.TemporaryDirectory() as td:
                trc, _tso, tse = run_tool([tileiras, "--gpu-name", "sm_100", "-o",
                                           str(Path(td) / "x.cubin"), path.name], env, cwd=out)
            if rc == 0 or not is_diagnostic(se):
                dropped.append((name, rc, se, trc, tse))
                path.unlink()
                exp = out / f"{name}.expected.json"
                if exp.exists():
                    exp.unlink()
                continue
            exp = {"rc": rc, "stderr": se, "tileiras_rc": trc, "tileiras_stderr": tse,
                   "version": vs, "description": desc}
            ej = json.dumps(exp, indent=1) + "\n"
            (out / f"{name}.expected.json").write_text(ej)
            entry["expected"] = {"rc": rc, "tileiras_rc": trc}
            entries.append(entry)
            entries.append({"file": f"invalid/{name}.expected.json", "kind": "expected",
                            "version": vs, "family": "invalid", "case": name,
                            "size": len(ej.encode()), "sha256": sha256(ej.encode())})
        else:
            entries.append(entry)
        keep_names.add(name)
    for name, rc, se, trc, tse in dropped:
        print(f"DROPPED invalid case {name}: tileirdisasm rc={rc} stderr={se.strip()[:300]!r} "
              f"tileiras rc={trc}", file=sys.stderr)
    # remove stale files of cases that no longer exist
    for p in out.iterdir():
        stem = p.name.split(".")[0]
        if stem not in keep_names:
            p.unlink()
    return entries


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE.parent / "data" / "ops" / "invalid"))
    a = ap.parse_args()
    es = build(Path(a.out))
    print(f"{sum(1 for e in es if e['kind'] == 'invalid_bytecode')} invalid cases kept")
