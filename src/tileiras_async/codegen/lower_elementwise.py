"""Elementwise ops: one function per op computing one element; the tile plumbing is shared.

The element functions get the emitter, the op, the LLVM element types and the
operand registers, and return the result register.  Every operand arrives in the
result's layout (assign-layouts converted it).
"""
from __future__ import annotations

from collections.abc import Callable

from ..ir import types as T
from ..ir.core import Operation
from ..ir.enums import ComparisonOrdering, IntegerOverflow, Signedness
from ..ir.enums import ComparisonPredicate as P
from ..ir.enums import RoundingMode as RM
from .emitter import KernelEmitter, LoweringError, lowers, target_has
from .llvmir import float_literal
from ..targets import known_target
from ..tilegpu.types import layout_of
from .values import Tile, llvm_type

ElementFn = Callable[[KernelEmitter, Operation, str, list[str]], str]


def elementwise(em: KernelEmitter, op: Operation, operand_names: list[str], fn: ElementFn) -> None:
    res_ty: T.TileType = op.result.type
    layout = layout_of(res_ty)
    tiles: list[Tile] = [em.expect(op.operands[n]) for n in operand_names]
    lt = tiles[0].llvm if tiles else llvm_type(res_ty.elem)
    n = 1 if layout is None else layout.num_registers
    regs = [fn(em, op, lt, [t.regs[0] if t.is_scalar else t.regs[r] for t in tiles]) for r in range(n)]
    em.set(op.result, Tile(res_ty, layout, regs))


def register(names: str, operands: str, fn: ElementFn) -> None:
    operand_names = operands.split()
    for name in names.split():
        lowers(name)(lambda em, op, f=fn, o=operand_names: elementwise(em, op, o, f))


# -- integers -------------------------------------------------------------------------------

_OVERFLOW_FLAGS = {IntegerOverflow.none: "", IntegerOverflow.no_signed_wrap: " nsw",
                   IntegerOverflow.no_unsigned_wrap: " nuw", IntegerOverflow.no_wrap: " nuw nsw"}


def _int_binary(instr: str, flags: bool = False) -> ElementFn:
    def fn(em, op, lt, a):
        f = _OVERFLOW_FLAGS[op.attrs.get("overflow", IntegerOverflow.none)] if flags else ""
        return em.b.value(f"{instr}{f} {lt} {a[0]}, {a[1]}")
    return fn


def _signed(op) -> bool:
    return op.attrs.get("signedness", Signedness.signed) == Signedness.signed


def _by_sign(signed_instr: str, unsigned_instr: str) -> ElementFn:
    return lambda em, op, lt, a: em.b.value(
        f"{signed_instr if _signed(op) else unsigned_instr} {lt} {a[0]}, {a[1]}")


def _minmax(kind: str) -> ElementFn:
    def fn(em, op, lt, a):
        name = f"llvm.{'s' if _signed(op) else 'u'}{kind}.{lt}"
        return em.b.call(lt, name, [(lt, a[0]), (lt, a[1])])
    return fn


def _shift_amount(em, lt, amount: str) -> str:
    return amount


def _divi(em, op, lt, a):
    x, y = a
    rnd = op.attrs.get("rounding", RM.zero)
    signed = _signed(op)
    q = em.b.value(f"{'sdiv' if signed else 'udiv'} {lt} {x}, {y}")
    if rnd == RM.zero or (not signed and rnd == RM.negative_inf):
        return q
    r = em.b.value(f"{'srem' if signed else 'urem'} {lt} {x}, {y}")
    nonzero = em.b.value(f"icmp ne {lt} {r}, 0")
    if signed:
        sign = em.b.value(f"xor {lt} {r}, {y}")
        differ = em.b.value(f"icmp slt {lt} {sign}, 0")
        want = differ if rnd == RM.negative_inf else em.b.value(f"xor i1 {differ}, true")
        adjust = em.b.value(f"and i1 {nonzero}, {want}")
    else:
        adjust = nonzero
    delta = em.b.value(f"select i1 {adjust}, {lt} {-1 if rnd == RM.negative_inf else 1}, {lt} 0")
    return em.b.value(f"add {lt} {q}, {delta}")


def _mulhii(em, op, lt, a):
    width = int(lt[1:])
    wide = f"i{2 * width}"
    ext = "zext"
    x = em.b.value(f"{ext} {lt} {a[0]} to {wide}")
    y = em.b.value(f"{ext} {lt} {a[1]} to {wide}")
    p = em.b.value(f"mul {wide} {x}, {y}")
    h = em.b.value(f"lshr {wide} {p}, {width}")
    return em.b.value(f"trunc {wide} {h} to {lt}")


def _absi(em, op, lt, a):
    return em.b.call(lt, f"llvm.abs.{lt}", [(lt, a[0]), ("i1", "false")])


def _negi(em, op, lt, a):
    f = _OVERFLOW_FLAGS[op.attrs.get("overflow", IntegerOverflow.none)]
    return em.b.value(f"sub{f} {lt} 0, {a[0]}")


register("addi", "lhs rhs", _int_binary("add", True))
register("subi", "lhs rhs", _int_binary("sub", True))
register("muli", "lhs rhs", _int_binary("mul", True))
register("shli", "lhs rhs", _int_binary("shl", True))
register("andi", "lhs rhs", _int_binary("and"))
register("ori", "lhs rhs", _int_binary("or"))
register("xori", "lhs rhs", _int_binary("xor"))
register("shri", "lhs rhs", _by_sign("ashr", "lshr"))
register("remi", "lhs rhs", _by_sign("srem", "urem"))
register("divi", "lhs rhs", _divi)
register("maxi", "lhs rhs", _minmax("max"))
register("mini", "lhs rhs", _minmax("min"))
register("mulhii", "x y", _mulhii)
register("absi", "source", _absi)
register("negi", "source", _negi)


# -- floats -----------------------------------------------------------------------------------

_NVVM_SUFFIX = {"float": "f", "double": "d"}
_RND = {RM.nearest_even: "rn", RM.zero: "rz", RM.negative_inf: "rm", RM.positive_inf: "rp"}


def _rounded(instr: str, nvvm: str) -> ElementFn:
    """IEEE op in the requested rounding mode (plain LLVM op for the default round-to-nearest).

    f16/bf16 in a directed mode (or approx/full) compute in f32 in that mode and round the f32 result
    to the half type in the same direction: the products of half values are exact in f32, and a
    directed rounding of a directed rounding (onto a coarser grid, same direction) is the directed
    rounding of the exact value."""
    def fn(em, op, lt, a):
        rnd = op.attrs.get("rounding_mode", RM.nearest_even)
        ftz = op.attrs.get("flush_to_zero", False)
        if lt in HALF_TYPES and rnd != RM.nearest_even:
            wide = [em.b.value(f"fpext {lt} {x} to float") for x in a]
            r = fn(em, op, "float", wide)
            return round_f32(em, r, lt, rnd)
        if rnd == RM.nearest_even and not ftz or lt not in _NVVM_SUFFIX:
            if instr == "fma":
                return em.b.call(lt, f"llvm.fma.{_ov(lt)}", [(lt, x) for x in a])
            return em.b.value(f"{instr} {lt} {a[0]}, {a[1]}")
        if rnd in (RM.approx, RM.full) and lt == "float" and nvvm == "div":
            name = f"llvm.nvvm.{nvvm}.{rnd.name}{'.ftz' if ftz else ''}.f"
        else:
            name = f"llvm.nvvm.{nvvm}.{_RND.get(rnd, 'rn')}{'.ftz' if ftz and lt == 'float' else ''}.{_NVVM_SUFFIX[lt]}"
        args = list(a)
        if instr == "fsub":  # there is no rounded-subtract intrinsic: a - b == a + (-b) exactly
            args[1] = em.b.value(f"fneg {lt} {a[1]}")
        return em.b.call(lt, name, [(lt, x) for x in args])
    return fn


def _ov(lt: str) -> str:
    """LLVM overload suffix of a scalar float type."""
    return {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}[lt]


def _float_intrinsic(name: str) -> ElementFn:
    return lambda em, op, lt, a: em.b.call(lt, f"llvm.{name}.{_ov(lt)}", [(lt, x) for x in a])


def _fminmax(kind: str) -> ElementFn:
    def fn(em, op, lt, a):
        nan = op.attrs.get("propagate_nan")
        if op.attrs.get("flush_to_zero") and lt == "float":  # min/max.ftz{.NaN}.f32
            name = f"llvm.nvvm.f{kind}.ftz{'.nan' if nan else ''}.f"
            return em.b.call(lt, name, [(lt, a[0]), (lt, a[1])])
        base = ("maximum" if kind == "max" else "minimum") if nan else \
               ("maxnum" if kind == "max" else "minnum")
        return em.b.call(lt, f"llvm.{base}.{_ov(lt)}", [(lt, a[0]), (lt, a[1])])
    return fn


register("addf", "lhs rhs", _rounded("fadd", "add"))
register("subf", "lhs rhs", _rounded("fsub", "add"))
register("mulf", "lhs rhs", _rounded("fmul", "mul"))
register("divf", "lhs rhs", _rounded("fdiv", "div"))
register("fma", "lhs rhs acc", _rounded("fma", "fma"))
register("remf", "lhs rhs", lambda em, op, lt, a: em.b.value(f"frem {lt} {a[0]}, {a[1]}"))
register("negf", "source", lambda em, op, lt, a: em.b.value(f"fneg {lt} {a[0]}"))
register("absf", "source", _float_intrinsic("fabs"))
register("ceil", "source", _float_intrinsic("ceil"))
register("floor", "source", _float_intrinsic("floor"))
register("maxf", "lhs rhs", _fminmax("max"))
register("minf", "lhs rhs", _fminmax("min"))


# -- comparisons and select ------------------------------------------------------------------------

_ICMP = {P.equal: ("eq", "eq"), P.not_equal: ("ne", "ne"), P.less_than: ("slt", "ult"),
         P.less_than_or_equal: ("sle", "ule"), P.greater_than: ("sgt", "ugt"),
         P.greater_than_or_equal: ("sge", "uge")}
_FCMP = {P.equal: "eq", P.not_equal: "ne", P.less_than: "lt", P.less_than_or_equal: "le",
         P.greater_than: "gt", P.greater_than_or_equal: "ge"}


def _cmpi(em, op, lt, a):
    s, u = _ICMP[op.attrs["comparison_predicate"]]
    return em.b.value(f"icmp {s if _signed(op) else u} {lt} {a[0]}, {a[1]}")


def _cmpf(em, op, lt, a):
    prefix = "o" if op.attrs["comparison_ordering"] == ComparisonOrdering.ordered else "u"
    return em.b.value(f"fcmp {prefix}{_FCMP[op.attrs['comparison_predicate']]} {lt} {a[0]}, {a[1]}")


def _select(em, op, lt, a):
    vt = llvm_type(op.result.type)
    return em.b.value(f"select i1 {a[0]}, {vt} {a[1]}, {vt} {a[2]}")


register("cmpi", "lhs rhs", _cmpi)
register("cmpf", "lhs rhs", _cmpf)
register("select", "cond val_if_true val_if_false", _select)


# -- conversions --------------------------------------------------------------------------------------

def _to(op) -> str:
    return llvm_type(op.result.type)


def _exti(em, op, lt, a):
    return em.b.value(f"{'sext' if _signed(op) else 'zext'} {lt} {a[0]} to {_to(op)}")


def _trunci(em, op, lt, a):
    return em.b.value(f"trunc {lt} {a[0]} to {_to(op)}")


HALF_TYPES = ("half", "bfloat")
_PTX_FLOAT = {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}
_DIRECTED = {RM.zero: "rz", RM.negative_inf: "rm", RM.positive_inf: "rp"}


def _cvt(em, mode: str, dst: str, src: str, x: str, src_lt: str, dst_lt: str) -> str:
    """One `cvt.<mode>.<dst>.<src>` as inline assembly (LLVM has no directed-rounding conversions)."""
    cls = {"half": "h", "bfloat": "h", "float": "f", "double": "d", "i32": "r", "i64": "l"}
    reg = {"half": "i16", "bfloat": "i16"}
    out = em.b.asm(reg.get(dst_lt, dst_lt), f"cvt.{mode}.{dst}.{src} $0, $1;",
                   f"={cls[dst_lt]},{cls[src_lt]}", [(reg.get(src_lt, src_lt), x)], sideeffect=False)
    return out if dst_lt not in reg else em.b.value(f"bitcast i16 {out} to {dst_lt}")


def round_f32(em, x: str, to: str, rnd=RM.nearest_even) -> str:
    """An f32 value rounded to f16/bf16 in a rounding mode (nearest even unless directed)."""
    mode = _DIRECTED.get(rnd)
    if mode is None:
        return em.b.value(f"fptrunc float {x} to {to}")
    return _cvt(em, mode, _PTX_FLOAT[to], "f32", x, "float", to)


def _f64_to_f32(em, x: str, rnd) -> str:
    """f64 -> f32 in a directed mode, or rounded to odd (for a second rounding to nearest: exact)."""
    mode = _DIRECTED.get(rnd)
    if mode is not None:
        return _cvt(em, mode, "f32", "f64", x, "double", "float")
    r = _cvt(em, "rz", "f32", "f64", x, "double", "float")
    back = em.b.value(f"fpext float {r} to double")
    inexact = em.b.value(f"fcmp one double {back}, {x}")
    return _sticky(em, r, inexact)


def _sticky(em, r: str, inexact: str) -> str:
    bits = em.b.value(f"bitcast float {r} to i32")
    odd = em.b.value(f"or i32 {bits}, 1")
    return em.b.value(f"bitcast i32 {em.b.value(f'select i1 {inexact}, i32 {odd}, i32 {bits}')} to float")


def _itof(em, op, lt, a):
    to = _to(op)
    signed = _signed(op)
    rnd = op.attrs.get("rounding_mode", RM.nearest_even)
    x = a[0]
    if op.result.type.elem == T.TF32:
        to = "float"
    width = int(lt[1:])
    if width < 32:  # exact in every float type we convert to, via i32 (i1 signed: true is -1)
        x = em.b.value(f"{'sext' if signed else 'zext'} {lt} {x} to i32")
        lt, width = "i32", 32
    src = f"{'s' if signed else 'u'}{width}"
    mode = _DIRECTED.get(rnd)
    dst = op.result.type.elem
    tf32 = dst == T.TF32
    fp8 = dst.name in FP8
    if rnd == RM.nearest_away and not tf32:
        raise LoweringError(f"itof to {dst} does not support rounding mode 'nearest_away'")
    native_bf16 = to == "bfloat" and mode is None and target_has(em, "has_int_to_bf16_cvt")  # cvt.rn.bf16.s32
    if (to == "bfloat" and not native_bf16) or tf32 or fp8:
        # via f32: in the same direction, or rounded to odd first, so that the second rounding is
        # the only one (LLVM converts i32/i64 -> bf16 by rounding to nearest twice)
        r = _cvt(em, mode or "rz", "f32", src, x, lt, "float")
        if mode is None:
            back = em.b.value(f"fpto{'s' if signed else 'u'}i float {r} to {lt}")
            r = _sticky(em, r, em.b.value(f"icmp ne {lt} {back}, {x}"))
        if fp8:
            return f32_to_fp8(em, r, dst.name, rnd)
        return round_to_tf32(em, r, rnd) if tf32 else round_f32(em, r, "bfloat", rnd)
    if mode is None:
        return em.b.value(f"{'sitofp' if signed else 'uitofp'} {lt} {x} to {to}")
    return _cvt(em, mode, _PTX_FLOAT[to], src, x, lt, to)


_TO_INTEGRAL = {RM.nearest_even: "roundeven", RM.negative_inf: "floor", RM.positive_inf: "ceil",
                RM.nearest_away: "round", RM.zero: "trunc", RM.nearest_int_to_zero: "trunc"}


def _ftoi(em, op, lt, a):
    to = _to(op)
    x = a[0]
    src = op.operands["from"].type.elem
    if src.name in FP8:
        x, lt = fp8_to_f32(em, x, src.name), "float"
    if lt in HALF_TYPES:  # exact; the integral rounding and the saturation bounds are the same
        x, lt = em.b.value(f"fpext {lt} {x} to float"), "float"
    how = _TO_INTEGRAL.get(op.attrs.get("rounding_mode", RM.nearest_int_to_zero), "trunc")
    if how != "trunc":
        x = em.b.call(lt, f"llvm.{how}.{_ov(lt)}", [(lt, x)])
    # saturating (what the hardware's cvt.rzi does), and NaN converts to 0
    name = f"llvm.fpto{'s' if _signed(op) else 'u'}i.sat.{to}.{_ov(lt)}"
    return em.b.call(to, name, [(lt, x)])


_FLOAT_RANK = {"half": 1, "bfloat": 1, "float": 2, "double": 3}


def _ftof(em, op, lt, a):
    src_t, dst_t = op.operands["from"].type.elem, op.result.type.elem
    rnd = op.attrs.get("rounding_mode", RM.nearest_even)
    if rnd in (RM.approx, RM.full):
        rnd = RM.nearest_even
    x = a[0]
    if src_t.name in FP8 or dst_t.name in FP8:
        return _ftof_fp8(em, x, src_t, dst_t, rnd)
    if lt == "i8" or _to(op) == "i8":
        raise LoweringError(f"conversion {src_t} -> {dst_t} is not supported")
    if rnd == RM.nearest_away and dst_t != T.TF32:
        raise LoweringError(f"ftof to {dst_t} does not support rounding mode 'nearest_away'")
    to = _to(op)
    if dst_t == T.TF32:
        if lt == "double":
            x = _f64_to_f32(em, x, rnd)
        elif lt != "float":
            x = em.b.value(f"fpext {lt} {x} to float")
        return round_to_tf32(em, x, rnd)
    if to == lt:
        return x
    if _FLOAT_RANK[to] > _FLOAT_RANK[lt] or (lt == "bfloat" and to == "float"):
        return em.b.value(f"fpext {lt} {x} to {to}")  # exact
    mode = _DIRECTED.get(rnd)
    if lt in HALF_TYPES:  # f16 <-> bf16: exactly through f32, then one rounding
        return round_f32(em, em.b.value(f"fpext {lt} {x} to float"), to, rnd)
    if lt == "float":
        return round_f32(em, x, to, rnd)
    # from f64
    if mode is None:
        return em.b.value(f"fptrunc double {x} to {to}")  # single rounding (bf16: LLVM rounds to odd)
    if to == "bfloat":
        return round_f32(em, _f64_to_f32(em, x, rnd), to, rnd)
    return _cvt(em, mode, _PTX_FLOAT[to], "f64", x, "double", to)


# rounding mode -> the modifier of `cvt.<rnd>.tf32.f32` (targets.Target.tf32_cvt_roundings: where it exists)
_TF32_CVT = {RM.nearest_even: "rn", RM.zero: "rz", RM.nearest_away: "rna"}


def round_to_tf32(em, x: str, rnd=RM.nearest_even) -> str:
    """Round an f32 to tf32 (10 explicit mantissa bits; the low 13 bits become 0) in a rounding mode:
    nearest even by default (cvt.rn.tf32.f32), nearest away (cvt.rna), or directed.  The hardware cvt where
    the target has it (one instruction, as NVIDIA's tileiras emits), else integer arithmetic."""
    hw = _TF32_CVT.get(rnd)
    tgt = known_target(em.options.target)
    if hw is not None and tgt is not None and hw in tgt.tf32_cvt_roundings:
        bits = em.b.asm("i32", f"cvt.{hw}.tf32.f32 $0, $1;", "=r,f", [("float", x)], sideeffect=False)
        return em.b.value(f"bitcast i32 {bits} to float")
    u = em.b.value(f"bitcast float {x} to i32")
    low = em.b.value(f"and i32 {u}, 8191")
    if rnd == RM.nearest_away:
        up = em.b.value(f"add i32 {u}, 4096")
    elif rnd in (RM.zero, RM.negative_inf, RM.positive_inf):
        neg = em.b.value(f"icmp slt i32 {u}, 0")
        away = {RM.zero: "false", RM.negative_inf: neg,
                RM.positive_inf: em.b.value(f"xor i1 {neg}, true")}[rnd]
        inexact = em.b.value(f"icmp ne i32 {low}, 0")
        bump = em.b.value(f"and i1 {away}, {inexact}")
        up = em.b.value(f"add i32 {u}, {em.b.value(f'select i1 {bump}, i32 8192, i32 0')}")
    else:
        odd = em.b.value(f"and i32 {em.b.value(f'lshr i32 {u}, 13')}, 1")
        up = em.b.value(f"add i32 {em.b.value(f'add i32 {u}, 4095')}, {odd}")
    r = em.b.value(f"and i32 {up}, -8192")  # past the largest finite value: infinity, as IEEE
    nan = em.b.value(f"fcmp uno float {x}, {x}")
    out = em.b.value(f"bitcast i32 {r} to float")
    return em.b.value(f"select i1 {nan}, float {x}, float {out}")


# -- fp8 (f8E4M3FN, f8E5M2): hardware cvt from sm_90 when the target is known, software otherwise --

# name -> (exponent bits, mantissa bits, bias, largest finite code, largest finite value)
FP8 = {"f8E4M3FN": (4, 3, 7, 0x7E, 448.0), "f8E5M2": (5, 2, 15, 0x7B, 57344.0)}
FP8_NAN = 0x7F  # f8E4M3FN's NaN (S.1111.111); the sign of the input is kept


def _ftof_fp8(em, x: str, src_t, dst_t, rnd) -> str:
    if src_t.name in FP8 and dst_t.name in FP8:
        if src_t == dst_t:
            return x
        return _ftof_fp8(em, fp8_to_f32(em, x, src_t.name), T.F32, dst_t, rnd)
    if src_t.name in FP8:
        v = fp8_to_f32(em, x, src_t.name)  # exact; so is the narrowing below
        to = llvm_type(dst_t)
        if to == "double":
            return em.b.value(f"fpext float {v} to double")
        return v if to == "float" else em.b.value(f"fptrunc float {v} to {to}")
    if dst_t.name not in FP8:
        raise LoweringError(f"conversion {src_t} -> {dst_t} is not supported")
    lt = llvm_type(src_t)
    if rnd not in (RM.nearest_even, RM.zero, RM.negative_inf, RM.positive_inf):
        raise LoweringError(f"ftof to {dst_t} does not support rounding mode '{RM(rnd).name}'")
    if lt == "double":
        x = _f64_to_f32(em, x, rnd)  # rounded to odd (or in the same direction): one rounding in all
    elif lt != "float":
        x = em.b.value(f"fpext {lt} {x} to float")
    return f32_to_fp8(em, x, dst_t.name, rnd)


def f32_to_fp8(em, x: str, name: str, rnd=RM.nearest_even) -> str:
    """f32 -> fp8 bits (i8) as cvt.rn.satfinite does: values beyond the largest finite one, and
    infinities, become the largest finite value; NaN stays NaN (bit-exact with the software reference
    in NVIDIA's cuda_fp8.hpp, which also covers the directed rounding modes here)."""
    fmt = "e4m3x2" if name == "f8E4M3FN" else "e5m2x2"
    if target_has(em, "has_fp8_cvt") and rnd == RM.nearest_even:
        pair = em.b.asm("i16", f"cvt.rn.satfinite.{fmt}.f32 $0, $1, $1;", "=h,f", [("float", x)],
                        sideeffect=False)
        return em.b.value(f"trunc i16 {pair} to i8")
    _, m, bias, max_code, max_value = FP8[name]
    u = em.b.value(f"bitcast float {x} to i32")
    sign = em.b.value(f"lshr i32 {u}, 31")
    mag = em.b.value(f"bitcast i32 {em.b.value(f'and i32 {u}, 2147483647')} to float")
    # beyond twice the largest value everything saturates alike; keeps the arithmetic finite
    capped = em.b.call("float", "llvm.minnum.f32",
                       [("float", mag), ("float", float_literal(2 * max_value, "float"))])
    cb = em.b.value(f"bitcast float {capped} to i32")
    e = em.b.value(f"sub i32 {em.b.value(f'lshr i32 {cb}, 23')}, 127")
    e_eff = em.b.call("i32", "llvm.smax.i32", [("i32", e), ("i32", str(1 - bias))])
    # scale to units of the format's quantum at this exponent (exact: a power of two)
    scale_exp = em.b.value(f"sub i32 {m + 127}, {e_eff}")
    scale = em.b.value(f"bitcast i32 {em.b.value(f'shl i32 {scale_exp}, 23')} to float")
    t = em.b.value(f"fmul float {capped}, {scale}")
    if rnd == RM.nearest_even:
        n_f = em.b.call("float", "llvm.roundeven.f32", [("float", t)])
    elif rnd == RM.zero:
        n_f = em.b.call("float", "llvm.trunc.f32", [("float", t)])
    else:  # toward +inf rounds magnitudes of negative numbers down, and toward -inf the reverse
        up = em.b.call("float", "llvm.ceil.f32", [("float", t)])
        down = em.b.call("float", "llvm.floor.f32", [("float", t)])
        neg = em.b.value(f"icmp ne i32 {sign}, 0")
        first, second = (down, up) if rnd == RM.positive_inf else (up, down)
        n_f = em.b.value(f"select i1 {neg}, float {first}, float {second}")
    n = em.b.value(f"fptoui float {n_f} to i32")
    base = em.b.value(f"shl i32 {em.b.value(f'add i32 {e_eff}, {bias - 1}')}, {m}")
    code = em.b.call("i32", "llvm.umin.i32", [("i32", em.b.value(f"add i32 {n}, {base}")),
                                              ("i32", str(max_code))])
    nan = em.b.value(f"fcmp uno float {x}, {x}")
    if name == "f8E4M3FN":
        nan_code = str(FP8_NAN)
    else:  # a quiet NaN keeping the top payload bit, as NVIDIA's cuda_fp8.hpp reference does
        payload = em.b.value(f"and i32 {em.b.value(f'lshr i32 {u}, 21')}, 3")
        nan_code = em.b.value(f"or i32 {payload}, 126")
    code = em.b.value(f"select i1 {nan}, i32 {nan_code}, i32 {code}")
    code = em.b.value(f"or i32 {code}, {em.b.value(f'shl i32 {sign}, 7')}")
    return em.b.value(f"trunc i32 {code} to i8")


def fp8_to_f32(em, bits: str, name: str) -> str:
    """fp8 bits (i8) -> the exact f32 value."""
    if target_has(em, "has_fp8_cvt"):
        fmt = "e4m3x2" if name == "f8E4M3FN" else "e5m2x2"
        wide = em.b.value(f"zext i8 {bits} to i16")
        pair = em.b.asm("i32", f"cvt.rn.f16x2.{fmt} $0, $1;", "=r,h", [("i16", wide)], sideeffect=False)
        h = em.b.value(f"bitcast i16 {em.b.value(f'trunc i32 {pair} to i16')} to half")
        return em.b.value(f"fpext half {h} to float")
    ebits, m, bias, _, _ = FP8[name]
    c = em.b.value(f"zext i8 {bits} to i32")
    e = em.b.value(f"and i32 {em.b.value(f'lshr i32 {c}, {m}')}, {(1 << ebits) - 1}")
    mant = em.b.value(f"and i32 {c}, {(1 << m) - 1}")
    normal = em.b.value(f"icmp ne i32 {e}, 0")
    n = em.b.value(f"select i1 {normal}, i32 {em.b.value(f'or i32 {mant}, {1 << m}')}, i32 {mant}")
    e_eff = em.b.call("i32", "llvm.umax.i32", [("i32", e), ("i32", "1")])
    p_exp = em.b.value(f"add i32 {e_eff}, {127 - bias - m}")
    p = em.b.value(f"bitcast i32 {em.b.value(f'shl i32 {p_exp}, 23')} to float")
    v = em.b.value(f"fmul float {em.b.value(f'uitofp i32 {n} to float')}, {p}")
    if name == "f8E4M3FN":  # no infinities; S.1111.111 is NaN
        nan = em.b.value(f"icmp eq i32 {em.b.value(f'and i32 {c}, 127')}, 127")
        v = em.b.value(f"select i1 {nan}, float 0x7FF8000000000000, float {v}")
    else:  # S.11111.00 is infinity, S.11111.xx NaN
        top = em.b.value(f"icmp eq i32 {e}, 31")
        special = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {mant}, 0')}, "
                             f"float 0x7FF0000000000000, float 0x7FF8000000000000")
        v = em.b.value(f"select i1 {top}, float {special}, float {v}")
    neg = em.b.value(f"icmp uge i32 {c}, 128")
    return em.b.value(f"select i1 {neg}, float {em.b.value(f'fneg float {v}')}, float {v}")


def _bitcast(em, op, lt, a):
    to = _to(op)
    if lt == to:
        return a[0]
    if "ptr" in lt:
        return em.b.value(f"ptrtoint {lt} {a[0]} to {to}")
    if "ptr" in to:
        return em.b.value(f"inttoptr {lt} {a[0]} to {to}")
    return em.b.value(f"bitcast {lt} {a[0]} to {to}")


def _int_to_ptr(em, op, lt, a):
    return em.b.value(f"inttoptr {lt} {a[0]} to {_to(op)}")


def _ptr_to_int(em, op, lt, a):
    return em.b.value(f"ptrtoint {lt} {a[0]} to {_to(op)}")


register("exti", "from", _exti)
register("trunci", "from", _trunci)
register("itof", "from", _itof)
register("ftoi", "from", _ftoi)
register("ftof", "from", _ftof)
register("bitcast", "source", _bitcast)
register("int_to_ptr", "source", _int_to_ptr)
register("ptr_to_int", "source", _ptr_to_int)
register("ptr_to_ptr", "source", lambda em, op, lt, a: a[0])


# -- pointers -------------------------------------------------------------------------------------------

def _offset(em, op, lt, a):
    pointee = op.result.type.elem.pointee
    it = llvm_type(op.operands["offset"].type)
    return em.b.value(f"getelementptr {llvm_type(pointee)}, {lt} {a[0]}, {it} {a[1]}")


register("offset", "ptr offset", _offset)
