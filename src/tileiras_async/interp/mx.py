"""Block-scaled matrix products (mmaf_scaled) with exact MX semantics.

    result[.., i, j] = round_f32(acc[.., i, j] + sum_k a[.., i, k] * sa[.., i, k // B] * b[.., k, j] * sb[.., k // B, j])

The sum is exact and rounded once, to nearest even: every scaled element a * sa is exact in float64 (at most 8
significant bits; exponents far inside float64's range), so is every product of two of them, and `math.fsum`
adds them exactly.  Its float64 result is nearest-rounded; a nonzero remainder makes it "odd" (round to odd), so
that the final rounding to float32 is the correct rounding of the exact value.  NaNs and infinities (an e8m0 NaN
scale, overflowing f32 accumulators) follow IEEE arithmetic through an ordinary float64 product.
"""
from __future__ import annotations

import math

import numpy as np


def _scaled(x: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    block = x.shape[axis] // scale.shape[axis]
    return x * np.repeat(scale, block, axis=axis)


def _round_once(terms: np.ndarray) -> np.float32:
    """float32 nearest to the exact sum of float64 `terms`."""
    s = math.fsum(terms)
    rest = math.fsum(np.append(terms, -s))
    if rest and s == s:
        bits = np.float64(s).view(np.uint64)
        if not bits & 1:  # round to odd: a tie at float32 precision is then never a false one
            s = float(np.nextafter(s, math.copysign(math.inf, rest)))
    return np.float32(s)


def scaled_mma(a, sa, b, sb, acc) -> np.ndarray:
    """a (.., M, K), sa (.., M, K/B), b (.., K, N), sb (.., K/B, N): element values (float64, decoded exactly);
    acc (.., M, N) float32.  Returns the float32 result."""
    xa = _scaled(np.asarray(a, np.float64), np.asarray(sa, np.float64), -1)
    xb = _scaled(np.asarray(b, np.float64), np.asarray(sb, np.float64), -2)
    acc = np.asarray(acc, np.float32)
    if not (np.isfinite(xa).all() and np.isfinite(xb).all() and np.isfinite(acc).all()):
        return (np.matmul(xa, xb) + acc.astype(np.float64)).astype(np.float32)
    xa, xb = np.broadcast_arrays(xa[..., :, :, None], xb[..., None, :, :])   # (.., M, K, N)
    prods = np.moveaxis(xa * xb, -2, -1)                                    # (.., M, N, K)
    acc = np.broadcast_to(acc, prods.shape[:-1])
    out = np.empty(prods.shape[:-1], np.float32)
    for idx in np.ndindex(*out.shape):
        out[idx] = _round_once(np.append(prods[idx], np.float64(acc[idx])))
    return out
