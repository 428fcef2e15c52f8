"""Numpy references for every case of examples/suite/kernels.py.

The same interface as the corpus's refs.py, per case id:

* ``make_inputs(cid, seed=None)`` -> dict of every runtime parameter in kernel order (constants
  excluded): numpy arrays (outputs zero-filled or holding their initial contents) and numpy
  scalars.  The default seed is ``crc32(cid)``.
* ``grid(cid, inputs)`` -> (gx, gy, gz).
* ``reference(cid, inputs)`` -> dict name -> expected final contents of every output array.
* ``tolerance(cid, name)`` -> (rtol, atol);  ``check(cid, inputs, outputs)`` -> list of problems.

bfloat16 arrays are uint16 bit patterns and fp8 arrays uint8 bit patterns (numpy has neither);
``decode`` turns them into values.  Sizes are small (the emulator runs every case on the CPU) and
deliberately not multiples of the tile sizes.  Outputs whose order depends on scheduling (a
lock's tickets) are compared after a canonicalisation (``canon``).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# ----------------------------------------------------------------------------- element formats
NP = {"bool": np.bool_, "uint8": np.uint8, "int32": np.int32, "int64": np.int64, "float16": np.float16,
      "float32": np.float32, "float64": np.float64, "bfloat16": np.uint16,
      "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8, "float8_e8m0fnu": np.uint8}


def f32_to_bf16(x) -> np.ndarray:
    """Round to bfloat16 (nearest even); uint16 bit patterns."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), r).astype(np.uint16)


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _fp8_table(exp_bits: int, man_bits: int, fn: bool) -> np.ndarray:
    """Value of every byte of an OCP fp8 format (NaN for NaN codes)."""
    bias = (1 << (exp_bits - 1)) - 1
    out = np.empty(256, dtype=np.float64)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> man_bits) & ((1 << exp_bits) - 1)
        m = c & ((1 << man_bits) - 1)
        if fn and e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
            out[c] = math.nan                      # e4m3fn: only S.1111.111 is NaN, no infinities
        elif not fn and e == (1 << exp_bits) - 1:
            out[c] = s * math.inf if m == 0 else math.nan
        elif e == 0:
            out[c] = s * m * 2.0 ** (1 - bias - man_bits)
        else:
            out[c] = s * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


FP8 = {"float8_e4m3fn": _fp8_table(4, 3, True), "float8_e5m2": _fp8_table(5, 2, False)}
E2M1 = np.array([(-1.0 if c & 8 else 1.0) * v for c in range(16)
                 for v in [[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0][c & 7]]])
E8M0 = np.array([2.0 ** (c - 127) if c != 255 else math.nan for c in range(256)])


def fp8_encode(x, fmt: str) -> np.ndarray:
    """Round values to the nearest fp8 code (ties to the even code); finite inputs in range only."""
    table = FP8[fmt]
    pos = np.array([c for c in range(128) if np.isfinite(table[c])])
    vals = table[pos]
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x).reshape(-1)
    hi = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = a - vals[lo], vals[hi] - a
    pick = np.where((dhi < dlo) | ((dhi == dlo) & (pos[hi] % 2 == 0)), hi, lo)
    code = pos[pick].astype(np.uint8) | np.where(np.signbit(x.reshape(-1)), 0x80, 0).astype(np.uint8)
    return code.reshape(x.shape)


def decode(a, dtype: str) -> np.ndarray:
    """Numeric value of an array of the given cuTile dtype, as float64 (ints stay exact)."""
    if dtype == "bfloat16":
        return bf16_to_f32(a).astype(np.float64)
    if dtype in FP8:
        return FP8[dtype][np.asarray(a, dtype=np.uint8)]
    if dtype == "float8_e8m0fnu":
        return E8M0[np.asarray(a, dtype=np.uint8)]
    if dtype == "uint8":
        return np.asarray(a)
    if dtype in ("int32", "int64"):
        return np.asarray(a)
    return np.asarray(a).astype(np.float64)


def unpack_e2m1(packed) -> np.ndarray:
    """Values of e2m1 pairs packed in bytes along the last axis, low nibble first."""
    p = np.asarray(packed, dtype=np.uint8)
    pairs = np.stack([E2M1[p & 0xF], E2M1[p >> 4]], axis=-1)
    return pairs.reshape(*p.shape[:-1], p.shape[-1] * 2)


def cdiv(a, b):
    return -(-a // b)


def grid_vals(rng, shape, dtype, k=8):
    """Values j/k with |j| <= k: exact in f16/bf16, so f32 dot products are exact."""
    x = rng.integers(-k, k + 1, size=shape) / k
    return f32_to_bf16(x) if dtype == "bfloat16" else x.astype(NP[dtype])


# ----------------------------------------------------------------------------- registry
@dataclass
class Ref:
    make: Callable
    grid: Callable
    ref: Callable
    dtypes: dict                                    # output name -> cuTile dtype
    tol: dict = field(default_factory=dict)         # output name -> (rtol, atol); default exact
    canon: dict = field(default_factory=dict)       # output name -> function applied before comparing


class Registry:
    """A set of cases and the refs.py interface over them (examples/refs.py keeps its own)."""

    def __init__(self):
        self.refs: dict[str, Ref] = {}

    def register(self, cid, make, grid, ref, dtypes, tol=None, canon=None):
        assert cid not in self.refs, cid
        self.refs[cid] = Ref(make, grid, ref, dict(dtypes), dict(tol or {}), dict(canon or {}))

    def make_inputs(self, cid: str, seed: int | None = None) -> dict:
        return self.refs[cid].make(np.random.default_rng(zlib.crc32(cid.encode()) if seed is None else seed))

    def grid(self, cid: str, inputs: dict) -> tuple:
        g = tuple(int(v) for v in self.refs[cid].grid(inputs))
        return g + (1,) * (3 - len(g))

    def reference(self, cid: str, inputs: dict) -> dict:
        return self.refs[cid].ref(inputs)

    def tolerance(self, cid: str, name: str) -> tuple:
        return self.refs[cid].tol.get(name, (0.0, 0.0))

    def check(self, cid: str, inputs: dict, outputs: dict) -> list:
        """Compare kernel outputs with the reference; a list of problems (empty = pass).  `inputs` must
        be an untouched copy: the reference is computed from it."""
        r = self.refs[cid]
        problems = []
        for name, exp in r.ref(inputs).items():
            canon = r.canon.get(name, lambda v: v)
            dt = r.dtypes[name]
            e = decode(canon(np.asarray(exp)), dt)
            g = decode(canon(np.asarray(outputs[name])), dt)
            if e.shape != g.shape:
                problems.append(f"{name}: shape {g.shape} != {e.shape}")
                continue
            rtol, atol = self.tolerance(cid, name)
            if e.dtype.kind in "iu":
                bad = e != g
            else:
                bad = ~(np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True))
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                problems.append(f"{name}: {int(bad.sum())} of {bad.size} differ, first at {idx}: "
                                f"got {g[idx]!r} expected {e[idx]!r}")
        return problems


_SUITE = Registry()
REFS = _SUITE.refs
register, make_inputs, grid = _SUITE.register, _SUITE.make_inputs, _SUITE.grid
reference, tolerance, check = _SUITE.reference, _SUITE.tolerance, _SUITE.check


# ----------------------------------------------------------------------------- matmuls
def _mm(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _persistent_matmul():
    M, N, K, T = 100, 70, 72, 32

    def make(rng):
        return {"A": grid_vals(rng, (M, K), "float16"), "B": grid_vals(rng, (K, N), "float16"),
                "C": np.zeros((M, N), np.float16)}

    register("persistent_matmul_f16", make, lambda d: (5,),
             lambda d: {"C": _mm(d["A"], d["B"]).astype(np.float16)}, {"C": "float16"})
    assert cdiv(M, T) * cdiv(N, T) > 5  # more tiles than blocks: the loop runs several times


def _splitk():
    M, N, K = 70, 50, 200

    def make_atomic(rng):
        return {"A": grid_vals(rng, (M, K), "float16"), "B": grid_vals(rng, (K, N), "float16"),
                "C": np.zeros((M, N), np.float32)}

    tiles = cdiv(M, 32) * cdiv(N, 32)
    register("splitk_matmul_atomic_f16", make_atomic, lambda d: (tiles, 3),
             lambda d: {"C": _mm(d["A"], d["B"]).astype(np.float32)}, {"C": "float32"})

    def make_lock(rng):
        d = make_atomic(rng)
        d.update(Locks=np.zeros(tiles, np.int32), Counts=np.zeros(tiles, np.int32))
        return d

    register("splitk_matmul_lock_f16", make_lock, lambda d: (tiles, 2),
             lambda d: {"C": _mm(d["A"], d["B"]).astype(np.float32),
                        "Locks": np.zeros(tiles, np.int32), "Counts": np.zeros(tiles, np.int32)},
             {"C": "float32", "Locks": "int32", "Counts": "int32"})


# ----------------------------------------------------------------------------- normalisations
LN_M, LN_N, LN_GROUP = 12, 300, 4


def _ln_stats(x):
    x = x.astype(np.float64)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + 1e-5)
    return mean, rstd


def _layernorm():
    M, N = LN_M, LN_N
    F = (1e-5, 1e-5)

    def make_fwd(rng):
        return {"X": rng.standard_normal((M, N)).astype(np.float32) * 2 + 0.5,
                "W": rng.standard_normal(N).astype(np.float32), "B": rng.standard_normal(N).astype(np.float32),
                "Y": np.zeros((M, N), np.float32), "Mean": np.zeros(M, np.float32),
                "Rstd": np.zeros(M, np.float32), "eps": np.float32(1e-5)}

    def ref_fwd(d):
        mean, rstd = _ln_stats(d["X"])
        y = (d["X"] - mean[:, None]) * rstd[:, None] * d["W"] + d["B"]
        return {"Y": y.astype(np.float32), "Mean": mean.astype(np.float32), "Rstd": rstd.astype(np.float32)}

    register("layernorm_fwd_f32", make_fwd, lambda d: (M,), ref_fwd,
             {"Y": "float32", "Mean": "float32", "Rstd": "float32"}, {"Y": F, "Mean": F, "Rstd": F})

    def make_bwd(rng):
        x = rng.standard_normal((M, N)).astype(np.float32)
        mean, rstd = _ln_stats(x)
        return {"DX": np.zeros((M, N), np.float32), "DY": rng.standard_normal((M, N)).astype(np.float32),
                "DW": np.zeros((LN_GROUP, N), np.float32), "DB": np.zeros((LN_GROUP, N), np.float32),
                "X": x, "W": rng.standard_normal(N).astype(np.float32),
                "Mean": mean.astype(np.float32), "Rstd": rstd.astype(np.float32),
                "Locks": np.zeros(LN_GROUP, np.int32)}

    def ref_bwd(d):
        x, dy, w = (d[k].astype(np.float64) for k in ("X", "DY", "W"))
        mean, rstd = d["Mean"].astype(np.float64)[:, None], d["Rstd"].astype(np.float64)[:, None]
        xhat = (x - mean) * rstd
        wdy = w * dy
        c1 = (xhat * wdy).mean(axis=1, keepdims=True)
        c2 = wdy.mean(axis=1, keepdims=True)
        dx = (wdy - (xhat * c1 + c2)) * rstd
        dw = np.zeros((LN_GROUP, N))
        db = np.zeros((LN_GROUP, N))
        for r in range(M):
            dw[r % LN_GROUP] += dy[r] * xhat[r]
            db[r % LN_GROUP] += dy[r]
        return {"DX": dx.astype(np.float32), "DW": dw.astype(np.float32), "DB": db.astype(np.float32),
                "Locks": np.zeros(LN_GROUP, np.int32)}

    register("layernorm_bwd_f32", make_bwd, lambda d: (M,), ref_bwd,
             {"DX": "float32", "DW": "float32", "DB": "float32", "Locks": "int32"},
             {"DX": (1e-4, 1e-5), "DW": (1e-4, 1e-5), "DB": (1e-4, 1e-5)})

    G = 20

    def make_dwdb(rng):
        return {"DW": rng.standard_normal((G, N)).astype(np.float32),
                "DB": rng.standard_normal((G, N)).astype(np.float32),
                "FDW": np.zeros(N, np.float32), "FDB": np.zeros(N, np.float32)}

    register("layernorm_bwd_dwdb_f32", make_dwdb, lambda d: (cdiv(N, 64),),
             lambda d: {"FDW": d["DW"].astype(np.float64).sum(0).astype(np.float32),
                        "FDB": d["DB"].astype(np.float64).sum(0).astype(np.float32)},
             {"FDW": "float32", "FDB": "float32"}, {"FDW": (1e-5, 1e-5), "FDB": (1e-5, 1e-5)})


def _rmsnorm():
    M, N = 50, 256

    def make_p(rng):
        return {"X": rng.standard_normal((M, N)).astype(np.float16), "Y": np.zeros((M, N), np.float16),
                "W": rng.standard_normal(N).astype(np.float16)}

    def ref_p(d):
        x = d["X"].astype(np.float64)
        inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)
        return {"Y": (x * inv * d["W"].astype(np.float64)).astype(np.float16)}

    register("rmsnorm_persistent_f16", make_p, lambda d: (5,), ref_p, {"Y": "float16"}, {"Y": (2e-3, 2e-3)})

    R, NG = 6, 200

    def make_g(rng):
        return {"x": f32_to_bf16(rng.standard_normal((R, NG))), "w": f32_to_bf16(rng.standard_normal(NG)),
                "out": np.zeros((R, NG), np.uint16), "Rstd": np.zeros(R, np.float32)}

    def ref_g(d):
        x = bf16_to_f32(d["x"]).astype(np.float64)
        rstd = 1.0 / np.sqrt((x * x).mean(axis=1) + 1e-6)
        return {"out": f32_to_bf16(x * rstd[:, None] * bf16_to_f32(d["w"])), "Rstd": rstd.astype(np.float32)}

    register("rmsnorm_gather_bf16", make_g, lambda d: (R,), ref_g, {"out": "bfloat16", "Rstd": "float32"},
             {"out": (1e-2, 1e-2), "Rstd": (1e-5, 1e-6)})


def _moe():
    T, K, E, N, TOPK, TM = 10, 64, 3, 48, 2, 16

    def make(rng):
        experts = np.stack([rng.permutation(E)[:TOPK] for _ in range(T)])  # (T, TOPK), distinct per token
        flat = experts.reshape(-1)
        slots, block_expert = [], []
        for e in range(E):
            ids = np.flatnonzero(flat == e)
            nb = cdiv(len(ids), TM)
            padded = np.full(nb * TM, T * TOPK, dtype=np.int32)   # the sentinel id is out of range
            padded[:len(ids)] = ids
            slots.append(padded)
            block_expert += [e] * nb
        return {"A": grid_vals(rng, (T, K), "float16"), "B": grid_vals(rng, (E, N, K), "float16"),
                "C": np.zeros((T * TOPK, N), np.float16),
                "topk_weights": rng.uniform(0.1, 1.0, T * TOPK).astype(np.float32),
                "sorted_token_ids": np.concatenate(slots).astype(np.int32),
                "expert_ids": np.array(block_expert, np.int32), "topk": np.int32(TOPK)}

    def ref(d):
        c = np.zeros((T * TOPK, N), np.float64)
        for blk, e in enumerate(d["expert_ids"]):
            for tok in d["sorted_token_ids"][blk * TM:(blk + 1) * TM]:
                if tok < T * TOPK:
                    row = _mm(d["A"][tok // TOPK][None, :], d["B"][e].T)[0].astype(np.float32)
                    c[tok] = row * d["topk_weights"][tok]
        return {"C": c.astype(np.float16)}

    register("moe_gather_matmul_f16", make, lambda d: (len(d["expert_ids"]), cdiv(N, 32)), ref,
             {"C": "float16"}, {"C": (1e-3, 1e-3)})


def _attention(cid, B, H, G, SQ, SK, D, causal, pos, TM=32):
    def make(rng):
        return {"Q": rng.uniform(-1, 1, (B, H, SQ, D)).astype(np.float16),
                "K": rng.uniform(-1, 1, (B, H // G, SK, D)).astype(np.float16),
                "V": rng.uniform(-1, 1, (B, H // G, SK, D)).astype(np.float16),
                "Out": np.zeros((B, H, SQ, D), np.float16),
                "qk_scale": np.float32(1.0 / math.sqrt(D)), "input_pos": np.int32(pos)}

    def ref(d):
        q = d["Q"].astype(np.float64)
        k = np.repeat(d["K"].astype(np.float64), G, axis=1)
        v = np.repeat(d["V"].astype(np.float64), G, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) * float(d["qk_scale"])
        if causal:
            qpos = np.arange(SQ)[:, None] + pos
            s = np.where(np.arange(SK)[None, :] <= qpos, s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return {"Out": (p @ v / p.sum(axis=-1, keepdims=True)).astype(np.float16)}

    # p is rounded to f16 before the PV product, as in cuTile's flash attention
    register(cid, make, lambda d: (cdiv(SQ, TM), B * H), ref, {"Out": "float16"}, {"Out": (1e-2, 4e-3)})


def _fft():
    BS, F0, F1 = 3, 8, 16
    N = F0 * F1

    def cplx(z):
        return np.stack([z.real, z.imag], axis=-1).astype(np.float32)

    def make(rng):
        w0 = np.exp(-2j * np.pi * np.outer(np.arange(F0), np.arange(F0)) / F0)
        w1 = np.exp(-2j * np.pi * np.outer(np.arange(F1), np.arange(F1)) / F1)
        tw = np.exp(-2j * np.pi * np.outer(np.arange(F0), np.arange(F1)) / N)
        return {"Xr": rng.standard_normal((BS, N)).astype(np.float32),
                "Xi": rng.standard_normal((BS, N)).astype(np.float32),
                "Yr": np.zeros((BS, N), np.float32), "Yi": np.zeros((BS, N), np.float32),
                "W0": cplx(w0), "W1": cplx(w1), "Tw": cplx(tw)}

    def ref(d):
        y = np.fft.fft(d["Xr"].astype(np.float64) + 1j * d["Xi"].astype(np.float64), axis=1)
        return {"Yr": y.real.astype(np.float32), "Yi": y.imag.astype(np.float32)}

    register("fft_two_stage_f32", make, lambda d: (BS,), ref, {"Yr": "float32", "Yi": "float32"},
             {"Yr": (1e-4, 1e-4), "Yi": (1e-4, 1e-4)})

    n = 1000

    def make_rot(rng):
        return {"Zr": rng.standard_normal(n).astype(np.float32), "Zi": rng.standard_normal(n).astype(np.float32),
                "Outr": np.zeros(n, np.float32), "Outi": np.zeros(n, np.float32), "theta": np.float32(0.003)}

    def ref_rot(d):
        k = np.arange(n, dtype=np.float32)
        ang = (k * d["theta"]).astype(np.float64)                 # the kernel's f32 product
        z = (d["Zr"] + 1j * d["Zi"].astype(np.float64)) * np.exp(1j * ang)
        return {"Outr": z.real.astype(np.float32), "Outi": z.imag.astype(np.float32)}

    register("complex_rotate_f32", make_rot, lambda d: (cdiv(n, 128),), ref_rot,
             {"Outr": "float32", "Outi": "float32"}, {"Outr": (1e-4, 1e-5), "Outi": (1e-4, 1e-5)})


# ----------------------------------------------------------------------------- scans
def _scans():
    R, C = 10, 32

    def make(rng):
        return {"X": rng.uniform(0.6, 1.4, (R, C)).astype(np.float32),
                "Csum": np.zeros((R, C), np.float32), "Rprod": np.zeros((R, C), np.float32)}

    def ref(d):
        x = d["X"].astype(np.float64)
        return {"Csum": np.cumsum(x, axis=1).astype(np.float32),
                "Rprod": np.cumprod(x[:, ::-1], axis=1)[:, ::-1].astype(np.float32)}

    register("scan_rows_f32", make, lambda d: (cdiv(R, 4),), ref, {"Csum": "float32", "Rprod": "float32"},
             {"Csum": (1e-5, 1e-5), "Rprod": (1e-5, 1e-6)})

    n = 1000

    def make_i64(rng):
        return {"x": rng.integers(-(1 << 40), 1 << 40, n).astype(np.int64), "out": np.zeros(n, np.int64)}

    register("scan_carry_i64", make_i64, lambda d: (1,), lambda d: {"out": np.cumsum(d["x"])}, {"out": "int64"})


# ----------------------------------------------------------------------------- atomics
def _atomics():
    T, G = 32, 4
    n_acc = 6 + G + 4

    def make(rng):
        acc = np.zeros(n_acc, np.int32)
        acc[:6] = [0, -1, 10 ** 6, 0x1234, -1, 0]
        acc[6:6 + G] = rng.integers(-50, 50, G)
        old = np.zeros(G + G * T, np.int32)
        old[G + 1::2] = 5                                   # odd elements' cas finds 5, not 0: it fails
        v = np.arange(G * T, dtype=np.int32)
        return {"acc": acc, "old": old, "flags": 1000 + v, "got": np.zeros(G * T, np.int32)}

    def ref(d):
        v = np.arange(G * T, dtype=np.int64)
        acc = d["acc"].astype(np.int64).copy()
        old = d["old"].astype(np.int64).copy()
        acc[0] += v.sum()
        acc[1] = max(acc[1], (v * 7 % 101).max())
        acc[2] = min(acc[2], (1000 - v * 13 % 97).min())
        acc[3] ^= np.bitwise_xor.reduce(v * 2654435 & 0xFFFF)
        acc[4] &= np.bitwise_and.reduce(~(1 << (v % 31)))
        acc[5] |= np.bitwise_or.reduce(1 << (v % 29))
        old[:G] = acc[6:6 + G]
        acc[6:6 + G] = np.arange(G) + 100
        found = old[G:].copy()
        old[G:] = np.where(found == 0, v + 1, found * 1000 + v + 1)
        acc[-4:] += G                                       # lanes 0..3 in range, the rest masked
        acc[-4] += G * 8 * 10                               # masked raw-memory adds: even lanes
        acc[-2] += G * 8 * 10
        lane = v % T
        flags = np.where(lane % 3 != 0, 3 * v, d["flags"])                  # the masked xchg
        got = np.where(lane % 2 == 0, flags, 3 * v)                          # masked lanes return `expected`
        flags = np.where((lane % 2 == 0) & (flags == 3 * v), -v, flags)      # the cas that succeeded
        return {"acc": acc.astype(np.int32), "old": old.astype(np.int32), "flags": flags.astype(np.int32),
                "got": got.astype(np.int32)}

    register("atomics_int_i32", make, lambda d: (G,), ref,
             {"acc": "int32", "old": "int32", "flags": "int32", "got": "int32"})

    TF, GF = 64, 3

    def make_f(rng):
        return {"acc": np.array([1.5] + [-1.0] * GF, np.float32), "tiles": np.full(TF, 0.25, np.float32)}

    def ref_f(d):
        v = (np.arange(GF)[:, None] * TF + np.arange(TF)[None, :]) * 0.5
        acc = d["acc"].astype(np.float64).copy()
        acc[0] += v.sum()
        acc[1:] = v.max(axis=1)
        return {"acc": acc.astype(np.float32), "tiles": (d["tiles"] + v.sum(axis=0)).astype(np.float32)}

    register("atomics_float_f32", make_f, lambda d: (GF,), ref_f, {"acc": "float32", "tiles": "float32"},
             {"acc": (1e-7, 0), "tiles": (1e-7, 0)})

    GI = 8

    def make_i64(rng):
        return {"acc": np.array([7, -(1 << 62), 1 << 62, 0x0F0F0F0F0F0F], np.int64),
                "x": rng.integers(-(1 << 45), 1 << 45, GI).astype(np.int64)}

    def ref_i64(d):
        x, acc = d["x"], d["acc"].copy()
        acc[0] += x.sum()
        acc[1] = max(acc[1], x.max())
        acc[2] = min(acc[2], x.min())
        acc[3] ^= np.bitwise_xor.reduce(x)
        return {"acc": acc}

    register("atomics_i64_scalar", make_i64, lambda d: (GI,), ref_i64, {"acc": "int64"})


# ----------------------------------------------------------------------------- gather / scatter
def _embedding():
    V, D, NT = 12, 64, 40

    def make(rng):
        return {"dW": f32_to_bf16(grid_vals(rng, (V, D), "float32") * 0 + 0.25),
                "ids": rng.integers(0, V, NT).astype(np.int32), "dY": grid_vals(rng, (NT, D), "bfloat16")}

    def ref(d):
        w = bf16_to_f32(d["dW"]).astype(np.float64)
        np.add.at(w, d["ids"], bf16_to_f32(d["dY"]).astype(np.float64))
        return {"dW": f32_to_bf16(w)}

    # sums of a few multiples of 1/8 are exact in bf16: any order gives the same bits
    register("embedding_grad_bf16", make, lambda d: (NT,), ref, {"dW": "bfloat16"})


def _gather_scatter():
    SR, C, NI, DR, T = 30, 16, 40, 45, 16

    def make(rng):
        idx = rng.integers(-1, SR + 6, NI).astype(np.int32)  # -1 (masked) and rows past the end
        return {"src": rng.standard_normal((SR, C)).astype(np.float32), "idx": idx,
                "dst": np.zeros((DR, C), np.float32)}

    def ref(d):
        dst = d["dst"].copy()
        for r in range(min(DR, cdiv(DR, T) * T)):
            srow = int(d["idx"][r]) if r < NI else -1
            for c in range(C - 2):
                keep = srow >= 0 and c % 3 != 1
                v = d["src"][srow, c] if keep and srow < SR else np.float32(-7.5)
                dst[r, C - 1 - c] = v * 2
        return {"dst": dst}

    register("gather_scatter_masked_f32", make, lambda d: (cdiv(DR, T),), ref, {"dst": "float32"})

    XR, XC, NR, TR, TC = 20, 64, 24, 8, 32

    def make_v(rng):
        idx = rng.integers(0, XR, NR).astype(np.int32)
        idx[[3, 10, 17]] = [XR, 100, -3]                      # out of range: padding rows
        return {"x": rng.standard_normal((XR, XC)).astype(np.float16), "idx": idx,
                "y": np.full((NR, XC), 9, np.float16)}

    def ref_v(d):
        y = d["y"].copy()
        for i in range(NR // TR):
            for r in range(TR):
                src = int(d["idx"][i * TR + r])
                row = d["x"][src].astype(np.float32) + 1 if 0 <= src < XR else np.zeros(XC, np.float32)
                y[i * TR + TR - 1 - r] = row.astype(np.float16)
        return {"y": y}

    register("gather_view_rows_f16", make_v, lambda d: (NR // TR, XC // TC), ref_v, {"y": "float16"})


# ----------------------------------------------------------------------------- fp8
def _fp8_codes(rng, shape, fmt, lo=-4, hi=2):
    """Random finite fp8 codes with exponents in [lo, hi] (and some zeros)."""
    table = FP8[fmt]
    ok = [c for c in range(256) if np.isfinite(table[c]) and
          (table[c] == 0 or lo <= math.floor(math.log2(abs(table[c]))) <= hi)]
    return rng.choice(np.array(ok, np.uint8), size=shape)


def _fp8():
    M, N, K, BLK = 128, 64, 128, 32
    for fmt, cid in (("float8_e4m3fn", "mx_matmul_e4m3"), ("float8_e5m2", "mx_matmul_e5m2")):
        def make(rng, fmt=fmt):
            return {"A": _fp8_codes(rng, (M, K), fmt), "As": rng.integers(124, 131, (M, K // BLK)).astype(np.uint8),
                    "B": _fp8_codes(rng, (K, N), fmt), "Bs": rng.integers(124, 131, (K // BLK, N)).astype(np.uint8),
                    "C": np.zeros((M, N), np.float32)}

        def ref(d, fmt=fmt):
            a = decode(d["A"], fmt) * np.repeat(E8M0[d["As"]], BLK, axis=1)
            b = decode(d["B"], fmt) * np.repeat(E8M0[d["Bs"]], BLK, axis=0)
            return {"C": (a @ b).astype(np.float32)}

        # the emulated kernels accumulate in f32 (FMA chains): compare at a few ulps of the result's scale
        register(cid, make, lambda d: (cdiv(M, 64), cdiv(N, 64)), ref, {"C": "float32"}, {"C": (1e-5, 1e-3)})

    n = 1000
    for fmt, cid in (("float8_e4m3fn", "fp8_roundtrip_e4m3"), ("float8_e5m2", "fp8_roundtrip_e5m2")):
        def make_rt(rng):
            return {"x": rng.standard_normal(n).astype(np.float32), "q": np.zeros(n, np.uint8),
                    "y": np.zeros(n, np.float32), "scale": np.float32(4.0)}

        def ref_rt(d, fmt=fmt):
            q = fp8_encode(d["x"].astype(np.float32) * d["scale"], fmt)
            return {"q": q, "y": (decode(q, fmt) / 4.0).astype(np.float32)}

        register(cid, make_rt, lambda d: (cdiv(n, 128),), ref_rt, {"q": fmt, "y": "float32"})

    for cid, sfmt, blk in (("mxfp4_matmul", "float8_e8m0fnu", 32), ("nvfp4_matmul", "float8_e4m3fn", 16)):
        def make4(rng, sfmt=sfmt, blk=blk):
            if sfmt == "float8_e8m0fnu":
                sa, sb = rng.integers(124, 131, (M, K // blk)), rng.integers(124, 131, (K // blk, N))
            else:  # positive e4m3 scales in [1/8, 4]
                sa, sb = _fp8_codes(rng, (M, K // blk), sfmt, -3, 1), _fp8_codes(rng, (K // blk, N), sfmt, -3, 1)
                sa, sb = sa & 0x7F, sb & 0x7F
            return {"A": rng.integers(0, 256, (M, K // 2)).astype(np.uint8), "As": sa.astype(np.uint8),
                    "B": rng.integers(0, 256, (K, N // 2)).astype(np.uint8), "Bs": sb.astype(np.uint8),
                    "C": np.zeros((M, N), np.float32)}

        def ref4(d, sfmt=sfmt, blk=blk):
            a = unpack_e2m1(d["A"]) * np.repeat(decode(d["As"], sfmt), blk, axis=1)
            b = unpack_e2m1(d["B"]) * np.repeat(decode(d["Bs"], sfmt), blk, axis=0)
            return {"C": (a @ b).astype(np.float32)}

        register(cid, make4, lambda d: (cdiv(M, 64), cdiv(N, 64)), ref4, {"C": "float32"}, {"C": (1e-5, 1e-3)})

    MM, NN, KK = 128, 64, 96

    def make_mm(rng):
        return {"A": _fp8_codes(rng, (MM, KK), "float8_e4m3fn"), "B": _fp8_codes(rng, (KK, NN), "float8_e4m3fn"),
                "C": np.zeros((MM, NN), np.float32)}

    def ref_mm(d):
        return {"C": (decode(d["A"], "float8_e4m3fn") @ decode(d["B"], "float8_e4m3fn")).astype(np.float32)}

    register("fp8_matmul_e4m3", make_mm, lambda d: (MM // 64, NN // 64), ref_mm, {"C": "float32"},
             {"C": (1e-5, 1e-5)})


# ----------------------------------------------------------------------------- locks, grids, scalars
def _misc():
    GX, GY = 5, 2

    def make_lock(rng):
        return {"lock": np.zeros(1, np.int32), "counter": np.zeros(1, np.int32),
                "order": np.full(GX * GY, -1, np.int32)}

    register("lock_counter_i32", make_lock, lambda d: (GX, GY),
             lambda d: {"lock": np.zeros(1, np.int32), "counter": np.array([GX * GY], np.int32),
                        "order": np.arange(GX * GY, dtype=np.int32)},
             {"lock": "int32", "counter": "int32", "order": "int32"}, canon={"order": np.sort})

    Z, Y, X, TX = 3, 2, 4, 16

    def ref_grid(d):
        out = np.zeros((Z, Y, X * TX), np.int32)
        for z in range(Z):
            for y in range(Y):
                for x in range(X):
                    code = ((z * Y + y) * X + x) * 1000 + X * 100 + Y * 10 + Z
                    out[z, y, x * TX:(x + 1) * TX] = code + np.arange(TX)
        return {"out": out}

    register("grid3d_i32", lambda rng: {"out": np.zeros((Z, Y, X * TX), np.int32)}, lambda d: (X, Y, Z),
             ref_grid, {"out": "int32"})

    n = 300

    def make_s(rng):
        return {"x": rng.integers(-1000, 1000, n).astype(np.int32), "y": np.zeros(n, np.float64),
                "offset": np.int64((1 << 40) + 3), "flag": np.bool_(True), "mult": np.float64(1.5)}

    def ref_s(d):
        r = d["x"].astype(np.float64) * d["mult"] + float(d["offset"])
        return {"y": -r if d["flag"] else r}

    register("runtime_scalars_i64", make_s, lambda d: (cdiv(n, 64),), ref_s, {"y": "float64"})

    def make_step(rng):
        return {"x": rng.standard_normal(1000).astype(np.float32), "y": np.zeros(1000, np.float32),
                "start": np.int32(3), "step": np.int32(4)}

    def ref_step(d):
        y = d["y"].copy()
        for j in range(int(d["start"]), cdiv(1000, 64), int(d["step"])):
            s = slice(j * 64, (j + 1) * 64)
            y[s] = d["x"][s] * 2 + j
        return {"y": y}

    register("loop_runtime_step_f32", make_step, lambda d: (1,), ref_step, {"y": "float32"})


for _build in (_persistent_matmul, _splitk, _layernorm, _rmsnorm, _moe, _fft, _scans, _atomics,
               _embedding, _gather_scatter, _fp8, _misc):
    _build()
_attention("flash_attention_causal_gqa_f16", B=1, H=4, G=2, SQ=64, SK=80, D=32, causal=True, pos=16)
_attention("flash_attention_ragged_f16", B=2, H=2, G=1, SQ=32, SK=50, D=32, causal=False, pos=0)
# cuTile's FMHA sample (128x128 tiles, D=64): the causal one starts its queries at 128, so its first K/V tile
# is unmasked and its second masked
_attention("fmha_f16", B=1, H=2, G=1, SQ=128, SK=128, D=64, causal=False, pos=0, TM=128)
_attention("fmha_causal_f16", B=1, H=2, G=1, SQ=128, SK=256, D=64, causal=True, pos=128, TM=128)
