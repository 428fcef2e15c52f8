"""The emulator's shared-memory race check (`emulate_ptx(..., check_races=True)`, emu/races.py): lanes run in
lock step, so a missing barrier does not change an emulated result; the check reports it."""
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
