"""Transcendental and power functions, element by element through the `register` table.

How each op becomes code, per element type:

* f32: a PTX instruction where the hardware has one that meets the op's accuracy (ex2.approx for
  exp2, rsqrt.approx for rsqrt, sqrt.{rn,rz,rm,rp} for sqrt, and the `approx` rounding modes:
  ex2.approx after a log2(e) scaling for exp, tanh.approx for tanh, sqrt.approx for sqrt);
  otherwise libdevice's `__nv_<fn>f` (linked by nvptx.py when a `__nv_` function is declared).
* f64: libdevice's `__nv_<fn>`, or the f64 PTX instruction (sqrt.rn/rz/rm/rp.f64).
* f16/bf16: extended to f32 (exact), computed as f32 and rounded back once, in the op's rounding
  mode (round to nearest unless the op says otherwise).  f32 carries more than 2p+2 bits of both
  formats, so for sqrt the double rounding is exact; for the others the f32 result is already an
  approximation and one more rounding is what "emulated in f32" means.

`flush_to_zero` selects the .ftz PTX forms where the op has them (f32 only).
"""
from __future__ import annotations

import math
import struct

from ..ir.core import Operation
from ..ir.enums import RoundingMode as RM
from .emitter import KernelEmitter, LoweringError
from .llvmir import float_literal
from .lower_elementwise import ElementFn, register

HALF = ("half", "bfloat")
_PTX_TYPE = {"half": "f16", "bfloat": "bf16"}
_DIRECTED = {RM.zero: "rz", RM.negative_inf: "rm", RM.positive_inf: "rp"}
LOG2E_F32 = float_literal(float(struct.unpack("<f", struct.pack("<f", math.log2(math.e)))[0]), "float")  # 0x3FB8AA3B


def round_f32(em: KernelEmitter, x: str, to: str, rnd: RM = RM.nearest_even) -> str:
    """An f32 value rounded to f16/bf16 in a rounding mode (nearest even unless directed)."""
    mode = _DIRECTED.get(rnd)
    if mode is None:
        return em.b.value(f"fptrunc float {x} to {to}")
    bits = em.b.asm("i16", f"cvt.{mode}.{_PTX_TYPE[to]}.f32 $0, $1;", "=h,f", [("float", x)], sideeffect=False)
    return em.b.value(f"bitcast i16 {bits} to {to}")


def via_f32(fn: ElementFn, rounding_of=lambda op: RM.nearest_even) -> ElementFn:
    """Run an f32/f64 element function on f16/bf16 operands by extending them to f32 and rounding
    the f32 result back (in the rounding mode `rounding_of(op)` returns)."""
    def wrapped(em, op, lt, a):
        if lt not in HALF:
            return fn(em, op, lt, a)
        ops = [em.b.value(f"fpext {lt} {x} to float") if i < _float_operands(op) else x
               for i, x in enumerate(a)]
        return round_f32(em, fn(em, op, "float", ops), lt, rounding_of(op))
    return wrapped


def _float_operands(op: Operation) -> int:
    return 1 if op.name == "fpowi" else len(op.spec.operands)


def libdevice(em: KernelEmitter, base: str, lt: str, args: list[tuple[str, str]]) -> str:
    """Call libdevice's __nv_<base>f (f32) or __nv_<base> (f64)."""
    if lt == "float":
        name = f"__nv_{base}f"
    elif lt == "double":
        name = f"__nv_{base}"
    else:
        raise LoweringError(f"no libdevice '{base}' for element type {lt}")
    return em.b.call(lt, name, args)


def _libdevice_fn(base: str) -> ElementFn:
    return via_f32(lambda em, op, lt, a: libdevice(em, base, lt, [(lt, x) for x in a]))


def _nvvm(em: KernelEmitter, name: str, lt: str, x: str) -> str:
    return em.b.call(lt, f"llvm.nvvm.{name}", [(lt, x)])


def _ftz(op: Operation) -> str:
    return ".ftz" if op.attrs.get("flush_to_zero") else ""


# -- exponentials and logarithms ------------------------------------------------------------------

def _exp(em, op, lt, a):
    if lt == "float" and op.attrs.get("rounding_mode", RM.full) == RM.approx:
        # the fast form: 2^(x * log2(e)) on the hardware's ex2 unit
        scaled = em.b.value(f"fmul float {a[0]}, {LOG2E_F32}")
        return _nvvm(em, "ex2.approx.f", lt, scaled)
    return libdevice(em, "exp", lt, [(lt, a[0])])


def _exp2(em, op, lt, a):
    if lt == "float":  # ex2.approx.f32 is what libdevice's exp2f is too (2 ulp, full range)
        return _nvvm(em, f"ex2.approx{_ftz(op)}.f", lt, a[0])
    return libdevice(em, "exp2", lt, [(lt, a[0])])


def _tanh(em, op, lt, a):
    if lt == "float" and op.attrs.get("rounding_mode", RM.full) == RM.approx:
        return _nvvm(em, "tanh.approx.f32", lt, a[0])  # sm_75+
    return libdevice(em, "tanh", lt, [(lt, a[0])])


# -- roots ---------------------------------------------------------------------------------------

_SQRT_MODE = {RM.nearest_even: "rn", RM.zero: "rz", RM.negative_inf: "rm", RM.positive_inf: "rp",
              RM.full: "rn", RM.approx: "approx"}


def _sqrt(em, op, lt, a):
    mode = _SQRT_MODE.get(op.attrs.get("rounding_mode", RM.nearest_even))
    if mode is None:
        raise LoweringError(f"sqrt does not support rounding mode "
                            f"'{RM(op.attrs['rounding_mode']).name}'")
    if lt == "double":
        return _nvvm(em, f"sqrt.{'rn' if mode == 'approx' else mode}.d", lt, a[0])
    return _nvvm(em, f"sqrt.{mode}{_ftz(op) if lt == 'float' else ''}.f", lt, a[0])


def _sqrt_result_rounding(op: Operation) -> RM:
    rnd = op.attrs.get("rounding_mode", RM.nearest_even)
    return rnd if rnd in _DIRECTED else RM.nearest_even


def _rsqrt(em, op, lt, a):
    if lt == "double":  # the hardware approximation, as the real tileiras uses for f64 too
        return _nvvm(em, "rsqrt.approx.d", lt, a[0])
    return _nvvm(em, f"rsqrt.approx{_ftz(op)}.f", lt, a[0])


# -- powers --------------------------------------------------------------------------------------

def _fpowi(em, op, lt, a):
    it = op.operands["exponent"].type.elem
    width = getattr(it, "width", 0)
    if width > 32:
        raise LoweringError(f"fpowi exponent of type i{width} is not supported (i1..i32)")
    e = a[1] if width == 32 else em.b.value(f"sext i{width} {a[1]} to i32")
    return libdevice(em, "powi", lt, [(lt, a[0]), ("i32", e)])


register("exp", "source", via_f32(_exp))
register("exp2", "source", via_f32(_exp2))
register("log", "source", _libdevice_fn("log"))
register("log2", "source", _libdevice_fn("log2"))
register("sin", "source", _libdevice_fn("sin"))
register("cos", "source", _libdevice_fn("cos"))
register("tan", "source", _libdevice_fn("tan"))
register("sinh", "source", _libdevice_fn("sinh"))
register("cosh", "source", _libdevice_fn("cosh"))
register("tanh", "source", via_f32(_tanh))
register("sqrt", "source", via_f32(_sqrt, _sqrt_result_rounding))
register("rsqrt", "source", via_f32(_rsqrt))
register("pow", "source exponent", _libdevice_fn("pow"))
register("fpowi", "source exponent", via_f32(_fpowi))
register("atan2", "x y", _libdevice_fn("atan2"))
