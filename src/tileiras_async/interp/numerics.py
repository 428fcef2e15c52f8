"""Element types as numpy arrays, and correctly rounded conversions between every float format.

Representation of tile values ("compute" dtypes):

==================  =====================  =========================================
cuda_tile element   numpy compute dtype    storage in memory (bytes)
==================  =====================  =========================================
i1                  bool                   uint8 (0 / 1; any nonzero byte loads as 1)
i4                  int8 (sign-extended)   -- (4-bit memory access is not supported)
i8/i16/i32/i64      int8/16/32/64          the same (signless: signedness is in the ops)
f16, f32, f64       float16/32/64          the same
bf16                float32 (exact bf16)   uint16 raw bits
tf32                float32 (exact tf32)   float32 layout (low 13 bits ignored on load)
f8E4M3FN, f8E5M2    float32 (exact value)  uint8 raw bits
f8E8M0FNU           float32 (exact value)  uint8 raw bits
f4E2M1FN            float32 (exact value)  -- (4-bit memory access is not supported)
ptr<T>              uint64 (fake address)  --
==================  =====================  =========================================

A float tile value of a narrow format always holds values exactly representable
in that format; every op that produces one rounds into the format.

Rounding: `round_to_format` rounds float64 values (plus the sign of an exact
residual, so results that are not exact in float64 still round correctly) to any
format in any IEEE rounding mode.  Conversions to the fp8/fp4 formats saturate to
the largest finite value (PTX ``cvt...satfinite``, what the hardware uses).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..ir import types as T
from ..ir.enums import RoundingMode

F64 = np.float64

RNE = RoundingMode.nearest_even
RZ = RoundingMode.zero
RD = RoundingMode.negative_inf
RU = RoundingMode.positive_inf
RNA = RoundingMode.nearest_away
APPROX = RoundingMode.approx
FULL = RoundingMode.full
RZI = RoundingMode.nearest_int_to_zero


@dataclass(frozen=True)
class FloatFormat:
    name: str
    p: int              # explicit significand bits
    emin: int           # exponent of the smallest normal binade (subnormals below it)
    max_finite: float
    has_inf: bool = True
    has_nan: bool = True
    signed: bool = True
    satfinite: bool = False   # conversions into it saturate instead of overflowing
    has_zero: bool = True


FORMATS: dict[str, FloatFormat] = {
    "f64": FloatFormat("f64", 52, -1022, float(np.finfo(np.float64).max)),
    "f32": FloatFormat("f32", 23, -126, float(np.finfo(np.float32).max)),
    "tf32": FloatFormat("tf32", 10, -126, (2 - 2.0 ** -10) * 2.0 ** 127),
    "f16": FloatFormat("f16", 10, -14, 65504.0),
    "bf16": FloatFormat("bf16", 7, -126, (2 - 2.0 ** -7) * 2.0 ** 127),
    "f8E4M3FN": FloatFormat("f8E4M3FN", 3, -6, 448.0, has_inf=False, satfinite=True),
    "f8E5M2": FloatFormat("f8E5M2", 2, -14, 57344.0, satfinite=True),
    "f8E8M0FNU": FloatFormat("f8E8M0FNU", 0, -127, 2.0 ** 127, has_inf=False, signed=False,
                             satfinite=True, has_zero=False),
    "f4E2M1FN": FloatFormat("f4E2M1FN", 1, 0, 6.0, has_inf=False, has_nan=False, satfinite=True),
}

_COMPUTE_FLOAT = {"f16": np.float16, "f64": np.float64}
# the numpy IEEE formats: element name -> (float dtype, unsigned dtype of its bits)
_IEEE = {"f16": (np.float16, np.uint16), "f32": (np.float32, np.uint32), "f64": (np.float64, np.uint64)}
_INT_DTYPES = {1: np.bool_, 4: np.int8, 8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_UINT_DTYPES = {1: np.uint8, 4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def fmt_of(t: T.Type) -> FloatFormat:
    try:
        return FORMATS[t.name]  # type: ignore[attr-defined]
    except (KeyError, AttributeError):
        raise TypeError(f"unsupported float element type {t}") from None


@cache
def compute_dtype(t: T.Type) -> np.dtype:
    """The numpy dtype tile values of element type `t` are held in."""
    if isinstance(t, T.IntType):
        if t.width not in _INT_DTYPES:
            raise TypeError(f"unsupported integer width i{t.width}")
        return np.dtype(_INT_DTYPES[t.width])
    if isinstance(t, T.FloatType):
        fmt_of(t)
        return np.dtype(_COMPUTE_FLOAT.get(t.name, np.float32))
    if isinstance(t, T.PointerType):
        return np.dtype(np.uint64)
    raise TypeError(f"no tile values of type {t}")


@cache
def storage_dtype(t: T.Type) -> np.dtype:
    """The numpy dtype of one element in memory."""
    if isinstance(t, T.IntType):
        if t.width == 1:
            return np.dtype(np.uint8)
        if t.width == 4:
            raise TypeError("4-bit integers in memory are not supported by the interpreter")
        return np.dtype(_INT_DTYPES[t.width])
    if isinstance(t, T.FloatType):
        n = t.name
        if n in _IEEE:
            return np.dtype(_IEEE[n][0])
        if n == "bf16":
            return np.dtype(np.uint16)
        if n == "tf32":
            return np.dtype(np.float32)
        if n in ("f8E4M3FN", "f8E5M2", "f8E8M0FNU"):
            return np.dtype(np.uint8)
        raise TypeError(f"{n} elements in memory are not supported by the interpreter")
    if isinstance(t, T.PointerType):
        return np.dtype(np.uint64)
    raise TypeError(f"no memory representation for {t}")


# ----------------------------------------------------------------------------- integers
def as_signed(x: np.ndarray, width: int) -> np.ndarray:
    """Integer tile values as signed numbers (i1 true is -1)."""
    if width == 1:
        return np.negative(np.asarray(x, dtype=np.int8))
    return np.asarray(x)


def as_unsigned(x: np.ndarray, width: int) -> np.ndarray:
    """Integer tile values as unsigned numbers of their width."""
    x = np.asarray(x)
    if width == 1:
        return x.astype(np.uint8)
    if width == 4:
        return (x.astype(np.uint8) & np.uint8(0xF))
    return x.view(_UINT_DTYPES[width])


def wrap_int(x: np.ndarray, width: int) -> np.ndarray:
    """Any integer array -> compute representation of iN (two's complement wrap-around)."""
    x = np.asarray(x)
    if width == 1:
        return (x & 1).astype(np.bool_) if x.dtype != np.bool_ else x
    if width == 4:
        v = (x.astype(np.int64) & 0xF)
        return ((v ^ 8) - 8).astype(np.int8)
    dt = _INT_DTYPES[width]
    if x.dtype == dt:
        return x
    if x.dtype.kind == "b":
        return x.astype(dt)
    return x.astype(dt, casting="unsafe")


def int_scalar(v: int, width: int) -> np.ndarray:
    """A Python int -> 0-d compute value of iN (wrapped)."""
    u = int(v) & ((1 << width) - 1)
    if width == 1:
        return np.array(bool(u))
    if width == 64:
        return np.array(u, dtype=np.uint64).view(np.int64)
    s = u - (1 << width) if u >> (width - 1) else u
    return np.array(s, dtype=_INT_DTYPES[width])


# ----------------------------------------------------------------------------- rounding
def _dec_one(fl: np.ndarray, exp: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """The next smaller magnitude on the format's grid (in units of the current binade's ulp)."""
    at_binade_start = (fl == float(2 ** fmt.p)) & (exp > fmt.emin)
    return np.where(at_binade_start, fl - 0.5, fl - 1.0)


def round_to_format(x, fmt: FloatFormat, mode=RNE, resid=None) -> np.ndarray:
    """Round float64 values to `fmt` in `mode`; returns float64 values on the format's grid.

    `resid` (optional, same shape) is the sign (or any value with that sign) of
    the exact value minus `x`, for results that are not exact in float64: it
    breaks ties and decides directed roundings of values that are on the grid.
    """
    x = np.asarray(x, dtype=F64)
    out = np.array(x, dtype=F64, copy=True)
    if mode in (APPROX, FULL, RZI):
        mode = RNE
    fin = np.isfinite(x) & (x != 0)
    if fin.any():
        xf = x[fin]
        neg = xf < 0
        s = np.where(neg, -1.0, 1.0)
        a = np.abs(xf)
        _, e = np.frexp(a)
        exp = np.maximum(e.astype(np.int64) - 1, fmt.emin)
        ulp_exp = exp - fmt.p
        a_s = np.ldexp(a, -ulp_exp)
        fl = np.floor(a_s)
        frac = a_s - fl
        if resid is None:
            rs = np.zeros_like(a)
        else:
            rsd = np.broadcast_to(np.asarray(resid, dtype=F64), x.shape)[fin]
            rs = np.nan_to_num(np.sign(rsd), nan=0.0) * s
        if mode in (RNE, RNA):
            tie = frac == 0.5
            if mode == RNE:
                tie_up = np.where(rs > 0, True, np.where(rs < 0, False, np.fmod(fl, 2.0) == 1.0))
            else:
                tie_up = rs >= 0
            r = np.where((frac > 0.5) | (tie & tie_up), fl + 1.0, fl)
            big_up = True  # overflow goes to infinity
        else:
            down = np.where(frac == 0, np.where(rs < 0, _dec_one(fl, exp, fmt), fl), fl)
            up = np.where(frac > 0, fl + 1.0, np.where(rs > 0, fl + 1.0, fl))
            if mode == RZ:
                mag_up = np.zeros(a.shape, bool)
            elif mode == RU:
                mag_up = ~neg
            elif mode == RD:
                mag_up = neg
            else:
                raise ValueError(f"unsupported rounding mode {mode!r}")
            r = np.where(mag_up, up, down)
            big_up = mag_up
        res = s * np.ldexp(r, ulp_exp)
        over = np.abs(res) > fmt.max_finite
        if over.any():
            if fmt.satfinite:
                sat = np.ones(over.shape, bool)
            elif big_up is True:
                sat = np.zeros(over.shape, bool)
            else:
                sat = ~np.asarray(big_up)
            inf_val = np.inf if fmt.has_inf else np.nan
            res = np.where(over, np.where(sat, s * fmt.max_finite, s * inf_val), res)
        if not fmt.has_zero:
            tiny = 2.0 ** fmt.emin
            res = np.where(np.abs(res) < tiny, tiny, res)
        if not fmt.signed:
            res = np.where(neg, np.nan, res)
        out[fin] = res
    if not fmt.has_inf or not fmt.has_nan or not fmt.has_zero or not fmt.signed:
        inf = np.isinf(x)
        if inf.any() and not fmt.has_inf:
            out[inf] = np.where(x[inf] > 0, fmt.max_finite, -fmt.max_finite if fmt.signed else np.nan) \
                if fmt.satfinite else np.nan
        if not fmt.has_nan:
            out[np.isnan(x)] = 0.0
        if not fmt.has_zero:
            out[x == 0] = 2.0 ** fmt.emin
        if not fmt.signed:
            out[np.isinf(x) & (x < 0)] = np.nan
    return out


def _f32_rne_drop_bits(x32: np.ndarray, k: int) -> np.ndarray:
    """float32 values rounded to nearest even with the low `k` significand bits cleared (NaN stays NaN)."""
    u = np.asarray(x32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + ((1 << (k - 1)) - 1) + ((u >> k) & 1)) & ~np.uint64((1 << k) - 1)).astype(np.uint32)
    out = r.view(np.float32)
    return np.where(np.isnan(x32), np.float32(np.nan), out)


def _f32_to_bf16_rne(x32: np.ndarray) -> np.ndarray:
    return _f32_rne_drop_bits(x32, 16)


def _f32_to_tf32_rne(x32: np.ndarray) -> np.ndarray:
    return _f32_rne_drop_bits(x32, 13)


def to_float(x64, t: T.Type, mode=RNE, resid=None) -> np.ndarray:
    """float64 values (+ optional exact residual sign) -> compute values of float type `t`."""
    name = t.name  # type: ignore[attr-defined]
    x64 = np.asarray(x64, dtype=F64)
    if mode in (APPROX, FULL, RZI):
        mode = RNE
    if resid is None and mode == RNE:
        if name == "f64":
            return x64
        if name == "f32":
            return x64.astype(np.float32)
        if name == "f16":
            return x64.astype(np.float16)
    if name == "f64" and resid is None:
        return x64
    r = round_to_format(x64, FORMATS[name], mode, resid)
    return r.astype(compute_dtype(t))


def from_f32_rne(x32: np.ndarray, t: T.Type) -> np.ndarray:
    """float32 values -> compute values of `t`, round to nearest even (fast paths)."""
    name = t.name  # type: ignore[attr-defined]
    if name == "f32":
        return np.asarray(x32, dtype=np.float32)
    if name == "bf16":
        return _f32_to_bf16_rne(np.asarray(x32, dtype=np.float32))
    if name == "tf32":
        return _f32_to_tf32_rne(np.asarray(x32, dtype=np.float32))
    if name == "f16":
        return np.asarray(x32, dtype=np.float32).astype(np.float16)
    return to_float(np.asarray(x32, dtype=F64), t)


def convert_float(x: np.ndarray, src: T.Type, dst: T.Type, mode=RNE) -> np.ndarray:
    """ftof: float compute values of `src` -> `dst` in `mode` (exact intermediate: float64)."""
    sname, dname = src.name, dst.name  # type: ignore[attr-defined]
    x = np.asarray(x)
    if mode in (RNE, APPROX, FULL) and x.dtype == np.float32 and dname in ("bf16", "tf32", "f16", "f32"):
        return from_f32_rne(x, dst)
    if mode in (RNE, APPROX, FULL) and sname == "f16" and dname in ("f32", "f64"):
        return x.astype(compute_dtype(dst))
    return to_float(x.astype(F64), dst, mode)


# ----------------------------------------------------------------------------- exact residuals
_SPLIT = 134217729.0  # 2**27 + 1 (Veltkamp split for float64)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a+b) and the exact error e with a + b = s + e (float64)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), e, 0.0)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = fl(a*b) and the error e with a * b = p + e (float64, Dekker; exact barring over/underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, np.where(np.isfinite(p) & np.isfinite(e), e, 0.0)


def ftz(x: np.ndarray) -> np.ndarray:
    """Flush float32 subnormals to sign-preserving zero."""
    x = np.asarray(x)
    sub = (x != 0) & (np.abs(x) < np.float32(2.0 ** -126))
    if sub.any():
        return np.where(sub, np.copysign(np.float32(0.0), x), x).astype(x.dtype)
    return x


# ----------------------------------------------------------------------------- small formats
class _Table:
    """Encode/decode of a narrow float format with at most 256 codes."""

    def __init__(self, fmt: FloatFormat, bits: int, decode):
        self.fmt = fmt
        codes = np.arange(1 << bits, dtype=np.uint32)
        vals = np.array([decode(int(c)) for c in codes], dtype=F64)
        self.decode_table = vals
        self.decode_f32 = vals.astype(np.float32)
        sign_bit = 1 << (bits - 1) if fmt.signed else 0
        pos = [(v, int(c)) for c, v in zip(codes, vals)
               if np.isfinite(v) and (int(c) & sign_bit) == 0 and not (v == 0 and np.signbit(v))]
        pos.sort()
        self.pos_vals = np.array([v for v, _ in pos], dtype=F64)
        self.pos_codes = np.array([c for _, c in pos], dtype=np.uint8)
        self.sign_bit = sign_bit
        nan_codes = [int(c) for c, v in zip(codes, vals) if np.isnan(v)]
        self.nan_code = max(nan_codes) if nan_codes else 0
        inf_codes = [int(c) for c, v in zip(codes, vals) if np.isinf(v) and v > 0]
        self.inf_code = inf_codes[0] if inf_codes else None

    def encode(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=F64)
        a = np.abs(x)
        idx = np.clip(np.searchsorted(self.pos_vals, a), 0, len(self.pos_vals) - 1)
        code = self.pos_codes[idx].astype(np.uint8)
        if self.inf_code is not None:
            code = np.where(np.isinf(a), np.uint8(self.inf_code), code)
        if self.sign_bit:
            code = np.where(np.signbit(x), code | np.uint8(self.sign_bit), code)
        return np.where(np.isnan(x), np.uint8(self.nan_code), code).astype(np.uint8)

    def decode(self, bits: np.ndarray) -> np.ndarray:
        return self.decode_f32[np.asarray(bits).astype(np.intp)]


def _dec_e4m3fn(c: int) -> float:
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 0xF, c & 7
    if e == 15 and m == 7:
        return float("nan")
    return s * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def _dec_e5m2(c: int) -> float:
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 2) & 0x1F, c & 3
    if e == 31:
        return s * float("inf") if m == 0 else float("nan")
    return s * (m / 4 * 2.0 ** -14 if e == 0 else (1 + m / 4) * 2.0 ** (e - 15))


def _dec_e8m0(c: int) -> float:
    return float("nan") if c == 255 else 2.0 ** (c - 127)


def _dec_e2m1(c: int) -> float:
    s = -1.0 if c & 0x8 else 1.0
    e, m = (c >> 1) & 3, c & 1
    return s * (m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1))


@cache
def table(name: str) -> _Table:
    fmt = FORMATS[name]
    return {
        "f8E4M3FN": lambda: _Table(fmt, 8, _dec_e4m3fn),
        "f8E5M2": lambda: _Table(fmt, 8, _dec_e5m2),
        "f8E8M0FNU": lambda: _Table(fmt, 8, _dec_e8m0),
        "f4E2M1FN": lambda: _Table(fmt, 4, _dec_e2m1),
    }[name]()


# ----------------------------------------------------------------------------- bits <-> values
def bits_to_compute(bits: np.ndarray, t: T.Type) -> np.ndarray:
    """Raw bit patterns (unsigned ints of the element's width) -> compute values."""
    bits = np.asarray(bits)
    if isinstance(t, T.IntType):
        return wrap_int(bits.astype(np.uint64).astype(np.int64) if t.width < 64
                        else bits.astype(np.uint64).view(np.int64), t.width)
    name = t.name  # type: ignore[attr-defined]
    if name in _IEEE:
        ft, ut = _IEEE[name]
        return bits.astype(ut).view(ft)
    if name == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if name == "tf32":  # a 19-bit pattern: sign, 8 exponent bits, 10 mantissa bits
        b = bits.astype(np.uint32)
        return (((b >> 18) & 1) << 31 | ((b >> 10) & 0xFF) << 23 | (b & 0x3FF) << 13).view(np.float32)
    if name in ("f8E4M3FN", "f8E5M2", "f8E8M0FNU", "f4E2M1FN"):
        return table(name).decode(bits)
    raise TypeError(f"unsupported element type {t}")


def compute_to_bits(x: np.ndarray, t: T.Type) -> np.ndarray:
    """Compute values -> raw bit patterns as unsigned ints of the element's width (inverse above)."""
    x = np.asarray(x)
    if isinstance(t, T.IntType):
        return as_unsigned(x, t.width)
    name = t.name  # type: ignore[attr-defined]
    if name in _IEEE:
        ft, ut = _IEEE[name]
        return x.astype(ft).view(ut)
    if name == "bf16":
        u = np.asarray(x, dtype=np.float32).view(np.uint32)
        r = (u >> 16).astype(np.uint16)
        return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype(np.uint16)
    if name == "tf32":
        u = np.asarray(x, dtype=np.float32).view(np.uint32)
        return (((u >> 31) & 1) << 18 | ((u >> 23) & 0xFF) << 10 | ((u >> 13) & 0x3FF)).astype(np.uint32)
    if name in ("f8E4M3FN", "f8E5M2", "f8E8M0FNU", "f4E2M1FN"):
        return table(name).encode(x)
    raise TypeError(f"unsupported element type {t}")


def to_storage(x: np.ndarray, t: T.Type) -> np.ndarray:
    """Compute values -> what one element looks like in memory (`storage_dtype`)."""
    x = np.asarray(x)
    if isinstance(t, T.IntType):
        if t.width == 1:
            return x.astype(np.uint8)
        return x
    name = t.name  # type: ignore[attr-defined]
    if name in ("f16", "f32", "f64", "tf32"):
        return x
    if name == "bf16":
        return compute_to_bits(x, t)
    return table(name).encode(x)


def from_storage(raw: np.ndarray, t: T.Type) -> np.ndarray:
    """Memory elements (`storage_dtype`) -> compute values."""
    if isinstance(t, T.IntType):
        if t.width == 1:
            return raw != 0
        return raw
    name = t.name  # type: ignore[attr-defined]
    if name in ("f16", "f32", "f64"):
        return raw
    if name == "tf32":  # the hardware reads f32 bits as tf32 by ignoring the low 13 bits
        return (np.asarray(raw, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    if name == "bf16":
        return (np.asarray(raw).astype(np.uint32) << 16).view(np.float32)
    return table(name).decode(raw)


def elem_bits(t: T.Type) -> int:
    if isinstance(t, (T.IntType, T.FloatType)):
        return t.width
    return 64
