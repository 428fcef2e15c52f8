"""The workload suite: kernels shaped like what cuTile users write, with numpy references in refs.py.

Each ``Case`` pairs a kernel with the one signature it is exported with (``examples/export_all.py``
writes ``examples/suite/<id>.v<ver>.tileirbc``).  The shapes follow cuTile's own samples and tests
(persistent and split-K matmuls, layer/RMS norms, fused MoE, flash attention, FFT, block-scaled
matmul); the code is written for this project.  Signatures: ``examples/example_signatures.py``.
Nothing here needs a GPU.
"""
from __future__ import annotations

import math

import cuda.tile as ct
from example_signatures import Case, arr, scal

CI = ct.Constant[int]
CB = ct.Constant[bool]
ZERO = ct.PaddingMode.ZERO
INV_LN2 = 1.0 / math.log(2.0)


def _tile_coords(t, N, TN):
    """Row-major output tile t (of tiles TN wide over N columns) -> (tile row, tile col)."""
    ntn = ct.cdiv(N, TN)
    return t // ntn, t % ntn


# ------------------------------------------------------------------ persistent kernels
@ct.kernel
def persistent_matmul(A, B, C, TM: CI, TN: CI, TK: CI):
    """Static persistent matmul: num_blocks(0) blocks stride over every output tile; the store
    sits inside the tile loop (the loop carries the memory token)."""
    M = A.shape[0]
    N = B.shape[1]
    ntiles = ct.cdiv(M, TM) * ct.cdiv(N, TN)
    nk = ct.num_tiles(A, axis=1, shape=(TM, TK))
    for t in range(ct.bid(0), ntiles, ct.num_blocks(0)):
        bm, bn = _tile_coords(t, N, TN)
        acc = ct.zeros((TM, TN), dtype=ct.float32)
        for k in range(nk):
            a = ct.load(A, index=(bm, k), shape=(TM, TK), padding_mode=ZERO)
            b = ct.load(B, index=(k, bn), shape=(TK, TN), padding_mode=ZERO)
            acc = ct.mma(a, b, acc)
        ct.store(C, index=(bm, bn), tile=ct.astype(acc, C.dtype))


@ct.kernel
def loop_runtime_step(x, y, start, step, T: CI):
    """y[tile j] = 2 * x[tile j] + j for j in range(start, num_tiles, step): a runtime start and
    step, a store in every iteration."""
    nt = ct.num_tiles(x, axis=0, shape=(T,))
    for j in range(start, nt, step):
        v = ct.load(x, index=(j,), shape=(T,), padding_mode=ZERO)
        ct.store(y, index=(j,), tile=v * 2.0 + ct.astype(j, ct.float32))


# ------------------------------------------------------------------ split-K matmuls
def _splitk_partial(A, B, bm, bn, TM, TN, TK, SPLIT):
    """This block's share of output tile (bm, bn): every SPLIT-th K tile from bid(1) on."""
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.bid(1), ct.num_tiles(A, axis=1, shape=(TM, TK)), SPLIT):
        a = ct.load(A, index=(bm, k), shape=(TM, TK), padding_mode=ZERO)
        b = ct.load(B, index=(k, bn), shape=(TK, TN), padding_mode=ZERO)
        acc = ct.mma(a, b, acc)
    return acc


@ct.kernel
def splitk_matmul_atomic(A, B, C, TM: CI, TN: CI, TK: CI, SPLIT: CI):
    """Split-K: grid (output tiles, SPLIT); each block sums every SPLIT-th K tile and adds its
    partial tile into C with a float atomic add (index tiles; out-of-range rows/cols are masked
    by the bounds check)."""
    bm, bn = _tile_coords(ct.bid(0), B.shape[1], TN)
    acc = _splitk_partial(A, B, bm, bn, TM, TN, TK, SPLIT)
    rows = bm * TM + ct.arange(TM, dtype=ct.int32)
    cols = bn * TN + ct.arange(TN, dtype=ct.int32)
    ct.atomic_add(C, (rows[:, None], cols[None, :]), acc)


@ct.kernel
def splitk_matmul_lock(A, B, C, Locks, Counts, TM: CI, TN: CI, TK: CI, SPLIT: CI):
    """Split-K with a spin lock per output tile: the first arrival stores, later ones
    load-add-store; a per-tile counter (scalar gather/scatter) says which."""
    t = ct.bid(0)
    bm, bn = _tile_coords(t, B.shape[1], TN)
    acc = _splitk_partial(A, B, bm, bn, TM, TN, TK, SPLIT)
    while ct.atomic_cas(Locks, t, 0, 1, memory_order=ct.MemoryOrder.ACQUIRE) == 1:
        pass
    count = ct.gather(Counts, t)
    if count == 0:
        ct.store(C, index=(bm, bn), tile=acc)
    else:
        cur = ct.load(C, index=(bm, bn), shape=(TM, TN), padding_mode=ZERO)
        ct.store(C, index=(bm, bn), tile=cur + acc)
    ct.scatter(Counts, t, (count + 1) % SPLIT)
    ct.atomic_xchg(Locks, t, 0, memory_order=ct.MemoryOrder.RELEASE)


# ------------------------------------------------------------------ normalisations
@ct.kernel
def layernorm_fwd(X, W, B, Y, Mean, Rstd, eps, TN: CI):
    """LayerNorm forward over rows of any length: mean, variance (masked tail), affine."""
    r = ct.bid(0)
    nt = ct.num_tiles(X, axis=1, shape=(1, TN))
    N = X.shape[1]
    s = ct.zeros((1, TN), dtype=ct.float32)
    for j in range(nt):
        s += ct.load(X, index=(r, j), shape=(1, TN), padding_mode=ZERO)
    mean = ct.sum(s, axis=1) / N
    ct.store(Mean, index=(r,), tile=mean)
    v = ct.zeros((1, TN), dtype=ct.float32)
    for j in range(nt):
        x = ct.load(X, index=(r, j), shape=(1, TN), padding_mode=ZERO)
        inside = (j * TN + ct.arange(TN, dtype=ct.int32)) < N
        d = ct.where(inside, x - mean, 0.0)
        v += d * d
    rstd = 1.0 / ct.sqrt(ct.sum(v, axis=1) / N + eps)
    ct.store(Rstd, index=(r,), tile=rstd)
    for j in range(nt):
        x = ct.load(X, index=(r, j), shape=(1, TN), padding_mode=ZERO)
        w = ct.load(W, index=(j,), shape=(TN,), padding_mode=ZERO)
        b = ct.load(B, index=(j,), shape=(TN,), padding_mode=ZERO)
        ct.store(Y, index=(r, j), tile=(x - mean) * rstd * w + b)


def _ln_bwd_terms(X, W, DY, r, j, mean, rstd, TN, N):
    x = ct.load(X, index=(r, j), shape=(1, TN), padding_mode=ZERO)
    w = ct.load(W, index=(j,), shape=(TN,), padding_mode=ZERO)
    dy = ct.load(DY, index=(r, j), shape=(1, TN), padding_mode=ZERO)
    inside = (j * TN + ct.arange(TN, dtype=ct.int32)) < N
    xhat = ct.where(inside, (x - mean) * rstd, 0.0)
    wdy = ct.where(inside, w * dy, 0.0)
    return dy, xhat, wdy


@ct.kernel
def layernorm_bwd(DX, DY, DW, DB, X, W, Mean, Rstd, Locks, TN: CI):
    """LayerNorm backward: dX per row, and partial dW/dB accumulated into GROUP rows under a
    spin lock per group (atomic_cas acquire / atomic_xchg release)."""
    r = ct.bid(0)
    nt = ct.num_tiles(X, axis=1, shape=(1, TN))
    N = X.shape[1]
    g = r % DW.shape[0]
    mean = ct.load(Mean, index=(r,), shape=(1,))
    rstd = ct.load(Rstd, index=(r,), shape=(1,))
    c1 = ct.zeros((1, TN), dtype=ct.float32)
    c2 = ct.zeros((1, TN), dtype=ct.float32)
    for j in range(nt):
        _, xhat, wdy = _ln_bwd_terms(X, W, DY, r, j, mean, rstd, TN, N)
        c1 += xhat * wdy
        c2 += wdy
    c1 = ct.sum(c1, axis=1) / N
    c2 = ct.sum(c2, axis=1) / N
    for j in range(nt):
        dy, xhat, wdy = _ln_bwd_terms(X, W, DY, r, j, mean, rstd, TN, N)
        ct.store(DX, index=(r, j), tile=(wdy - (xhat * c1 + c2)) * rstd)
        pdw = dy * xhat
        pdb = dy
        while ct.atomic_cas(Locks, g, 0, 1, memory_order=ct.MemoryOrder.ACQUIRE) == 1:
            pass
        pdw += ct.load(DW, index=(g, j), shape=(1, TN), padding_mode=ZERO)
        pdb += ct.load(DB, index=(g, j), shape=(1, TN), padding_mode=ZERO)
        ct.store(DW, index=(g, j), tile=pdw)
        ct.store(DB, index=(g, j), tile=pdb)
        ct.atomic_xchg(Locks, g, 0, memory_order=ct.MemoryOrder.RELEASE)


@ct.kernel
def layernorm_bwd_dwdb(DW, DB, FDW, FDB, TM: CI, TN: CI):
    """LayerNorm backward, second pass: sum the GROUP partial rows of dW and dB."""
    c = ct.bid(0)
    nt = ct.num_tiles(DW, axis=0, shape=(TM, TN))
    dw = ct.zeros((TM, TN), dtype=ct.float32)
    db = ct.zeros((TM, TN), dtype=ct.float32)
    for i in range(nt):
        dw += ct.load(DW, index=(i, c), shape=(TM, TN), padding_mode=ZERO)
        db += ct.load(DB, index=(i, c), shape=(TM, TN), padding_mode=ZERO)
    ct.store(FDW, index=(c,), tile=ct.sum(dw, axis=0))
    ct.store(FDB, index=(c,), tile=ct.sum(db, axis=0))


@ct.kernel
def rmsnorm_persistent(X, Y, W, TM: CI, TN: CI, N: CI, eps: ct.Constant[float]):
    """Static persistent RMSNorm: W is loaded once, each block strides over row tiles and
    slices W per column tile with extract."""
    M = X.shape[0]
    ntn = ct.cdiv(N, TN)
    w = ct.load(W, index=(0,), shape=(N,), padding_mode=ZERO)
    for rt in range(ct.bid(0), ct.cdiv(M, TM), ct.num_blocks(0)):
        ss = ct.zeros((TM, 1), dtype=ct.float32)
        for j in range(ntn):
            x = ct.astype(ct.load(X, index=(rt, j), shape=(TM, TN), padding_mode=ZERO), ct.float32)
            ss += ct.sum(x * x, axis=1, keepdims=True)
        inv = ct.rsqrt(ss / (N * 1.0) + eps)
        for j in range(ntn):
            x = ct.astype(ct.load(X, index=(rt, j), shape=(TM, TN), padding_mode=ZERO), ct.float32)
            y = x * inv * ct.astype(ct.extract(w, (j,), (TN,)), ct.float32)
            ct.store(Y, index=(rt, j), tile=ct.astype(y, Y.dtype))


@ct.kernel
def rmsnorm_gather(x, w, out, Rstd, N: CI, eps: ct.Constant[float], T: CI):
    """RMSNorm through pointer gathers/scatters; rstd is written with a scalar scatter of a
    full reduction."""
    r = ct.bid(0)
    acc = ct.zeros((T,), dtype=ct.float32)
    nt = ct.cdiv(N, T)
    offs = ct.arange(T, dtype=ct.int32)
    for j in range(nt):
        xj = ct.astype(ct.gather(x, (r, j * T + offs)), ct.float32)
        acc += xj * xj
    rstd = ct.rsqrt(ct.sum(acc, axis=0) / N + eps)
    ct.scatter(Rstd, r, rstd)
    for j in range(nt):
        o = j * T + offs
        wj = ct.astype(ct.gather(w, o), ct.float32)
        xj = ct.astype(ct.gather(x, (r, o)), ct.float32)
        ct.scatter(out, (r, o), ct.astype(xj * rstd * wj, x.dtype))


# ------------------------------------------------------------------ fused MoE
@ct.kernel
def moe_gather_matmul(A, B, C, topk_weights, sorted_token_ids, expert_ids, topk,
                      TM: CI, TN: CI, TK: CI):
    """Fused MoE: each block takes TM token slots of one expert, gathers their rows of A,
    multiplies by that expert's (N, K) weight read transposed, scales by the routing weights and
    scatters rows into C (padding slots hold an out-of-range id and are masked)."""
    bm = ct.bid(0)
    bn = ct.bid(1)
    K = B.shape[2]
    slots = bm * TM + ct.arange(TM, dtype=ct.int32)
    tok = ct.gather(sorted_token_ids, slots)
    rows = tok // topk
    e = ct.load(expert_ids, index=bm, shape=())
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.cdiv(K, TK)):
        cols = k * TK + ct.arange(TK, dtype=ct.int32)
        a = ct.gather(A, (rows[:, None], cols[None, :]))
        b = ct.load(B, (e, k, bn), shape=(1, TK, TN), order=(0, 2, 1),
                    padding_mode=ZERO).reshape((TK, TN))
        acc = ct.mma(a, b, acc)
    acc = acc * ct.gather(topk_weights, tok)[:, None]
    ccols = bn * TN + ct.arange(TN, dtype=ct.int32)
    ct.scatter(C, (tok[:, None], ccols[None, :]), ct.astype(acc, C.dtype))


# ------------------------------------------------------------------ flash attention
@ct.kernel
def flash_attention(Q, K, V, Out, qk_scale, input_pos, D: CI, H: CI, TM: CI, TN: CI,
                    GROUP: CI, CAUSAL: CB, EVEN_K: CB):
    """Flash attention forward (online softmax in base 2), grouped-query heads (GROUP query heads
    per KV head), optional causal mask, K/V length not a multiple of TN."""
    bx = ct.bid(0)
    by = ct.bid(1)
    b = by // H
    h = by % H
    kvh = h // GROUP
    scale = qk_scale * INV_LN2
    offs_m = (bx * TM + ct.arange(TM, dtype=ct.int32) + input_pos)[:, None]
    offs_n0 = ct.arange(TN, dtype=ct.int32)[None, :]
    m_i = ct.full((TM, 1), -math.inf, dtype=ct.float32)
    l_i = ct.zeros((TM, 1), dtype=ct.float32)
    acc = ct.zeros((TM, D), dtype=ct.float32)
    q = ct.load(Q, index=(b, h, bx, 0), shape=(1, 1, TM, D), padding_mode=ZERO).reshape((TM, D))
    klen = K.shape[2]
    if CAUSAL:
        m_end = input_pos + (bx + 1) * TM
        mask_start = min((input_pos + bx * TM) // TN, klen // TN)
        nj = ct.cdiv(min(m_end, klen), TN)
    else:
        mask_start = klen // TN
        nj = ct.cdiv(klen, TN)
    for j in range(nj):
        k = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, D, TN), order=(0, 1, 3, 2),
                    padding_mode=ZERO).reshape((D, TN))
        qk = ct.mma(q, k, ct.zeros((TM, TN), dtype=ct.float32))
        if (CAUSAL or not EVEN_K) and j >= mask_start:
            offs_n = j * TN + offs_n0
            keep = ct.full((TM, TN), True, dtype=ct.bool_)
            if not EVEN_K:
                keep = keep & (offs_n < klen)
            if CAUSAL:
                keep = keep & (offs_m >= offs_n)
            qk = qk + ct.where(keep, 0.0, -math.inf)
        m_ij = ct.maximum(m_i, ct.max(qk, axis=1, keepdims=True) * scale)
        p = ct.exp2(qk * scale - m_ij)
        alpha = ct.exp2(m_i - m_ij)
        l_i = l_i * alpha + ct.sum(p, axis=1, keepdims=True)
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TN, D), padding_mode=ZERO).reshape((TN, D))
        acc = ct.mma(ct.astype(p, Q.dtype), v, acc * alpha)
        m_i = m_ij
    out = ct.astype(acc / l_i, Out.dtype).reshape((1, 1, TM, D))
    ct.store(Out, index=(b, h, bx, 0), tile=out)


# ------------------------------------------------------------------ FFT-style complex math
@ct.kernel
def fft_two_stage(Xr, Xi, Yr, Yi, W0, W1, Tw, F0: CI, F1: CI):
    """One length-N = F0*F1 complex DFT per block, Cooley-Tukey in two stages: a DFT of size F0
    over the strided columns (batched complex matmul), a twiddle, a DFT of size F1 over rows,
    and a transposed store.  Complex values live as separate real/imaginary tiles; W0, W1 and Tw
    hold (re, im) pairs in their last dimension."""
    bi = ct.bid(0)
    N = F0 * F1
    xr = ct.load(Xr, index=(bi, 0), shape=(1, N)).reshape((F0, F1))
    xi = ct.load(Xi, index=(bi, 0), shape=(1, N)).reshape((F0, F1))
    w0 = ct.load(W0, index=(0, 0, 0), shape=(F0, F0, 2))
    w0r = ct.extract(w0, (0, 0, 0), (F0, F0, 1)).reshape((F0, F0))
    w0i = ct.extract(w0, (0, 0, 1), (F0, F0, 1)).reshape((F0, F0))
    w1 = ct.load(W1, index=(0, 0, 0), shape=(F1, F1, 2))
    w1r = ct.extract(w1, (0, 0, 0), (F1, F1, 1)).reshape((F1, F1))
    w1i = ct.extract(w1, (0, 0, 1), (F1, F1, 1)).reshape((F1, F1))
    tw = ct.load(Tw, index=(0, 0, 0), shape=(F0, F1, 2))
    twr = ct.extract(tw, (0, 0, 0), (F0, F1, 1)).reshape((F0, F1))
    twi = ct.extract(tw, (0, 0, 1), (F0, F1, 1)).reshape((F0, F1))
    # x[n0*F1 + n1]: stage 1 transforms over n0 (columns) for every n1
    ar = ct.matmul(w0r, xr) - ct.matmul(w0i, xi)
    ai = ct.matmul(w0i, xr) + ct.matmul(w0r, xi)
    br = ar * twr - ai * twi
    bi_ = ar * twi + ai * twr
    # stage 2 transforms over n1 (rows): (F0, F1) @ W1^T, W1 symmetric
    cr = ct.matmul(br, w1r) - ct.matmul(bi_, w1i)
    ci = ct.matmul(br, w1i) + ct.matmul(bi_, w1r)
    # X[k0 + F0*k1] = c[k0, k1]: store transposed
    ct.store(Yr, index=(bi, 0), tile=ct.permute(cr, (1, 0)).reshape((1, N)))
    ct.store(Yi, index=(bi, 0), tile=ct.permute(ci, (1, 0)).reshape((1, N)))


@ct.kernel
def complex_rotate(Zr, Zi, Outr, Outi, theta, T: CI):
    """z * exp(i * theta * k) for element k: a complex multiply by a phase whose sin/cos come from
    a runtime angle."""
    i = ct.bid(0)
    k = ct.astype(i * T + ct.arange(T, dtype=ct.int32), ct.float32)
    c = ct.cos(k * theta)
    s = ct.sin(k * theta)
    zr = ct.load(Zr, index=(i,), shape=(T,), padding_mode=ZERO)
    zi = ct.load(Zi, index=(i,), shape=(T,), padding_mode=ZERO)
    ct.store(Outr, index=(i,), tile=zr * c - zi * s)
    ct.store(Outi, index=(i,), tile=zr * s + zi * c)


# ------------------------------------------------------------------ scans
@ct.kernel
def scan_rows(X, Csum, Rprod, TR: CI, TC: CI):
    """Per (TR, TC) tile: the inclusive cumsum along rows and the reverse cumprod along rows."""
    i = ct.bid(0)
    x = ct.load(X, index=(i, 0), shape=(TR, TC), padding_mode=ZERO)
    ct.store(Csum, index=(i, 0), tile=ct.cumsum(x, axis=1))
    ct.store(Rprod, index=(i, 0), tile=ct.cumprod(x, axis=1, reverse=True))


@ct.kernel
def scan_carry_i64(x, out, T: CI):
    """A running int64 prefix sum over a whole array in one block: a scan per tile plus the
    carry of the previous tiles (a scalar carried around the loop, a store per iteration)."""
    carry = ct.zeros((), dtype=ct.int64)
    for j in range(ct.num_tiles(x, axis=0, shape=(T,))):
        v = ct.load(x, index=(j,), shape=(T,), padding_mode=ZERO)
        c = ct.cumsum(v, axis=0) + carry
        ct.store(out, index=(j,), tile=c)
        carry = carry + ct.sum(v)


# ------------------------------------------------------------------ atomics
@ct.kernel
def atomics_int(acc, old, flags, got, T: CI):
    """Every integer atomic on acc[0..6) from every element of every block (tile atomics with
    duplicate addresses), out-of-range indices masked by the bounds check, raw-memory masked
    atomics (add, xchg, cas).  old[] and got[] receive the values the xchg and cas return."""
    i = ct.bid(0)
    lane = ct.arange(T, dtype=ct.int32)
    v = i * T + lane
    ct.atomic_add(acc, ct.full((T,), 0, dtype=ct.int32), v)
    ct.atomic_max(acc, ct.full((T,), 1, dtype=ct.int32), v * 7 % 101)
    ct.atomic_min(acc, ct.full((T,), 2, dtype=ct.int32), 1000 - v * 13 % 97)
    ct.atomic_xor(acc, ct.full((T,), 3, dtype=ct.int32), v * 2654435 & 0xFFFF)
    ct.atomic_and(acc, ct.full((T,), 4, dtype=ct.int32), ~(1 << (v % 31)))
    ct.atomic_or(acc, ct.full((T,), 5, dtype=ct.int32), 1 << (v % 29))
    # one xchg per block into its own slot (6 + i), returning the initial value
    prev = ct.atomic_xchg(acc, 6 + i, i + 100)
    ct.scatter(old, i, prev)
    # cas on a per-element slot: it succeeds where the slot holds 0 and returns what it found
    won = ct.atomic_cas(old, ct.num_blocks(0) + v, 0, v + 1)
    ct.scatter(old, ct.num_blocks(0) + v, won * 1000 + v + 1)
    # out-of-range indices (lane >= 4 here) are masked by the bounds check: acc has 6 + grid
    # + 4 slots, these go to the last 4 only
    ct.atomic_add(acc, acc.shape[0] - 4 + lane, ct.full((T,), 1, dtype=ct.int32))
    mem = acc.get_raw_memory()
    mem.atomic_add_offset(acc.shape[0] - 4 + (lane % 4), ct.full((T,), 10, dtype=ct.int32),
                          mask=(lane % 2) == 0)
    # masked xchg, then a masked cas that succeeds where the xchg wrote (masked lanes get `expected`)
    fm = flags.get_raw_memory()
    fm.atomic_xchg_offset(v, v * 3, mask=(lane % 3) != 0)
    seen = fm.atomic_cas_offset(v, v * 3, -v, mask=(lane % 2) == 0)
    ct.scatter(got, v, seen)


@ct.kernel
def atomics_float(acc, tiles, T: CI):
    """Float atomics: a scalar atomic add of a block sum, an xchg, and a tile atomic add."""
    i = ct.bid(0)
    lane = ct.arange(T, dtype=ct.int32)
    v = ct.astype(i * T + lane, ct.float32) * 0.5
    ct.atomic_add(acc, 0, ct.sum(v))
    ct.atomic_xchg(acc, 1 + i, ct.max(v))
    ct.atomic_add(tiles, lane, v)


@ct.kernel
def atomics_i64_scalar(acc, x):
    """Scalar int64 atomics (one per block) with runtime-valued operands."""
    i = ct.bid(0)
    v = ct.gather(x, i)
    ct.atomic_add(acc, 0, v)
    ct.atomic_max(acc, 1, v)
    ct.atomic_min(acc, 2, v)
    ct.atomic_xor(acc, 3, v)


@ct.kernel
def embedding_grad(dW, ids, dY, D: CI):
    """Embedding backward: dW[ids[t], :] += dY[t, :], one token per block, a bf16 atomic add of a
    row (tokens share rows)."""
    t = ct.bid(0)
    row = ct.gather(ids, t)
    g = ct.load(dY, index=(t, 0), shape=(1, D)).reshape((D,))
    ct.atomic_add(dW, (row, ct.arange(D, dtype=ct.int32)), g)


# ------------------------------------------------------------------ gather / scatter
@ct.kernel
def gather_scatter_masked(src, idx, dst, T: CI, TC: CI):
    """dst[r, perm] = src[idx[r], c] for masked lanes: a 2-D gather through an index tile
    (rows) broadcast with a column range, a mask and a padding value; a masked 2-D scatter."""
    i = ct.bid(0)
    rows = i * T + ct.arange(T, dtype=ct.int32)
    src_rows = ct.gather(idx, rows, padding_value=-1)
    cols = ct.arange(TC, dtype=ct.int32)
    keep = (src_rows[:, None] >= 0) & ((cols[None, :] % 3) != 1)
    v = ct.gather(src, (src_rows[:, None], cols[None, :]), mask=keep, padding_value=-7.5)
    ct.scatter(dst, (rows[:, None], (TC - 1 - cols)[None, :]), v * 2.0, mask=(cols[None, :] < TC - 2))


@ct.kernel
def gather_view_rows(x, idx, y, TR: CI, TC: CI):
    """Gather/scatter views: load TR rows of x chosen by an index tile and a column slice
    (rows out of range read the padding value), write them to y at permuted row positions."""
    i = ct.bid(0)
    c0 = ct.bid(1) * TC
    rows = ct.gather(idx, i * TR + ct.arange(TR, dtype=ct.int32))
    t = ct.load_advanced_indexing(x, (rows, ct.Slice(c0, TC)), padding_mode=ct.PaddingMode.NEG_INF)
    t = ct.where(t == -math.inf, 0.0, t + 1.0)
    dst = i * TR + (TR - 1 - ct.arange(TR, dtype=ct.int32))
    ct.store_advanced_indexing(y, (dst, ct.Slice(c0, TC)), ct.astype(t, y.dtype))


# ------------------------------------------------------------------ fp8
@ct.kernel
def mx_matmul(A, As, B, Bs, C, TM: CI, TN: CI, TK: CI, BLK: CI):
    """MX block-scaled fp8 matmul: every BLK elements of K share one e8m0 scale per row of A and
    per column of B; K loop, f32 accumulator."""
    bm = ct.bid(0)
    bn = ct.bid(1)
    nk = ct.num_tiles(A, axis=1, shape=(TM, TK))
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(nk):
        a = ct.load(A, index=(bm, k), shape=(TM, TK), padding_mode=ZERO)
        sa = ct.load(As, index=(bm, k), shape=(TM, TK // BLK), padding_mode=ZERO)
        b = ct.load(B, index=(k, bn), shape=(TK, TN), padding_mode=ZERO)
        sb = ct.load(Bs, index=(k, bn), shape=(TK // BLK, TN), padding_mode=ZERO)
        acc = ct.mma_scaled(a, sa, b, sb, acc)
    ct.store(C, index=(bm, bn), tile=acc)


@ct.kernel
def fp4_scaled_matmul(A, As, B, Bs, C, TM: CI, TN: CI, TK: CI, BLK: CI):
    """Block-scaled fp4 (e2m1) matmul from packed bytes: A holds two e2m1 per byte along K, B two per
    byte along N (unpacked with unpack_from_bytes, low nibble first); one scale per BLK elements of
    K (e8m0 for MXFP4, e4m3 for NVFP4)."""
    bm = ct.bid(0)
    bn = ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.num_tiles(As, axis=1, shape=(TM, TK // BLK))):
        ab = ct.load(A, index=(bm, k), shape=(TM, TK // 2), padding_mode=ZERO).reshape((TM * TK // 2,))
        a = ct.unpack_from_bytes(ab, ct.float4_e2m1fn).reshape((TM, TK))
        bb = ct.load(B, index=(k, bn), shape=(TK, TN // 2), padding_mode=ZERO).reshape((TK * TN // 2,))
        b = ct.unpack_from_bytes(bb, ct.float4_e2m1fn).reshape((TK, TN))
        sa = ct.load(As, index=(bm, k), shape=(TM, TK // BLK), padding_mode=ZERO)
        sb = ct.load(Bs, index=(k, bn), shape=(TK // BLK, TN), padding_mode=ZERO)
        acc = ct.mma_scaled(a, sa, b, sb, acc)
    ct.store(C, index=(bm, bn), tile=acc)


@ct.kernel
def fp8_roundtrip(x, q, y, scale, T: CI):
    """Quantise f32 to fp8 after multiplying by a runtime scale, store the codes, and dequantise."""
    i = ct.bid(0)
    v = ct.load(x, index=(i,), shape=(T,), padding_mode=ZERO) * scale
    f8 = ct.astype(v, q.dtype)
    ct.store(q, index=(i,), tile=f8)
    ct.store(y, index=(i,), tile=ct.astype(f8, ct.float32) / scale)


@ct.kernel
def fp8_matmul(A, B, C, TM: CI, TN: CI, TK: CI):
    """Plain fp8 x fp8 -> f32 mma (no scales)."""
    bm = ct.bid(0)
    bn = ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.num_tiles(A, axis=1, shape=(TM, TK))):
        a = ct.load(A, index=(bm, k), shape=(TM, TK), padding_mode=ZERO)
        b = ct.load(B, index=(k, bn), shape=(TK, TN), padding_mode=ZERO)
        acc = ct.mma(a, b, acc)
    ct.store(C, index=(bm, bn), tile=acc)


# ------------------------------------------------------------------ locks, grids, scalars
@ct.kernel
def lock_counter(lock, counter, order):
    """A global spin lock (while atomic_cas) around a non-atomic read-modify-write: every block
    takes a ticket; tickets are a permutation of 0..grid-1."""
    i = ct.bid(0) + ct.bid(1) * ct.num_blocks(0)
    while ct.atomic_cas(lock, 0, 0, 1, memory_order=ct.MemoryOrder.ACQUIRE) != 0:
        pass
    n = ct.gather(counter, 0)
    ct.scatter(order, i, n)
    ct.scatter(counter, 0, n + 1)
    ct.atomic_xchg(lock, 0, 0, memory_order=ct.MemoryOrder.RELEASE)


@ct.kernel
def grid3d(out, TX: CI):
    """out[z, y, x-tile] = a code of (bid, num_blocks) over a 3-D grid."""
    x = ct.bid(0)
    y = ct.bid(1)
    z = ct.bid(2)
    code = ((z * ct.num_blocks(1) + y) * ct.num_blocks(0) + x) * 1000 \
        + ct.num_blocks(0) * 100 + ct.num_blocks(1) * 10 + ct.num_blocks(2)
    t = ct.full((1, 1, TX), 0, dtype=ct.int32) + code + ct.arange(TX, dtype=ct.int32)[None, None, :]
    ct.store(out, index=(z, y, x), tile=t)


@ct.kernel
def runtime_scalars(x, y, offset, flag, mult, T: CI):
    """Runtime int64, bool and f64 scalars on int64-indexed arrays: y = x * mult + offset, or
    its negation when flag is set (a runtime if)."""
    i = ct.bid(0)
    v = ct.load(x, index=(i,), shape=(T,), padding_mode=ZERO)
    r = ct.astype(v, ct.float64) * mult + ct.astype(offset, ct.float64)
    if flag:
        r = -r
    ct.store(y, index=(i,), tile=r)


# ------------------------------------------------------------------ cuTile's FMHA sample
@ct.kernel(occupancy=2)
def fmha(Q, K, V, Out, qk_scale, input_pos, D: CI, H: CI, TM: CI, TN: CI, GROUP: CI, CAUSAL: CB,
         EVEN_K: CB):
    """The fused multi-head attention of cuTile's samples (AttentionFMHA.py), op for op: no padding
    mode on the loads, latency hints on the K and V loads, exp2 and the final division with
    flush-to-zero, the division approximate, two blocks per SM requested.  At D=64 and 128x128
    tiles it needs more than the 48 KiB of shared memory a kernel may declare statically.  (Functions
    rather than Tile methods: a method's debug location is the frontend's own file, whose path would
    differ from one checkout to the next.)"""
    bx = ct.bid(0)
    by = ct.bid(1)
    b = by // H
    h = by % H
    kvh = h // GROUP
    scale = qk_scale * INV_LN2
    rows = bx * TM + ct.arange(TM, dtype=ct.int32)
    rows += input_pos
    rows = rows[:, None]
    cols0 = ct.arange(TN, dtype=ct.int32)[None, :]
    m_i = ct.full((TM, 1), -math.inf, dtype=ct.float32)
    l_i = ct.full((TM, 1), 0.0, dtype=ct.float32)
    acc = ct.full((TM, D), 0.0, dtype=ct.float32)
    q = ct.reshape(ct.load(Q, index=(b, h, bx, 0), shape=(1, 1, TM, D)), (TM, D))
    m_end = input_pos + (bx + 1) * TM
    klen = K.shape[2]
    if CAUSAL:
        mask_start = (input_pos + bx * TM) // TN
        mask_start = min(mask_start, klen // TN)
        nj = ct.cdiv(min(m_end, klen), TN)
    else:
        nj = ct.cdiv(klen, TN)
        mask_start = klen // TN
    for j in range(0, nj):
        k = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, D, TN), order=(0, 1, 3, 2), latency=2)
        k = ct.reshape(k, (D, TN))
        qk = ct.full((TM, TN), 0., dtype=ct.float32)
        qk = ct.mma(q, k, qk)
        if (CAUSAL or not EVEN_K) and j >= mask_start:
            cols = j * TN + cols0
            keep = ct.full((TM, TN), True, dtype=ct.bool_)
            if not EVEN_K:
                keep = keep & (cols < klen)
            if CAUSAL:
                keep = keep & (rows >= cols)
            qk += ct.where(keep, 0.0, -math.inf)
        m_ij = max(m_i, ct.max(qk, axis=-1, keepdims=True) * scale)
        qk = qk * scale - m_ij
        p = ct.exp2(qk, flush_to_zero=True)
        l_ij = ct.sum(p, axis=-1, keepdims=True)
        alpha = ct.exp2(m_i - m_ij, flush_to_zero=True)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha
        v = ct.reshape(ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TN, D), latency=4), (TN, D))
        p = ct.astype(p, Q.dtype)
        acc = ct.mma(p, v, acc)
        m_i = m_ij
    acc = ct.truediv(acc, l_i, flush_to_zero=True, rounding_mode=ct.RoundingMode.APPROX)
    acc = ct.astype(ct.reshape(acc, (1, 1, TM, D)), Out.dtype)
    ct.store(Out, index=(b, h, bx, 0), tile=acc)


# ------------------------------------------------------------------ signatures
A16_2 = arr("float16", 2)
F32_1 = arr("float32", 1)
F32_2 = arr("float32", 2)
I32_1 = arr("int32", 1)

EXAMPLES = [
    Case("persistent_matmul_f16", persistent_matmul, (A16_2, A16_2, A16_2, 32, 32, 32)),
    Case("loop_runtime_step_f32", loop_runtime_step, (F32_1, F32_1, scal("int32"), scal("int32"), 64)),
    Case("splitk_matmul_atomic_f16", splitk_matmul_atomic, (A16_2, A16_2, F32_2, 32, 32, 32, 3)),
    Case("splitk_matmul_lock_f16", splitk_matmul_lock,
         (A16_2, A16_2, F32_2, I32_1, I32_1, 32, 32, 32, 2)),
    Case("layernorm_fwd_f32", layernorm_fwd,
         (F32_2, F32_1, F32_1, F32_2, F32_1, F32_1, scal("float32"), 64)),
    Case("layernorm_bwd_f32", layernorm_bwd,
         (F32_2, F32_2, F32_2, F32_2, F32_2, F32_1, F32_1, F32_1, I32_1, 64)),
    Case("layernorm_bwd_dwdb_f32", layernorm_bwd_dwdb, (F32_2, F32_2, F32_1, F32_1, 8, 64)),
    Case("rmsnorm_persistent_f16", rmsnorm_persistent, (A16_2, A16_2, arr("float16", 1), 4, 64, 256, 1e-5)),
    Case("rmsnorm_gather_bf16", rmsnorm_gather,
         (arr("bfloat16", 2), arr("bfloat16", 1), arr("bfloat16", 2), F32_1, 200, 1e-6, 64)),
    Case("moe_gather_matmul_f16", moe_gather_matmul,
         (A16_2, arr("float16", 3), A16_2, F32_1, I32_1, I32_1, scal("int32"), 16, 32, 32)),
    Case("flash_attention_causal_gqa_f16", flash_attention,
         (arr("float16", 4), arr("float16", 4), arr("float16", 4), arr("float16", 4),
          scal("float32"), scal("int32"), 32, 4, 32, 32, 2, True, False)),
    Case("flash_attention_ragged_f16", flash_attention,
         (arr("float16", 4), arr("float16", 4), arr("float16", 4), arr("float16", 4),
          scal("float32"), scal("int32"), 32, 2, 32, 32, 1, False, False)),
    Case("fft_two_stage_f32", fft_two_stage,
         (F32_2, F32_2, F32_2, F32_2, arr("float32", 3), arr("float32", 3), arr("float32", 3), 8, 16)),
    Case("complex_rotate_f32", complex_rotate, (F32_1, F32_1, F32_1, F32_1, scal("float32"), 128)),
    Case("scan_rows_f32", scan_rows, (F32_2, F32_2, F32_2, 4, 32)),
    Case("scan_carry_i64", scan_carry_i64, (arr("int64", 1), arr("int64", 1), 64)),
    Case("atomics_int_i32", atomics_int, (I32_1, I32_1, I32_1, I32_1, 32)),
    Case("atomics_float_f32", atomics_float, (F32_1, F32_1, 64)),
    Case("atomics_i64_scalar", atomics_i64_scalar, (arr("int64", 1), arr("int64", 1))),
    Case("embedding_grad_bf16", embedding_grad, (arr("bfloat16", 2), I32_1, arr("bfloat16", 2), 64)),
    Case("gather_scatter_masked_f32", gather_scatter_masked, (F32_2, I32_1, F32_2, 16, 16)),
    Case("gather_view_rows_f16", gather_view_rows, (A16_2, I32_1, A16_2, 8, 32)),
    Case("mx_matmul_e4m3", mx_matmul,
         (arr("float8_e4m3fn", 2), arr("float8_e8m0fnu", 2), arr("float8_e4m3fn", 2),
          arr("float8_e8m0fnu", 2), F32_2, 64, 64, 64, 32)),
    Case("mx_matmul_e5m2", mx_matmul,
         (arr("float8_e5m2", 2), arr("float8_e8m0fnu", 2), arr("float8_e5m2", 2),
          arr("float8_e8m0fnu", 2), F32_2, 64, 64, 64, 32)),
    Case("mxfp4_matmul", fp4_scaled_matmul,
         (arr("uint8", 2), arr("float8_e8m0fnu", 2), arr("uint8", 2), arr("float8_e8m0fnu", 2), F32_2,
          64, 64, 64, 32)),
    Case("nvfp4_matmul", fp4_scaled_matmul,
         (arr("uint8", 2), arr("float8_e4m3fn", 2), arr("uint8", 2), arr("float8_e4m3fn", 2), F32_2,
          64, 64, 64, 16)),
    Case("fp8_roundtrip_e4m3", fp8_roundtrip,
         (F32_1, arr("float8_e4m3fn", 1), F32_1, scal("float32"), 128)),
    Case("fp8_roundtrip_e5m2", fp8_roundtrip,
         (F32_1, arr("float8_e5m2", 1), F32_1, scal("float32"), 128)),
    Case("fp8_matmul_e4m3", fp8_matmul,
         (arr("float8_e4m3fn", 2), arr("float8_e4m3fn", 2), F32_2, 64, 64, 32)),
    Case("lock_counter_i32", lock_counter, (I32_1, I32_1, I32_1)),
    Case("grid3d_i32", grid3d, (arr("int32", 3), 16)),
    Case("runtime_scalars_i64", runtime_scalars,
         (arr("int32", 1, "int64"), arr("float64", 1, "int64"), scal("int64"), scal("bool"),
          scal("float64"), 64)),
    # cuTile's FMHA sample at its defaults: D=64, 128x128 tiles, one query head per KV head, K length a
    # multiple of the tile; H=2 keeps the grid small
    Case("fmha_f16", fmha, (arr("float16", 4), arr("float16", 4), arr("float16", 4), arr("float16", 4),
                            scal("float32"), scal("int32"), 64, 2, 128, 128, 1, False, True)),
    Case("fmha_causal_f16", fmha, (arr("float16", 4), arr("float16", 4), arr("float16", 4), arr("float16", 4),
                                   scal("float32"), scal("int32"), 64, 2, 128, 128, 1, True, True)),
]
