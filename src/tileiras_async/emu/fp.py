"""Floating-point numerics for the emulator, vectorised with numpy.

* `round_fmt` rounds exact (or round-to-odd) float64 values to any of the PTX
  formats (f64, f32, tf32, f16, bf16, e4m3, e5m2, e2m3, e3m2, e2m1) with any
  rounding mode (rn, rna, rz, rm, rp), with saturation to the largest finite
  value when asked.
* Error-free transformations (`two_sum`, `two_prod`) and round-to-odd give
  single-rounding results for f32/f16/bf16 arithmetic done in float64
  (`add_ro`, `fma_ro`, `div_ro`, `sqrt_ro`), and exact f64 fma and directed
  f64 rounding (`fma64`, `directed64`).
* `encode`/`decode` convert between values and the bit patterns of each
  format; NaNs are produced as the GPU's canonical NaN (all mantissa bits set,
  sign clear).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

F64 = np.float64
CANON_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF, "tf32": 0x7FFFFFFF,
             "f64": 0x7FFFFFFFFFFFFFFF, "e4m3": 0x7F, "e5m2": 0x7F}


@dataclass(frozen=True)
class Fmt:
    name: str
    p: int              # significand bits including the implicit one
    emin: int           # exponent of the smallest normal
    emax: int           # exponent of the largest finite
    has_inf: bool
    has_nan: bool
    maxval: float       # largest finite value
    bits: int           # storage width

    @property
    def bias(self) -> int:
        return 1 - self.emin


def _ieee(name, p, ew, bits):
    emax = (1 << (ew - 1)) - 1
    return Fmt(name, p, 1 - emax, emax, True, True, float((2 - 2.0 ** (1 - p)) * 2.0 ** emax), bits)


FORMATS = {
    "f64": _ieee("f64", 53, 11, 64),
    "f32": _ieee("f32", 24, 8, 32),
    "tf32": Fmt("tf32", 11, -126, 127, True, True, float((2 - 2.0 ** -10) * 2.0 ** 127), 32),
    "f16": _ieee("f16", 11, 5, 16),
    "bf16": Fmt("bf16", 8, -126, 127, True, True, float((2 - 2.0 ** -7) * 2.0 ** 127), 16),
    "e4m3": Fmt("e4m3", 4, -6, 8, False, True, 448.0, 8),
    "e5m2": _ieee("e5m2", 3, 5, 8),
    "e2m3": Fmt("e2m3", 4, 0, 2, False, False, 7.5, 6),
    "e3m2": Fmt("e3m2", 3, -2, 4, False, False, 28.0, 6),
    "e2m1": Fmt("e2m1", 2, 0, 2, False, False, 6.0, 4),
}


def round_fmt(x, fmt: str | Fmt, mode: str = "rn", *, satfinite: bool = False) -> np.ndarray:
    """Round float64 values (exact, or round-to-odd with >= p+2 bits) to `fmt`; returns float64.

    NaN stays NaN (NaN for a NaN-less format is returned as NaN too; callers
    decide).  Infinities: kept where the format has them (else NaN), or the
    largest finite value with `satfinite`.  Overflow follows the IEEE rule of
    each rounding mode; zero keeps its sign.
    """
    f = FORMATS[fmt] if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=F64)
    ax = np.abs(x)
    fin = np.isfinite(x) & (ax > 0)
    safe = np.where(fin, ax, 1.0)
    _, e = np.frexp(safe)
    E = np.maximum(e.astype(np.int64) - 1, f.emin)
    qexp = E - (f.p - 1)
    n = np.ldexp(safe, (-qexp).astype(np.int32))
    neg = np.signbit(x)
    if mode == "rn":
        r = np.rint(n)
    elif mode == "rna":
        r = np.floor(n + 0.5)
    elif mode == "rz":
        r = np.floor(n)
    elif mode == "rm":
        r = np.where(neg, np.ceil(n), np.floor(n))
    elif mode == "rp":
        r = np.where(neg, np.floor(n), np.ceil(n))
    else:
        raise ValueError(f"unknown rounding mode {mode}")
    y = np.ldexp(r, qexp.astype(np.int32))
    over = y > f.maxval
    if over.any():
        if satfinite:
            big = np.full_like(y, f.maxval)
        else:
            inf_val = np.inf if f.has_inf else (np.nan if f.has_nan else f.maxval)
            if mode in ("rn", "rna"):
                big = np.full_like(y, inf_val)
            elif mode == "rz":
                big = np.full_like(y, f.maxval)
            elif mode == "rm":
                big = np.where(neg, inf_val, f.maxval)
            else:  # rp
                big = np.where(neg, f.maxval, inf_val)
        y = np.where(over, big, y)
    y = np.where(fin, np.copysign(y, x), x)
    inf = np.isinf(x)
    if inf.any():
        if satfinite:
            y = np.where(inf, np.copysign(f.maxval, x), y)
        elif not f.has_inf:
            y = np.where(inf, np.nan if f.has_nan else np.copysign(f.maxval, x), y)
    return y


def flush_subnormal(x: np.ndarray, fmt: str = "f32") -> np.ndarray:
    """Flush subnormals of `fmt` to sign-preserving zero (values as float64 or float32)."""
    f = FORMATS[fmt]
    tiny = 2.0 ** f.emin
    return np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x)


# ---------------------------------------------------------------------------- encode / decode

def encode(vals: np.ndarray, fmt: str) -> np.ndarray:
    """Bit patterns of already-representable float64 values (NaN -> canonical NaN)."""
    vals = np.asarray(vals, dtype=F64)
    nan = np.isnan(vals)
    if fmt == "f64":
        out = vals.view(np.uint64).copy()
    elif fmt in ("f32", "tf32"):
        out = vals.astype(np.float32).view(np.uint32).copy()
    elif fmt == "f16":
        out = vals.astype(np.float16).view(np.uint16).copy()
    elif fmt == "bf16":
        out = (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        f = FORMATS[fmt]
        a = np.abs(np.where(nan | np.isinf(vals), 0.0, vals))
        sign = np.signbit(vals).astype(np.uint32)
        safe = np.where(a > 0, a, 1.0)
        _, e = np.frexp(safe)
        E = e.astype(np.int64) - 1
        sub = E < f.emin
        m = f.p - 1
        mant_sub = np.rint(np.ldexp(safe, (m - f.emin) * np.ones_like(E, dtype=np.int32)))
        mant_norm = np.rint(np.ldexp(safe, (m - E).astype(np.int32))) - (1 << m)
        expf = np.where(sub, 0, E + f.bias)
        mant = np.where(sub, mant_sub, mant_norm)
        code = (expf.astype(np.uint32) << m) | mant.astype(np.uint32)
        code = np.where(a > 0, code, 0)
        out = (sign << (f.bits - 1)) | code.astype(np.uint32)
        if f.has_inf:
            out = np.where(np.isinf(vals), (sign << (f.bits - 1)) | (((1 << (f.bits - 1 - m)) - 1) << m), out)
        out = out.astype(np.uint8 if f.bits <= 8 else np.uint16)
        if nan.any():
            out[nan] = CANON_NAN.get(fmt, 0)
        return out
    if nan.any():
        out[nan] = CANON_NAN[fmt]
    return out


_TABLES: dict = {}


def decode_table(fmt: str) -> np.ndarray:
    """float64 value of every bit pattern of a narrow format (f16, bf16, fp8, fp6, fp4)."""
    t = _TABLES.get(fmt)
    if t is not None:
        return t
    if fmt == "f16":
        t = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(F64)
    elif fmt == "bf16":
        t = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32).astype(F64)
    else:
        f = FORMATS[fmt]
        m = f.p - 1
        ew = f.bits - 1 - m
        codes = np.arange(1 << f.bits)
        sign = np.where((codes >> (f.bits - 1)) & 1, -1.0, 1.0)
        ex = (codes >> m) & ((1 << ew) - 1)
        mant = codes & ((1 << m) - 1)
        val = np.where(ex == 0, np.ldexp(mant.astype(F64), f.emin - m),
                       np.ldexp((mant + (1 << m)).astype(F64), (ex - f.bias - m)))
        if f.has_inf:
            val = np.where(ex == (1 << ew) - 1, np.where(mant == 0, np.inf, np.nan), val)
        elif f.has_nan:  # e4m3: S.1111.111 is NaN
            val = np.where((ex == (1 << ew) - 1) & (mant == (1 << m) - 1), np.nan, val)
        t = sign * val
    _TABLES[fmt] = t
    return t


def decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "f64":
        return np.asarray(bits).astype(np.uint64).view(F64)
    if fmt in ("f32", "tf32"):
        return np.asarray(bits).astype(np.uint32).view(np.float32).astype(F64)
    return decode_table(fmt)[np.asarray(bits).astype(np.int64)]


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_rn(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even, canonical NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r = np.where(nan, np.uint16(0x7FFF), r)
    return r


# ---------------------------------------------------------------------------- error-free transforms

def two_sum(a, b):
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


_SPLIT = 134217729.0  # 2**27 + 1


def _split(a):
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def make_odd(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Round-to-odd of the exact value s + e (|e| <= ulp(s)/2, s = RN(s + e))."""
    fix = (e != 0) & np.isfinite(s)
    if not fix.any():
        return s
    bits = s.view(np.int64)
    even = (bits & 1) == 0
    fix &= even
    if not fix.any():
        return s
    up = (e > 0) == (s > 0)
    nb = np.where(fix, np.where(up, bits + 1, bits - 1), bits)
    return nb.view(F64)


def add_ro(a, b):
    """a + b in float64 with round-to-odd (a, b float64)."""
    s, e = two_sum(a, b)
    return make_odd(s, e)


def fma_ro_small(a, b, c):
    """a*b + c with round-to-odd, for a, b of at most 26 significant bits (f32 and narrower)."""
    p = a * b                      # exact
    s, e = two_sum(p, c)
    return make_odd(s, e)


def div_ro(a, b):
    """a / b with round-to-odd in float64, for a, b with <= 26-bit significands (exact residual)."""
    q = a / b
    fin = np.isfinite(q) & (q != 0) & np.isfinite(a) & np.isfinite(b)
    if not fin.any():
        return q
    p, pe = two_prod(np.where(fin, q, 0.0), np.where(fin, b, 0.0))
    r = (np.where(fin, a, 0.0) - p) - pe       # exact remainder a - q*b
    # sign of the true quotient's residual: (a - q b)/b
    e = np.where(fin, r * np.sign(b), 0.0)
    return make_odd(q, e)


def sqrt_ro(a):
    s = np.sqrt(a)
    fin = np.isfinite(s) & (s > 0)
    if not fin.any():
        return s
    ss = np.where(fin, s, 0.0)
    p, pe = two_prod(ss, ss)
    r = (np.where(fin, a, 0.0) - p) - pe
    return make_odd(s, np.where(fin, r, 0.0))


def _ulp_step(s, direction):
    """nextafter(s, direction * inf) elementwise (direction +1/-1 arrays)."""
    return np.where(direction > 0, np.nextafter(s, np.inf), np.nextafter(s, -np.inf))


def directed64(s, e, mode: str):
    """Round the exact value s + e (s = RN(s+e)) to float64 with `mode`."""
    if mode == "rn":
        return s
    fin = np.isfinite(s) & (e != 0)
    if not fin.any():
        return s
    if mode == "rz":
        adj = fin & ((e > 0) != (s > 0))
        return np.where(adj, np.nextafter(s, 0.0 * s), s)
    if mode == "rm":
        return np.where(fin & (e < 0), np.nextafter(s, -np.inf), s)
    if mode == "rp":
        return np.where(fin & (e > 0), np.nextafter(s, np.inf), s)
    raise ValueError(mode)


def _exact_fma_scalar(a: float, b: float, c: float) -> float:
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        return a * b + c
    v = Fraction(a) * Fraction(b) + Fraction(c)
    if v == 0:
        return (a * b) + c          # sign of zero per IEEE (computed with the same signs)
    try:
        return float(v)             # Fraction -> float rounds correctly (to nearest even)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def fma64(a, b, c, mode: str = "rn"):
    """Correctly rounded float64 a*b + c (vectorised; exact fallback for extreme operands)."""
    a = np.asarray(a, F64)
    b = np.asarray(b, F64)
    c = np.asarray(c, F64)
    a, b, c = np.broadcast_arrays(a, b, c)
    uh, ul = two_prod(a, b)
    th, tl = two_sum(c, uh)
    v = add_ro(tl, ul)
    z = th + v
    if mode != "rn":
        # residual of the final sum for directed rounding
        z2, ze = two_sum(th, v)
        z = directed64(z2, ze, mode)
    aa, ab, ac, az = np.abs(a), np.abs(b), np.abs(c), np.abs(uh)
    risky = ~(np.isfinite(z) & np.isfinite(uh)) | (az > 2.0 ** 960) | (ac > 2.0 ** 960) \
        | ((az < 2.0 ** -900) & (az > 0)) | ((ac < 2.0 ** -900) & (ac > 0)) \
        | (aa > 2.0 ** 960) | (ab > 2.0 ** 960) | ((uh == 0) & (aa > 0) & (ab > 0))
    if risky.any():
        z = np.array(z, copy=True)
        for i in np.flatnonzero(risky.reshape(-1)):
            idx = np.unravel_index(i, z.shape)
            av, bv, cv = float(a[idx]), float(b[idx]), float(c[idx])
            if mode == "rn":
                z[idx] = _exact_fma_scalar(av, bv, cv)
            else:
                exact = (Fraction(av) * Fraction(bv) + Fraction(cv)
                         if np.isfinite(av) and np.isfinite(bv) and np.isfinite(cv) else None)
                z[idx] = _exact_directed_scalar(exact, av * bv + cv, mode)
    return z


def _round_rn_scalar(v, fallback: float) -> float:
    """Exact rational -> float64, round to nearest even (overflow to inf)."""
    if v is None:
        return fallback
    if v == 0:
        return fallback
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _exact_directed_scalar(v, fallback: float, mode: str) -> float:
    if v is None:
        return fallback
    if v == 0:
        return fallback
    try:
        r = float(v)
    except OverflowError:
        r = float("inf") if v > 0 else float("-inf")
    if np.isinf(r):
        big = np.finfo(F64).max
        if mode == "rz" or (mode == "rm" and r > 0) or (mode == "rp" and r < 0):
            return float(np.copysign(big, r))
        return r
    fr = Fraction(r)
    if fr == v:
        return r
    if mode == "rz":
        return r if abs(fr) < abs(v) else float(np.nextafter(r, 0.0))
    if mode == "rm":
        return r if fr < v else float(np.nextafter(r, -np.inf))
    return r if fr > v else float(np.nextafter(r, np.inf))
