"""mmaf_scaled: the interpreter's exact MX semantics, and the lowering (per K block on the tensor cores, then
the block scales) checked on the emulator against numpy for every element/scale combination the real tool
accepts; 4-bit pack/unpack."""
from __future__ import annotations

import numpy as np
import pytest
from test_interp_helpers import TK

from tileiras_async import run_kernel
from tileiras_async.interp.mx import scaled_mma
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import tile

M, N, K = 16, 16, 64

# e2m1 code -> value, e4m3 value of a code (finite codes), e8m0 -> 2^(c - 127)
E2M1 = np.array([s * v for s in (1.0, -1.0) for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)])


def e4m3(code):
    c = np.asarray(code, np.int64)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return np.where(c & 0x80, -v, v)


def e5m2(code):
    c = np.asarray(code, np.int64)
    e, m = (c >> 2) & 31, c & 3
    v = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * 2.0 ** (e - 15))
    return np.where(c & 0x80, -v, v)


def e8m0(code):
    return 2.0 ** (np.asarray(code, np.float64) - 127)


def test_exact_semantics_round_once():
    """acc + sum of the scaled products is rounded once: 1 + 2^-25 (the products) + 2^-24 (acc) is
    1 + 1.5 * 2^-24, whose nearest float32 is 1 + 2^-23 (rounding the products first would give 1)."""
    a = np.zeros((1, 64))
    b = np.zeros((64, 1))
    a[0, 0] = b[0, 0] = 1.0            # block 0: 1 * 1 at scale 1
    a[0, 32] = b[32, 0] = 1.0          # block 1: 1 * 1 at scale 2^-12 * 2^-13
    sa = np.array([[1.0, 2.0 ** -12]])
    sb = np.array([[1.0], [2.0 ** -13]])
    out = scaled_mma(a, sa, b, sb, np.array([[2.0 ** -24]], np.float32))
    assert out[0, 0] == np.float32(1 + 2.0 ** -23)
    nan = scaled_mma(a, np.array([[np.nan, 1.0]]), b, sb, np.zeros((1, 1), np.float32))
    assert np.isnan(nan).all()


def _codes(rng, shape, decode, lo=-4, hi=2):
    """Random finite codes of an fp8 format with exponents in [lo, hi]."""
    ok = [c for c in range(256) if np.isfinite(decode(c)) and
          (decode(c) == 0 or lo <= np.floor(np.log2(abs(decode(c)))) <= hi)]
    return rng.choice(np.array(ok, np.uint8), size=shape)


def _kernel(elem, scale, block, packed):
    """C += mma_scaled(A, As, B, Bs) on one 16x16x64 tile; 4-bit operands arrive as bytes and are unpacked."""
    tk = TK()
    data = T.I8 if packed else elem
    a, sa, b, sb, c = (tk.array(data, 1 if packed else 2), tk.array(scale, 2), tk.array(data, 1 if packed else 2),
                       tk.array(scale, 2), tk.array(T.F32, 2))
    with tk.body() as bb:
        def operand(p, shape):
            if not packed:
                return bb.load(p, shape)
            raw = bb.load(p, (shape[0] * shape[1] // 2,))
            flat = bb.op("unpack", [tile(elem, shape[0] * shape[1])], source=raw).result
            return bb.op("reshape", [tile(elem, *shape)], source=flat).result
        x, y = operand(a, (M, K)), operand(b, (K, N))
        xs, ys = bb.load(sa, (M, K // block)), bb.load(sb, (K // block, N))
        r = bb.op("mmaf_scaled", [tile(T.F32, M, N)], lhs=x, rhs=y, acc=bb.load(c, (M, N)), lhs_scale=xs,
                  rhs_scale=ys).result
        bb.store(c, (M, N), r)
    return tk.bytes()


CASES = {  # name: (element type, decode, scale type, scale decode, block)
    "e4m3_e8m0": (T.F8E4M3FN, e4m3, T.F8E8M0FNU, e8m0, 32),
    "e5m2_e8m0": (T.F8E5M2, e5m2, T.F8E8M0FNU, e8m0, 32),
    "e2m1_e8m0_32": (T.F4E2M1FN, None, T.F8E8M0FNU, e8m0, 32),
    "e2m1_e8m0_16": (T.F4E2M1FN, None, T.F8E8M0FNU, e8m0, 16),
    "e2m1_e4m3_16": (T.F4E2M1FN, None, T.F8E4M3FN, e4m3, 16),
}


def _inputs(name, rng):
    elem, dec, scale, sdec, block = CASES[name]
    if dec is None:  # e2m1 pairs in bytes, low nibble first
        a = rng.integers(0, 256, M * K // 2).astype(np.uint8)
        b = rng.integers(0, 256, K * N // 2).astype(np.uint8)
        av = np.stack([E2M1[a & 15], E2M1[a >> 4]], -1).reshape(M, K)
        bv = np.stack([E2M1[b & 15], E2M1[b >> 4]], -1).reshape(K, N)
    else:
        a, b = _codes(rng, (M, K), dec), _codes(rng, (K, N), dec)
        av, bv = dec(a), dec(b)
    if sdec is e8m0:
        sa, sb = rng.integers(120, 134, (M, K // block)), rng.integers(120, 134, (K // block, N))
    else:
        sa, sb = _codes(rng, (M, K // block), e4m3, -3, 1) & 0x7F, _codes(rng, (K // block, N), e4m3, -3, 1) & 0x7F
    sa, sb = sa.astype(np.uint8), sb.astype(np.uint8)
    c = rng.standard_normal((M, N)).astype(np.float32)
    want = (av * np.repeat(sdec(sa), block, 1)) @ (bv * np.repeat(sdec(sb), block, 0)) + c
    return [a, sa, b, sb, c], want


@pytest.mark.parametrize("engine", ["interpret", "emulate"])
@pytest.mark.parametrize("name", list(CASES))
def test_scaled_mma_matches_numpy(name, engine):
    elem, dec, scale, _, block = CASES[name]
    args, want = _inputs(name, np.random.default_rng(len(name)))
    run_kernel(_kernel(elem, scale, block, dec is None), (1,), args, engine=engine, gpu_name="sm_100")
    got = args[-1]
    if engine == "interpret":  # exact sum, one rounding
        assert (got == want.astype(np.float32)).all()
    else:                      # f32 accumulation on the tensor cores
        assert np.allclose(got, want, rtol=1e-6, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("engine", ["interpret", "emulate"])
def test_pack_unpack_nibbles(engine):
    """unpack: element i is nibble i % 2 of byte i // 2 (low first); pack joins elements 2j and 2j + 1.
    Here the nibbles are regrouped (all low ones, then all high ones) between the two."""
    tk = TK()
    x, y = tk.array(T.I8, 1), tk.array(T.I8, 1)
    with tk.body() as b:
        f4 = b.op("unpack", [tile(T.F4E2M1FN, 128)], source=b.load(x, (64,))).result
        pairs = b.op("reshape", [tile(T.F4E2M1FN, 64, 2)], source=f4).result
        planes = b.op("permute", [tile(T.F4E2M1FN, 2, 64)], source=pairs, permutation=[1, 0]).result
        flat = b.op("reshape", [tile(T.F4E2M1FN, 128)], source=planes).result
        b.store(y, (64,), b.op("pack", [tile(T.I8, 64)], source=flat).result)
    xs = np.random.default_rng(1).integers(0, 256, 64).astype(np.uint8)
    ys = np.zeros(64, np.uint8)
    run_kernel(tk.bytes(), (1,), [xs, ys], engine=engine, gpu_name="sm_100")
    nibbles = np.concatenate([xs & 15, xs >> 4]).astype(np.uint8)
    assert (ys == (nibbles[0::2] | (nibbles[1::2] << 4))).all()
