"""Elementwise integer and floating-point ops, comparisons, select and conversions.

Integer semantics: two's complement wrap-around in the element width (the
overflow flags are promises by the producer: violating them is undefined, the
interpreter wraps).  Values the hardware leaves unspecified get fixed,
documented answers: x / 0 = all ones (-1), x % 0 = x, a shift by >= the width
gives 0 (sign fill for an arithmetic right shift), float -> int conversions
saturate and NaN -> 0 (as PTX cvt does).

Float semantics: IEEE operations are correctly rounded in every rounding mode
(round to nearest even via numpy; the directed modes through an exact float64
residual, see numerics.round_to_format).  bf16/f16 arithmetic is done in f32
and rounded once (exact for + - * / sqrt by the double-rounding theorem).  Math
functions (exp, log, sin, tanh, pow, ...) are evaluated in float64 and rounded
to the result type: more accurate than the hardware's approximations (1-2 ulp
in f32).  `approx`/`full` variants are computed like the default, except
`divf approx`, which multiplies by the f32-rounded reciprocal like the hardware.
"""
from __future__ import annotations

import numpy as np

from ..ir import types as T
from ..ir.enums import ComparisonOrdering, RoundingMode, Signedness
from ..ir.enums import ComparisonPredicate as CP
from . import numerics as N
from .registry import elem, handler

F64 = np.float64
_NEAREST = (RoundingMode.nearest_even, RoundingMode.approx, RoundingMode.full)


def _set(env, op, value, t: T.Type) -> None:
    env[op.results[0]] = np.asarray(value, dtype=N.compute_dtype(t))


def _w(v) -> int:
    return elem(v).width


# ============================================================================ integers
def _ibin(fn, a, b, width):
    if width == 1:
        return (fn(np.asarray(a, np.uint8), np.asarray(b, np.uint8)) & 1).astype(np.bool_)
    if width == 4:
        return N.wrap_int(fn(np.asarray(a, np.int64), np.asarray(b, np.int64)), 4)
    return fn(a, b)


@handler("addi", "subi", "muli")
def _int_arith(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    w = _w(op.results[0])
    fn = {"addi": np.add, "subi": np.subtract, "muli": np.multiply}[op.spec.name]
    _set(env, op, _ibin(fn, a, b, w), elem(op.results[0]))


@handler("andi", "ori", "xori")
def _bitwise(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    fn = {"andi": np.bitwise_and, "ori": np.bitwise_or, "xori": np.bitwise_xor}[op.spec.name]
    _set(env, op, fn(a, b), elem(op.results[0]))


@handler("negi")
def _negi(it, op, env):
    a = env[op.operands["source"]]
    w = _w(op.results[0])
    _set(env, op, _ibin(np.subtract, np.zeros_like(a), a, w), elem(op.results[0]))


@handler("absi")
def _absi(it, op, env):
    a = env[op.operands["source"]]
    w = _w(op.results[0])
    if w == 1:
        r = a  # |-1| = 1 -> the same bit
    else:
        r = _ibin(lambda x, y: np.abs(x), a, a, w)
    _set(env, op, r, elem(op.results[0]))


def _signed(a, b, w, signedness):
    if signedness == Signedness.unsigned:
        return N.as_unsigned(a, w), N.as_unsigned(b, w)
    if w == 1:
        return N.as_signed(a, 1), N.as_signed(b, 1)
    return np.asarray(a), np.asarray(b)


@handler("maxi", "mini")
def _minmax_i(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    w = _w(op.results[0])
    x, y = _signed(a, b, w, op.attrs["signedness"])
    pick_a = (x >= y) if op.spec.name == "maxi" else (x <= y)
    _set(env, op, np.where(pick_a, a, b), elem(op.results[0]))


@handler("divi")
def _divi(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    t = elem(op.results[0])
    w = t.width
    unsigned = op.attrs["signedness"] == Signedness.unsigned
    rounding = op.attrs.get("rounding", RoundingMode.zero)
    x, y = _signed(a, b, w, op.attrs["signedness"])
    x = np.asarray(x, dtype=np.int64) if (w <= 32 or not unsigned) else np.asarray(x)
    y = np.asarray(y, dtype=np.int64) if (w <= 32 or not unsigned) else np.asarray(y)
    zero = y == 0
    ys = np.where(zero, np.ones((), y.dtype), y)
    ovf = None
    if not unsigned and w == 64:
        ovf = (x == np.iinfo(np.int64).min) & (ys == -1)
        ys = np.where(ovf, np.ones((), ys.dtype), ys)
    q = np.floor_divide(x, ys)
    r = x - q * ys
    if rounding in (RoundingMode.zero, RoundingMode.nearest_int_to_zero):
        q = q + ((r != 0) & ((x < 0) != (ys < 0)))
    elif rounding == RoundingMode.positive_inf:
        q = q + (r != 0)
    # negative_inf: the floor division above (other modes are rejected by the verifier)
    if ovf is not None:
        q = np.where(ovf, x, q)
    q = np.where(zero, np.array(-1, q.dtype) if q.dtype.kind == "i" else np.array(np.iinfo(q.dtype).max, q.dtype), q)
    _set(env, op, N.wrap_int(np.asarray(q), w), t)


@handler("remi")
def _remi(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    t = elem(op.results[0])
    w = t.width
    x, y = _signed(a, b, w, op.attrs["signedness"])
    zero = y == 0
    ys = np.where(zero, np.ones((), np.asarray(y).dtype), y)
    if op.attrs["signedness"] == Signedness.signed:
        ys = np.where((ys == -1), np.ones((), ys.dtype), ys)  # INT_MIN % -1 == 0 == x % 1
    r = np.fmod(x, ys)
    r = np.where(zero, x, r)
    _set(env, op, N.wrap_int(np.asarray(r).astype(np.int64) if np.asarray(r).dtype != np.uint64
                             else np.asarray(r).view(np.int64), w), t)


@handler("mulhii")
def _mulhii(it, op, env):
    a, b = env[op.operands["x"]], env[op.operands["y"]]
    t = elem(op.results[0])
    w = t.width
    x = N.as_unsigned(a, w).astype(np.uint64)
    y = N.as_unsigned(b, w).astype(np.uint64)
    if w <= 32:
        hi = (x * y) >> np.uint64(w)
    else:
        m32 = np.uint64(0xFFFFFFFF)
        s32 = np.uint64(32)
        xl, xh, yl, yh = x & m32, x >> s32, y & m32, y >> s32
        ll = xl * yl
        lh = xl * yh
        hl = xh * yl
        hh = xh * yh
        mid = (ll >> s32) + (lh & m32) + (hl & m32)
        hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    _set(env, op, N.wrap_int(hi.view(np.int64) if w == 64 else hi.astype(np.int64), w), t)


def _shift_operands(op, env):
    """(value, result type, width, shift amount as uint64, amount >= width) of shli/shri."""
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    t = elem(op.results[0])
    w = t.width
    amt = N.as_unsigned(b, w).astype(np.uint64)
    return a, t, w, amt, amt >= np.uint64(w)


def _unsigned_shift(fn, a, w, amt, big):
    """`fn` (np.left_shift / np.right_shift) on the unsigned value; 0 where the amount is >= the width."""
    x = N.as_unsigned(a, w).astype(np.uint64)
    r = fn(x, np.where(big, np.uint64(0), amt))
    return np.where(big, np.uint64(0), r)


@handler("shli")
def _shli(it, op, env):
    a, t, w, amt, big = _shift_operands(op, env)
    r = _unsigned_shift(np.left_shift, a, w, amt, big)
    _set(env, op, N.wrap_int(r.view(np.int64) if w == 64 else (r & np.uint64((1 << w) - 1)).astype(np.int64), w), t)


@handler("shri")
def _shri(it, op, env):
    a, t, w, amt, big = _shift_operands(op, env)
    if op.attrs["signedness"] == Signedness.unsigned:
        r = _unsigned_shift(np.right_shift, a, w, amt, big)
        r = r.view(np.int64) if w == 64 else r.astype(np.int64)
    else:
        x = N.as_signed(a, w).astype(np.int64)
        s = np.where(big, np.int64(w - 1), amt.astype(np.int64))
        r = np.right_shift(x, s)
    _set(env, op, N.wrap_int(r, w), t)


_CMP = {CP.equal: np.equal, CP.not_equal: np.not_equal, CP.less_than: np.less,
        CP.less_than_or_equal: np.less_equal, CP.greater_than: np.greater,
        CP.greater_than_or_equal: np.greater_equal}


@handler("cmpi")
def _cmpi(it, op, env):
    lv = op.operands["lhs"]
    a, b = env[lv], env[op.operands["rhs"]]
    x, y = _signed(a, b, _w(lv), op.attrs["signedness"])
    env[op.results[0]] = np.asarray(_CMP[op.attrs["comparison_predicate"]](x, y), dtype=np.bool_)


# ============================================================================ floats
def _float_modifiers(op):
    """(rounding mode, flush_to_zero) of a float op."""
    return op.attrs.get("rounding_mode", RoundingMode.nearest_even), op.attrs.get("flush_to_zero", False)


def _float_inputs(vals, t, ftz_flag):
    if ftz_flag and t.name == "f32":
        return [N.ftz(v) for v in vals]
    return vals


def _float_result(r, t, ftz_flag):
    """flush_to_zero applies to f32 results too."""
    if ftz_flag and t.name == "f32":
        return N.ftz(r)
    return r


# the binary ops in a native numpy float type (f16/f32/f64: round to nearest even)
_NATIVE_BINARY = {"addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide}


def _directed_overflow(x64, mode, inputs_finite, t):
    """IEEE overflow of a float64 result in a directed mode: saturate toward zero where required."""
    ovf = np.isinf(x64) & inputs_finite
    if not ovf.any():
        return x64
    big = N.FORMATS[t.name].max_finite
    pos = x64 > 0
    if mode == RoundingMode.zero:
        sat = ovf
    elif mode == RoundingMode.positive_inf:
        sat = ovf & ~pos
    else:
        sat = ovf & pos
    return np.where(sat, np.where(pos, big, -big), x64)


def float_binary(name: str, a, b, t: T.Type, mode, ftz_flag: bool) -> np.ndarray:
    a, b = _float_inputs([a, b], t, ftz_flag)
    if mode in _NEAREST:
        if name == "divf" and mode == RoundingMode.approx and t.name == "f32":
            r = np.multiply(a, np.divide(np.float32(1), b))
        elif t.name in ("f32", "f64", "f16"):
            r = _NATIVE_BINARY[name](a, b)
        else:
            r = N.from_f32_rne(_NATIVE_BINARY[name](np.asarray(a, np.float32), np.asarray(b, np.float32)), t)
    else:
        a64, b64 = np.asarray(a, F64), np.asarray(b, F64)
        if name in ("addf", "subf"):
            bb = b64 if name == "addf" else -b64
            x64, resid = N.two_sum(a64, bb)
        elif name == "mulf":
            if t.name == "f64":
                x64, resid = N.two_prod(a64, b64)
            else:
                x64, resid = a64 * b64, None
        else:
            x64 = a64 / b64
            p, pe = N.two_prod(x64, b64)
            resid = ((a64 - p) - pe) * np.sign(b64)
        if t.name == "f64":
            x64 = _directed_overflow(x64, mode, np.isfinite(a64) & np.isfinite(b64), t)
        r = N.to_float(x64, t, mode, resid)
        if name in ("addf", "subf") and mode == RoundingMode.negative_inf:
            bb = b64 if name == "addf" else -b64
            both_pos_zero = (a64 == 0) & (bb == 0) & ~np.signbit(a64) & ~np.signbit(bb)
            r = np.where((r == 0) & ~both_pos_zero, -np.zeros((), r.dtype), r)
    return _float_result(r, t, ftz_flag)


@handler("addf", "subf", "mulf", "divf")
def _float_arith(it, op, env):
    t = elem(op.results[0])
    r = float_binary(op.spec.name, env[op.operands["lhs"]], env[op.operands["rhs"]], t, *_float_modifiers(op))
    _set(env, op, r, t)


@handler("fma")
def _fma(it, op, env):
    t = elem(op.results[0])
    mode, ftz_flag = _float_modifiers(op)
    a, b, c = _float_inputs([env[op.operands[k]] for k in ("lhs", "rhs", "acc")], t, ftz_flag)
    a64, b64, c64 = (np.asarray(v, F64) for v in (a, b, c))
    if t.name == "f64":
        p, pe = N.two_prod(a64, b64)
    else:
        p, pe = a64 * b64, np.zeros((), F64)
    s, e1 = N.two_sum(p, c64)
    tail = e1 + pe
    x64 = s + tail
    resid = (s - x64) + tail
    resid = np.where(np.isfinite(x64), resid, 0.0)
    if t.name == "f64" and mode not in _NEAREST:
        x64 = _directed_overflow(x64, mode, np.isfinite(a64) & np.isfinite(b64) & np.isfinite(c64), t)
    r = N.to_float(x64, t, mode if mode not in _NEAREST else RoundingMode.nearest_even, resid)
    _set(env, op, _float_result(r, t, ftz_flag), t)


@handler("sqrt")
def _sqrt(it, op, env):
    t = elem(op.results[0])
    mode, ftz_flag = _float_modifiers(op)
    (a,) = _float_inputs([env[op.operands["source"]]], t, ftz_flag)
    with np.errstate(invalid="ignore"):
        if mode in _NEAREST:
            if t.name in ("f32", "f64", "f16"):
                r = np.sqrt(a)
            else:
                r = N.from_f32_rne(np.sqrt(np.asarray(a, np.float32)), t)
        else:
            a64 = np.asarray(a, F64)
            x64 = np.sqrt(a64)
            p, pe = N.two_prod(x64, x64)
            r = N.to_float(x64, t, mode, (a64 - p) - pe)
    _set(env, op, _float_result(r, t, ftz_flag), t)


def _math(fn):
    def h(it, op, env):
        t = elem(op.results[0])
        names = [o.name for o in op.spec.operands]
        ftz_flag = op.attrs.get("flush_to_zero", False)
        vals = _float_inputs([env[op.operands[n]] for n in names], t, ftz_flag)
        r = N.to_float(fn(*[np.asarray(v, F64) for v in vals]), t)
        _set(env, op, _float_result(r, t, ftz_flag), t)
    return h


def _rsqrt(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


for _name, _fn in {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin,
                   "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
                   "rsqrt": _rsqrt, "pow": np.power, "atan2": np.arctan2}.items():
    handler(_name)(_math(_fn))


@handler("fpowi")
def _fpowi(it, op, env):
    t = elem(op.results[0])
    x = np.asarray(env[op.operands["source"]], F64)
    ev = op.operands["exponent"]
    n = N.as_signed(env[ev], elem(ev).width).astype(F64)
    _set(env, op, N.to_float(np.power(x, n), t), t)


def _exact_unary(fn):
    """A float op computed by one numpy function, exact in the source format (no rounding)."""
    def h(it, op, env):
        _set(env, op, fn(env[op.operands["source"]]), elem(op.results[0]))
    return h


for _name, _fn in {"absf": np.abs, "negf": np.negative, "ceil": np.ceil, "floor": np.floor}.items():
    handler(_name)(_exact_unary(_fn))


@handler("remf")
def _remf(it, op, env):
    t = elem(op.results[0])
    a = np.asarray(env[op.operands["lhs"]], F64)
    b = np.asarray(env[op.operands["rhs"]], F64)
    _set(env, op, N.to_float(np.fmod(a, b), t), t)


@handler("maxf", "minf")
def _minmax_f(it, op, env):
    t = elem(op.results[0])
    ftz_flag = op.attrs.get("flush_to_zero", False)
    a, b = _float_inputs([env[op.operands["lhs"]], env[op.operands["rhs"]]], t, ftz_flag)
    is_max = op.spec.name == "maxf"
    if op.attrs.get("propagate_nan", False):
        r = np.maximum(a, b) if is_max else np.minimum(a, b)
    else:
        r = np.fmax(a, b) if is_max else np.fmin(a, b)
    # IEEE maximum/minimum order -0 < +0; on two zeros a + b is exactly that maximum
    # (and -((-a) + (-b)) that minimum)
    both_zero = (a == 0) & (b == 0)
    zs = np.add(a, b) if is_max else np.negative(np.add(np.negative(a), np.negative(b)))
    r = np.where(both_zero, zs, r)
    _set(env, op, r, t)


@handler("cmpf")
def _cmpf(it, op, env):
    a, b = env[op.operands["lhs"]], env[op.operands["rhs"]]
    base = _CMP[op.attrs["comparison_predicate"]](a, b)
    nan = np.isnan(a) | np.isnan(b)
    if op.attrs["comparison_ordering"] == ComparisonOrdering.ordered:
        r = base & ~nan
    else:
        r = base | nan
    env[op.results[0]] = np.asarray(r, dtype=np.bool_)


# ============================================================================ select
@handler("select")
def _select(it, op, env):
    c = env[op.operands["cond"]]
    t = env[op.operands["val_if_true"]]
    f = env[op.operands["val_if_false"]]
    env[op.results[0]] = np.asarray(np.where(c, t, f), dtype=np.asarray(t).dtype)


# ============================================================================ conversions
@handler("exti")
def _exti(it, op, env):
    sv = op.operands["from"]
    a = env[sv]
    w_in = _w(sv)
    t = elem(op.results[0])
    if op.attrs["signedness"] == Signedness.unsigned:
        x = N.as_unsigned(a, w_in)
        x = x.view(np.int64) if x.dtype == np.uint64 else x.astype(np.int64)
    else:
        x = N.as_signed(a, w_in).astype(np.int64)
    _set(env, op, N.wrap_int(x, t.width), t)


@handler("trunci")
def _trunci(it, op, env):
    t = elem(op.results[0])
    a = np.asarray(env[op.operands["from"]])
    _set(env, op, N.wrap_int(a.astype(np.int64) if a.dtype != np.int64 else a, t.width), t)


@handler("ftof")
def _ftof(it, op, env):
    sv = op.operands["from"]
    t = elem(op.results[0])
    mode = op.attrs.get("rounding_mode", RoundingMode.nearest_even)
    _set(env, op, N.convert_float(env[sv], elem(sv), t, mode), t)


def float_to_int(x, t: T.IntType, unsigned: bool, mode) -> np.ndarray:
    x = np.asarray(x, F64)
    if mode == RoundingMode.nearest_even:
        r = np.rint(x)
    elif mode == RoundingMode.negative_inf:
        r = np.floor(x)
    elif mode == RoundingMode.positive_inf:
        r = np.ceil(x)
    elif mode == RoundingMode.nearest_away:
        r = np.trunc(x + np.copysign(0.5, x))
        r = np.where(np.abs(x - np.trunc(x)) == 0.5, r, np.rint(x))
    else:
        r = np.trunc(x)
    w = t.width
    lo, hi = (0, 2 ** w - 1) if unsigned else (-(2 ** (w - 1)), 2 ** (w - 1) - 1)
    r = np.where(np.isnan(r), 0.0, r)
    if w == 64:
        # float64 cannot hold 2**63-1 / 2**64-1: clamp in the integer domain
        over = r >= float(hi) + 1.0
        under = r < float(lo)
        rc = np.clip(r, lo, 2.0 ** 63 - 1024 if not unsigned else 2.0 ** 64 - 2048)
        if unsigned:
            out = rc.astype(np.uint64)
            out = np.where(over, np.uint64(hi), np.where(under, np.uint64(0), out))
            return out.view(np.int64)
        out = rc.astype(np.int64)
        out = np.where(over, np.int64(hi), np.where(under, np.int64(lo), out))
        return out
    r = np.clip(r, lo, hi).astype(np.int64)
    return N.wrap_int(r, w)


@handler("ftoi")
def _ftoi(it, op, env):
    t = elem(op.results[0])
    unsigned = op.attrs["signedness"] == Signedness.unsigned
    mode = op.attrs.get("rounding_mode", RoundingMode.nearest_int_to_zero)
    _set(env, op, float_to_int(env[op.operands["from"]], t, unsigned, mode), t)


def int_to_float(x, w: int, unsigned: bool, t: T.Type, mode) -> np.ndarray:
    if unsigned:
        xi = N.as_unsigned(x, w)
        xi = xi.astype(np.uint64)
    else:
        xi = N.as_signed(x, w).astype(np.int64)
    x64 = xi.astype(F64)
    resid = None
    if w == 64:
        big = np.abs(x64) >= 2.0 ** 53
        if big.any():
            resid = np.zeros(x64.shape, F64)
            flat_x, flat_r, flat_b = xi.reshape(-1), resid.reshape(-1), big.reshape(-1)
            for i in np.flatnonzero(flat_b):
                exact = int(flat_x[i])
                flat_r[i] = float(np.sign(exact - int(x64.reshape(-1)[i])))
    return N.to_float(x64, t, mode, resid)


@handler("itof")
def _itof(it, op, env):
    sv = op.operands["from"]
    t = elem(op.results[0])
    unsigned = op.attrs["signedness"] == Signedness.unsigned
    mode = op.attrs.get("rounding_mode", RoundingMode.nearest_even)
    _set(env, op, int_to_float(env[sv], _w(sv), unsigned, t, mode), t)


@handler("bitcast")
def _bitcast(it, op, env):
    sv = op.operands["source"]
    t = elem(op.results[0])
    bits = N.compute_to_bits(env[sv], elem(sv))
    _set(env, op, N.bits_to_compute(bits, t), t)


@handler("int_to_ptr")
def _int_to_ptr(it, op, env):
    env[op.results[0]] = np.asarray(env[op.operands["source"]]).astype(np.int64).view(np.uint64)


@handler("ptr_to_int")
def _ptr_to_int(it, op, env):
    env[op.results[0]] = np.asarray(env[op.operands["source"]], np.uint64).view(np.int64)


@handler("ptr_to_ptr")
def _ptr_to_ptr(it, op, env):
    env[op.results[0]] = env[op.operands["source"]]
