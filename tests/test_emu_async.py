"""mbarrier phases and transaction counts, bulk asynchronous copies, and warps that make independent
progress through mbarrier waits (warp-specialised producer/consumer code), in the PTX emulator.
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import BarrierError, DeviceMemory, emulate_ptx

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"


def run(ptx, nthreads, nwords, *args, grid=1):
    mem = DeviceMemory()
    out = mem.alloc(4 * nwords * grid)
    params = [out] + [mem.alloc_array(a) if isinstance(a, np.ndarray) else a for a in args]
    emulate_ptx(ptx, "k", (grid, 1, 1), (nthreads, 1, 1), params, mem)
    return mem.read_array(out, np.uint32, nwords * grid)


def one_thread(body: str, params: str = "") -> str:
    return f"""{HEAD}
.visible .entry k(.param .u64 out{params})
{{
    .reg .pred %p<16>;
    .reg .b32 %r<48>;
    .reg .b64 %rd<16>;
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [out];
{body}
    ret;
}}
"""


def _flags(*preds):
    return "\n".join(f"    selp.u32 %r{20 + i}, 1, 0, {p};\n    st.global.b32 [%rd1+{4 * i}], %r{20 + i};"
                     for i, p in enumerate(preds))


def test_phases_and_transaction_counts():
    body = """
    mbarrier.init.shared.b64 [bar], 2;
    mbarrier.arrive.expect_tx.shared.b64 %rd2, [bar], 64;   // 1 arrival, 64 bytes announced
    mbarrier.test_wait.parity.shared.b64 %p0, [bar], 0;      // phase 0 open: false
    mbarrier.complete_tx.shared.b64 [bar], 32;
    mbarrier.arrive.shared.b64 %rd3, [bar];                 // all arrived, 32 bytes still missing
    mbarrier.test_wait.parity.shared.b64 %p1, [bar], 0;      // false
    mbarrier.test_wait.shared.b64 %p2, [bar], %rd2;          // false: the phase of state %rd2 is open
    mbarrier.complete_tx.shared.b64 [bar], 32;               // phase 0 completes
    mbarrier.test_wait.parity.shared.b64 %p3, [bar], 0;      // true
    mbarrier.test_wait.shared.b64 %p4, [bar], %rd2;          // true
    mbarrier.test_wait.parity.shared.b64 %p5, [bar], 1;      // phase 1 open: false
    mbarrier.pending_count.b64 %r10, %rd2;                   // pending count after that arrival: 1
    st.global.b32 [%rd1+64], %r10;
    mbarrier.arrive.shared.b64 %rd4, [bar], 2;               // two arrivals at once complete phase 1
    mbarrier.test_wait.parity.shared.b64 %p6, [bar], 1;      // true
    mbarrier.test_wait.parity.shared.b64 %p7, [bar], 0;      // phase 2 (parity 0) open: false
    mbarrier.arrive_drop.shared.b64 %rd5, [bar];             // phase 2 needs 1 more; later phases 1
    mbarrier.test_wait.parity.shared.b64 %p8, [bar], 0;      // false
    mbarrier.arrive.shared.b64 %rd6, [bar];                  // completes phase 2
    mbarrier.test_wait.parity.shared.b64 %p9, [bar], 0;      // true
    mbarrier.arrive.shared.b64 %rd7, [bar];                  // one arrival completes phase 3 now
    mbarrier.test_wait.parity.shared.b64 %p10, [bar], 1;     // true
    mbarrier.expect_tx.shared.b64 [bar], 16;                 // phase 4 now also waits for 16 bytes
    mbarrier.arrive.shared.b64 %rd8, [bar];
    mbarrier.test_wait.parity.shared.b64 %p11, [bar], 0;     // false
    mbarrier.complete_tx.shared.b64 [bar], 16;
    mbarrier.test_wait.parity.shared.b64 %p12, [bar], 0;     // true
""" + _flags(*(f"%p{i}" for i in range(13)))
    out = run(one_thread(body), 1, 17)
    assert out[:13].tolist() == [0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1]
    assert out[16] == 1


@pytest.mark.parametrize("body,msg", [
    ("mbarrier.init.shared.b64 [bar], 1;\n    mbarrier.expect_tx.shared.b64 [bar], 16;\n"
     "    mbarrier.arrive.shared.b64 %rd2, [bar];\n    mbarrier.arrive.shared.b64 %rd3, [bar];", "over-arrival"),
    ("mbarrier.init.shared.b64 [bar], 1;\n    mbarrier.arrive.noComplete.shared.b64 %rd2, [bar];", "noComplete"),
    ("mbarrier.arrive.shared.b64 %rd2, [bar];", "uninitialised"),
    ("mbarrier.init.shared.b64 [bar], 1;\n$W:\n    mbarrier.try_wait.parity.shared.b64 %p1, [bar], 0;\n"
     "    @!%p1 bra $W;", "no other thread can arrive"),
])
def test_mbarrier_errors(body, msg):
    with pytest.raises(BarrierError, match=msg):
        run(one_thread(body), 1, 1)


# three warps: warp 0 produces 4 stages into a 2-slot ring (full/empty mbarriers), warp 1 consumes and
# sums them; then both meet at named barrier 1 (64 threads) and warp 1 arrives on `done`, which warp 2
# has been spinning on all along -- the barrier must release while warp 2 spins.
PIPE = HEAD + """
.visible .entry k(.param .u64 out)
.reqntid 96
{
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b32 ring[64];
    .shared .align 8 .b64 full[2];
    .shared .align 8 .b64 empty[2];
    .shared .align 8 .b64 done;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    and.b32 %r3, %r1, 31;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $INIT_DONE;
    mbarrier.init.shared.b64 [full], 32;
    mbarrier.init.shared.b64 [full+8], 32;
    mbarrier.init.shared.b64 [empty], 32;
    mbarrier.init.shared.b64 [empty+8], 32;
    mbarrier.init.shared.b64 [done], 32;
$INIT_DONE:
    bar.sync 0;
    ld.param.u64 %rd1, [out];
    mov.u32 %r22, %ctaid.x;
    mul.wide.u32 %rd7, %r22, 256;
    add.s64 %rd1, %rd1, %rd7;
    setp.eq.u32 %p2, %r2, 2;
    @%p2 bra $WATCHER;
    mov.u32 %r4, 0;                       // stage k
    mov.u32 %r5, 0;                       // sum (consumer)
$LOOP:
    and.b32 %r6, %r4, 1;                  // slot
    shr.u32 %r7, %r4, 1;
    and.b32 %r8, %r7, 1;                  // phase parity of this slot's use
    mul.lo.u32 %r9, %r6, 8;
    mov.u32 %r10, full;
    add.u32 %r11, %r10, %r9;
    mov.u32 %r12, empty;
    add.u32 %r13, %r12, %r9;
    mul.lo.u32 %r14, %r6, 128;
    mov.u32 %r15, ring;
    add.u32 %r16, %r15, %r14;
    shl.b32 %r17, %r3, 2;
    add.u32 %r18, %r16, %r17;             // &ring[slot][lane]
    setp.eq.u32 %p3, %r2, 1;
    @%p3 bra $CONSUME;
    setp.lt.u32 %p4, %r4, 2;              // the first use of each slot needs no empty phase
    @%p4 bra $PRODUCE;
    xor.b32 %r19, %r8, 1;
$WAIT_EMPTY:
    mbarrier.try_wait.parity.shared.b64 %p5, [%r13], %r19;
    @!%p5 bra $WAIT_EMPTY;
$PRODUCE:
    mad.lo.u32 %r20, %r4, 100, %r3;
    st.shared.b32 [%r18], %r20;
    mbarrier.arrive.shared.b64 %rd2, [%r11];
    bra.uni $NEXT;
$CONSUME:
    mbarrier.try_wait.parity.shared.b64 %p6, [%r11], %r8;
    @!%p6 bra $CONSUME;
    ld.shared.b32 %r21, [%r18];
    add.u32 %r5, %r5, %r21;
    mbarrier.arrive.shared.b64 %rd3, [%r13];
$NEXT:
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p7, %r4, 4;
    @%p7 bra $LOOP;
    barrier.sync 1, 64;
    @!%p3 bra $END;
    mul.wide.u32 %rd4, %r3, 4;
    add.s64 %rd5, %rd1, %rd4;
    st.global.b32 [%rd5], %r5;
    mbarrier.arrive.shared.b64 %rd6, [done];
    bra.uni $END;
$WATCHER:
    mbarrier.try_wait.parity.shared.b64 %p1, [done], 0;
    @!%p1 bra $WATCHER;
    mul.wide.u32 %rd4, %r3, 4;
    add.s64 %rd5, %rd1, %rd4;
    st.global.b32 [%rd5+128], %r3;
$END:
    ret;
}
"""


def test_warp_specialised_pipeline_with_named_barrier_and_spinning_watcher():
    out = run(PIPE, 96, 64, grid=3)
    lane = np.arange(32)
    for c in range(3):
        assert out[64 * c:64 * c + 32].tolist() == (4 * lane + 600).tolist()    # sum over k of 100k + lane
        assert out[64 * c + 32:64 * c + 64].tolist() == lane.tolist()


def test_a_wait_no_thread_can_satisfy_is_a_deadlock():
    # warp 0 waits for warp 1's arrival, which comes only after warp 1's own wait for warp 0
    ptx = HEAD + """
.visible .entry k(.param .u64 out)
.reqntid 64
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b64 b[2];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $GO;
    mbarrier.init.shared.b64 [b], 32;
    mbarrier.init.shared.b64 [b+8], 32;
$GO:
    bar.sync 0;
    shr.u32 %r2, %r1, 5;
    mul.lo.u32 %r3, %r2, 8;
    mov.u32 %r4, b;
    add.u32 %r5, %r4, %r3;                // my barrier
    xor.b32 %r6, %r3, 8;
    add.u32 %r7, %r4, %r6;                // the other warp's
$W:
    mbarrier.try_wait.parity.shared.b64 %p2, [%r5], 0;
    @!%p2 bra $W;
    mbarrier.arrive.shared.b64 %rd1, [%r7];
    ret;
}
"""
    with pytest.raises(BarrierError, match="can never complete"):
        run(ptx, 64, 1)
    # the same with the warps waiting at different places
    ptx = ptx.replace("$W:", "setp.eq.u32 %p3, %r2, 0;\n    @%p3 bra $W;\n$W1:\n"
                      "    mbarrier.try_wait.parity.shared.b64 %p2, [%r5], 0;\n    @!%p2 bra $W1;\n"
                      "    mbarrier.arrive.shared.b64 %rd1, [%r7];\n    ret;\n$W:")
    with pytest.raises(BarrierError, match="every thread that could arrive is waiting"):
        run(ptx, 64, 1)


# ---------------------------------------------------------------------------- bulk copies

BULK = HEAD + """
.visible .entry k(.param .u64 out, .param .u64 src)
.reqntid 32
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .shared .align 128 .b32 buf[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    mul.wide.u32 %rd3, %r1, 4;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $ISSUED;
    mbarrier.init.shared.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared.b64 %rd4, [bar], 192;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf+16], [%rd2], 192, [bar];
$ISSUED:
    bar.sync 0;
    mov.u32 %r2, buf;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    ld.shared.b32 %r5, [%r4+16];          // before the wait: not there yet
    add.s64 %rd5, %rd1, %rd3;
    st.global.b32 [%rd5], %r5;
$W:
    mbarrier.try_wait.parity.shared.b64 %p2, [bar], 0;
    @!%p2 bra $W;
    ld.shared.b32 %r6, [%r4+16];
    st.global.b32 [%rd5+128], %r6;
    add.u32 %r7, %r6, 1000;
    st.shared.b32 [%r4+128], %r7;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    @%p1 bra $END;
    add.s64 %rd6, %rd1, 256;
    add.u32 %r8, %r2, 128;
    cp.async.bulk.global.shared::cta.bulk_group [%rd6], [%r8], 128;
    cp.async.bulk.commit_group;
    st.shared.b32 [%r2+128], 7;           // after wait_group.read only: this store lands first
    cp.async.bulk.wait_group.read 0;
$END:
    ret;
}
"""


def test_bulk_copies_land_when_waited_for():
    src = np.arange(100, 148, dtype=np.uint32)
    out = run(BULK, 32, 96, src)
    assert (out[:32] == 0).all()                                    # read before the mbarrier wait
    assert out[32:64].tolist() == src[:32].tolist()
    assert out[64:96].tolist() == [7] + (src[1:32] + 1000).tolist()
