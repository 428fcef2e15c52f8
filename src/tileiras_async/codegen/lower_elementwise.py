"""Elementwise ops: one function per op computing one element; the tile plumbing is shared.

The element functions get the emitter, the op, the LLVM element types and the
operand registers, and return the result register.  Layouts: every operand is
converted to the layout of the first non-scalar operand.
"""
from __future__ import annotations

from typing import Callable

from ..ir import types as T
from ..ir.core import Operation
from ..ir.enums import ComparisonOrdering, ComparisonPredicate as P, IntegerOverflow, RoundingMode as RM, Signedness
from .emitter import KernelEmitter, LoweringError, lowers
from .values import Tile, llvm_type

ElementFn = Callable[[KernelEmitter, Operation, str, list[str]], str]


def elementwise(em: KernelEmitter, op: Operation, operand_names: list[str], fn: ElementFn) -> None:
    tiles: list[Tile] = [em.get(op.operands[n]) for n in operand_names]
    res_ty: T.TileType = op.result.type
    layout = next((t.layout for t in tiles if not t.is_scalar), None)
    if layout is None and res_ty.shape:
        layout = em.default_layout(res_ty.shape)
    tiles = [em.convert(t, layout) for t in tiles]
    lt = tiles[0].llvm if tiles else llvm_type(res_ty.elem)
    n = 1 if layout is None else layout.num_registers
    regs = [fn(em, op, lt, [t.regs[r] for t in tiles]) for r in range(n)]
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
    """IEEE op in the requested rounding mode (plain LLVM op for the default round-to-nearest)."""
    def fn(em, op, lt, a):
        rnd = op.attrs.get("rounding_mode", RM.nearest_even)
        ftz = op.attrs.get("flush_to_zero", False)
        if rnd == RM.nearest_even and not ftz or lt not in _NVVM_SUFFIX:
            if instr == "fma":
                return em.b.call(lt, f"llvm.fma.{_ov(lt)}", [(lt, x) for x in a])
            return em.b.value(f"{instr} {lt} {a[0]}, {a[1]}")
        if rnd in (RM.approx, RM.full):
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
        base = ("maximum" if kind == "max" else "minimum") if op.attrs.get("propagate_nan") else \
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


def _itof(em, op, lt, a):
    if lt == "i1" and _signed(op):
        pass  # signed i1: true is -1, which sitofp gives
    return em.b.value(f"{'sitofp' if _signed(op) else 'uitofp'} {lt} {a[0]} to {_to(op)}")


def _ftoi(em, op, lt, a):
    to = _to(op)
    # saturating conversion is what the hardware's cvt.rzi does; it is also defined for NaN (0)
    name = f"llvm.fpto{'s' if _signed(op) else 'u'}i.sat.{to}.{_ov(lt)}"
    return em.b.call(to, name, [(lt, a[0])])


_FLOAT_RANK = {"half": 1, "bfloat": 1, "float": 2, "double": 3}


def _ftof(em, op, lt, a):
    to = _to(op)
    src_t, dst_t = op.operands["from"].type.elem, op.result.type.elem
    if dst_t == T.TF32:
        return _round_to_tf32(em, a[0])
    if to == lt:
        return a[0]
    if lt == "i8" or to == "i8":
        raise LoweringError(f"conversion {src_t} -> {dst_t} is not supported yet")
    if _FLOAT_RANK[to] > _FLOAT_RANK[lt] or (lt == "bfloat" and to == "float"):
        return em.b.value(f"fpext {lt} {a[0]} to {to}")
    if {lt, to} == {"half", "bfloat"}:
        wide = em.b.value(f"fpext {lt} {a[0]} to float")
        return em.b.value(f"fptrunc float {wide} to {to}")
    return em.b.value(f"fptrunc {lt} {a[0]} to {to}")


def _round_to_tf32(em, x: str) -> str:
    """Round an f32 to tf32 (10 mantissa bits, nearest, ties away) as cvt.rna.tf32.f32 does."""
    bits = em.b.asm("i32", "cvt.rna.tf32.f32 $0, $1;", "=r,f", [("float", x)], sideeffect=False)
    return em.b.value(f"bitcast i32 {bits} to float")


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
