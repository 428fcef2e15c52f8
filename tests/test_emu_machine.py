"""PTX emulator: control flow, barriers, memory spaces and checking, warp-level and async instructions.

Each test is a small hand-written kernel run through `emulate_ptx`.
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import (
    BarrierError,
    ConvergenceError,
    DeviceMemory,
    LaunchError,
    MemoryFault,
    PtxSyntaxError,
    TrapError,
    UnsupportedInstruction,
    emulate_ptx,
)
from tileiras_async.emu.parser import parse_ptx

HEAD = ".version 8.6\n.target sm_100a\n.address_size 64\n"


def kernel(body: str, params: str = ".param .u64 out", name: str = "k", extra: str = "", attrs: str = "") -> str:
    return f"{HEAD}{extra}\n.visible .entry {name}({params}){attrs}\n{{\n{body}\n}}\n"


def run(ptx, grid, block, params, mem=None, **kw):
    mem = mem or DeviceMemory()
    rep = emulate_ptx(ptx, None, grid, block, params, mem, **kw)
    return rep, mem


def out_array(mem, addr, n, dt):
    return mem.read_array(addr, dt, n)


def run_out(ptx: str, nthreads: int, words: int = 1, dtype=np.uint32) -> np.ndarray:
    """Run `ptx` as one CTA of `nthreads` threads whose one parameter `out` has room for `words` 32-bit
    words per thread; returns what they wrote there."""
    mem = DeviceMemory()
    out = mem.alloc(4 * words * nthreads)
    run(ptx, (1, 1, 1), (nthreads, 1, 1), [out], mem)
    return mem.read_array(out, dtype, words * nthreads)


# a kernel prologue: %gid = global thread id, %rdo = &out[gid] (u32 elements)
PRO = """
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<16>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r4, 4;
    add.s64 %rd3, %rd1, %rd2;
"""


# ============================================================================ control flow


def test_divergent_if_else_and_reconvergence():
    body = PRO + """
    and.b32 %r5, %r1, 1;
    setp.eq.b32 %p1, %r5, 0;
    @%p1 bra $EVEN;
    mul.lo.s32 %r6, %r1, 10;
    bra.uni $JOIN;
$EVEN:
    add.s32 %r6, %r1, 1000;
$JOIN:
    add.s32 %r6, %r6, 7;
    st.global.u32 [%rd3], %r6;
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(4 * 96)
    rep, _ = run(kernel(body), (1, 1, 1), (96, 1, 1), [out], mem)
    t = np.arange(96)
    assert mem.read_array(out, np.int32, 96).tolist() == np.where(t % 2 == 0, t + 1007, t * 10 + 7).tolist()
    # after the join every thread runs together: 96 threads x (prologue + join) instructions
    assert rep.thread_instructions > 0


def test_per_thread_loop_trip_counts():
    # out[t] = sum(0..t-1), each thread loops t times
    body = PRO + """
    mov.u32 %r7, 0;
    mov.u32 %r8, 0;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra $DONE;
$LOOP:
    add.s32 %r8, %r8, %r7;
    add.s32 %r7, %r7, 1;
    setp.lt.u32 %p2, %r7, %r1;
    @%p2 bra $LOOP;
$DONE:
    st.global.u32 [%rd3], %r8;
    ret;
"""
    t = np.arange(70)
    assert run_out(kernel(body), 70, dtype=np.int32).tolist() == (t * (t - 1) // 2).tolist()


def test_predicated_exit_and_partial_warps():
    body = PRO + """
    setp.ge.u32 %p1, %r1, 20;
    @%p1 ret;
    st.global.u32 [%rd3], %r1;
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(4 * 100)
    mem.write(out, np.full(100, 7, np.uint32))
    # 50 threads: the second warp is partial; threads >= 20 exit before storing
    run(kernel(body), (2, 1, 1), (50, 1, 1), [out], mem)
    got = mem.read_array(out, np.uint32, 100)
    exp = np.full(100, 7)
    exp[0:20] = np.arange(20)
    exp[50:70] = np.arange(20)
    assert got.tolist() == exp.tolist()


def test_special_registers_2d_grid_and_block():
    body = """
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;  mov.u32 %r2, %tid.y;  mov.u32 %r3, %ctaid.x;  mov.u32 %r4, %ctaid.y;
    mov.u32 %r5, %ntid.x; mov.u32 %r6, %ntid.y; mov.u32 %r7, %nctaid.x; mov.u32 %r8, %laneid;
    mov.u32 %r9, %warpid;
    mad.lo.s32 %r10, %r2, %r5, %r1;                  // linear tid
    mul.lo.s32 %r11, %r5, %r6;                       // threads per block
    mad.lo.s32 %r12, %r4, %r7, %r3;                  // linear block id
    mad.lo.s32 %r13, %r12, %r11, %r10;               // global id
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r13, 16;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.u32 [%rd3], {%r10, %r12, %r8, %r9};
    ret;
"""
    mem = DeviceMemory()
    n = 3 * 2 * 8 * 5
    out = mem.alloc(16 * n)
    run(kernel(body), (3, 2, 1), (8, 5, 1), [out], mem)
    got = mem.read_array(out, np.uint32, 4 * n).reshape(n, 4)
    lin = np.tile(np.arange(40), 6)
    assert got[:, 0].tolist() == lin.tolist()
    assert got[:, 1].tolist() == np.repeat(np.arange(6), 40).tolist()
    assert got[:, 2].tolist() == (lin % 32).tolist() and got[:, 3].tolist() == (lin // 32).tolist()


def test_batches_give_the_same_result():
    body = PRO + """
    mul.lo.s32 %r5, %r4, %r4;
    st.global.u32 [%rd3], %r5;
    ret;
"""
    res = []
    for max_lanes in (64, 4096):
        mem = DeviceMemory()
        out = mem.alloc(4 * 64 * 13)
        rep, _ = run(kernel(body), (13, 1, 1), (64, 1, 1), [out], mem, max_lanes=max_lanes)
        res.append(mem.read_array(out, np.uint32, 64 * 13))
        assert rep.batches == (13 if max_lanes == 64 else 1)
    assert res[0].tolist() == res[1].tolist() == (np.arange(64 * 13) ** 2).tolist()


def test_reqntid_and_parameter_count_are_checked():
    ptx = kernel(PRO + "ret;", attrs="\n.reqntid 128")
    with pytest.raises(LaunchError, match="reqntid"):
        run(ptx, (1, 1, 1), (64, 1, 1), [0])
    with pytest.raises(LaunchError, match="takes 1 parameters"):
        run(kernel(PRO + "ret;"), (1, 1, 1), (32, 1, 1), [0, 1])


# ============================================================================ barriers and shared memory


def test_shared_exchange_across_barrier_and_cta_isolation():
    body = PRO + """
    .shared .align 4 .b32 buf[128];
    mov.u32 %r10, buf;
    shl.b32 %r11, %r1, 2;
    add.s32 %r12, %r10, %r11;
    add.s32 %r13, %r4, 1000;
    st.shared.u32 [%r12], %r13;
    bar.sync 0;
    add.s32 %r14, %r1, 1;
    rem.u32 %r14, %r14, %r3;
    shl.b32 %r15, %r14, 2;
    add.s32 %r16, %r10, %r15;
    ld.shared.u32 %r17, [%r16];
    st.global.u32 [%rd3], %r17;
    ret;
"""
    mem = DeviceMemory()
    n, cta = 128, 9
    out = mem.alloc(4 * n * cta)
    run(kernel(body), (cta, 1, 1), (n, 1, 1), [out], mem, max_lanes=4 * n)
    got = mem.read_array(out, np.uint32, n * cta).reshape(cta, n)
    exp = (np.arange(cta)[:, None] * n + (np.arange(n)[None, :] + 1) % n) + 1000
    assert got.tolist() == exp.tolist()


def test_barrier_after_some_threads_exit():
    body = PRO + """
    .shared .align 4 .b32 s[1];
    setp.ge.u32 %p1, %r1, 16;
    @%p1 ret;
    setp.ne.u32 %p2, %r1, 0;
    @%p2 bra $W;
    mov.u32 %r5, 77;
    st.shared.u32 [s], %r5;
$W:
    bar.sync 0;
    ld.shared.u32 %r6, [s];
    st.global.u32 [%rd3], %r6;
    ret;
"""
    got = run_out(kernel(body), 64)
    assert got[:16].tolist() == [77] * 16 and got[16:].tolist() == [0] * 48


def test_barrier_deadlock_is_reported():
    body = PRO + """
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra $A;
    bar.sync 1;
    bra.uni $END;
$A:
    bar.sync 0;
$END:
    ret;
"""
    with pytest.raises(BarrierError, match="never"):
        run(kernel(body), (1, 1, 1), (64, 1, 1), [0])


def test_named_barrier_with_thread_count():
    # warps 0-1 sync on barrier 1 with 64 threads while warp 2 is elsewhere
    body = PRO + """
    .shared .align 4 .b32 s[2];
    setp.ge.u32 %p1, %r1, 64;
    @%p1 bra $OTHER;
    setp.eq.u32 %p2, %r1, 0;
    @!%p2 bra $B;
    mov.u32 %r5, 5;
    st.shared.u32 [s], %r5;
$B:
    bar.sync 1, 64;
    ld.shared.u32 %r6, [s];
    st.global.u32 [%rd3], %r6;
    ret;
$OTHER:
    st.global.u32 [%rd3], %r1;
    ret;
"""
    got = run_out(kernel(body), 96)
    assert got[:64].tolist() == [5] * 64 and got[64:].tolist() == list(range(64, 96))


# ============================================================================ memory checking


OOB = PRO + """
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd5, %rd6;
    ld.global.u32 %r5, [%rd7];
    st.global.u32 [%rd3], %r5;
    ret;
"""


def test_out_of_bounds_read_names_kernel_line_block_thread_and_address():
    ptx = kernel(OOB, params=".param .u64 out, .param .u64 inp", name="oob_kernel")
    mem = DeviceMemory()
    out = mem.alloc(4 * 256, "out")
    inp = mem.alloc_array(np.arange(100, dtype=np.uint32), "inp")
    with pytest.raises(MemoryFault) as ei:
        run(ptx, (2, 1, 1), (128, 1, 1), [out, inp], mem)
    e = ei.value
    line = next(i + 1 for i, ln in enumerate(ptx.split("\n")) if "ld.global.u32" in ln)
    assert e.kernel == "oob_kernel" and e.line == line and e.address == inp + 400
    assert e.block == (0, 0, 0) and e.thread == (100, 0, 0)
    msg = str(e)
    assert "read of size 4" in msg and "0 bytes after the end of allocation 'inp'" in msg
    assert "block (0, 0, 0)" in msg and "thread (100, 0, 0)" in msg and f"PTX line {line}" in msg


def test_out_of_bounds_write_and_misaligned_access():
    body = PRO + """
    add.s64 %rd4, %rd3, 4096;
    st.global.u32 [%rd4], %r1;
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(4 * 64, "out")
    with pytest.raises(MemoryFault, match="write of size 4"):
        run(kernel(body), (1, 1, 1), (64, 1, 1), [out], mem)
    body = PRO + """
    add.s64 %rd4, %rd3, 2;
    ld.global.u32 %r5, [%rd4];
    ret;
"""
    with pytest.raises(MemoryFault, match="Misaligned"):
        run(kernel(body), (1, 1, 1), (32, 1, 1), [out], mem)


def test_shared_and_local_bounds():
    body = PRO + """
    .shared .align 4 .b32 s[32];
    mov.u32 %r5, s;
    shl.b32 %r6, %r1, 2;
    add.s32 %r7, %r5, %r6;
    ld.shared.u32 %r8, [%r7+128];
    ret;
"""
    with pytest.raises(MemoryFault, match="__shared__"):
        run(kernel(body), (1, 1, 1), (64, 1, 1), [0])
    body = PRO + """
    ld.shared.u32 %r8, [0];
    ret;
"""
    with pytest.raises(MemoryFault, match="reserved"):
        run(kernel(body), (1, 1, 1), (32, 1, 1), [0])


def test_unallocated_and_null_pointer():
    with pytest.raises(MemoryFault, match="no allocation|not in any allocation"):
        run(kernel(OOB, params=".param .u64 out, .param .u64 inp"), (1, 1, 1), (32, 1, 1), [0, 0])


def test_guarded_loads_do_not_fault():
    # the inline-asm form our compiler emits: only lanes whose guard is set touch memory
    body = PRO + """
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd5, %rd6;
    setp.lt.u32 %p1, %r4, 100;
    selp.b32 %r9, 1, 0, %p1;
    mov.b32 %r10, 0xFFFFFFFF;
    { .reg .pred p; setp.ne.b32 p, %r9, 0; mov.b32 %r8, %r10; @p ld.global.b32 %r8, [%rd7]; }
    st.global.u32 [%rd3], %r8;
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(4 * 128)
    inp = mem.alloc_array(np.arange(100, dtype=np.uint32))
    run(kernel(body, params=".param .u64 out, .param .u64 inp"), (1, 1, 1), (128, 1, 1), [out, inp], mem)
    got = mem.read_array(out, np.uint32, 128)
    assert got[:100].tolist() == list(range(100)) and got[100:].tolist() == [0xFFFFFFFF] * 28


def test_strided_array_gaps_are_invalid():
    mem = DeviceMemory()
    base = np.arange(20, dtype=np.uint32)
    inp = mem.alloc_array(base[::2], "strided")
    out = mem.alloc(4 * 32)
    body = PRO + """
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r4, 4;
    add.s64 %rd7, %rd5, %rd6;
    ld.global.u32 %r5, [%rd7];
    ret;
"""
    with pytest.raises(MemoryFault, match="between the elements"):
        run(kernel(body, params=".param .u64 out, .param .u64 inp"), (1, 1, 1), (4, 1, 1), [out, inp], mem)


# ============================================================================ generic addressing, local memory, calls


def test_generic_addressing_and_isspacep():
    body = PRO + """
    .shared .align 8 .b32 s[64];
    .local .align 4 .b8 depot[8];
    mov.u64 %rd4, s;
    cvta.shared.u64 %rd5, %rd4;
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd5, %rd6;
    st.u32 [%rd7], %r1;                       // generic store into shared
    mov.u64 %rd8, depot;
    cvta.local.u64 %rd9, %rd8;
    add.s32 %r5, %r1, 100;
    st.u32 [%rd9+4], %r5;                     // generic store into local
    bar.sync 0;
    ld.shared.u32 %r6, [%rd4+8];              // s[2]
    ld.local.u32 %r7, [%rd8+4];
    add.s32 %r8, %r6, %r7;
    isspacep.shared %p1, %rd7;
    isspacep.global %p2, %rd3;
    isspacep.local %p3, %rd7;
    selp.u32 %r9, 1000000, 0, %p1;
    selp.u32 %r10, 100000, 0, %p2;
    selp.u32 %r11, 1, 0, %p3;
    add.s32 %r8, %r8, %r9;
    add.s32 %r8, %r8, %r10;
    add.s32 %r8, %r8, %r11;
    st.u32 [%rd3], %r8;                       // generic store into global
    ret;
"""
    t = np.arange(64)
    assert run_out(kernel(body), 64).tolist() == (2 + t + 100 + 1100000).tolist()


FUNC = """
.func (.param .b32 ret0) twice(.param .b32 x)
{
    .reg .b32 %r<4>;
    .local .align 4 .b8 tmp[4];
    ld.param.b32 %r1, [x];
    st.local.u32 [tmp], %r1;
    ld.local.u32 %r2, [tmp];
    add.s32 %r3, %r2, %r2;
    st.param.b32 [ret0], %r3;
    ret;
}
"""


def test_device_function_calls_are_inlined_per_call_site():
    body = PRO + """
    { .param .b32 a; .param .b32 r;
      st.param.b32 [a], %r1;
      call.uni (r), twice, (a);
      ld.param.b32 %r5, [r]; }
    { .param .b32 a; .param .b32 r;
      st.param.b32 [a], %r5;
      call.uni (r), twice, (a);
      ld.param.b32 %r6, [r]; }
    st.global.u32 [%rd3], %r6;
    ret;
"""
    assert run_out(kernel(body, extra=FUNC), 32).tolist() == (4 * np.arange(32)).tolist()


def test_recursion_is_unsupported():
    rec = """
.func (.param .b32 ret0) f(.param .b32 x)
{
    .reg .b32 %r<2>;
    ld.param.b32 %r1, [x];
    { .param .b32 a; .param .b32 r; st.param.b32 [a], %r1; call.uni (r), f, (a); ld.param.b32 %r1, [r]; }
    st.param.b32 [ret0], %r1;
    ret;
}
"""
    body = PRO + "{ .param .b32 a; .param .b32 r; st.param.b32 [a], %r1; call.uni (r), f, (a); }\nret;"
    with pytest.raises(UnsupportedInstruction, match="recursive"):
        run(kernel(body, extra=rec), (1, 1, 1), (32, 1, 1), [0])


def test_module_global_constant_table():
    extra = ".global .align 4 .b8 table[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};\n"
    body = PRO + """
    and.b32 %r5, %r1, 3;
    mov.u64 %rd4, table;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.nc.u32 %r6, [%rd6];
    st.global.u32 [%rd3], %r6;
    ret;
"""
    assert run_out(kernel(body, extra=extra), 32).tolist() == [1, 2, 3, 4] * 8


def test_trap_is_reported():
    with pytest.raises(TrapError):
        run(kernel(PRO + "trap;\nret;"), (1, 1, 1), (32, 1, 1), [0])


# ============================================================================ warp-level


def test_shfl_modes_and_clamp():
    body = PRO + """
    shfl.sync.bfly.b32 %r5, %r1, 1, 0x1f, 0xffffffff;
    shfl.sync.up.b32 %r6|%p1, %r1, 3, 0, 0xffffffff;
    shfl.sync.down.b32 %r7, %r1, 4, 0x1f, 0xffffffff;
    shfl.sync.idx.b32 %r8, %r1, 5, 0x1f, 0xffffffff;
    shfl.sync.idx.b32 %r9, %r1, 1, 0x181f, 0xffffffff;     // segments of 8 lanes
    selp.u32 %r10, 1, 0, %p1;
    mul.wide.u32 %rd4, %r4, 24;
    add.s64 %rd5, %rd1, %rd4;
    st.global.v2.u32 [%rd5], {%r5, %r6};
    st.global.v2.u32 [%rd5+8], {%r7, %r8};
    st.global.v2.u32 [%rd5+16], {%r9, %r10};
    ret;
"""
    g = run_out(kernel(body), 64, words=6).reshape(64, 6)
    t = np.arange(64)
    lane = t % 32
    base = t - lane
    assert g[:, 0].tolist() == (base + (lane ^ 1)).tolist()
    assert g[:, 1].tolist() == np.where(lane >= 3, t - 3, t).tolist() and g[:, 5].tolist() == (lane >= 3).tolist()
    assert g[:, 2].tolist() == np.where(lane + 4 <= 31, t + 4, t).tolist()
    assert g[:, 3].tolist() == (base + 5).tolist()
    assert g[:, 4].tolist() == (base + (lane & ~7) + 1).tolist()


def test_shfl_in_divergent_code_is_a_convergence_error():
    body = PRO + """
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra $X;
    shfl.sync.bfly.b32 %r5, %r1, 1, 0x1f, 0xffffffff;
$X:
    ret;
"""
    with pytest.raises(ConvergenceError, match="member mask"):
        run(kernel(body), (1, 1, 1), (32, 1, 1), [0])
    # a partial member mask naming exactly the converged lanes is fine
    body = PRO + """
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra $X;
    shfl.sync.bfly.b32 %r5, %r1, 1, 0x1f, 0xffff0000;
    st.global.u32 [%rd3], %r5;
$X:
    ret;
"""
    assert run_out(kernel(body), 32)[16:].tolist() == [x ^ 1 for x in range(16, 32)]


def test_vote_redux_match_activemask_elect():
    body = PRO + """
    and.b32 %r5, %r1, 3;
    setp.eq.u32 %p1, %r5, 0;
    vote.sync.ballot.b32 %r6, %p1, 0xffffffff;
    vote.sync.any.pred %p2, %p1, 0xffffffff;
    vote.sync.all.pred %p3, %p1, 0xffffffff;
    selp.u32 %r7, 1, 0, %p2;
    selp.u32 %r8, 1, 0, %p3;
    redux.sync.add.u32 %r9, %r1, 0xffffffff;
    redux.sync.max.s32 %r10, %r5, 0xffffffff;
    match.any.sync.b32 %r11, %r5, 0xffffffff;
    activemask.b32 %r12;
    elect.sync %r13|%p4, 0xffffffff;
    selp.u32 %r14, 1, 0, %p4;
    mul.wide.u32 %rd4, %r4, 48;
    add.s64 %rd5, %rd1, %rd4;
    st.global.v4.u32 [%rd5], {%r6, %r7, %r8, %r9};
    st.global.v4.u32 [%rd5+16], {%r10, %r11, %r12, %r13};
    st.global.u32 [%rd5+32], %r14;
    ret;
"""
    g = run_out(kernel(body), 32, words=12).reshape(32, 12)
    assert set(g[:, 0].tolist()) == {0x11111111}
    assert set(g[:, 1].tolist()) == {1} and set(g[:, 2].tolist()) == {0}
    assert set(g[:, 3].tolist()) == {sum(range(32))} and set(g[:, 4].tolist()) == {3}
    assert g[:, 5].tolist() == [0x11111111 << (t % 4) for t in range(32)]
    assert set(g[:, 6].tolist()) == {0xFFFFFFFF} and set(g[:, 7].tolist()) == {0}
    assert g[:, 8].tolist() == [1] + [0] * 31


def test_mma_m16n8k8_tf32_and_ldmatrix_against_numpy():
    """A (16x8 tf32) and B (8x8) in shared memory, loaded per the PTX fragment layouts; D = A @ B."""
    rng = np.random.default_rng(1)
    A = (rng.integers(-8, 9, size=(16, 8)) / 8).astype(np.float32)
    B = (rng.integers(-8, 9, size=(8, 8)) / 8).astype(np.float32)
    body = """
    .reg .pred %p<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<16>;
    mov.u32 %r1, %laneid;
    shr.u32 %r2, %r1, 2;           // g
    and.b32 %r3, %r1, 3;           // t
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pd];
    // a0: (g, t)  a1: (g+8, t)  a2: (g, t+4)  a3: (g+8, t+4)   A row-major 16x8
    mad.lo.s32 %r4, %r2, 8, %r3;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.b32 %r10, [%rd5];
    ld.global.b32 %r11, [%rd5+256];
    ld.global.b32 %r12, [%rd5+16];
    ld.global.b32 %r13, [%rd5+272];
    // b0: (t, g)  b1: (t+4, g)   B row-major 8x8
    mad.lo.s32 %r5, %r3, 8, %r2;
    mul.wide.u32 %rd6, %r5, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.b32 %r14, [%rd7];
    ld.global.b32 %r15, [%rd7+128];
    mov.b32 %r16, 0f00000000;
    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%r20, %r21, %r22, %r23}, {%r10, %r11, %r12, %r13},
        {%r14, %r15}, {%r16, %r16, %r16, %r16};
    // d0,d1: (g, 2t+{0,1})  d2,d3: (g+8, 2t+{0,1})  D row-major 16x8
    shl.b32 %r6, %r3, 1;
    mad.lo.s32 %r7, %r2, 8, %r6;
    mul.wide.u32 %rd8, %r7, 4;
    add.s64 %rd9, %rd3, %rd8;
    st.global.v2.b32 [%rd9], {%r20, %r21};
    st.global.v2.b32 [%rd9+256], {%r22, %r23};
    ret;
"""
    mem = DeviceMemory()
    pa, pb = mem.alloc_array(A), mem.alloc_array(B)
    pd = mem.alloc(16 * 8 * 4)
    run(kernel(body, params=".param .u64 pa, .param .u64 pb, .param .u64 pd"), (1, 1, 1), (32, 1, 1),
        [pa, pb, pd], mem)
    assert np.array_equal(mem.read_array(pd, np.float32, 128).reshape(16, 8), A @ B)


def test_ldmatrix_x4_and_trans():
    # a 16x16 b16 matrix in shared memory: rows of 8 elements provided by lanes 8*i + r
    body = """
    .reg .b32 %r<40>;
    .reg .b64 %rd<16>;
    .shared .align 16 .b16 m[256];
    mov.u32 %r1, %laneid;
    // copy the matrix from global: lane l copies elements 8l .. 8l+7
    ld.param.u64 %rd1, [src];
    mul.wide.u32 %rd2, %r1, 16;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd3];
    mov.u32 %r6, m;
    shl.b32 %r7, %r1, 4;
    add.s32 %r8, %r6, %r7;
    st.shared.v4.b32 [%r8], {%r2, %r3, %r4, %r5};
    bar.sync 0;
    // matrix i = rows 8i..8i+7 of the 32x8 view; lane l gives the address of row l
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r8];
    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r14, %r15}, [%r8];
    ld.param.u64 %rd4, [dst];
    mul.wide.u32 %rd5, %r1, 24;
    add.s64 %rd6, %rd4, %rd5;
    st.global.v2.b32 [%rd6], {%r10, %r11};
    st.global.v2.b32 [%rd6+8], {%r12, %r13};
    st.global.v2.b32 [%rd6+16], {%r14, %r15};
    ret;
"""
    M = np.arange(256, dtype=np.uint16)
    mem = DeviceMemory()
    src = mem.alloc_array(M)
    dst = mem.alloc(24 * 32)
    run(kernel(body, params=".param .u64 src, .param .u64 dst"), (1, 1, 1), (32, 1, 1), [src, dst], mem)
    got = mem.read_array(dst, np.uint16, 12 * 32).reshape(32, 6, 2)
    mats = M.reshape(4, 8, 8)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            assert got[lane, i].tolist() == [mats[i, g, 2 * t], mats[i, g, 2 * t + 1]]
        for i in range(2):
            assert got[lane, 4 + i].tolist() == [mats[i, 2 * t, g], mats[i, 2 * t + 1, g]]


def test_mma_requires_a_converged_warp():
    body = """
    .reg .pred %p<2>;
    .reg .b32 %r<20>;
    mov.u32 %r1, %laneid;
    setp.lt.u32 %p1, %r1, 4;
    @%p1 bra $X;
    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%r2, %r3, %r4, %r5}, {%r6, %r7, %r8, %r9},
        {%r10, %r11}, {%r12, %r13, %r14, %r15};
$X:
    ret;
"""
    with pytest.raises(ConvergenceError):
        run(kernel(body, params=""), (1, 1, 1), (32, 1, 1), [])


# ============================================================================ atomics


def test_atomics_with_conflicting_lanes():
    body = PRO + """
    ld.param.u64 %rd5, [ctr];
    atom.global.add.u32 %r5, [%rd5], 1;            // every thread hits the same word
    st.global.u32 [%rd3], %r5;
    atom.global.max.s32 %r6, [%rd5+4], %r4;
    and.b32 %r7, %r4, 7;
    mul.wide.u32 %rd6, %r7, 4;
    add.s64 %rd7, %rd5, %rd6;
    red.global.add.f32 [%rd7+8], 0f3F000000;      // 0.5 into one of 8 bins
    atom.global.cas.b32 %r8, [%rd5+40], %r4, 1000;  // only the thread whose id matches wins
    atom.global.inc.u32 %r9, [%rd5+44], 9;          // wraps to 0 after 9
    ret;
"""
    mem = DeviceMemory()
    n = 200
    out = mem.alloc(4 * n)
    ctr = mem.alloc(48)
    mem.write(ctr + 40, np.array([7], np.uint32))
    run(kernel(body, params=".param .u64 out, .param .u64 ctr"), (2, 1, 1), (100, 1, 1), [out, ctr], mem)
    olds = mem.read_array(out, np.uint32, n)
    assert sorted(olds.tolist()) == list(range(n))
    c = mem.read_array(ctr, np.uint32, 12)
    assert c[0] == n and c[1] == n - 1
    assert mem.read_array(ctr + 8, np.float32, 8).tolist() == [n / 8 * 0.5] * 8
    assert c[10] == 1000 and c[11] == n % 10


def test_shared_atomics():
    body = PRO + """
    .shared .align 4 .b32 s[1];
    atom.shared.add.u32 %r5, [s], %r1;
    bar.sync 0;
    ld.shared.u32 %r6, [s];
    st.global.u32 [%rd3], %r6;
    ret;
"""
    mem = DeviceMemory()
    out = mem.alloc(4 * 64 * 3)
    run(kernel(body), (3, 1, 1), (64, 1, 1), [out], mem)
    assert set(mem.read_array(out, np.uint32, 192).tolist()) == {sum(range(64))}


# ============================================================================ cp.async and mbarriers


def test_cp_async_completes_at_wait_group():
    body = PRO + """
    .shared .align 16 .b32 s[256];
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r1, 16;
    add.s64 %rd7, %rd5, %rd6;
    mov.u32 %r5, s;
    shl.b32 %r6, %r1, 4;
    add.s32 %r7, %r5, %r6;
    cp.async.ca.shared.global [%r7], [%rd7], 16;
    cp.async.commit_group;
    ld.shared.u32 %r8, [%r7];                 // not yet complete: still the old (zero) contents
    cp.async.wait_group 0;
    ld.shared.u32 %r9, [%r7+4];
    add.s32 %r10, %r8, %r9;
    st.global.u32 [%rd3], %r10;
    ret;
"""
    mem = DeviceMemory()
    inp = mem.alloc_array(np.arange(256, dtype=np.uint32))
    out = mem.alloc(4 * 64)
    run(kernel(body, params=".param .u64 out, .param .u64 inp"), (1, 1, 1), (64, 1, 1), [out, inp], mem)
    assert mem.read_array(out, np.uint32, 64).tolist() == (4 * np.arange(64) + 1).tolist()


def test_cp_async_zero_fill_and_mbarrier_producer_consumer():
    body = PRO + """
    .shared .align 16 .b32 s[64];
    .shared .align 8 .b64 bar;
    setp.eq.u32 %p1, %r1, 0;
    @!%p1 bra $INIT_DONE;
    mbarrier.init.shared.b64 [bar], 32;
$INIT_DONE:
    bar.sync 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra $CONSUMER;
    // producers: warp 0 copies 4 bytes each (src-size 2: upper half zero-filled), then arrives
    ld.param.u64 %rd5, [inp];
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd5, %rd6;
    mov.u32 %r5, s;
    shl.b32 %r6, %r1, 2;
    add.s32 %r7, %r5, %r6;
    mov.u32 %r12, 2;
    cp.async.ca.shared.global [%r7], [%rd7], 4, %r12;
    cp.async.mbarrier.arrive.noinc.shared.b64 [bar];
    bra.uni $END;
$CONSUMER:
    mov.u32 %r13, 0;
$WAIT:
    mbarrier.try_wait.parity.shared.b64 %p3, [bar], %r13;
    @!%p3 bra $WAIT;
    sub.u32 %r8, %r1, 32;
    mov.u32 %r5, s;
    shl.b32 %r9, %r8, 2;
    add.s32 %r10, %r5, %r9;
    ld.shared.u32 %r11, [%r10];
    st.global.u32 [%rd3], %r11;
$END:
    ret;
"""
    mem = DeviceMemory()
    inp = mem.alloc_array(np.arange(32, dtype=np.uint32) * 0x10001)
    out = mem.alloc(4 * 64)
    run(kernel(body, params=".param .u64 out, .param .u64 inp"), (1, 1, 1), (64, 1, 1), [out, inp], mem)
    got = mem.read_array(out, np.uint32, 64)
    assert got[32:].tolist() == list(range(32))                 # only the low 2 bytes were copied


def test_mbarrier_wait_that_can_never_complete():
    body = PRO + """
    .shared .align 8 .b64 bar;
    mbarrier.init.shared.b64 [bar], 1000;
    mov.u32 %r13, 0;
$WAIT:
    mbarrier.try_wait.parity.shared.b64 %p3, [bar], %r13;
    @!%p3 bra $WAIT;
    ret;
"""
    with pytest.raises(BarrierError, match="mbarrier"):
        run(kernel(body), (1, 1, 1), (32, 1, 1), [0])


# ============================================================================ parsing


def test_parser_handles_llvm_and_nvvm_syntax():
    ptx = HEAD + """
// comment with a brace {
/* block
   comment */
.extern .shared .align 16 .b8 dyn[];
.global .align 4 .u32 g = 5;
.visible .entry e(
	.param .u64 .ptr .global .align 1 e_param_0,
	.param .align 8 .b8 e_param_1[16]
)
.reqntid 64, 1, 1
.minnctapersm 1
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
$L__BB0_1:
	@!%p1 bra.uni 	$L__BB0_1;
	mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
		{%r1, %r2, %r3, %r4},
		{%r5, %r6, %r7, %r8},
		{%r1, %r2},
		{%r1, %r2, %r3, %r4};
	ld.shared.v4.b32 	{%r1, %r2, %r3, %r4}, [dyn+-16];
	setp.lt.and.s32 %p1|%p2, %r1, 0x7fffffff, !%p1;
	.loc 1 23 4
	ret;
}
"""
    mod = parse_ptx(ptx)
    fn = mod.functions["e"]
    assert fn.attrs["reqntid"] == [64, 1, 1] and len(fn.params) == 2 and fn.params[1].dims == (16,)
    ins = [s for s in fn.body if type(s).__name__ == "Instr"]
    assert [i.opcode for i in ins] == ["bra.uni", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                                       "ld.shared.v4.b32", "setp.lt.and.s32", "ret"]
    assert ins[0].pred.neg and str(ins[2].operands[1]) == "[dyn+-16]"
    with pytest.raises(PtxSyntaxError):
        parse_ptx(HEAD + ".visible .entry e() { add.s32 %r1, ; }")


def _mma_run(shape_types: str, a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray, d_n: int,
             wide: bool = False) -> np.ndarray:
    """Run one mma.sync with per-lane fragment registers given as [32, n] uint32 arrays."""
    na, nb, nc = a_regs.shape[1], b_regs.shape[1], c_regs.shape[1]
    rt = "b64" if wide else "b32"
    sz = 8 if wide else 4
    lines = [".reg .b32 %r<4>;", ".reg .b64 %rd<8>;", f".reg .{rt} %a<{na}>, %b<{nb}>, %c<{nc}>, %d<{d_n}>;",
             "mov.u32 %r1, %laneid;"]
    for nm, n, p in (("a", na, "pa"), ("b", nb, "pb"), ("c", nc, "pc")):
        lines += [f"ld.param.u64 %rd1, [{p}];", f"mul.wide.u32 %rd2, %r1, {n * sz};", "add.s64 %rd3, %rd1, %rd2;"]
        lines += [f"ld.global.{rt} %{nm}{i}, [%rd3+{i * sz}];" for i in range(n)]
    vec = lambda nm, n: "{" + ", ".join(f"%{nm}{i}" for i in range(n)) + "}"
    lines.append(f"mma.sync.aligned.{shape_types} {vec('d', d_n)}, {vec('a', na)}, {vec('b', nb)}, {vec('c', nc)};")
    lines += ["ld.param.u64 %rd1, [pd];", f"mul.wide.u32 %rd2, %r1, {d_n * sz};", "add.s64 %rd3, %rd1, %rd2;"]
    lines += [f"st.global.{rt} [%rd3+{i * sz}], %d{i};" for i in range(d_n)]
    lines.append("ret;")
    mem = DeviceMemory()
    dt = np.uint64 if wide else np.uint32
    pa, pb, pc = (mem.alloc_array(np.ascontiguousarray(x.astype(dt))) for x in (a_regs, b_regs, c_regs))
    pd = mem.alloc(32 * d_n * sz)
    run(kernel("\n".join(lines), params=".param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd"),
        (1, 1, 1), (32, 1, 1), [pa, pb, pc, pd], mem)
    return mem.read_array(pd, dt, 32 * d_n).reshape(32, d_n)


def test_mma_m16n8k32_s8_documented_layout():
    rng = np.random.default_rng(5)
    A = rng.integers(-128, 128, size=(16, 32)).astype(np.int8)
    B = rng.integers(-128, 128, size=(32, 8)).astype(np.int8)
    C = rng.integers(-1000, 1000, size=(16, 8)).astype(np.int32)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    # A: reg i holds 4 consecutive columns; rows g / g+8 alternate, columns +16 for regs 2, 3
    a = np.stack([A[g + 8 * (i % 2)][:, None, ...].reshape(32, 32)[np.arange(32)[:, None],
                  (4 * t + 16 * (i // 2))[:, None] + np.arange(4)] for i in range(4)], 1)
    a_regs = np.ascontiguousarray(a).view(np.uint32).reshape(32, 4)
    b = np.stack([B[(4 * t + 16 * i)[:, None] + np.arange(4), g[:, None]] for i in range(2)], 1)
    b_regs = np.ascontiguousarray(b).view(np.uint32).reshape(32, 2)
    c_regs = np.stack([C[g + 8 * (i // 2), 2 * t + i % 2] for i in range(4)], 1).view(np.uint32)
    d = _mma_run("m16n8k32.row.col.s32.s8.s8.s32", a_regs, b_regs, c_regs, 4).view(np.int32)
    D = np.zeros((16, 8), np.int32)
    for i in range(4):
        D[g + 8 * (i // 2), 2 * t + i % 2] = d[:, i]
    assert np.array_equal(D, A.astype(np.int32) @ B.astype(np.int32) + C)


def test_mma_m16n8k16_f16_f16acc_documented_layout():
    rng = np.random.default_rng(6)
    A = (rng.integers(-8, 9, size=(16, 16)) / 8).astype(np.float16)
    B = (rng.integers(-8, 9, size=(16, 8)) / 8).astype(np.float16)
    C = (rng.integers(-8, 9, size=(16, 8)) / 8).astype(np.float16)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    # A: a0,a1 (g, 2t..) a2,a3 (g+8, 2t..) a4,a5 (g, 2t+8..) a6,a7 (g+8, 2t+8..)
    a = np.stack([A[g + 8 * (i % 2)][np.arange(32)[:, None], (2 * t + 8 * (i // 2))[:, None] + np.arange(2)]
                  for i in range(4)], 1)
    a_regs = np.ascontiguousarray(a).view(np.uint32).reshape(32, 4)
    b = np.stack([B[(2 * t + 8 * i)[:, None] + np.arange(2), g[:, None]] for i in range(2)], 1)
    b_regs = np.ascontiguousarray(b).view(np.uint32).reshape(32, 2)
    c = np.stack([C[g + 8 * i][np.arange(32)[:, None], (2 * t)[:, None] + np.arange(2)] for i in range(2)], 1)
    c_regs = np.ascontiguousarray(c).view(np.uint32).reshape(32, 2)
    d = _mma_run("m16n8k16.row.col.f16.f16.f16.f16", a_regs, b_regs, c_regs, 2)
    dh = np.ascontiguousarray(d).view(np.float16).reshape(32, 2, 2)
    D = np.zeros((16, 8), np.float16)
    for i in range(2):
        D[g[:, None] + 8 * i, (2 * t)[:, None] + np.arange(2)] = dh[:, i]
    assert np.array_equal(D, (A.astype(np.float64) @ B + C).astype(np.float16))


def test_mma_m8n8k4_f64():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((8, 4))
    B = rng.standard_normal((4, 8))
    C = rng.standard_normal((8, 8))
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    a_regs = A[g, t][:, None].view(np.uint64)
    b_regs = B[t, g][:, None].view(np.uint64)
    c_regs = np.stack([C[g, 2 * t + i] for i in range(2)], 1).view(np.uint64)
    d = _mma_run("m8n8k4.row.col.f64.f64.f64.f64", a_regs, b_regs, c_regs, 2, wide=True).view(np.float64)
    D = np.zeros((8, 8))
    for i in range(2):
        D[g, 2 * t + i] = d[:, i]
    assert np.allclose(D, A @ B + C, rtol=1e-15, atol=1e-15)
