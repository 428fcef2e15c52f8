"""Example cuTile kernels bundled with tileiras-async.

Each kernel exercises a different family of Tile IR operations.  ``EXAMPLES`` pairs every
kernel with the one signature it is exported with (see ``export_all.py`` and
``example_signatures.py``); nothing here needs a GPU.

Parameter specs follow the ``cutile_python_v1`` calling convention: an array becomes
``(base pointer, shape..., strides...)`` entry parameters, a scalar one parameter, and a
constant disappears into the mangled symbol name.
"""
from __future__ import annotations

import math

import cuda.tile as ct
from example_signatures import Case, arr, scal
# (this file's line numbers are in the exported bytecode's debug info, which tests and the
# dashboard's snapshots point into: keep the kernels where they are)

CI = ct.Constant[int]
CF = ct.Constant[float]
ZERO = ct.PaddingMode.ZERO
NEG_INF = ct.PaddingMode.NEG_INF


# --------------------------------------------------------------- scalar + elementwise
@ct.kernel
def axpby(alpha, beta, x, y, out, T: CI):
    """out = alpha * x + beta * y, one tile of T elements per block."""
    i = ct.bid(0)
    xv = ct.load(x, index=(i,), shape=(T,), padding_mode=ZERO)
    yv = ct.load(y, index=(i,), shape=(T,), padding_mode=ZERO)
    ct.store(out, index=(i,), tile=alpha * xv + beta * yv)


# --------------------------------------------------------------- reductions (max/sum, exp)
@ct.kernel
def online_softmax(x, y, TN: CI):
    """Row softmax over a row of any length: one pass for the running max and the
    rescaled running sum (the "online" softmax), a second pass to normalise."""
    r = ct.bid(0)
    nt = ct.num_tiles(x, axis=1, shape=(1, TN))
    m = ct.full((1, 1), -math.inf, dtype=ct.float32)
    s = ct.zeros((1, 1), dtype=ct.float32)
    for j in range(nt):
        v = ct.astype(ct.load(x, index=(r, j), shape=(1, TN), padding_mode=NEG_INF), ct.float32)
        m_new = ct.maximum(m, ct.max(v, axis=1, keepdims=True))
        s = s * ct.exp(m - m_new) + ct.sum(ct.exp(v - m_new), axis=1, keepdims=True)
        m = m_new
    inv = 1.0 / s
    for j in range(nt):
        v = ct.astype(ct.load(x, index=(r, j), shape=(1, TN), padding_mode=NEG_INF), ct.float32)
        ct.store(y, index=(r, j), tile=ct.astype(ct.exp(v - m) * inv, y.dtype))


# --------------------------------------------------------------- matmul with a K loop
@ct.kernel
def matmul_bias_relu(A, B, bias, C, TM: CI, TN: CI, TK: CI):
    """C = relu(A @ B + bias[None, :]), f32 accumulation over a K loop of mma."""
    i = ct.bid(0)
    j = ct.bid(1)
    nk = ct.num_tiles(A, axis=1, shape=(TM, TK))
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(nk):
        a = ct.load(A, index=(i, k), shape=(TM, TK), padding_mode=ZERO)
        b = ct.load(B, index=(k, j), shape=(TK, TN), padding_mode=ZERO)
        acc = ct.mma(a, b, acc)
    bv = ct.astype(ct.load(bias, index=(j,), shape=(TN,), padding_mode=ZERO), ct.float32)
    acc = ct.maximum(acc + bv[None, :], 0.0)
    ct.store(C, index=(i, j), tile=ct.astype(acc, C.dtype))


# --------------------------------------------------------------- layout (permute)
@ct.kernel
def batched_transpose(X, Y, TM: CI, TN: CI):
    """Y[b] = X[b].T for a batch of matrices: a 3-d permute (0, 2, 1) per tile."""
    i = ct.bid(0)
    j = ct.bid(1)
    b = ct.bid(2)
    t = ct.load(X, index=(b, i, j), shape=(1, TM, TN), padding_mode=ZERO)
    ct.store(Y, index=(b, j, i), tile=ct.permute(t, (0, 2, 1)))


# --------------------------------------------------------------- scans
@ct.kernel
def exclusive_scan_max(x, excl, sufmax, T: CI):
    """Per tile: the exclusive prefix sum (cumsum minus the element itself) and the
    suffix maximum (a custom reverse scan with max as the combiner)."""
    i = ct.bid(0)
    v = ct.load(x, index=(i,), shape=(T,), padding_mode=ZERO)
    ct.store(excl, index=(i,), tile=ct.cumsum(v, axis=0) - v)
    sm = ct.scan(v, axis=0, func=lambda a, b: ct.maximum(a, b), identity=-2147483648,
                 reverse=True)
    ct.store(sufmax, index=(i,), tile=sm)


# --------------------------------------------------------------- integer ops, compare, where
@ct.kernel
def clamp_count(x, y, nclamped, lo, hi, T: CI):
    """y = clamp(x, lo, hi) with odd values rounded down to even (bit ops); nclamped[i]
    = how many elements of tile i were out of range."""
    i = ct.bid(0)
    v = ct.load(x, index=(i,), shape=(T,), padding_mode=ZERO)
    below = v < lo
    above = v > hi
    c = ct.where(below, lo, ct.where(above, hi, v))
    c = ct.where((c & 1) != 0, c - 1, c)
    ct.store(y, index=(i,), tile=c)
    n = ct.sum(ct.astype(below, ct.int32) + ct.astype(above, ct.int32))
    ct.store(nclamped, index=(i,), tile=n)


# --------------------------------------------------------------- atomics
@ct.kernel
def bucket_histogram(data, hist, maxbin, lo, inv_width, T: CI, NB: CI):
    """Bins float data into NB buckets of equal width with atomic adds (out-of-range
    values land in the edge buckets) and records the largest bucket hit (atomic max)."""
    i = ct.bid(0)
    offs = i * T + ct.arange(T, dtype=ct.int32)
    valid = offs < data.shape[0]
    v = ct.gather(data, offs, padding_value=0.0)
    b = ct.astype(ct.floor((v - lo) * inv_width), ct.int32)
    b = ct.minimum(ct.maximum(b, 0), NB - 1)
    ct.atomic_add(hist, b, ct.where(valid, 1, 0))
    top = ct.max(ct.where(valid, b, 0))
    ct.atomic_max(maxbin, 0, top)


# --------------------------------------------------------------- control flow (while, if)
@ct.kernel
def collatz_steps(out, limit):
    """out[b] = number of Collatz steps from b + 1 down to 1, capped at `limit`
    (a scalar while loop with an if/else body, then an if on the result)."""
    b = ct.bid(0)
    n = b + 1
    steps = 0
    while n != 1 and steps < limit:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps = steps + 1
    if n != 1:
        steps = -steps
    ct.store(out, index=(b,), tile=steps)


# --------------------------------------------------------------- signatures
EXAMPLES = [
    Case("axpby_f32", axpby,
         (scal("float32"), scal("float32"), arr("float32", 1), arr("float32", 1),
          arr("float32", 1), 256)),
    Case("online_softmax_f16", online_softmax,
         (arr("float16", 2), arr("float16", 2), 128)),
    Case("matmul_bias_relu_f16", matmul_bias_relu,
         (arr("float16", 2), arr("float16", 2), arr("float16", 1), arr("float16", 2),
          64, 64, 32)),
    Case("batched_transpose_f32", batched_transpose,
         (arr("float32", 3), arr("float32", 3), 32, 16)),
    Case("exclusive_scan_max_i32", exclusive_scan_max,
         (arr("int32", 1), arr("int32", 1), arr("int32", 1), 128)),
    Case("clamp_count_i32", clamp_count,
         (arr("int32", 1), arr("int32", 1), arr("int32", 1), scal("int32"), scal("int32"),
          64)),
    Case("bucket_histogram_f32", bucket_histogram,
         (arr("float32", 1), arr("int32", 1), arr("int32", 1), scal("float32"),
          scal("float32"), 128, 32)),
    Case("collatz_steps_i32", collatz_steps,
         (arr("int32", 1), scal("int32"))),
]
