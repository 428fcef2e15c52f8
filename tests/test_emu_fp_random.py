"""PTX emulator: f32/f64 arithmetic in every rounding mode against exact rational arithmetic.

Random operands (wide exponent range, subnormals, exact ties) go through
add/sub/mul/div/fma/sqrt with .rn/.rz/.rm/.rp; every result must be the exact
value rounded by an independent reference (Python fractions, bracketing by
nextafter).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from conftest import stable_seed

from tileiras_async.emu.testing import run_ptx_op

MODES = ("rn", "rz", "rm", "rp")


def _round(q: Fraction, mode: str, dt) -> float:
    """Round a nonzero exact rational to float dtype `dt` (IEEE) with a rounding mode."""
    with np.errstate(over="ignore"):
        return _round_pos(q, mode, dt)


def _round_pos(q: Fraction, mode: str, dt) -> float:
    if q < 0:
        return -_round_pos(-q, {"rm": "rp", "rp": "rm"}.get(mode, mode), dt)
    fmax = np.finfo(dt).max
    c = dt(fmax) if q >= Fraction(float(fmax)) else dt(float(q))
    while Fraction(float(c)) > q:                      # lo: the largest value <= q
        c = np.nextafter(c, dt(0))
    while True:
        up = np.nextafter(c, dt(np.inf))
        if np.isinf(up) or Fraction(float(up)) > q:
            break
        c = up
    lo = c
    if Fraction(float(lo)) == q:
        return float(lo)
    hi = np.nextafter(lo, dt(np.inf))
    if np.isinf(hi):                                   # above the largest finite value
        ulp = Fraction(float(fmax)) - Fraction(float(np.nextafter(dt(fmax), dt(0))))
        return {"rn": np.inf if q >= Fraction(float(fmax)) + ulp / 2 else float(fmax),
                "rz": float(fmax), "rm": float(fmax), "rp": np.inf}[mode]
    if mode in ("rz", "rm"):
        return float(lo)
    if mode == "rp":
        return float(hi)
    dl, dh = q - Fraction(float(lo)), Fraction(float(hi)) - q
    if dl != dh:
        return float(lo) if dl < dh else float(hi)
    ibits = np.array([lo], dtype=dt).view({np.float16: np.uint16, np.float32: np.uint32}.get(dt, np.uint64))[0]
    return float(lo) if int(ibits) % 2 == 0 else float(hi)


def _operands(rng, n, dt):
    bits = 32 if dt == np.float32 else 64
    emax = 100 if dt == np.float32 else 600
    m = rng.uniform(1, 2, n) * rng.choice([-1, 1], n)
    e = rng.integers(-emax, emax, n)
    x = (m * np.exp2(e.astype(float))).astype(dt)
    # a few subnormals, exact small integers (ties) and huge values
    k = n // 8
    x[:k] = (rng.integers(-2 ** 20, 2 ** 20, k) * (2.0 ** -149 if bits == 32 else 2.0 ** -1074)).astype(dt)
    x[k:2 * k] = rng.integers(-2 ** 25, 2 ** 25, k).astype(dt)
    x[2 * k:3 * k] = (rng.uniform(1, 2, k) * 2.0 ** (emax + 20 if bits == 32 else 1000)).astype(dt)
    return x


@pytest.mark.parametrize("dtname", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "fma", "sqrt"])
def test_random_arithmetic_all_rounding_modes(op, dtname):
    dt = np.float32 if dtname == "f32" else np.float64
    rng = np.random.default_rng(stable_seed(op, dtname))
    n = 160
    a, b, c = (_operands(rng, n, dt) for _ in range(3))
    rng.shuffle(b)
    if op == "sqrt":
        a = np.abs(a)
    for mode in MODES:
        if op == "fma":
            body = f"fma.{mode}.{dtname} %d0, %a0, %a1, %a2;"
            ins = [(dtname, a), (dtname, b), (dtname, c)]
        elif op == "sqrt":
            body = f"sqrt.{mode}.{dtname} %d0, %a0;"
            ins = [(dtname, a)]
        else:
            body = f"{op}.{mode}.{dtname} %d0, %a0, %a1;"
            ins = [(dtname, a), (dtname, b)]
        got = run_ptx_op(body, ins, [dtname])[0]
        for i in range(n):
            fa, fb, fc = Fraction(float(a[i])), Fraction(float(b[i])), Fraction(float(c[i]))
            if op == "add":
                q = fa + fb
            elif op == "sub":
                q = fa - fb
            elif op == "mul":
                q = fa * fb
            elif op == "div":
                if fb == 0:
                    continue
                q = fa / fb
            elif op == "fma":
                q = fa * fb + fc
            else:
                if fa == 0:
                    continue
                # sqrt: bracket the root with squares
                r = dt(np.sqrt(float(a[i])))
                cands = [np.nextafter(r, dt(-np.inf)), r, np.nextafter(r, dt(np.inf))]
                lo = max(x for x in cands if Fraction(float(x)) ** 2 <= fa)
                hi = min(x for x in cands if Fraction(float(x)) ** 2 >= fa)
                if lo == hi or mode in ("rz", "rm"):
                    want = float(lo)
                elif mode == "rp":
                    want = float(hi)
                else:
                    mid = (Fraction(float(lo)) + Fraction(float(hi))) / 2
                    want = float(lo) if mid ** 2 > fa else float(hi)
                assert float(got[i]) == want, (op, mode, a[i], got[i], want)
                continue
            if q == 0:
                continue            # signed zeros are covered by the hand-written tests
            want = _round(q, mode, dt)
            assert float(got[i]) == want, (op, mode, dtname, a[i], b[i], c[i], got[i], want)


@pytest.mark.parametrize("dst,srct", [("f16", "f32"), ("f16", "f64"), ("f32", "f64"), ("f32", "s64"), ("f64", "s64"),
                                      ("f16", "s32"), ("f32", "u64")])
def test_random_conversions_all_rounding_modes(dst, srct):
    rng = np.random.default_rng(stable_seed(dst, srct))
    n = 200
    ddt = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dst]
    if srct in ("f32", "f64"):
        sdt = np.float32 if srct == "f32" else np.float64
        span = 40 if dst == "f16" else 200
        x = (rng.uniform(1, 2, n) * rng.choice([-1, 1], n) * np.exp2(rng.integers(-span, span // 2, n))).astype(sdt)
        vals = [Fraction(float(v)) for v in x]
        ins = x
    else:
        bits = int(srct[1:])
        lo, hi = (0, 2 ** bits) if srct[0] == "u" else (-2 ** (bits - 1), 2 ** (bits - 1))
        ints = [int(v) for v in rng.integers(lo, hi, n, dtype=np.uint64 if srct[0] == "u" else np.int64)]
        ints[:4] = [hi - 1, lo, (1 << (bits - 11)) + 1, (1 << 24) + 1]
        vals = [Fraction(v) for v in ints]
        ins = ints
    for mode in MODES:
        got = run_ptx_op(f"cvt.{mode}.{dst}.{srct} %d0, %a0;", [(srct, ins)], [dst])[0]
        for i, q in enumerate(vals):
            if q == 0:
                continue
            want = _round(q, mode, ddt)
            assert float(got[i]) == want, (dst, srct, mode, float(q), float(got[i]), want)
