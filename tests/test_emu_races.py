"""The emulator's race check (`emulate_ptx(..., check_races=True)`, emu/races.py): lanes run in lock step, so a
missing barrier or mbarrier wait does not change an emulated result; the check (happens-before: barriers join
their participants, an mbarrier wait orders after its phase's arrivals) reports it."""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu import DeviceMemory, emulate_ptx
from tileiras_async.emu.races import RaceError

# Every thread t stores t to word t of a buffer, then (BETWEEN) reads word t ^ PARTNER and writes it out;
# AFTER runs last (a second store to the buffer).
HEAD = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
"""
KERNEL = HEAD + """  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  .shared .align 4 .b8 buf[512];
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, buf;
  add.u32 %r4, %r3, %r2;
  st.shared.u32 [%r4], %r1;
  BETWEEN
  xor.b32 %r5, %r2, PARTNER;
  add.u32 %r6, %r3, %r5;
  ld.shared.u32 %r7, [%r6];
  AFTER
  ld.param.u64 %rd1, [out];
  cvt.u64.u32 %rd2, %r2;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
  ret;
}
"""


def run(between: str, partner: int, after: str = "", threads: int = 64) -> np.ndarray:
    ptx = KERNEL.replace("BETWEEN", between).replace("PARTNER", str(4 * partner)).replace("AFTER", after)
    mem = DeviceMemory()
    out = mem.alloc(4 * threads)
    emulate_ptx(ptx, "k", (2, 1, 1), (threads, 1, 1), [out], mem, check_races=True)
    return mem.read_array(out, np.uint32, threads)


def test_a_read_of_another_warps_store_needs_a_barrier():
    assert (run("bar.sync 0;", 32) == np.arange(64) ^ 32).all()
    with pytest.raises(RaceError, match=r"read at shared address \d+ by thread 0 \(warp 0\) after thread 32's") as e:
        run("", 32)
    assert e.value.text.startswith("ld.shared.u32 %r7") and e.value.thread == (0, 0, 0)


def test_lanes_of_one_warp_need_a_warp_barrier():
    """With independent thread scheduling a warp's lanes are not in lock step: __syncwarp orders them."""
    assert (run("bar.warp.sync -1;", 1) == np.arange(64) ^ 1).all()
    with pytest.raises(RaceError, match=r"by thread 0 \(warp 0\) after thread 1's \(warp 0\)"):
        run("", 1)


def test_a_store_over_what_another_warp_read_needs_a_barrier():
    second = "st.shared.u32 [%r4], %r7;"      # thread t writes word t again, which thread t ^ 32 read
    assert (run("bar.sync 0;", 32, "bar.sync 0;\n  " + second) == np.arange(64) ^ 32).all()
    with pytest.raises(RaceError, match=r"write after a read .* after thread \d+'s"):
        run("bar.sync 0;", 32, second)


def test_barriers_of_one_cta_do_not_order_another_ctas_accesses_and_checking_changes_nothing():
    """Two CTAs in one batch: each CTA's own words only; the results equal an unchecked run."""
    ptx = KERNEL.replace("BETWEEN", "bar.sync 0;").replace("PARTNER", "128").replace("AFTER", "")
    outs = []
    for check in (False, True):
        mem = DeviceMemory()
        out = mem.alloc(4 * 64)
        emulate_ptx(ptx, "k", (2, 1, 1), (64, 1, 1), [out], mem, check_races=check)
        outs.append(mem.read_array(out, np.uint32, 64))
    assert (outs[0] == outs[1]).all()


def test_generic_addresses_into_shared_memory_are_checked_too():
    generic = KERNEL.replace("mov.u32 %r3, buf;", "mov.u32 %r3, buf;\n  .reg .b64 %g<4>;").replace(
        "ld.shared.u32 %r7, [%r6];", "cvt.u64.u32 %g1, %r6;\n  cvta.shared.u64 %g2, %g1;\n  ld.u32 %r7, [%g2];")
    mem = DeviceMemory()
    out = mem.alloc(4 * 64)
    with pytest.raises(RaceError, match="read at shared address"):   # PARTNER in bytes: word t ^ 32
        emulate_ptx(generic.replace("BETWEEN", "").replace("PARTNER", "128").replace("AFTER", ""), "k",
                    (1, 1, 1), (64, 1, 1), [out], mem, check_races=True)


DUMP = HEAD + """  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  .shared .align 4 .b8 buf[16];
  mov.u32 %r1, %tid.x;
  mov.u32 %r3, buf;
  setp.lt.u32 %p1, %r1, 32;
  @%p1 bra $FIRST;
  st.shared.u32 [%r3], %r1;
  bra.uni $DONE;
$FIRST:
  st.shared.u32 [%r3], %r1;
$DONE:
  bar.sync 0;
  READ
  ret;
}
"""


def test_unordered_writes_of_different_values_race_only_when_read():
    """Each warp stores its threads' ids to one word (a branch-free dump of values nobody needs): harmless
    until someone reads the word, whose value then depends on which warp wrote last."""
    read = """ld.shared.u32 %r4, [%r3];
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r4;"""
    mem = DeviceMemory()
    out = mem.alloc(4)
    emulate_ptx(DUMP.replace("READ", ""), "k", (1, 1, 1), (64, 1, 1), [out], mem, check_races=True)
    with pytest.raises(RaceError, match=r"which threads \d+ and \d+ wrote with no barrier between"):
        emulate_ptx(DUMP.replace("READ", read), "k", (1, 1, 1), (64, 1, 1), [out], mem, check_races=True)


# Happens-before: an mbarrier wait orders the waiter after the arrivals of the phase it waited for, no more.
# Warp 1 (the producer) stores word t - 32 and arrives as PRODUCER says; warp 0 waits as CONSUMER says and reads
# the word of its lane.
MBAR = HEAD.replace(".target sm_80", ".target sm_90") + """  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  .shared .align 8 .b64 full;
  .shared .align 8 .b64 early;
  .shared .align 4 .b8 buf[128];
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [full], COUNT;
  @%p1 mbarrier.init.shared.b64 [early], 32;
  bar.sync 0;
  mov.u32 %r3, buf;
  and.b32 %r2, %r1, 31;
  shl.b32 %r2, %r2, 2;
  add.u32 %r4, %r3, %r2;
  setp.lt.u32 %p2, %r1, 32;
  @%p2 bra $READER;
  PRODUCER
  ret;
$READER:
  CONSUMER
  ld.shared.u32 %r7, [%r4];
  ld.param.u64 %rd1, [out];
  cvt.u64.u32 %rd2, %r2;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
  ret;
}
"""
STORE = "st.shared.u32 [%r4], %r1;"
HALF = "setp.lt.u32 %p3, %r1, 48;\n  @%p3 "    # the first half of the producer warp only


def arrive(bar: str) -> str:
    return f"mbarrier.arrive.shared.b64 %rd5, [{bar}];"


def wait(bar: str, parity: int) -> str:
    return f"""$W{bar}{parity}:
  mbarrier.try_wait.parity.shared.b64 %p3, [{bar}], {parity};
  @!%p3 bra $W{bar}{parity};"""


def run_mbar(producer: list[str], consumer: list[str], count: int = 32) -> np.ndarray:
    ptx = MBAR.replace("COUNT", str(count)).replace("PRODUCER", "\n  ".join(producer)).replace(
        "CONSUMER", "\n  ".join(consumer))
    mem = DeviceMemory()
    out = mem.alloc(4 * 32)
    emulate_ptx(ptx, "k", (1, 1, 1), (64, 1, 1), [out], mem, check_races=True)
    return mem.read_array(out, np.uint32, 32)


def test_a_wait_orders_after_the_arrivals_of_its_own_mbarrier_only():
    """The producer arrives on `early` before its stores and on `full` after them: waiting for `full` orders
    the consumer's reads after the stores, waiting for `early` (which completed too) does not."""
    producer = [arrive("early"), STORE, arrive("full")]
    assert (run_mbar(producer, [wait("full", 0)]) == np.arange(32, 64)).all()
    with pytest.raises(RaceError, match=r"read at shared address \d+ by thread 0 \(warp 0\) after thread 32's "
                                        r"\(warp 1\)"):
        run_mbar(producer, [wait("early", 0)])


def test_a_phase_orders_only_the_arrivals_that_completed_it():
    """Two phases of `full`: the producer arrives, stores, and arrives again.  Waiting for the second phase (all
    arrived) orders the reads; waiting for the first does not, though half the warp arrived again since."""
    assert (run_mbar([arrive("full"), STORE, arrive("full")], [wait("full", 1)]) == np.arange(32, 64)).all()
    with pytest.raises(RaceError, match=r"read at shared address \d+ by thread 0 \(warp 0\) after thread 32's"):
        run_mbar([arrive("full"), STORE, HALF + arrive("full")], [wait("full", 0)])


def test_a_phase_needs_every_arrival_it_counts():
    """With a count of 32 the phase completes when the whole producer warp has arrived: a consumer that waits
    for it is ordered after every producer's store; an mbarrier counting fewer (16: the first half's arrivals
    complete it) leaves the second half's stores unordered."""
    assert (run_mbar([STORE, arrive("full")], [wait("full", 0)]) == np.arange(32, 64)).all()
    with pytest.raises(RaceError, match=r"after thread (4[89]|5\d|6[0-3])'s"):
        run_mbar([STORE, HALF + arrive("full")], [wait("full", 0)], count=16)


# The warps meet at the barrier of ID: named barrier 1 for warps 0-1, 2 for warps 2-3.
ID = "shr.u32 %r8, %r1, 6;\n  add.u32 %r8, %r8, 1;\n  "


def run_named(sync: str, partner: int) -> np.ndarray:
    return run(ID + sync, partner, threads=128)


def test_a_barrier_joins_only_its_own_participants():
    """Warps 0-1 meet at named barrier 1 and warps 2-3 at barrier 2, both complete at once: each pair is
    ordered within itself, not with the other pair (only a barrier of all four orders a read across)."""
    named = "bar.sync %r8, 64;"
    assert (run_named(named, 32) == np.arange(128) ^ 32).all()
    assert (run_named("bar.sync 0;", 64) == np.arange(128) ^ 64).all()
    with pytest.raises(RaceError, match=r"read at shared address \d+ by thread 0 \(warp 0\) after thread 64's "
                                        r"\(warp 2\)"):
        run_named(named, 64)


def test_barriers_order_transitively():
    """Warps 0-1 meet at barrier 1, then warps 1-2 at barrier 3 (warp 1 carries what it saw), then every warp:
    a read of warp 0's word by warp 2 is ordered through warp 1 without the last barrier too."""
    chain = """bar.sync %r8, 64;
  shr.u32 %r9, %r1, 5;
  setp.eq.u32 %p1, %r9, 0;
  setp.eq.u32 %p2, %r9, 3;
  or.pred %p1, %p1, %p2;
  @%p1 bra $OUT;
  bar.sync 3, 64;
$OUT:"""
    src = KERNEL.replace(".reg .b64 %rd<4>;", ".reg .b64 %rd<4>;\n  .reg .pred %p<3>;").replace("AFTER", "")
    mem = DeviceMemory()
    out = mem.alloc(4 * 128)
    # thread t of warp 2 (64..95) reads word t ^ 64 (warp 0's); warp 3 reads warp 1's (ordered by barrier 2 only
    # with warp 2: its read of warp 1's word races) -- so read t ^ 64 only in warp 2, own word elsewhere
    ptx = src.replace("BETWEEN", ID + chain).replace("xor.b32 %r5, %r2, PARTNER;", """shr.u32 %r9, %r1, 5;
  setp.eq.u32 %p1, %r9, 2;
  selp.b32 %r10, 256, 0, %p1;
  xor.b32 %r5, %r2, %r10;""")
    emulate_ptx(ptx, "k", (1, 1, 1), (128, 1, 1), [out], mem, check_races=True)
    got = mem.read_array(out, np.uint32, 128)
    want = np.arange(128)
    want[64:96] ^= 64
    assert (got == want).all()
    with pytest.raises(RaceError, match=r"by thread \d+ \(warp 2\) after thread \d+'s \(warp 0\)"):
        emulate_ptx(ptx.replace("  bar.sync %r8, 64;\n", "  ", 1), "k", (1, 1, 1), (128, 1, 1), [out], mem,
                    check_races=True)


# A bulk copy of 64 bytes into buf issued by thread 0, on mbarrier `full`; the threads WAITING names wait for it,
# then threads below READERS read word t of buf.
BULK = HEAD.replace(".target sm_80", ".target sm_90") + """  .reg .b32 %r<12>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  .shared .align 8 .b64 full;
  .shared .align 16 .b8 buf[64];
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [full], 1;
  bar.sync 0;
  mov.u32 %r3, buf;
  mov.u32 %r5, full;
  ld.param.u64 %rd1, [out];
  @!%p1 bra $ISSUED;
  mbarrier.arrive.expect_tx.shared.b64 %rd5, [full], 64;
  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 64, [%r5];
$ISSUED:
  WAITING
  @!%p2 bra $READ;
$WAIT:
  mbarrier.try_wait.parity.shared.b64 %p3, [full], 0;
  @!%p3 bra $WAIT;
$READ:
  setp.lt.u32 %p2, %r1, READERS;
  @!%p2 bra $DONE;
  shl.b32 %r2, %r1, 2;
  add.u32 %r4, %r3, %r2;
  ld.shared.u32 %r7, [%r4];
  cvt.u64.u32 %rd2, %r2;
  add.u64 %rd3, %rd1, %rd2;
  add.u64 %rd3, %rd3, 64;
  st.global.u32 [%rd3], %r7;
$DONE:
  ret;
}
"""


def run_bulk(waiting: str, readers: int) -> np.ndarray:
    mem = DeviceMemory()
    out = mem.alloc(128)
    mem.write(out, np.arange(16, dtype=np.uint32) + 100)
    emulate_ptx(BULK.replace("WAITING", waiting).replace("READERS", str(readers)), "k", (1, 1, 1), (64, 1, 1),
                [out], mem, check_races=True)
    return mem.read_array(out, np.uint32, 32)[16:16 + readers]


def test_a_bulk_copy_lands_as_a_unit_of_its_own():
    """The copy's landing is ordered for the threads that waited on its mbarrier, the issuing thread included
    only if it waited too: thread 0 reading the buffer after warp 1's wait (which landed it) races."""
    assert (run_bulk("setp.lt.u32 %p2, %r1, 64;", 16) == np.arange(16) + 100).all()
    with pytest.raises(RaceError, match=r"read at shared address \d+ by thread 0 \(warp 0\) after a bulk copy's "
                                        r"\(issued by thread 0, warp 0\)"):
        run_bulk("setp.ge.u32 %p2, %r1, 32;", 1)
