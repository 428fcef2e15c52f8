"""Per-op verifier rules (the hand-written `verify()` of each cuda_tile op).

Every rule is a small function `(ctx, op) -> str | None` returning the message
(the text after "'cuda_tile.<op>' op ") of the first violation.  Shared rules
are built by factories parameterised with data (allowed rounding sets, which
modifiers an op carries, which memory orderings a load/store allows), and
`OP_RULES` maps op names to their rule lists, in the order NVIDIA's tool
checks them.
"""
from __future__ import annotations

from typing import Callable

from . import types as T
from .attrs import (BoolAttr, BoundedAttr, DictAttr, DivByAttr, IntegerAttr, OptimizationHintsAttr,
                    SameElementsAttr)
from .enums import (AtomicRMWMode, IntegerOverflow, MemoryOrderingSemantics as MOS, MemoryScope,
                    RoundingMode as RM, Signedness)
from .verify_types import bit_width, is_view, q, shape_str, view_index_rank, view_tile_type

Rule = Callable[..., "str | None"]


class Fail(Exception):
    """Raised by a rule that wants a non-default severity/op/prefix for its diagnostic."""

    def __init__(self, message: str, op_name: str | None = None, severity: str = "error",
                 with_op: bool = True, at=None, then: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.then = then
        self.op_name = op_name
        self.at = at  # the op the diagnostic is attached to, when not the verified op
        self.severity = severity
        self.with_op = with_op


def _elem(t):
    return t.elem if isinstance(t, T.TileType) else t


def _operand(op, name):
    return op.operands.get(name)


def _result_type(op, i=0):
    return op.results[i].type if len(op.results) > i else None


def _rm_list(modes) -> str:
    return "[" + ", ".join(m.name for m in modes) + "]"


def _is_f32(t) -> bool:
    return isinstance(t, T.FloatType) and t.name == "f32"


# ---------------------------------------------------------------------------
# floating-point modifiers
# ---------------------------------------------------------------------------

IEEE = (RM.nearest_even, RM.zero, RM.negative_inf, RM.positive_inf)
DIVF_MODES = IEEE + (RM.approx, RM.full)
SQRT_MODES = IEEE + (RM.approx,)
APPROX_FULL = (RM.full, RM.approx)
DIVI_MODES = (RM.zero, RM.negative_inf, RM.positive_inf)


def rounding_in(allowed, attr="rounding_mode", default=None, shown=None) -> Rule:
    """The op's rounding mode must be one of `allowed` (the message lists `shown`, default `allowed`)."""
    text = _rm_list(shown or allowed)

    def rounding_mode_allowed(ctx, op):
        mode = op.attrs.get(attr, default)
        if mode is not None and mode not in allowed:
            return f"invalid rounding mode specified, expect one of {text}"
        return None
    return rounding_mode_allowed


def ftz_only_f32(ctx, op):
    """flush_to_zero is only allowed on f32 results."""
    ty = _elem(_result_type(op))
    if op.attrs.get("flush_to_zero") and not _is_f32(ty):
        return f"flush_to_zero modifier only supported for f32 data type, but got: {q(ty)}"
    return None


def approx_only_f32(attr="rounding_mode", default=None) -> Rule:
    def approx_only_f32(ctx, op):
        ty = _elem(_result_type(op))
        if op.attrs.get(attr, default) == RM.approx and not _is_f32(ty):
            return f"approx modifier only supported for f32 data type, but got: {q(ty)}"
        return None
    return approx_only_f32


def div_sqrt_modifiers(ctx, op):
    """verifyDivSqrtCommonFPModifiers: approx/full need f32 and exclude an IEEE rounding."""
    mode = op.attrs.get("rounding_mode")
    approx, full = mode == RM.approx, mode == RM.full
    ty = _elem(_result_type(op))
    if _is_f32(ty):
        return None
    for modifier, used in (("flush_to_zero", op.attrs.get("flush_to_zero")), ("approx", approx), ("full", full)):
        if used:
            return f"{modifier} modifier only supported for f32 data type, but got: {q(ty)}"
    return None


def divi_unsigned_floor(ctx, op):
    if op.attrs.get("rounding", RM.zero) == RM.negative_inf and op.attrs.get("signedness") == Signedness.unsigned:
        return "rounding mode 'negative_inf' is not allowed with 'unsigned' flag"
    return None


def negi_no_nuw(ctx, op):
    if op.attrs.get("overflow") == IntegerOverflow.no_unsigned_wrap:
        return "'no_unsigned_wrap' overflow flag is not supported"
    return None


# ---------------------------------------------------------------------------
# conversions
# ---------------------------------------------------------------------------

def _conv_elems(op):
    src = op.operand_values()[0].type
    return _elem(src), _elem(_result_type(op))


def exti_widens(ctx, op):
    frm, to = _conv_elems(op)
    if to.width <= frm.width:
        return "extending to smaller or identical integer"
    return None


def trunci_narrows(ctx, op):
    frm, to = _conv_elems(op)
    if to.width >= frm.width:
        return "truncating to larger or identical integer"
    return None


# APFloat semantics: (maxExponent, minExponent, precision)
FLOAT_SEMANTICS = {
    "f16": (15, -14, 11), "bf16": (127, -126, 8), "f32": (127, -126, 24), "tf32": (127, -126, 11),
    "f64": (1023, -1022, 53), "f8E4M3FN": (8, -6, 4), "f8E5M2": (15, -14, 3), "f8E8M0FNU": (127, -127, 1),
    "f4E2M1FN": (2, 0, 2), "fnv8E5M3FNU": (15, -14, 4),
}
LOW_PRECISION = ("f8E4M3FN", "f8E5M2", "f4E2M1FN", "fnv8E5M3FNU")


def representable_by(a: str, b: str) -> bool:
    """APFloatBase::isRepresentableBy: every value of `a` is exactly a value of `b`."""
    amax, amin, ap = FLOAT_SEMANTICS[a]
    bmax, bmin, bp = FLOAT_SEMANTICS[b]
    return amax <= bmax and amin >= bmin and ap <= bp


def ftof_not_noop(ctx, op):
    """ftof: not a no-op; rounding allowed by the kind of conversion (13.5 rules)."""
    src_t, dst_t = op.operands["from"].type, _result_type(op)
    if src_t == dst_t:
        return "converting tiles must not be a no-op"
    mode = op.attrs.get("rounding_mode", RM.nearest_even)
    src, dst = str(_elem(src_t)), str(_elem(dst_t))
    if dst == "f8E8M0FNU":
        if mode not in (RM.zero, RM.positive_inf):
            return ("invalid rounding mode specified for conversion to f8E8M0FNU. Only 'zero' and "
                    "'positive_inf' are supported")
    elif dst in LOW_PRECISION:
        if mode != RM.nearest_even:
            return ("invalid rounding mode specified for conversion to low-precision type. Only "
                    "'nearest_even' is supported")
    elif src == "f32" and dst == "tf32":
        if mode not in (RM.nearest_even, RM.zero, RM.nearest_away):
            return ("invalid rounding mode specified for conversion from f32 to tf32. Only 'nearest_even', "
                    "'zero', and 'nearest_away' are supported")
    elif src in FLOAT_SEMANTICS and dst in FLOAT_SEMANTICS and not representable_by(src, dst):
        if mode not in (RM.nearest_even, RM.zero):
            return ("invalid rounding mode specified. Only 'nearest_even' and 'zero' are supported for "
                    "narrowing conversions to standard types")
    elif src in FLOAT_SEMANTICS and dst in FLOAT_SEMANTICS:
        if mode not in IEEE_ROUNDING:
            return ("invalid rounding mode specified for widening conversion. Only IEEE float rounding modes "
                    "are supported: 'nearest_even', 'zero', 'negative_inf', 'positive_inf', 'nearest_away'")
    return None


# the rounding modes IEEE 754 defines (a widening conversion is exact, but the mode must still be one of them)
IEEE_ROUNDING = (RM.nearest_even, RM.zero, RM.negative_inf, RM.positive_inf, RM.nearest_away)


def itof_rounding(ctx, op):
    if _elem(_result_type(op)) == T.F8E8M0FNU:
        return ("integer to f8E8M0FNU conversion is not supported, please first convert to another "
                "float type")
    if op.attrs.get("rounding_mode") != RM.nearest_even:
        return "invalid rounding mode specified. Only 'nearest_even' is supported"
    return None


def ftoi_rounding(ctx, op):
    if op.attrs.get("rounding_mode") != RM.nearest_int_to_zero:
        return "invalid rounding mode specified. Only 'nearest_int_to_zero' is supported"
    return None


def bitcast_equal_width(ctx, op):
    src_t, res_t = op.operands["source"].type, _result_type(op)
    a, b = bit_width(_elem(src_t)), bit_width(_elem(res_t))
    if a != b:
        return (f"types must be equal width, cannot convert {q(src_t)} of width {a} to type {q(res_t)} "
                f"of width {b}")
    return None


def _tile_bits(t: T.TileType) -> int:
    e = t.elem
    w = 1 if e == T.I1 else 32 if e == T.TF32 else e.width
    return w * t.num_elements()


def pack_unpack_sizes(ctx, op):
    src, res = op.operands["source"].type, _result_type(op)
    if src.rank != 1:
        return "expects source and result to be rank-1 tiles"
    if src.elem.width == res.elem.width:
        return "expects source and result to have different element type widths"
    sb, rb = _tile_bits(src), _tile_bits(res)
    if sb % 8:
        return "expects source tile to be byte-aligned"
    if rb % 8:
        return "expects result tile to be byte-aligned"
    if sb != rb:
        return (f"expects source and result to have the same size in bytes, but got source tile size "
                f"{sb // 8} bytes and result tile size {rb // 8} bytes")
    return None


# ---------------------------------------------------------------------------
# shape ops
# ---------------------------------------------------------------------------

def broadcast_compatible(ctx, op):
    src, res = op.operands["source"].type, _result_type(op)
    for s, r in zip(src.shape, res.shape):
        if s != r and s != 1:
            return (f"expects the shape of source tile to be compatible with that of the result tile, "
                    f"but got: {shape_str(src.shape)} and {shape_str(res.shape)}")
    return None


def reshape_numel(ctx, op):
    if op.operands["source"].type.num_elements() != _result_type(op).num_elements():
        return "expected source tile and result tile to have the same number of elements"
    return None


def cat_shapes(ctx, op):
    dim = op.attrs.get("dim", 0)
    lhs, rhs, res = op.operands["lhs"].type.shape, op.operands["rhs"].type.shape, _result_type(op).shape
    rank = len(lhs)
    if dim < 0 or dim >= rank:
        return f"expect dim to be [0, {rank}), but got: {dim}"
    if lhs[dim] + rhs[dim] != res[dim]:
        return f"invalid concat at position {dim}, expected: {lhs[dim] + rhs[dim]} but got: {res[dim]}"
    for i in range(rank):
        if i == dim:
            continue
        if lhs[i] != rhs[i]:
            return (f"expect lhs and rhs shapes to match at non-concat position {i}, expected: {lhs[i]} "
                    f"but got: {rhs[i]}")
        if lhs[i] != res[i]:
            return (f"expect lhs and result shapes to match at non-concat position {i}, expected: {lhs[i]} "
                    f"but got: {res[i]}")
    return None


def permute_valid(ctx, op):
    src = op.operands["source"].type
    perm = list(op.attrs.get("permutation", ()))
    rank = src.rank
    if rank < 2:
        return f"expects at least rank 2, but got: {rank}"
    if len(perm) != rank:
        return f"expect permutation size ({len(perm)}) to equal the rank of the source ({rank})"
    if len(set(perm)) != len(perm):
        return "expect permutation elements to be unique"
    for i, p in enumerate(perm):
        if p < 0 or p >= rank:
            return f"permutation element at index {i} ({p}) is out of bound [0, {rank})"
    res = _result_type(op).shape
    for i, p in enumerate(perm):
        if res[i] != src.shape[p]:
            return f"result shape invalid at index {i}, expected: {src.shape[p]}, but got: {res[i]}"
    return None


def extract_valid(ctx, op):
    src, res = op.operands["source"].type, _result_type(op)
    if src.elem != res.elem:
        return "source and result element type do not match"
    if src.rank != res.rank:
        return "source and result must have the same rank"
    for i in range(src.rank):
        if res.shape[i] == 0 or src.shape[i] % res.shape[i]:
            return (f"source dimension {i} size ({src.shape[i]}) must be evenly divisible by result "
                    f"dimension {i} size ({res.shape[i]})")
    idx = op.operands.get("indices") or []
    if len(idx) != src.rank:
        return f"expected {src.rank} indices, but got {len(idx)}"
    for i, v in enumerate(idx):
        t = v.type
        if not isinstance(t, T.TileType):
            return f"index {i} must be a Tile type"
        if t.rank != 0:
            return f"index {i} must be a scalar tile, got rank {t.rank}"
        if t.elem != T.I32:
            return f"index {i} must have i32 element type"
    return None


def iota_valid(ctx, op):
    res = _result_type(op)
    if res.rank != 1:
        return "expects result type to be 1-d tile"
    n, w = res.shape[0], res.elem.width
    if w < 64 and n > (1 << w):
        return f"the number of elements {n} exceeds the maximum value of element type {q(res.elem)}"
    return None


def select_no_f4(ctx, op):
    if _elem(_result_type(op)) == T.F4E2M1FN:
        return "cannot operate on sub-byte type F4E2M1FN"
    return None


def join_tokens_count(ctx, op):
    if len(op.operands.get("tokens") or []) < 2:
        return "expect two or more tokens"
    return None


def _format_expr(s: bytes) -> bytes:
    for i in range(1, len(s)):
        if s[i:i + 1] in b"diuoxXeEfFgGaAcsSpn%":
            return s[:i + 1]
    return b""


def print_format(ctx, op):
    s = op.attrs.get("str", b"")
    if isinstance(s, str):
        s = s.encode()
    expected, pos = 0, 0
    while pos < len(s):
        if s[pos:pos + 1] != b"%":
            pos += 1
            continue
        expr = _format_expr(s[pos:])
        if not expr:
            return "found unterminated format expression"
        if expr == b"%%":
            pos += 2
            continue
        expected += 1
        pos += 1
    got = len(op.operands.get("args") or [])
    if expected != got:
        return f"incorrect number of operands: expected {expected}, found {got}"
    return None


# ---------------------------------------------------------------------------
# mma
# ---------------------------------------------------------------------------

def _paren(shape) -> str:
    return shape_str(shape)


def _dim_mismatch(shapes: dict, pairs, lead: str = "") -> str | None:
    """The first (a, i, b, j) of `pairs` where dim i of operand a differs from dim j of operand b, as
    NVIDIA's tool words it (`lead`: its message for the matrix dims starts with a space)."""
    for a, i, b, j in pairs:
        sa, sb = shapes[a], shapes[b]
        if sa[i] != sb[j]:
            return (f"{lead}shape error: dim {i} of {a} ({sa[i]}) and dim {j} of {b} ({sb[j]}) must match, "
                    f"but got {a} shape ({_paren(sa)}) and {b} shape ({_paren(sb)})")
    return None


def mma_shapes(ctx, op):
    shapes = {n: op.operands[n].type.shape for n in ("lhs", "rhs", "acc")}
    if len(shapes["lhs"]) not in (2, 3):
        return "operands must be 2D or 3D tiles"
    b = int(len(shapes["lhs"]) == 3)
    row, col = b, b + 1
    batch = [("lhs", 0, "rhs", 0), ("lhs", 0, "acc", 0)] if b else []
    return (_dim_mismatch(shapes, batch)
            or _dim_mismatch(shapes, [("lhs", col, "rhs", row), ("lhs", row, "acc", row), ("rhs", col, "acc", col)],
                             lead=" "))


# input element type -> allowed accumulator/result element types (MmaFOp::verify)
MMAF_TYPES: dict[str, tuple[str, ...]] = {
    "f4E2M1FN": ("f16", "f32"),
    "f8E4M3FN": ("f16", "f32"),
    "f8E5M2": ("f16", "f32"),
    "f16": ("f16", "f32"),
    "bf16": ("f32",),
    "tf32": ("f32",),
    "f32": ("f32",),
    "f64": ("f64",),
}
MMAI_TYPES: dict[str, tuple[str, ...]] = {"i8": ("i32",)}


def mmaf_types(ctx, op):
    lhs = _elem(op.operands["lhs"].type)
    acc = _elem(op.operands["acc"].type)
    allowed = MMAF_TYPES.get(str(lhs))
    if allowed is None:
        return f"unsupported input element type: {q(lhs)}"
    if str(acc) not in allowed:
        outs = ", ".join(f"'{a}'" for a in allowed)
        return (f"unsupported combination of element types. Input type {q(lhs)} expects "
                f"accumulator/result type to be one of {{{outs}}}, but got {q(acc)}")
    return None


def mmaf_scaled_checks(ctx, op):
    lhs, rhs = op.operands["lhs"].type, op.operands["rhs"].type
    ls, rs = op.operands["lhs_scale"].type, op.operands["rhs_scale"].type
    b = int(lhs.rank == 3)
    row, col = b, b + 1
    L, R, LS, RS = lhs.shape, rhs.shape, ls.shape, rs.shape
    batch = [("lhs", 0, "lhs_scale", 0), ("rhs", 0, "rhs_scale", 0)] if b else []
    err = _dim_mismatch({"lhs": L, "rhs": R, "lhs_scale": LS, "rhs_scale": RS},
                        batch + [("lhs", row, "lhs_scale", row), ("rhs", col, "rhs_scale", col),
                                 ("lhs_scale", col, "rhs_scale", row)])
    if err:
        return err
    le, se = str(lhs.elem), str(ls.elem)
    if se == "f8E4M3FN" and le != "f4E2M1FN":
        return (f"unsupported combination of element types. Scale type {q(ls.elem)} expects lhs and rhs "
                f"element types to be 'f4E2M1FN', but got {q(lhs.elem)}")
    if se == "f8E8M0FNU" and le not in ("f8E4M3FN", "f8E5M2", "f4E2M1FN"):
        return (f"unsupported combination of element types. Scale type {q(ls.elem)} expects lhs and rhs "
                f"element types to be one of {{'f8E4M3FN', 'f8E5M2', 'f4E2M1FN'}}, but got {q(lhs.elem)}")
    k, sk = L[col], LS[col]
    if sk == 0 or k % sk:
        return (f"shape error: dim {col} of lhs_scale ({sk}) must be a divisor of dim {col} of lhs ({k}), "
                f"but got lhs_scale shape ({_paren(LS)}) and lhs shape ({_paren(L)})")
    vec = k // sk
    if le in ("f8E4M3FN", "f8E5M2") and vec != 32:
        return ("shape error: f8 element type requires block scale factor of lhs_scale and rhs_scale to be "
                f"32, but got {vec}")
    if le == "f4E2M1FN":
        if se == "f8E4M3FN" and vec != 16:
            return ("shape error: f4E2M1FN element type with f8E4M3FN scales requires block scale factor of "
                    f"lhs_scale and rhs_scale to be 16, but got {vec}")
        if se == "f8E8M0FNU" and vec not in (16, 32):
            return ("shape error: f4E2M1FN element type with f8E8M0FNU scales requires block scale factor of "
                    f"lhs_scale and rhs_scale to be 16 or 32, but got {vec}")
    return None


# ---------------------------------------------------------------------------
# memory: ordering/scope, pointers, views, atomics
# ---------------------------------------------------------------------------

def memory_model(kind: str, allowed: tuple[MOS, ...]) -> Rule:
    """verifyMemoryModelLoad/Store: allowed orderings; weak forbids a scope, others require one."""
    names = ", ".join(m.name for m in allowed[:-1]) + f", or {allowed[-1].name}"

    def memory_ordering_and_scope(ctx, op):
        sem = op.attrs.get("memory_ordering_semantics")
        scope = op.attrs.get("memory_scope")
        if sem not in allowed:
            return f"expect one of: {names}, but got: {MOS(sem).name}"
        if sem == MOS.weak:
            if scope is not None:
                return f"weak {kind} must not have memory scope"
        elif scope is None:
            return f"memory scope is required for {MOS(sem).name} {kind}"
        return None
    return memory_ordering_and_scope


LOAD_ORDERINGS = (MOS.weak, MOS.relaxed, MOS.acquire)
STORE_ORDERINGS = (MOS.weak, MOS.relaxed, MOS.release)
ATOMIC_ORDERINGS = (MOS.relaxed, MOS.acquire, MOS.release, MOS.acq_rel)


def atomic_ordering(ctx, op):
    if op.attrs.get("memory_ordering_semantics") not in ATOMIC_ORDERINGS:
        return "memory ordering semantics must be one of: relaxed, acquire, release, acq_rel"
    return None


INT_RMW = (AtomicRMWMode.and_, AtomicRMWMode.or_, AtomicRMWMode.xor, AtomicRMWMode.add, AtomicRMWMode.max,
           AtomicRMWMode.min, AtomicRMWMode.umax, AtomicRMWMode.umin)


def _rmw_mode_error(mode, elem) -> str | None:
    sp = AtomicRMWMode(mode).spelling
    if mode in INT_RMW:
        if not (isinstance(elem, T.IntType) and elem.width in (32, 64)):
            return f"'{sp}' works only with integers i32 and i64"
    elif mode == AtomicRMWMode.addf:
        if not (isinstance(elem, T.FloatType) and elem.name in ("f16", "bf16", "f32", "f64")):
            return f"'{sp}' works only with floats f16, bf16, f32, and f64"
    elif mode == AtomicRMWMode.xchg:
        if not isinstance(elem, (T.IntType, T.FloatType)) or elem.width not in (32, 64):
            return f"'{sp}' works only with integers or float of 32 or 64 bitwidth"
    return None


def atomic_rmw_checks(ctx, op):
    pointee = _elem(op.operands["pointers"].type).pointee
    arg_t = op.operands["arg"].type
    el = _elem(arg_t)
    if pointee != el:
        return f"expected pointee type ({q(pointee)}) to match element type of 'arg' ({q(el)})"
    mask = op.operands.get("mask")
    if mask is not None and mask.type.shape != arg_t.shape:
        return "failed to verify that all of {pointers, arg, mask} have same shape"
    err = _rmw_mode_error(op.attrs.get("mode"), el)
    if err:
        return err
    return atomic_ordering(ctx, op)


def atomic_cas_checks(ctx, op):
    pointee = _elem(op.operands["pointers"].type).pointee
    val_t = op.operands["val"].type
    el = _elem(val_t)
    if pointee != el:
        return f"expected pointee type ({q(pointee)}) to match element type of 'val' ({q(el)})"
    if not isinstance(el, (T.IntType, T.FloatType)) or el.width not in (32, 64):
        return "expect only float or integer types with 32 or 64 bit"
    mask = op.operands.get("mask")
    if mask is not None and mask.type.shape != val_t.shape:
        return "failed to verify that all of {pointers, val, cmp and mask} have same shape"
    return atomic_ordering(ctx, op)


def atomic_red_view_checks(ctx, op):
    vt = op.operands["view"].type
    if not is_view(vt):
        return "view operand must be a TileView type"
    if isinstance(vt, T.GatherScatterViewType):
        return "gather_scatter_view is not supported; use partition_view instead"
    if getattr(vt, "padding", None) is not None:
        return "views with padding_value are not supported for atomic reductions"
    vtile = view_tile_type(vt)
    val_t = op.operands["value"].type
    if vtile.elem != _elem(val_t):
        return f"view element type ({q(vtile.elem)}) must match value element type ({q(_elem(val_t))})"
    if vtile.shape != val_t.shape:
        return (f"view tile shape {shape_str(vtile.shape)} must match value shape {shape_str(val_t.shape)} "
                f"for element-wise atomic operations")
    mode = op.attrs.get("mode")
    if mode == AtomicRMWMode.xchg:
        return "atomic_red_view_tko op cannot use xchg operation"
    err = _rmw_mode_error(mode, vtile.elem)
    if err:
        return err
    if op.attrs.get("memory_ordering_semantics") != MOS.relaxed:
        return "only 'relaxed' memory ordering is supported for view-based atomic reductions"
    if op.attrs.get("memory_scope") == MemoryScope.sys:
        return ("memory scope 'sys' is not supported for view-based atomic reductions; use 'tl_blk' or "
                "'device' for TMA compatibility")
    idx = op.operands.get("index") or []
    if len(idx) != vtile.rank:
        return (f"expected {vtile.rank} index operand(s) for view with tile rank {vtile.rank}, "
                f"got {len(idx)}")
    for i, v in enumerate(idx):
        if v.type.shape:
            return f"index operand {i} must be a scalar tile (rank 0), got shape {shape_str(v.type.shape)}"
        if not isinstance(v.type.elem, T.IntType):
            return f"index operand {i} must be a scalar integer tile, got element type {q(v.type.elem)}"
    return None


def view_load_store(tile_of: Callable) -> Rule:
    """verifyViewLoadStoreCommon: index count and tile type from the view, uniform scalar indices."""
    def view_indices_and_tile(ctx, op):
        vt = op.operands["view"].type
        idx = op.operands.get("index") or []
        rank = view_index_rank(vt)
        if len(idx) != rank:
            return f"expected {rank} index operands (based on view type), got {len(idx)}"
        tile_t = tile_of(op)
        want = view_tile_type(vt)
        if tile_t != want:
            return f"expected tile type to be {q(want)} (based on view type), got {q(tile_t)}"
        if idx and isinstance(vt, T.GatherScatterViewType):
            return _gather_scatter_indices(vt, [v.type for v in idx])
        if idx:
            for v in idx:
                if not isinstance(v.type, T.TileType):
                    return f"expected index type to be a tile type, got {q(v.type)}"
                if v.type.rank != 0:
                    return f"expected index type to be a scalar tile, got {q(v.type)}"
            base = idx[0].type
            for i, v in enumerate(idx):
                if v.type != base:
                    return f"expected index type {i} to be the same as other index types ({q(base)}), got {q(v.type)}"
        return None
    return view_indices_and_tile


def inbounds_size(ctx, op):
    """One `inbounds` flag per index operand (13.4+)."""
    flags = op.attrs.get("inbounds")
    n = len(op.operands.get("index") or [])
    if flags is not None and len(flags) != n:
        return f"inbounds size ({len(flags)}) must match the number of index dimensions ({n})"
    return None


def _gather_scatter_indices(vt, types):
    """GatherScatterViewType::verifyIndices: a 1-D index tile at sparse_dim, scalars elsewhere."""
    sd = vt.sparse_dim
    if sd >= len(types):
        return f"gather/scatter dimension {sd} is out of range for index count {len(types)}"
    g = types[sd]
    if not isinstance(g, T.TileType):
        return f"expected index at sparse_dim position {sd} to be a tile type for GatherScatterView"
    if g.rank != 1:
        return (f"expected index at sparse_dim position {sd} to be a 1D tensor for GatherScatterView, "
                f"got rank {g.rank}")
    if g.shape[0] != vt.tile_shape[sd]:
        return (f"expected gather/scatter index size ({g.shape[0]}) to match tile shape at gather/scatter "
                f"dimension {sd} ({vt.tile_shape[sd]})")
    base = None
    for i, t in enumerate(types):
        if i == sd:
            continue
        if not isinstance(t, T.TileType) or t.shape:
            return f"expected index {i} to be a scalar tile for GatherScatterView"
        if base is None:
            base = t
        elif t != base:
            return (f"expected scalar index {i} to have the same type as other scalar indices ({q(base)}), "
                    f"got {q(t)}")
    return None


# ---------------------------------------------------------------------------
# views
# ---------------------------------------------------------------------------

def make_tensor_view_checks(ctx, op):
    res = _result_type(op)
    pointee = _elem(op.operands["base"].type).pointee
    if res.elem != pointee:
        return f"expected pointer to {q(res.elem)} to build tensor_view of this type, got {q(pointee)}"
    shp = op.operands.get("dynamicShape") or []
    strd = op.operands.get("dynamicStrides") or []
    nshape = sum(1 for d in res.shape if d == T.DYNAMIC)
    nstride = sum(1 for d in res.strides if d == T.DYNAMIC)
    if nshape != len(shp):
        return f"expected {nshape} dynamic shape operands, got {len(shp)}"
    if nstride != len(strd):
        return f"expected {nstride} dynamic stride operands, got {len(strd)}"
    base = None
    for what, values in (("shape", shp), ("stride", strd)):
        if values:
            base = base or values[0].type
            for i, v in enumerate(values):
                if v.type != base:
                    return (f"expected dynamic {what} index {i} to be of the same type as the other dynamic values "
                            f"({q(base)}), got {q(v.type)}")
    return _preserves_ptr_attr(_elem(op.operands["base"].type).ptr_attr, res.ptr_attr)


def _preserves_ptr_attr(base: int | None, view: int | None) -> str | None:
    """A tensor_view keeps its base pointer's #cuda_tile.ptr_attr (13.4 modules may carry `none`)."""
    if base is None:
        return None if view is None else "pointer base without ptr_attr cannot produce tensor_view with ptr_attr"
    if view != base:
        from .printer import ptr_attr_name
        return f"tensor_view must preserve ptr_attr from base pointer (#cuda_tile.ptr_attr<{ptr_attr_name(base)}>)"
    return None


def view_of_tensor_view(ctx, op):
    """make_partition_view / make_strided_view / make_gather_scatter_view: operand matches the view's tensor_view."""
    tv = op.operands["tensor_view"].type
    want = _result_type(op).tensor_view
    if tv != want:
        return (f"expected the type of the provided tensor_view value ({q(tv)}) to be the same as the view's "
                f"tensor_view type ({q(want)})")
    return None


def results_per_dim(rank_of: Callable, what: str) -> Rule:
    """One result per dimension of the `src` operand (`rank_of` its type, `what` names that rank)."""
    def result_count(ctx, op):
        rank = rank_of(op.operands["src"].type)
        if len(op.results) != rank:
            return f"expected {rank} results due to {what}, but got {len(op.results)}"
        return None
    return result_count


get_index_space_shape_count = results_per_dim(view_index_rank, "view index space rank")
get_tensor_shape_count = results_per_dim(lambda t: len(t.shape), "tensor rank")


# ---------------------------------------------------------------------------
# assume predicates
# ---------------------------------------------------------------------------

def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def assume_predicate(ctx, op):
    pred = op.attrs.get("predicate")
    t = op.operands["value"].type
    if isinstance(pred, DivByAttr):
        name = "cuda_tile.div_by"
        if not _pow2(pred.divisor):
            return f"'{name}' divisor must be a power of 2"
        if (pred.every is None) != (pred.along is None):
            return f"'{name}' 'every'/'along' must be used in combination"
        if pred.divisor > 4611686018427387904:
            return f"'{name}' divisor is too large"
        if isinstance(t, T.TensorViewType):
            if pred.every is not None:
                return f"'{name}' 'every'/'along' cannot be used if the constrained value is a tensor_view"
            return None
        invalid = f"'{name}' is valid only for tile of integer/pointer or tensor_view values"
        if not isinstance(t, T.TileType):
            return invalid
        if t.rank == 0 and pred.every is not None:
            return f"'{name}' 'every'/'along' cannot be used if the constrained value is a 0D tile"
        if not isinstance(t.elem, (T.PointerType, T.IntType)):
            return invalid
        if pred.every is None:
            return None
        if pred.along < 0 or pred.along >= t.rank:
            return f"'{name}' every_dim ({pred.along}) must be >= 0 and < tile rank ({t.rank})"
        if pred.every < 0 or pred.every > t.shape[pred.along]:
            return (f"expected '{name}' every_dim to be within 0 and the size of the respective dimension "
                    f"({t.shape[pred.along]})")
        return None
    if isinstance(pred, SameElementsAttr):
        name = "cuda_tile.same_elements"
        if not isinstance(t, T.TileType) or not isinstance(t.elem, (T.PointerType, T.IntType)):
            return f"'{name}' is valid only for tile of integer/pointer values"
        if len(pred.values) != t.rank:
            return (f"expected number of values in '{name}' ({len(pred.values)}) to match rank of "
                    f"constrained tile ({t.rank})")
        for i, v in enumerate(pred.values):
            if v < 0 or v > t.shape[i]:
                return (f"expected '{name}' value {i} to be within 0 and the size of the respective dimension "
                        f"({t.shape[i]})")
        return None
    if isinstance(pred, BoundedAttr):
        name = "cuda_tile.bounded"
        if not isinstance(t, T.TileType) or not isinstance(t.elem, T.IntType):
            return f"'{name}' is valid only for tile of integer values"
        w = t.elem.width
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if w > 1 else (-1, 0)
        if pred.lb is not None and not lo <= pred.lb <= hi:
            return f"'{name}' expects lower bound to be within [{lo}, {hi}]"
        if pred.ub is not None and not lo <= pred.ub <= hi:
            return f"'{name}' expects upper bound to be within [{lo}, {hi}]"
        if pred.lb is not None and pred.ub is not None and pred.lb > pred.ub:
            return f"'{name}' expects lower bound to be less than or equal to upper bound"
        return None
    return None


# ---------------------------------------------------------------------------
# misc
# ---------------------------------------------------------------------------

def alloca_alignment(ctx, op):
    align = op.attrs.get("alignment", 0)
    if not _pow2(align):
        return "'alignment' must be power of two"
    pointee = _elem(_result_type(op)).pointee
    size = 1 if pointee == T.I1 else pointee.width // 8
    if align < size:
        return (f"'alignment' ({align}) must be at least the natural size ({size} bytes) for element type "
                f"{q(pointee)}")
    return None


def get_global_symbol(ctx, op):
    name = op.attrs.get("name", b"")
    if isinstance(name, str):
        name = name.encode()
    g = next((g for g in ctx.module.globals if g.name == name), None)
    shown = name.decode(errors="replace")
    if g is None:
        return f"'{shown}' does not reference a valid global"
    gel = _elem(g.type)
    ptr = _elem(_result_type(op))
    if gel != ptr.pointee:
        return f"pointee type of result type {q(ptr)} does not match type {q(gel)} of the global @{shown}"
    return None


# ---------------------------------------------------------------------------
# optimization hints
# ---------------------------------------------------------------------------

HINT_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120",
              "sm_121")
HINT_KEYS = HINT_ARCHS + ("default",)
ENTRY_HINTS = ("num_cta_in_cga", "num_worker_warps_per_cta", "occupancy")
VIEW_HINTS = ("latency", "allow_tma")
PTR_HINTS = ("latency",)
HINTS_FOR_OP = {"entry": ENTRY_HINTS, "load_view_tko": VIEW_HINTS, "store_view_tko": VIEW_HINTS,
                "load_ptr_tko": PTR_HINTS, "store_ptr_tko": PTR_HINTS}


def _int_value(a):
    if isinstance(a, IntegerAttr):
        v = a.value
        w = getattr(a.type, "width", 64)
        if w > 1 and v >= 1 << (w - 1):
            v -= 1 << w
        return v
    return None


def _hint_int(a):
    """IntegerAttr.getInt(): signed value (a bool reads as i1: true is -1)."""
    if isinstance(a, BoolAttr):
        return -1 if a.value else 0
    return _int_value(a)


RESTRICTED_CGA_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89")
# key -> (power-of-two required, min, max)
INT_HINTS = {"num_cta_in_cga": (True, 1, 16), "num_worker_warps_per_cta": (True, 1, 32),
             "latency": (False, 1, 10), "occupancy": (False, 1, 32)}


def hint_problems(op_name: str, hints) -> list[list[str]]:
    """The warnings NVIDIA's tool prints for one hints attribute (with -Wunsupported-hints),
    grouped per architecture entry, entries and keys in sorted (DictionaryAttr) order."""
    groups: list[list[str]] = []
    valid = HINTS_FOR_OP.get(op_name, ())
    for arch, entry in sorted(hints.items, key=lambda kv: kv[0]):
        ctxname = arch.decode(errors="replace")
        if not isinstance(entry, DictAttr):
            continue
        out: list[str] = []
        groups.append(out)
        if ctxname not in HINT_KEYS:
            out.append(f"unknown hint key {ctxname}")
            continue
        for key_b, value in sorted(entry.items, key=lambda kv: kv[0]):
            key = key_b.decode(errors="replace")
            if valid and key not in valid:
                out.append(f"{key} is not known hint for current Operation")
                continue
            where = f"{ctxname}.{key}"
            if key == "allow_tma":
                if not isinstance(value, BoolAttr):
                    out.append(f"boolean value expected for {where}")
                continue
            if key not in INT_HINTS:
                out.append(f"unknown param {key} for {ctxname}")
                continue
            v = _hint_int(value)
            if v is None:
                out.append(f"integer value expected for {where}")
                continue
            pow2, lo, hi = INT_HINTS[key]
            if key == "num_cta_in_cga" and ctxname.startswith(RESTRICTED_CGA_ARCHS):
                if v != 1:
                    out.append(f"value {v} clamped to 1 for {where}")
                continue
            if pow2 and (v <= 0 or v & (v - 1)):
                out.append(f"power-of-2 expected for {where}")
            elif v < lo:
                out.append(f"value {v} clamped to {lo} for {where}")
            elif v > hi:
                out.append(f"value {v} clamped to {hi} for {where}")
    return groups


def hints_shape(hints, op_name: str = "") -> str | None:
    """Each target's entry of optimization hints must be a dictionary."""
    if hints is None:
        return None
    from .printer import diagnostic_attr_str
    for arch, entry in hints.items:
        if not isinstance(entry, DictAttr):
            return (f"expected dictionary attribute for optimization_hints entry "
                    f"`{arch.decode(errors='replace')}` got value={diagnostic_attr_str(entry)}")
    return None


def op_hints(ctx, op):
    """Optimization hints on loads/stores: entries must be dictionaries; unknown keys are warnings."""
    hints = op.attrs.get("optimization_hints")
    if not isinstance(hints, OptimizationHintsAttr) or not hints.items:
        return None
    err = hints_shape(hints, op.name)
    if err:
        return err
    return ctx.check_hints(op.name, hints)


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------

def _tile_result(op):
    return _result_type(op)


def _tile_operand(op):
    return op.operands["tile"].type


OP_RULES: dict[str, list[Rule]] = {
    "addf": [rounding_in(IEEE), ftz_only_f32],
    "subf": [rounding_in(IEEE), ftz_only_f32],
    "mulf": [rounding_in(IEEE), ftz_only_f32],
    "fma": [rounding_in(IEEE), ftz_only_f32],
    "divf": [rounding_in(DIVF_MODES), div_sqrt_modifiers],
    "sqrt": [rounding_in(SQRT_MODES), div_sqrt_modifiers],
    "exp": [rounding_in(APPROX_FULL, default=RM.full, shown=(RM.approx, RM.full)), approx_only_f32(default=RM.full)],
    "tanh": [rounding_in(APPROX_FULL, default=RM.full, shown=(RM.approx, RM.full)),
             approx_only_f32(default=RM.full)],
    "exp2": [ftz_only_f32],
    "rsqrt": [ftz_only_f32],
    "maxf": [ftz_only_f32],
    "minf": [ftz_only_f32],
    "divi": [rounding_in(DIVI_MODES, attr="rounding", default=RM.zero), divi_unsigned_floor],
    "negi": [negi_no_nuw],
    "exti": [exti_widens],
    "trunci": [trunci_narrows],
    "ftof": [ftof_not_noop],
    "itof": [itof_rounding],
    "ftoi": [ftoi_rounding],
    "bitcast": [bitcast_equal_width],
    "pack": [pack_unpack_sizes],
    "unpack": [pack_unpack_sizes],
    "broadcast": [broadcast_compatible],
    "reshape": [reshape_numel],
    "cat": [cat_shapes],
    "permute": [permute_valid],
    "extract": [extract_valid],
    "iota": [iota_valid],
    "select": [select_no_f4],
    "join_tokens": [join_tokens_count],
    "print_tko": [print_format],
    "mmaf": [mma_shapes, mmaf_types],
    "mmai": [mma_shapes],
    "mmaf_scaled": [mma_shapes, mmaf_scaled_checks],
    "load_view_tko": [view_load_store(_tile_result), op_hints, inbounds_size, memory_model("load", LOAD_ORDERINGS)],
    "store_view_tko": [view_load_store(_tile_operand), op_hints, inbounds_size,
                       memory_model("store", STORE_ORDERINGS)],
    "load_ptr_tko": [op_hints, memory_model("load", LOAD_ORDERINGS)],
    "store_ptr_tko": [op_hints, memory_model("store", STORE_ORDERINGS)],
    "atomic_rmw_tko": [atomic_rmw_checks],
    "atomic_cas_tko": [atomic_cas_checks],
    "atomic_red_view_tko": [atomic_red_view_checks],
    "make_tensor_view": [make_tensor_view_checks],
    "make_partition_view": [view_of_tensor_view],
    "make_strided_view": [view_of_tensor_view],
    "make_gather_scatter_view": [view_of_tensor_view],
    "get_index_space_shape": [get_index_space_shape_count],
    "get_tensor_shape": [get_tensor_shape_count],
    "assume": [assume_predicate],
    "alloca": [alloca_alignment],
    "get_global": [get_global_symbol],
}
