"""Hopper wgmma in the emulator, against matrices computed by hand (numpy).

Operands are placed in shared memory the way CUTLASS's canonical GMMA layout atoms place them (the
8 x 16-byte core matrices, Swizzle<B,4,3> patterns of 32/64/128-byte rows tiled M/N-first); the
descriptors carry that placement's leading/stride byte offsets; D is read back from each thread's
registers and put in place with the accumulator layout (register i of thread t: row
16*(t//32) + (t%32)//4 + 8*((i//2)%2), column 2*(t%4) + i%2 + 8*(i//4)).
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import ConvergenceError, DeviceMemory, emulate_ptx
from tileiras_async.emu import fp
from tileiras_async.emu.isa.descriptors import DescriptorError
from tileiras_async.emu.testing import copy_to_shared_ptx

SW_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
WIDTH = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
SMEM = 1 << 15


def _swz(off: int, sw: str) -> int:
    b = SW_BITS[sw]
    return off ^ (((off >> 7) & ((1 << b) - 1)) << 4)


def place(img: np.ndarray, base: int, mat_bytes: np.ndarray, sw: str, mn_major: bool) -> tuple[int, int]:
    """Write a rows x kbytes byte matrix (K-major view) at `base` in the canonical layout; returns (LBO, SBO).

    K-major: 8-row groups of rows `WIDTH` bytes wide (no swizzle: 16-byte core matrices, K pieces
    LBO apart).  MN-major: the matrix is stored transposed (kbytes/elem rows of M/N-contiguous bytes)."""
    rows, kb = mat_bytes.shape
    w = WIDTH[sw]
    if not mn_major:
        if sw == "none":
            lbo, sbo = 128, 128 * (kb // 16)
            for r in range(rows):
                for j in range(kb):
                    img[base + (r // 8) * sbo + (j // 16) * lbo + (r % 8) * 16 + j % 16] = mat_bytes[r, j]
            return lbo, sbo
        sbo = 8 * w
        for r in range(rows):
            for j in range(kb):
                img[base + (r // 8) * sbo + _swz((r % 8) * w + j, sw)] = mat_bytes[r, j]
        return 16, sbo
    raise NotImplementedError


def place_mn(img, base, mat, elem_bytes, sw):
    """Write a rows x k element matrix (uint, one per element) M/N-major: `WIDTH` bytes of consecutive rows
    per K-row, 8 K-rows per pattern (or 8 x 16-byte core matrices); returns (LBO, SBO)."""
    rows, k = mat.shape
    w = WIDTH[sw]
    per = w // elem_bytes                      # M/N elements in one K-row of a pattern
    npat = -(-rows // per)
    if sw == "none":
        sbo, lbo = 128, 128 * npat            # next 8 M/N elements / next 8 K-rows
    else:
        lbo, sbo = 8 * w, 8 * w * npat        # next pattern along M/N / next 8 K-rows
    for r in range(rows):
        for kk in range(k):
            if sw == "none":
                off = (r // per) * sbo + (kk // 8) * lbo + (kk % 8) * 16 + (r % per) * elem_bytes
            else:
                off = (r // per) * lbo + (kk // 8) * sbo + _swz((kk % 8) * w + (r % per) * elem_bytes, sw)
            img[base + off:base + off + elem_bytes] = np.frombuffer(int(mat[r, kk]).to_bytes(elem_bytes, "little"),
                                                                    np.uint8)
    return lbo, sbo


def desc(start, lbo, sbo, sw):
    code = {"none": 0, "128B": 1, "64B": 2, "32B": 3}[sw]
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | code << 62


def d_index(n, per):
    """(row, col) [regs, 128, per] of every accumulator element."""
    nregs = n * 64 // (128 * per)
    t = np.arange(128)[None, :, None]
    i = np.arange(nregs)[:, None, None] * per + np.arange(per)[None, None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
    col = 2 * (t % 4) + i % 2 + 8 * (i // 4)
    return row, col


def kernel(instr: str, nd: int, a_regs: bool, scale_d: str = "1", extra: str = "", wait: str = "0") -> str:
    d = ", ".join(f"%d{i}" for i in range(nd))
    a = "{%a0, %a1, %a2, %a3}" if a_regs else "%rd4"
    load_d = "\n".join(f"    ld.global.b32 %d{i}, [%rd8+{4 * 128 * i}];" for i in range(nd))
    store_d = "\n".join(f"    st.global.b32 [%rd8+{4 * 128 * i}], %d{i};" for i in range(nd))
    load_a = "\n".join(f"    ld.global.b32 %a{i}, [%rd10+{4 * 128 * i}];" for i in range(4)) if a_regs else ""
    return f""".version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 img, .param .u32 nwords, .param .u64 adesc, .param .u64 bdesc,
                  .param .u64 out, .param .u64 ain)
.reqntid 128
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .reg .b32 %d<{nd}>;
    .reg .b32 %a<4>;
    .shared .align 1024 .b8 smem[{SMEM}];
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [img];
    ld.param.u32 %r2, [nwords];
{copy_to_shared_ptx("%rd1", "%r2", "smem", 128)}    fence.proxy.async.shared::cta;
    mov.u32 %r8, smem;
    shr.u32 %r9, %r8, 4;
    cvt.u64.u32 %rd6, %r9;
    ld.param.u64 %rd4, [adesc];
    ld.param.u64 %rd5, [bdesc];
    add.s64 %rd4, %rd4, %rd6;
    add.s64 %rd5, %rd5, %rd6;
    ld.param.u64 %rd7, [out];
    mul.wide.u32 %rd9, %r1, 4;
    add.s64 %rd8, %rd7, %rd9;
    ld.param.u64 %rd11, [ain];
    add.s64 %rd10, %rd11, %rd9;
{load_d}
{load_a}
    setp.ne.b32 %p2, {scale_d}, 0;
    wgmma.fence.sync.aligned;
    {instr} {{{d}}}, {a}, %rd5, %p2{extra};
{"" if wait is None else f"    wgmma.commit_group.sync.aligned;{chr(10)}    wgmma.wait_group.sync.aligned {wait};"}
{store_d}
    ret;
}}
"""


def run(ptx, img, adesc, bdesc, out_regs, a_regs=None):
    mem = DeviceMemory()
    words = img.view(np.uint32)
    pimg = mem.alloc_array(words)
    pout = mem.alloc_array(out_regs)
    ain = a_regs if a_regs is not None else np.zeros((4, 128), np.uint32)
    pa = mem.alloc_array(np.ascontiguousarray(ain))
    emulate_ptx(ptx, "k", (1, 1, 1), (128, 1, 1), [pimg, len(words), adesc, bdesc, pout, pa], mem)
    res = np.empty_like(out_regs)
    mem.copy_back(pout, res)
    return res


def f16_bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def gather_d(regs: np.ndarray, n: int, per: int, fmt: str) -> np.ndarray:
    row, col = d_index(n, per)
    out = np.zeros((64, n))
    if per == 2:
        vals = regs.view(np.uint16).reshape(regs.shape[0], 128, 2).view(np.float16).astype(np.float64)
    elif fmt == "s32":
        vals = regs.view(np.int32).astype(np.float64)[:, :, None]
    else:
        vals = regs.view(np.float32).astype(np.float64)[:, :, None]
    out[row, col] = vals
    return out


@pytest.mark.parametrize("sw", ["none", "32B", "64B", "128B"])
def test_f16_descriptors_every_swizzle_k_major(sw):
    rng = np.random.default_rng(1)
    n = 16
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (n, 16)).astype(np.float16)     # B stored N x K (K-major)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place(img, 0, f16_bits(A).view(np.uint8).reshape(64, 32), sw, False)
    lb, sb = place(img, 16384, f16_bits(B).view(np.uint8).reshape(n, 32), sw, False)
    C = rng.integers(-8, 9, (64, n)).astype(np.float64)
    row, col = d_index(n, 1)
    cregs = C[row, col][:, :, 0].astype(np.float32).view(np.uint32)
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16", n // 2, False, extra=", 1, 1, 0, 0")
    res = run(ptx, img, desc(0, la, sa, sw), desc(16384, lb, sb, sw), cregs)
    np.testing.assert_array_equal(gather_d(res, n, 1, "f32"), A.astype(np.float64) @ B.T.astype(np.float64) + C)


@pytest.mark.parametrize("sw", ["none", "32B", "64B", "128B"])
def test_bf16_transposed_operands_are_mn_major(sw):
    rng = np.random.default_rng(2)
    n = 64
    A = rng.integers(-3, 4, (64, 16)).astype(np.float32)
    B = rng.integers(-3, 4, (n, 16)).astype(np.float32)
    bits = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)     # exact small integers
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_mn(img, 0, bits(A), 2, sw)
    lb, sb = place_mn(img, 16384, bits(B), 2, sw)
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16", n // 2, False, scale_d="0",
                 extra=", 1, -1, 1, 1")
    res = run(ptx, img, desc(0, la, sa, sw), desc(16384, lb, sb, sw), np.zeros((n // 2, 128), np.uint32))
    np.testing.assert_array_equal(gather_d(res, n, 1, "f32"), -(A.astype(np.float64) @ B.T.astype(np.float64)))


def test_f16_accumulator_and_a_from_registers():
    rng = np.random.default_rng(3)
    n = 8
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (n, 16)).astype(np.float16)
    img = np.zeros(SMEM, np.uint8)
    lb, sb = place(img, 0, f16_bits(B).view(np.uint8).reshape(n, 32), "32B", False)
    # A fragments: register j of thread t holds (row 16w + g + 8*(j%2), cols 2q + 8*(j//2) + {0, 1})
    t = np.arange(128)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    areg = np.zeros((4, 128), np.uint32)
    for j in range(4):
        r, c = 16 * w + g + 8 * (j % 2), 2 * q + 8 * (j // 2)
        areg[j] = f16_bits(A[r, c]).astype(np.uint32) | f16_bits(A[r, c + 1]).astype(np.uint32) << 16
    C = rng.integers(-8, 9, (64, n)).astype(np.float16)
    row, col = d_index(n, 2)
    creg = f16_bits(C[row, col]).reshape(n // 4, 128, 2).view(np.uint32)[:, :, 0]
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f16.f16.f16", n // 4, True, extra=", 1, 1, 0")
    res = run(ptx, img, 0, desc(0, lb, sb, "32B"), np.ascontiguousarray(creg), a_regs=areg)
    expect = A.astype(np.float64) @ B.T.astype(np.float64) + C
    np.testing.assert_array_equal(gather_d(res, n, 2, "f16"), expect)


def test_tf32_a_from_registers_rounds_like_the_hardware_ignores_low_bits():
    rng = np.random.default_rng(4)
    n = 8
    A = rng.standard_normal((64, 8)).astype(np.float32)
    B = rng.standard_normal((n, 8)).astype(np.float32)
    img = np.zeros(SMEM, np.uint8)
    lb, sb = place(img, 0, B.view(np.uint8).reshape(n, 32), "none", False)
    t = np.arange(128)
    w, g, q = t // 32, (t % 32) // 4, t % 4
    areg = np.zeros((4, 128), np.uint32)
    for j in range(4):                                   # (g, q), (g+8, q), (g, q+4), (g+8, q+4)
        areg[j] = A[16 * w + g + 8 * (j % 2), q + 4 * (j // 2)].view(np.uint32)
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32", n // 2, True, scale_d="0",
                 extra=", 1, 1")
    res = run(ptx, img, 0, desc(0, lb, sb, "none"), np.zeros((n // 2, 128), np.uint32), a_regs=areg)
    trunc = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    expect = (trunc(A) @ trunc(B).T).astype(np.float32)
    np.testing.assert_array_equal(gather_d(res, n, 1, "f32"), expect)


def test_s8_u8_satfinite_and_e4m3():
    rng = np.random.default_rng(5)
    n = 16
    A = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    B = rng.integers(0, 256, (n, 32)).astype(np.uint8)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place(img, 0, A.view(np.uint8), "128B", False)
    lb, sb = place(img, 16384, B, "128B", False)
    C = np.full((64, n), 2 ** 31 - 100, np.int64)
    row, col = d_index(n, 1)
    creg = C[row, col][:, :, 0].astype(np.int32).view(np.uint32)
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k32.satfinite.s32.s8.u8", n // 2, False)
    res = run(ptx, img, desc(0, la, sa, "128B"), desc(16384, lb, sb, "128B"), creg)
    exact = A.astype(np.int64) @ B.T.astype(np.int64) + C
    np.testing.assert_array_equal(gather_d(res, n, 1, "s32"), np.clip(exact, -2 ** 31, 2 ** 31 - 1))

    E = np.array([0x38, 0x40, 0xB8, 0x00, 0x30, 0x44], np.uint8)       # 1, 2, -1, 0, 0.5, 3 in e4m3
    A8 = rng.choice(E, (64, 32))
    B8 = rng.choice(E, (n, 32))
    img = np.zeros(SMEM, np.uint8)
    la, sa = place(img, 0, A8, "64B", False)
    lb, sb = place(img, 16384, B8, "64B", False)
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3", n // 2, False, scale_d="0",
                 extra=", 1, 1")
    res = run(ptx, img, desc(0, la, sa, "64B"), desc(16384, lb, sb, "64B"), np.zeros((n // 2, 128), np.uint32))
    dec = lambda x: fp.decode(x, "e4m3")
    np.testing.assert_array_equal(gather_d(res, n, 1, "f32"), dec(A8) @ dec(B8).T)


def test_accumulators_change_only_when_the_group_is_waited_for():
    # without commit/wait the registers still hold C when they are stored: the result is asynchronous
    n = 8
    img = np.zeros(SMEM, np.uint8)
    la, sa = place(img, 0, f16_bits(np.ones((64, 16))).view(np.uint8).reshape(64, 32), "none", False)
    lb, sb = place(img, 8192, f16_bits(np.ones((n, 16))).view(np.uint8).reshape(n, 32), "none", False)
    creg = np.full((n // 2, 128), np.float32(5).view(np.uint32), np.uint32)
    instr = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"
    early = run(kernel(instr, n // 2, False, extra=", 1, 1, 0, 0", wait=None), img, desc(0, la, sa, "none"),
                desc(8192, lb, sb, "none"), creg.copy())
    assert (early.view(np.float32) == 5).all()
    # two wgmmas into the same accumulators before one wait chain: 5 + 16 + 16
    chained = kernel(instr, n // 2, False, extra=", 1, 1, 0, 0", wait=None).replace(
        "    wgmma.fence.sync.aligned;\n", "    wgmma.fence.sync.aligned;\n"
        f"    {instr} {{{', '.join(f'%d{i}' for i in range(n // 2))}}}, %rd4, %rd5, %p2, 1, 1, 0, 0;\n").replace(
        "    st.global.b32 [%rd8+0], %d0;", "    wgmma.commit_group.sync.aligned;\n    wgmma.wait_group.sync.aligned 0;\n"
        "    st.global.b32 [%rd8+0], %d0;")
    res = run(chained, img, desc(0, la, sa, "none"), desc(8192, lb, sb, "none"), creg.copy())
    assert (res.view(np.float32) == 37).all()


def test_a_partial_warpgroup_is_a_convergence_error():
    n = 8
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16", n // 2, False, extra=", 1, 1, 0, 0")
    ptx = ptx.replace("    wgmma.fence.sync.aligned;\n", "    setp.ge.u32 %p3, %r1, 64;\n    @%p3 ret;\n"
                                                          "    wgmma.fence.sync.aligned;\n")
    with pytest.raises(ConvergenceError, match="warpgroup"):
        run(ptx, np.zeros(SMEM, np.uint8), desc(0, 128, 256, "none"), desc(0, 128, 256, "none"),
            np.zeros((n // 2, 128), np.uint32))


def test_descriptors_must_agree_across_the_warpgroup():
    n = 8
    ptx = kernel(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16", n // 2, False, extra=", 1, 1, 0, 0")
    ptx = ptx.replace("    add.s64 %rd5, %rd5, %rd6;\n", "    add.s64 %rd5, %rd5, %rd6;\n    cvt.u64.u32 %rd12, %r1;\n"
                                                          "    and.b64 %rd12, %rd12, 32;\n    add.s64 %rd5, %rd5, %rd12;\n")
    with pytest.raises(DescriptorError, match="B descriptor differs"):
        run(ptx, np.zeros(SMEM, np.uint8), desc(0, 128, 256, "none"), desc(0, 128, 256, "none"),
            np.zeros((n // 2, 128), np.uint32))
