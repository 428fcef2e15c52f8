"""Layouts map every tile element to threads and registers and back."""
from __future__ import annotations

import itertools

import pytest

from tileiras_async.tilegpu.layout import WARP_SIZE, LinearLayout, blocked, mma_accumulator


def _all_coords(shape):
    return itertools.product(*(range(s) for s in shape))


@pytest.mark.parametrize("shape", [(128,), (1, 256), (64, 64), (16, 32), (2, 4), (8, 16, 32), (1,), (4096,)])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_blocked_round_trip(shape, num_warps):
    lay = blocked(shape, num_warps)
    assert lay.is_complete()
    for coord in _all_coords(shape):
        owners = lay.owners(coord)
        assert owners, coord
        for r, lane, w in owners:
            assert lay.apply(r, lane, w) == coord
    # a thread never holds the same element twice
    for lane in range(WARP_SIZE):
        for w in range(num_warps):
            held = [lay.apply(r, lane, w) for r in range(lay.num_registers)]
            assert len(held) == len(set(held))


def test_blocked_registers_hold_all_elements_exactly_once_when_tile_is_large():
    lay = blocked((64, 64), 4)
    assert lay.num_registers * WARP_SIZE * 4 == 64 * 64
    assert lay.contiguous_registers() == 4


def test_small_tile_replicates():
    lay = blocked((2, 4), 4)
    assert lay.num_registers == 4  # one vector of 4
    assert len(lay.owners((1, 3))) == WARP_SIZE * 4 // 2  # 64 threads hold each element


def test_split_into_thread_and_register_parts():
    lay = blocked((32, 64), 4)
    for r, lane, w in [(0, 0, 0), (3, 5, 1), (7, 31, 3)]:
        t = lay.thread_coord(lane, w)
        g = lay.register_coord(r)
        assert lay.apply(r, lane, w) == tuple(a ^ b for a, b in zip(t, g))


def test_mma_accumulator_matches_ptx_fragment():
    lay = mma_accumulator(16, 8, 1)
    for lane in range(32):
        group, tig = lane // 4, lane % 4
        assert lay.apply(0, lane, 0) == (group, 2 * tig)
        assert lay.apply(1, lane, 0) == (group, 2 * tig + 1)
        assert lay.apply(2, lane, 0) == (group + 8, 2 * tig)
        assert lay.apply(3, lane, 0) == (group + 8, 2 * tig + 1)


@pytest.mark.parametrize("m,n,warps", [(64, 64, 4), (128, 128, 4), (16, 8, 4), (32, 64, 8)])
def test_mma_accumulator_complete(m, n, warps):
    lay = mma_accumulator(m, n, warps)
    assert lay.is_complete()


def test_transpose_and_slice():
    lay = blocked((16, 32), 4)
    t = lay.transpose((1, 0))
    for r in range(lay.num_registers):
        a = lay.apply(r, 5, 2)
        assert t.apply(r, 5, 2) == (a[1], a[0])
    s = lay.slice(1)
    assert s.shape == (16,)
    assert s.apply(1, 3, 1) == (lay.apply(1, 3, 1)[0],)
    assert s.is_complete()


@pytest.mark.parametrize("shape, vector", [((16, 128), 4), ((8, 64), 4), ((64, 16), 4), ((32, 32), 8)])
def test_a_scattered_slice_shares_the_rows_out_among_the_reducing_lanes(shape, vector):
    """Each lane bit of the reduced dimension that a row register bit can move to does; the result still
    holds every row (now each in fewer threads), and a thread's rows halve per lane bit taken."""
    lay = blocked(shape, 4, vector)
    plain, spread = lay.slice(1), lay.slice_scattered(1)
    assert spread.shape == plain.shape and spread.bases[2] == plain.bases[2]
    assert spread.is_complete()
    reducing = [b for b, basis in enumerate(lay.bases[1]) if basis[1] and not basis[0]]
    row_regs = [b for b, basis in enumerate(plain.bases[0]) if any(basis)]
    moved = min(len(reducing), len(row_regs))
    assert sum(1 for b in spread.bases[0] if any(b)) == len(row_regs) - moved
    for lane in range(WARP_SIZE):
        rows = {spread.apply(r, lane, 0) for r in range(spread.num_registers)}
        assert len(rows) == 1 << (len(row_regs) - moved)
    if not moved:
        assert spread == plain


def test_invalid_layouts_are_rejected():
    with pytest.raises(ValueError):
        blocked((3, 4), 4)
    with pytest.raises(ValueError):
        LinearLayout((4,), ((), ((1,),), ()))


def test_sub_box_selects_the_registers_that_hold_it():
    """A 16x16x2 tile with its last dimension in a register bit: either 16x16x1 half is a register selection
    (the same lanes and warps); a half along a lane-held dimension is not."""
    lay = blocked((16, 16, 2), 4, 2)
    assert lay.bases[0][0] == (0, 0, 1)
    for k in (0, 1):
        sub, regs = lay.sub_box((16, 16, 1), (0, 0, k))
        assert sub.shape == (16, 16, 1) and sub.bases[1:] == lay.bases[1:]
        assert len(regs) == sub.num_registers
        for r, src in enumerate(regs):
            assert lay.register_coord(src) == tuple(c + o for c, o in zip(sub.register_coord(r), (0, 0, k)))
    assert lay.sub_box((16, 8, 2), (0, 8, 0)) is None     # columns 8.. live in other lanes
