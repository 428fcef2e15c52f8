"""Blackwell tcgen05 and tensor memory in the emulator, against hand-computed layouts and numpy.

The tcgen05.ld/st register layouts are checked against CUTLASS's published copy traits for the
SM100_TMEM_LOAD_* atoms, evaluated here as CuTe layouts (a map from (thread, value bit) to a
(bit, data path) position of the TMEM region); the MMA results against numpy products.
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import DeviceMemory, MemoryFault, emulate_ptx
from tileiras_async.emu.isa.descriptors import DescriptorError
from tileiras_async.emu.testing import copy_to_shared_ptx

# ---------------------------------------------------------------------------- CuTe layout evaluation


def _flatten(shape, stride):
    if isinstance(shape, tuple):
        out = []
        for s, d in zip(shape, stride):
            out += _flatten(s, d)
        return out
    return [(shape, stride)]


def cute_index(shape, stride, i: int) -> int:
    """The value of the (colexicographic) CuTe layout shape:stride at linear coordinate i."""
    v = 0
    for s, d in _flatten(shape, stride):
        v += (i % s) * d
        i //= s
    return v


# Copy_Traits<SM100_TMEM_LOAD_...>: (ValID bits per data path, DstLayout thread mode, DstLayout value mode)
TRAITS = {
    ("32x32b", 1): (32, (32, 32), (32, 1)),
    ("32x32b", 2): (64, (32, 64), (64, 1)),
    ("16x64b", 1): (64, (((2, 2, 8), 32)), (((512, 32, 64), 1))),
    ("16x128b", 1): (128, ((4, 8), (32, 2)), ((32, 128), (1, 1024))),
    ("16x128b", 2): (256, ((4, 8), (32, 2, 2)), ((32, 256), (1, 2048, 128))),
    ("16x256b", 1): (256, ((4, 8), (64, 2)), ((64, 256), (1, 2048))),
    ("16x256b", 2): (512, ((4, 8), (64, 2, 2)), ((64, 512), (1, 4096, 256))),
    ("16x32bx2", 1): (64, ((16, 2), 32), ((64, 32), 1)),       # CUTLASS issues it with half-split 1
}


def expected_cells(shape: str, num: int):
    """{(thread, register): (TMEM lane, column)} from the CUTLASS traits."""
    colbits, shp, strd = TRAITS[(shape, num)]
    tshape, vshape = shp
    tstride, vstride = strd
    nbits = 1
    for s, _ in _flatten(vshape, vstride):
        nbits *= s
    cells = {}
    for t in range(32):
        for r in range(nbits // 32):
            i = cute_index(tshape, tstride, t) + cute_index(vshape, vstride, 32 * r)
            cells[(t, r)] = (i // colbits, (i % colbits) // 32)
    return cells


# ---------------------------------------------------------------------------- kernels

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"


def regs(name, n):
    return "{" + ", ".join(f"%{name}{i}" for i in range(n)) + "}"


def shape_kernel(shape: str, num: int, nregs: int, half: str = "", ncols: int = 32, lane_base: int = 0,
                 pack: str = "") -> str:
    """Warp 0 stores value 1000*t + r + 1 from register r of thread t with tcgen05.st.<shape>, then reads
    back TMEM lanes 0-31 x columns 0..ncols-1 with 32x32b and writes them to out[lane * ncols + col]."""
    half_op = f", {half}" if half else ""
    vals = "\n".join(f"    mad.lo.s32 %v{i}, %r1, 1000, {i + 1};" for i in range(nregs))
    return f"""{HEAD}
.visible .entry k(.param .u64 out)
.reqntid 128
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b32 %v<{nregs}>;
    .reg .b32 %c<{ncols}>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b32 slot;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra $WAIT;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], {max(32, ncols)};
    ld.shared.b32 %r3, [slot];
    add.s32 %r4, %r3, {lane_base << 16};
{vals}
    tcgen05.st.sync.aligned.{shape}.x{num}{pack}.b32 [%r4]{half_op}, {regs("v", nregs)};
    tcgen05.wait::st.sync.aligned;
    tcgen05.ld.sync.aligned.32x32b.x{ncols}.b32 {regs("c", ncols)}, [%r3];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, {4 * ncols};
    add.s64 %rd3, %rd1, %rd2;
{chr(10).join(f"    st.global.b32 [%rd3+{4 * i}], %c{i};" for i in range(ncols))}
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, {max(32, ncols)};
$WAIT:
    ret;
}}
"""


def run_out(ptx, nwords, block=128):
    mem = DeviceMemory()
    out = mem.alloc(4 * nwords)
    emulate_ptx(ptx, "k", (1, 1, 1), (block, 1, 1), [out], mem)
    return mem.read_array(out, np.uint32, nwords)


@pytest.mark.parametrize("shape,num", sorted(TRAITS))
def test_ld_st_shapes_match_the_cutlass_layouts(shape, num):
    cells = expected_cells(shape, num)
    nregs = max(r for _, r in cells) + 1
    half = "1" if shape == "16x32bx2" else ""
    tm = run_out(shape_kernel(shape, num, nregs, half), 32 * 32).reshape(32, 32)
    expect = np.zeros((32, 32), np.uint32)
    for (t, r), (lane, col) in cells.items():
        expect[lane, col] = 1000 * t + r + 1
    np.testing.assert_array_equal(tm, expect)


def test_16x32bx2_half_split_offset_and_lane_base():
    # threads 16-31 address the same 16 lanes, `half` columns on; the address selects the lanes
    tm = run_out(shape_kernel("16x32bx2", 4, 4, "8", lane_base=16), 32 * 32).reshape(32, 32)
    for t in range(32):
        for r in range(4):
            assert tm[16 + t % 16, r + 8 * (t // 16)] == 1000 * t + r + 1
    assert not tm[:16].any()


def test_unpack_puts_the_halves_of_a_register_in_adjacent_columns():
    tm = run_out(shape_kernel("32x32b", 2, 2, pack=".unpack::16b"), 32 * 32).reshape(32, 32)
    for t in range(32):
        for r in range(2):
            v = 1000 * t + r + 1
            assert (tm[t, 2 * r], tm[t, 2 * r + 1]) == (v & 0xFFFF, v >> 16)
    ptx = shape_kernel("32x32b", 2, 2, pack=".unpack::16b").replace(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.ld.sync.aligned.32x32b.x16.pack::16b.b32").replace(
        regs("c", 32), regs("c", 16))
    ptx = "\n".join(ln for ln in ptx.split("\n") if not any(f"%c{i};" in ln for i in range(16, 32)))
    packed = run_out(ptx, 32 * 32).reshape(32, 32)[:, :16]
    for t in range(32):
        assert packed[t, 0] == 1000 * t + 1 and packed[t, 1] == 1000 * t + 2


def test_a_warp_may_only_touch_its_sub_partition():
    with pytest.raises(MemoryFault, match="outside its lanes 0..31"):
        run_out(shape_kernel("16x64b", 1, 1, lane_base=32), 32 * 32)


def test_tensor_memory_accesses_outside_the_allocation_fault():
    ptx = shape_kernel("32x32b", 1, 1, ncols=32).replace("ld.shared.b32 %r3, [slot];",
                                                         "ld.shared.b32 %r3, [slot];\n    add.s32 %r3, %r3, 16;")
    with pytest.raises(MemoryFault, match="not allocated"):
        run_out(ptx, 32 * 32)


def test_a_load_after_the_deallocation_faults():
    """Warp 0 frees its columns, then loads them: the columns are no longer allocated."""
    ptx = shape_kernel("32x32b", 1, 1)
    free = "    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 32;\n"
    load = "    tcgen05.ld.sync.aligned.32x32b.x32.b32"
    assert ptx.count(free) == ptx.count(load) == 1
    ptx = ptx.replace(free, "").replace(load, free + load)
    with pytest.raises(MemoryFault, match=r"tensor-memory access to columns 0\.\.31, which are not allocated"):
        run_out(ptx, 32 * 32)


ALLOC = HEAD + """
.visible .entry k(.param .u64 out)
.reqntid 64
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b32 slots[4];
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    setp.ne.u32 %p1, %r2, 1;
    @%p1 bra $END;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots], 32;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots+4], 128;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots+8], 64;
    ld.shared.b32 %r3, [slots];
    ld.shared.b32 %r4, [slots+4];
    ld.shared.b32 %r5, [slots+8];
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 32;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots+12], 32;
    ld.shared.b32 %r6, [slots+12];
    RELINQUISH
    ld.param.u64 %rd1, [out];
    st.global.v4.b32 [%rd1], {%r3, %r4, %r5, %r6};
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 128;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r5, DEALLOC64;
    LEAK
$END:
    ret;
}
"""


def alloc_kernel(relinquish="", dealloc64="64", leak="tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r6, 32;"):
    return ALLOC.replace("RELINQUISH", relinquish).replace("DEALLOC64", dealloc64).replace("LEAK", leak)


def test_alloc_takes_the_lowest_free_aligned_block():
    mem = DeviceMemory()
    out = mem.alloc(16)
    emulate_ptx(alloc_kernel(), "k", (2, 1, 1), (64, 1, 1), [out], mem)
    assert mem.read_array(out, np.uint32, 4).tolist() == [0, 128, 64, 0]


@pytest.mark.parametrize("change,msg", [
    (dict(leak=""), "still allocated"),
    (dict(dealloc64="32"), "not an allocation"),
    (dict(relinquish="tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
                     "    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots], 32;"), "relinquished"),
    (dict(relinquish="tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slots], 512;"), "never complete"),
])
def test_allocation_errors(change, msg):
    mem = DeviceMemory()
    with pytest.raises(MemoryFault, match=msg):
        emulate_ptx(alloc_kernel(**change), "k", (1, 1, 1), (64, 1, 1), [mem.alloc(16)], mem)


# ---------------------------------------------------------------------------- mma

SW_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
WIDTH = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
SMEM = 1 << 15


def _swz(off, sw):
    return off ^ (((off >> 7) & ((1 << SW_BITS[sw]) - 1)) << 4)


def place_k(img, base, mat_bytes, sw):
    """K-major canonical placement (CUTLASS's Layout_K_*_Atom tiled M/N-first); returns (LBO, SBO)."""
    rows, kb = mat_bytes.shape
    w = WIDTH[sw]
    for r in range(rows):
        for j in range(kb):
            if sw == "none":
                off = (r // 8) * 256 + (j // 16) * 128 + (r % 8) * 16 + j % 16
            else:
                off = (r // 8) * 8 * w + _swz((r % 8) * w + j, sw)
            img[base + off] = mat_bytes[r, j]
    return (128, 256) if sw == "none" else (16, 8 * w)


def umma_desc(start, lbo, sbo, sw):
    code = {"none": 0, "128B": 2, "64B": 4, "32B": 6}[sw]
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46 | code << 61


def umma_idesc(m, n, dtype=1, atype=0, btype=0, neg_b=False):
    return dtype << 4 | atype << 7 | btype << 10 | int(neg_b) << 14 | (n >> 3) << 17 | (m >> 4) << 24


def d_lanes(m):
    r = np.arange(m)
    return r if m == 128 else r % 16 + 32 * (r // 16)


def mma_kernel(kind: str, n: int, commit: bool = True, a_tmem: bool = False) -> str:
    """One CTA of 128 threads: the image goes to shared memory, warp 0 allocates 256 columns, every warp
    stores C (from `cin`, 32x32b) into columns 0..n-1 of its lanes, thread 0 issues one MMA (and commits
    it to an mbarrier everyone waits on), every warp reads columns 0..n-1 back into out."""
    cregs = regs("c", n)
    a_op = "[%r20]" if a_tmem else "%rd4"
    a_setup = ""
    if a_tmem:   # A (tf32, M=64): the rows of warp w are in columns 128.. of lanes 32w..32w+15
        a_setup = f"""
    add.s32 %r20, %r10, 128;
    shl.b32 %r21, %r2, 21;
    add.s32 %r22, %r20, %r21;
    ld.param.u64 %rd20, [ain];
    mul.wide.u32 %rd21, %r1, 32;
    add.s64 %rd22, %rd20, %rd21;
{chr(10).join(f"    ld.global.b32 %a{i}, [%rd22+{4 * i}];" for i in range(8))}
    tcgen05.st.sync.aligned.16x32bx2.x4.b32 [%r22], 4, {regs("a", 8).replace(", %a4, %a5, %a6, %a7", "")};
    add.s32 %r23, %r22, 16;
    tcgen05.st.sync.aligned.16x32bx2.x4.b32 [%r23], 4, {{%a4, %a5, %a6, %a7}};
    tcgen05.wait::st.sync.aligned;"""
    commit_lines = """    tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [mbar];""" if commit else ""
    wait = """$SPIN:
    mbarrier.try_wait.parity.shared.b64 %p3, [mbar], 0;
    @!%p3 bra $SPIN;""" if commit else "    bar.sync 0;"
    return f"""{HEAD}
.visible .entry k(.param .u64 img, .param .u32 nwords, .param .u64 adesc, .param .u64 bdesc, .param .u32 idesc,
                  .param .u32 enable, .param .u64 cin, .param .u64 out, .param .u64 ain)
.reqntid 128
{{
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b32 %c<{n}>;
    .reg .b32 %a<8>;
    .reg .b64 %rd<32>;
    .shared .align 1024 .b8 smem[{SMEM}];
    .shared .align 8 .b64 mbar;
    .shared .align 4 .b32 slot;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    ld.param.u64 %rd1, [img];
    ld.param.u32 %r3, [nwords];
{copy_to_shared_ptx("%rd1", "%r3", "smem", 128)}
    setp.ne.u32 %p2, %r2, 0;
    @%p2 bra $ALLOCATED;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 256;
    tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
$ALLOCATED:
    setp.ne.u32 %p4, %r1, 0;
    @%p4 bra $INITED;
    mbarrier.init.shared.b64 [mbar], 1;
$INITED:
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    ld.shared.b32 %r10, [slot];
    shl.b32 %r11, %r2, 21;
    add.s32 %r12, %r10, %r11;
    ld.param.u64 %rd5, [cin];
    mul.wide.u32 %rd6, %r1, {4 * n};
    add.s64 %rd7, %rd5, %rd6;
{chr(10).join(f"    ld.global.b32 %c{i}, [%rd7+{4 * i}];" for i in range(n))}
    tcgen05.st.sync.aligned.32x32b.x{n}.b32 [%r12], {cregs};
    tcgen05.wait::st.sync.aligned;{a_setup}
    fence.proxy.async.shared::cta;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    @%p4 bra $ISSUED;
    mov.u32 %r13, smem;
    shr.u32 %r14, %r13, 4;
    cvt.u64.u32 %rd8, %r14;
    ld.param.u64 %rd4, [adesc];
    ld.param.u64 %rd9, [bdesc];
    add.s64 %rd4, %rd4, %rd8;
    add.s64 %rd9, %rd9, %rd8;
    ld.param.u32 %r15, [idesc];
    ld.param.u32 %r16, [enable];
    setp.ne.u32 %p5, %r16, 0;
    mov.b32 %r17, 0;
    tcgen05.mma.cta_group::1.kind::{kind} [%r10], {a_op}, %rd9, %r15, {{%r17, %r17, %r17, %r17}}, %p5;
{commit_lines}
$ISSUED:
{wait}
    tcgen05.fence::after_thread_sync;
    tcgen05.ld.sync.aligned.32x32b.x{n}.b32 {cregs}, [%r12];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd10, [out];
    add.s64 %rd11, %rd10, %rd6;
{chr(10).join(f"    st.global.b32 [%rd11+{4 * i}], %c{i};" for i in range(n))}
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @%p2 bra $END;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r10, 256;
$END:
    ret;
}}
"""


def run_mma(ptx, img, adesc, bdesc, idesc, enable, cin, ain=None, check_races=False):
    mem = DeviceMemory()
    words = img.view(np.uint32)
    args = [mem.alloc_array(words), len(words), adesc, bdesc, idesc, enable, mem.alloc_array(cin)]
    out = mem.alloc(cin.nbytes)
    args += [out, mem.alloc_array(ain if ain is not None else np.zeros(1024, np.uint32))]
    emulate_ptx(ptx, "k", (1, 1, 1), (128, 1, 1), args, mem, check_races=check_races)
    return mem.read_array(out, np.uint32, cin.size).reshape(cin.shape)


def tmem_image(D, m, n):
    """[128 threads (= lanes), n columns] of 32-bit cells holding D (f32) in the M's data-path layout."""
    cells = np.zeros((128, n), np.float32)
    cells[d_lanes(m)] = D
    return cells.view(np.uint32)


@pytest.mark.parametrize("m,sw", [(128, "128B"), (64, "64B"), (128, "none"), (64, "32B")])
def test_f16_mma_into_tensor_memory(m, sw):
    rng = np.random.default_rng(7)
    n = 16
    A = rng.integers(-4, 5, (m, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (n, 16)).astype(np.float16)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_k(img, 0, A.view(np.uint8).reshape(m, 32), sw)
    lb, sb = place_k(img, 16384, B.view(np.uint8).reshape(n, 32), sw)
    C = rng.integers(-8, 9, (m, n)).astype(np.float32)
    res = run_mma(mma_kernel("f16", n), img, umma_desc(0, la, sa, sw), umma_desc(16384, lb, sb, sw),
                  umma_idesc(m, n), 1, tmem_image(C, m, n))
    D = res.view(np.float32)[d_lanes(m)]
    np.testing.assert_array_equal(D, A.astype(np.float64) @ B.T.astype(np.float64) + C)


def test_bf16_mma_negate_b_without_accumulating():
    rng = np.random.default_rng(8)
    n, m = 32, 128
    A = rng.integers(-3, 4, (m, 16)).astype(np.float32)
    B = rng.integers(-3, 4, (n, 16)).astype(np.float32)
    bf = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_k(img, 0, bf(A).view(np.uint8).reshape(m, 32), "128B")
    lb, sb = place_k(img, 16384, bf(B).view(np.uint8).reshape(n, 32), "128B")
    C = np.full((m, n), 99, np.float32)
    res = run_mma(mma_kernel("f16", n), img, umma_desc(0, la, sa, "128B"), umma_desc(16384, lb, sb, "128B"),
                  umma_idesc(m, n, atype=1, btype=1, neg_b=True), 0, tmem_image(C, m, n))
    np.testing.assert_array_equal(res.view(np.float32), -(A.astype(np.float64) @ B.T.astype(np.float64)))


def test_i8_mma():
    rng = np.random.default_rng(9)
    n, m = 16, 64
    A = rng.integers(-128, 128, (m, 32)).astype(np.int8)
    B = rng.integers(-128, 128, (n, 32)).astype(np.int8)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_k(img, 0, A.view(np.uint8), "32B")
    lb, sb = place_k(img, 16384, B.view(np.uint8), "32B")
    C = np.zeros((128, n), np.uint32)
    res = run_mma(mma_kernel("i8", n), img, umma_desc(0, la, sa, "32B"), umma_desc(16384, lb, sb, "32B"),
                  umma_idesc(m, n, dtype=2, atype=1, btype=1), 0, C)
    np.testing.assert_array_equal(res.view(np.int32)[d_lanes(m)], A.astype(np.int64) @ B.T.astype(np.int64))


def test_tf32_mma_with_a_in_tensor_memory():
    # A (64 x 8, tf32) is stored with 16x32bx2 by each warp into its lanes, one element per column
    rng = np.random.default_rng(10)
    n, m = 16, 64
    A = rng.integers(-8, 9, (m, 8)).astype(np.float32)
    B = rng.integers(-8, 9, (n, 8)).astype(np.float32)
    img = np.zeros(SMEM, np.uint8)
    lb, sb = place_k(img, 16384, B.view(np.uint8).reshape(n, 32), "none")
    ain = np.zeros((128, 8), np.uint32)   # thread t = 32w + h*16 + i stores row 16w + i, columns 4h..4h+3 (+4)
    for t in range(128):
        w, h, i = t // 32, (t % 32) // 16, t % 16
        row = 16 * w + i
        ain[t, :4] = A[row, 4 * h:4 * h + 4].view(np.uint32)        # first x4 at column base + 4h (half-split 4)
        ain[t, 4:] = 0
    # columns 0..3 from threads 0-15, 4..7 from threads 16-31; the second store goes to columns 16.. (unused)
    res = run_mma(mma_kernel("tf32", n, a_tmem=True), img, 0, umma_desc(16384, lb, sb, "none"),
                  umma_idesc(m, n, atype=2, btype=2), 0, np.zeros((128, n), np.uint32), ain=ain.reshape(-1))
    np.testing.assert_array_equal(res.view(np.float32)[d_lanes(m)], A.astype(np.float64) @ B.T.astype(np.float64))


def test_tf32_mma_reads_the_top_19_bits_of_f32_operands():
    """.kind::tf32 takes f32 bits from shared memory and uses sign, exponent and the top 10 mantissa bits (the
    13 below are dropped, not rounded): what lets a compiler stage f32 operands unconverted, as NVIDIA's PTX
    does (test_emu_wgmma checks the same of wgmma)."""
    rng = np.random.default_rng(11)
    n, m = 16, 64
    A = rng.standard_normal((m, 8)).astype(np.float32)
    B = rng.standard_normal((n, 8)).astype(np.float32)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_k(img, 0, A.view(np.uint8).reshape(m, 32), "32B")
    lb, sb = place_k(img, 16384, B.view(np.uint8).reshape(n, 32), "32B")
    res = run_mma(mma_kernel("tf32", n), img, umma_desc(0, la, sa, "32B"), umma_desc(16384, lb, sb, "32B"),
                  umma_idesc(m, n, atype=2, btype=2), 0, np.zeros((128, n), np.uint32))
    trunc = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    nearest = lambda x: ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    expect = (trunc(A) @ trunc(B).T).astype(np.float32)
    assert not np.array_equal(expect, (nearest(A).astype(np.float64) @ nearest(B).T).astype(np.float32))
    np.testing.assert_array_equal(res.view(np.float32)[d_lanes(m)], expect)


def test_mma_runs_only_when_committed():
    # without tcgen05.commit the MMA never completes: TMEM still holds C
    n, m = 16, 128
    img = np.zeros(SMEM, np.uint8)
    one = np.ones((128, 16), np.float16).view(np.uint8).reshape(128, 32)
    la, sa = place_k(img, 0, one, "none")
    C = np.full((m, n), 3, np.float32)
    res = run_mma(mma_kernel("f16", n, commit=False), img, umma_desc(0, la, sa, "none"),
                  umma_desc(0, la, sa, "none"), umma_idesc(m, n), 1, tmem_image(C, m, n))
    assert (res.view(np.float32) == 3).all()
    res = run_mma(mma_kernel("f16", n), img, umma_desc(0, la, sa, "none"), umma_desc(0, la, sa, "none"),
                  umma_idesc(m, n), 1, tmem_image(C, m, n))
    assert (res.view(np.float32) == 19).all()


def test_bad_instruction_descriptor_is_reported():
    with pytest.raises(DescriptorError, match="M=48"):
        run_mma(mma_kernel("f16", 16), np.zeros(SMEM, np.uint8), umma_desc(0, 128, 256, "none"),
                umma_desc(0, 128, 256, "none"), umma_idesc(48, 16), 1, np.zeros((128, 16), np.uint32))


def _m64_operands(seed: int, n: int) -> tuple:
    """run_mma's arguments after the PTX for an f16 M=64 x N=n x K=16 MMA on small random integers, 128B swizzle."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-4, 5, (64, 16)).astype(np.float16)
    B = rng.integers(-4, 5, (n, 16)).astype(np.float16)
    img = np.zeros(SMEM, np.uint8)
    la, sa = place_k(img, 0, A.view(np.uint8).reshape(64, 32), "128B")
    lb, sb = place_k(img, 16384, B.view(np.uint8).reshape(n, 32), "128B")
    C = rng.integers(-8, 9, (64, n)).astype(np.float32)
    return (img, umma_desc(0, la, sa, "128B"), umma_desc(16384, lb, sb, "128B"), umma_idesc(64, n), 1,
            tmem_image(C, 64, n))


@pytest.mark.parametrize("barrier", [True, False])
def test_an_issue_before_the_other_warps_stores_are_ordered_is_a_race(barrier):
    """Every warp stores its part of C into tensor memory, thread 0 issues the MMA that accumulates onto it:
    without the barrier between (tcgen05.fence::before_thread_sync; bar.sync; ...after_thread_sync) the
    issue may come before the other warps' stores land.  Run in lock step the result is the same either
    way; the race check (emulate_ptx(check_races=True)) tells them apart."""
    from tileiras_async.emu.races import RaceError
    n = 16
    ptx = mma_kernel("f16", n)
    fenced = "    tcgen05.fence::before_thread_sync;\n    bar.sync 0;\n    tcgen05.fence::after_thread_sync;\n    @%p4"
    assert ptx.count(fenced) == 1
    if not barrier:
        ptx = ptx.replace(fenced, fenced.replace("    bar.sync 0;\n", ""))
    args = (ptx, *_m64_operands(3, n))
    plain = run_mma(*args)
    if barrier:
        assert (run_mma(*args, check_races=True) == plain).all()
    else:
        with pytest.raises(RaceError, match=r"tensor-memory race: read at tensor-memory lane \d+ column \d+ by "
                                            r"tcgen05\.mma \(issued by thread 0, warp 0\) after thread \d+'s "
                                            r"\(warp [123]\)"):
            run_mma(*args, check_races=True)


def test_reading_the_accumulator_needs_the_wait_for_the_commit():
    """The MMA writes D when the tensor core gets to it: the threads' tcgen05.ld of D is ordered after it by the
    wait on the mbarrier its commit arrives on, not by a CTA barrier after the commit (the tensor core is no
    party to it).  In lock step the values are the same either way; the race check tells them apart."""
    from tileiras_async.emu.races import RaceError
    n = 16
    ptx = mma_kernel("f16", n)
    spin = "$SPIN:\n    mbarrier.try_wait.parity.shared.b64 %p3, [mbar], 0;\n    @!%p3 bra $SPIN;"
    assert ptx.count(spin) == 1
    args = _m64_operands(5, n)
    assert (run_mma(ptx, *args, check_races=True) == run_mma(ptx, *args)).all()
    with pytest.raises(RaceError, match=r"tensor-memory race: read at tensor-memory lane \d+ column \d+ by thread "
                                        r"\d+ \(warp \d\) after tcgen05\.mma's \(issued by thread 0, warp 0\)"):
        run_mma(ptx.replace(spin, "    bar.sync 0;"), *args, check_races=True)


# ---------------------------------------------------------------------------- deallocation

DEALLOC = HEAD + """
.visible .entry k(.param .u64 out)
.reqntid 128
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 8 .b64 mbar;
    .shared .align 4 .b32 slot;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    setp.ne.u32 %p1, %r2, 0;
    setp.ne.u32 %p2, %r1, 0;
    @%p1 bra $ALLOCATED;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;
$ALLOCATED:
    @%p2 bra $INITED;
    mbarrier.init.shared.b64 [mbar], 128;
$INITED:
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    ld.shared.b32 %r3, [slot];
    shl.b32 %r4, %r2, 21;
    add.s32 %r5, %r3, %r4;
    tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r6}, [%r5];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.b32 [%rd3], %r6;
    tcgen05.fence::before_thread_sync;
ORDER
    @%p1 bra $END;
    tcgen05.fence::after_thread_sync;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 32;
$END:
    ret;
}
"""

ARRIVE = "    mbarrier.arrive.shared.b64 %rd4, [mbar];"
SPIN = "    @%p1 bra $END;\n$SPIN:\n    mbarrier.try_wait.shared.b64 %p3, [mbar], %rd4;\n    @!%p3 bra $SPIN;"
DEALLOC_ORDERS = {"barrier": "    bar.sync 0;", "mbarrier": ARRIVE + "\n" + SPIN, "arrive-only": ARRIVE, "none": ""}


@pytest.mark.parametrize("order", DEALLOC_ORDERS)
def test_a_deallocation_must_come_after_the_other_warps_loads(order):
    """Every warp loads its lanes of the columns warp 0 allocated, then warp 0 frees them: a deallocation
    before another warp's tcgen05.ld has run (or been issued) frees columns still in use.  A CTA barrier or
    warp 0's wait on an mbarrier every thread arrived on after its load orders them (the race check's
    deallocation is a write of every cell by warp 0); an arrival with no wait, or nothing, does not."""
    from tileiras_async.emu.races import RaceError
    mem = DeviceMemory()
    ptx = DEALLOC.replace("ORDER", DEALLOC_ORDERS[order])
    run = lambda: emulate_ptx(ptx, "k", (1, 1, 1), (128, 1, 1), [mem.alloc(512)], mem,  # noqa: E731
                              check_races=True)
    if order in ("barrier", "mbarrier"):
        run()
        return
    with pytest.raises(RaceError, match=r"tensor-memory race: deallocation after a read at tensor-memory lane "
                                        r"(3[2-9]|[4-9]\d|1[01]\d|12[0-7]) column 0 by thread 0 \(warp 0\) after "
                                        r"thread \d+'s \(warp [123]\)"):
        run()


def test_the_mma_kernel_needs_its_last_barrier_before_the_deallocation():
    """mma_kernel's warps load D, then meet at a CTA barrier before warp 0 deallocates: without that barrier
    the other warps' loads are not ordered before the deallocation."""
    from tileiras_async.emu.races import RaceError
    n = 16
    ptx = mma_kernel("f16", n)
    last = "    tcgen05.fence::before_thread_sync;\n    bar.sync 0;\n    @%p2 bra $END;"
    assert ptx.count(last) == 1
    args = _m64_operands(5, n)
    run_mma(ptx, *args, check_races=True)
    with pytest.raises(RaceError, match=r"tensor-memory race: deallocation after a read at tensor-memory lane \d+ "
                                        r"column \d+ by thread 0 \(warp 0\) after thread \d+'s \(warp [123]\)"):
        run_mma(ptx.replace(last, "    @%p2 bra $END;"), *args, check_races=True)


def test_a_deallocation_before_the_mma_completes_is_a_race():
    """Thread 0 commits its MMA, and warp 0 frees the columns without waiting for the commit's mbarrier (no
    thread reads D): the tensor core may still be writing them."""
    from tileiras_async.emu.races import RaceError
    n = 16
    ptx = mma_kernel("f16", n)
    tail = ptx[ptx.index("$ISSUED:"):ptx.index("$END:")]
    no_wait = "$ISSUED:\n    @%p2 bra $END;\n    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r10, 256;\n"
    args = _m64_operands(5, n)
    with pytest.raises(RaceError, match=r"tensor-memory race: deallocation at tensor-memory lane \d+ column \d+ by "
                                        r"thread 0 \(warp 0\) after tcgen05\.mma's \(issued by thread 0, warp 0\)"):
        run_mma(ptx.replace(tail, no_wait), *args, check_races=True)
    waited = no_wait.replace("$ISSUED:\n", "$ISSUED:\n$SPIN:\n    mbarrier.try_wait.parity.shared.b64 %p3, [mbar], 0;\n"
                                           "    @!%p3 bra $SPIN;\n    tcgen05.fence::after_thread_sync;\n")
    run_mma(ptx.replace(tail, waited), *args, check_races=True)
