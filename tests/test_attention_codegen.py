"""What the flash attention kernels as cuTile launches them (examples/suite/launch: D=32, 32x32 tiles, 4 warps,
mma.sync) execute per loop iteration, and the code generation helpers behind it (issue 30: executed
instructions at most NVIDIA's):

* the row statistics (running max and sum, 32x1 tiles laid out as a slice of the accumulator) are carried
  through the loop once per distinct row a thread holds (2), not once per register copy of the slice (8):
  their exp2 per iteration are the 8 of P plus 2;
* K, read through a transposing view (order=(0, 1, 3, 2)), is read in vectors along its unit stride (no
  element-wise 16-bit global loads), which also lets its staging for the mma store vectors; V is staged in
  the rows of N it is read in, with vector stores too (not transposed element by element);
* the fragments of both mmas are read with ldmatrix (the 32x32x32 plans' staging allows it): per iteration
  2 x (2 for A + 2 for B) ldmatrix.x4, V's (staged in rows of N, as it is read) with .trans, no 32-bit
  shared loads of single words;
* per-thread offsets add one field of thread-id bits at a time.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.codegen.lower_wgmma import thread_bit_fields
from tileiras_async.driver import module_ptx
from tileiras_async.targets import target
from tileiras_async.tilegpu.layout import WARP_SIZE

LAUNCH = Path(__file__).resolve().parent.parent / "examples" / "suite" / "launch"
KERNELS = ("flash_attention_causal_gqa_f16", "flash_attention_ragged_f16")
_PTX: dict[tuple[str, str], str] = {}


def _ptx(kernel: str, gpu: str) -> str:
    if (kernel, gpu) not in _PTX:
        module = read_module((LAUNCH / f"{kernel}.v13.4.tileirbc").read_bytes())
        _PTX[kernel, gpu] = module_ptx(module, target(gpu), 3)
    return _PTX[kernel, gpu]


def _loop_bodies(ptx: str) -> list[str]:
    """The text of every loop: from a label to the branch back to it."""
    bodies = []
    for m in re.finditer(r"^(\$L__BB\d+_\d+):$", ptx, re.M):
        back = re.search(rf"bra(?:\.uni)?\s+{re.escape(m.group(1))};", ptx[m.end():])
        if back:
            bodies.append(ptx[m.end():m.end() + back.start()])
    return [b for b in bodies if "mma.sync" in b]


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_row_statistics_are_carried_once_per_row(kernel, gpu):
    bodies = _loop_bodies(_ptx(kernel, gpu))
    assert bodies, "no mma loop found"
    for body in bodies:
        # P = exp2 of the 8 scores a thread holds, alpha = exp2 of its 2 rows' max change
        assert body.count("ex2.approx") == 8 + 2, body.count("ex2.approx")


@pytest.mark.parametrize("kernel", KERNELS)
def test_k_is_read_in_vectors_and_staged_in_vectors(kernel):
    for body in _loop_bodies(_ptx(kernel, "sm_90")):
        assert "ld.global.u16" not in body and "ld.global.b16" not in body
        assert body.count("ld.global.v2.b32") == 2 + 2     # K and V: two 4-element vectors per thread
        # both staged with two 8-byte stores: K along its rows of K, V in rows of N (nothing element-wise)
        assert body.count("st.shared.v2.b32") == 2 + 2 and "st.shared.b16" not in body


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_fragments_are_read_with_ldmatrix(kernel, gpu):
    for body in _loop_bodies(_ptx(kernel, gpu)):
        # A of both mmas (Q, P) and B of the first (K, staged transposed): .x4; V in rows of N: .x4.trans
        assert body.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 + 2 + 2
        assert body.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 2
        ldmatrix = body.count("ldmatrix.sync")
        # what else reads shared memory: the row max's and sum's partials across the two warps of a row
        assert body.count("ld.shared") - ldmatrix <= 2 * 3


def test_bit_fields_group_doubling_contributions():
    contribs = [8, 16, 32, 80, 160]             # lane bits of an operand's staging offset
    assert thread_bit_fields(contribs, True) == [(0, 3, 8), (3, 2, 80)]
    assert thread_bit_fields(contribs, False) == [(b, 1, c) for b, c in enumerate(contribs)]
    assert thread_bit_fields([0, 4, 8, 0, 2], True) == [(1, 2, 4), (4, 1, 2)]
    # the fields add up to what the bits do, for every lane
    for contribs in ([8, 16, 32, 80, 160], [2, 4, 640, 1280, 0], [1, 3, 6, 12, 0]):
        for lane in range(WARP_SIZE):
            per_bit = sum(c for b, c in enumerate(contribs) if lane >> b & 1)
            fields = sum((lane >> b & (1 << w) - 1) * c for b, w, c in thread_bit_fields(contribs, True))
            assert fields == per_bit
