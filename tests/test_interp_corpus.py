"""Every kernel of the public corpus, at every bytecode version, run by the interpreter and compared
with the numpy references of the corpus (refs.py) within the listed tolerances."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    CORPUS,
    PUBLIC,
    corpus_case,
    manifest_entries,
    requires_corpus,
)

from tileiras_async.interp import InvalidModule, UndefinedBehavior, run_kernel

ENTRIES = manifest_entries()


def _rejected_by_nvidia(e) -> str | None:
    for target, res in (e.get("tileiras") or {}).items():
        if res.get("rc", 0) != 0:
            first = (res.get("stderr") or "").strip().splitlines()
            return f"NVIDIA tileiras rejects it for {target} (rc {res['rc']}): {first[-1] if first else ''}"
    return None


@requires_corpus
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"].rsplit("/", 1)[-1] for e in ENTRIES])
def test_corpus_kernel(entry, refs):
    cid = entry["id"]
    inputs, original, grid = corpus_case(refs, cid)
    assert list(grid) == list(entry["grid"])
    path = CORPUS / entry["file"]
    rejected = _rejected_by_nvidia(entry)
    if rejected:
        with pytest.raises(InvalidModule) as ei:
            run_kernel(path, grid, list(inputs.values()))
        pytest.skip(f"{rejected}; our verifier rejects it too: {ei.value}")
    report = run_kernel(path, grid, list(inputs.values()))
    assert report.counters["tile_blocks"] == int(np.prod(grid))
    problems = refs.check(cid, original, inputs)
    assert not problems, problems


@requires_corpus
def test_every_kernel_and_version_is_covered():
    ids = {e["id"] for e in ENTRIES}
    versions = {e["bytecode_version"] for e in ENTRIES}
    assert len(ids) == 56 and versions == {"13.1", "13.2", "13.3", "13.4"}


@requires_corpus
def test_fault_in_a_corpus_kernel_names_op_location_and_block(refs):
    cid = "layernorm_f16_128"
    inputs = refs.make_inputs(cid)
    gx = refs.grid(cid, inputs)[0]
    with pytest.raises(UndefinedBehavior) as ei:
        run_kernel(PUBLIC / f"{cid}.v13.4.tileirbc", (gx + 1,), list(inputs.values()))
    msg = str(ei.value)
    assert msg.startswith("'load_view_tko' at kernels_public.py:")
    assert f"in tile block ({gx}, 0, 0)" in msg and "outside the index space" in msg


@requires_corpus
def test_strided_inputs_match_contiguous_ones(refs):
    """The same kernel on non-contiguous views (real strides passed by the calling convention)."""
    cid = "transpose2d_f32_32x32"
    inputs = refs.make_inputs(cid)
    A = inputs["A"]
    big = np.zeros((A.shape[0] * 2, A.shape[1] * 3), np.float32)
    big[::2, ::3] = A
    Bbig = np.full((inputs["B"].shape[0], inputs["B"].shape[1] * 2), -1.0, np.float32)
    Bv = Bbig[:, 1::2]
    run_kernel(PUBLIC / f"{cid}.v13.4.tileirbc", refs.grid(cid, inputs), [big[::2, ::3], Bv])
    assert (Bv == A.T).all() and (Bbig[:, 0::2] == -1).all()
