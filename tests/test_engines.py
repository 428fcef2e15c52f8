"""run_kernel and `tileiras-async run` with every engine: interpret, emulate (our PTX) and both compared."""
from __future__ import annotations

import numpy as np
import pytest

import tileiras_async
from tileiras_async import engines
from tileiras_async.interp.runner import RunReport

from conftest import PUBLIC, corpus_case, requires_corpus


@requires_corpus
@pytest.mark.parametrize("engine", ["interpret", "emulate", "both"])
@pytest.mark.parametrize("cid", ["softmax_rows_f16_512", "matmul_f16_f32acc_64x64x32", "transpose2d_f32_32x32", "row_bcast_f16_32x32"])
def test_engines_match_reference(refs, cid, engine):
    path = PUBLIC / f"{cid}.v13.4.tileirbc"
    if not path.exists():
        pytest.skip(f"{cid} not in this corpus")
    inputs, _, grid = corpus_case(refs, cid)
    args = list(inputs.values())
    report = tileiras_async.run_kernel(str(path), grid, args, engine=engine)
    assert report.engine == engine
    outputs = dict(zip(inputs.keys(), args))
    assert refs.check(cid, inputs, outputs) == []


@requires_corpus
def test_both_reports_the_first_mismatch(refs, monkeypatch):
    cid = "softmax_rows_f16_512"
    path = PUBLIC / f"{cid}.v13.4.tileirbc"
    inputs, _, grid = corpus_case(refs, cid)
    real = engines._interpret

    def corrupted(module, grid, args, **kw):  # an interpreter that gets one element wrong
        report = real(module, grid, args, **kw)
        args[1].reshape(-1)[7] += 1
        return report
    monkeypatch.setattr(engines, "_interpret", corrupted)
    with pytest.raises(engines.EnginesDisagree) as err:
        engines.run_kernel(str(path), grid, list(inputs.values()), engine="both")
    (m,) = err.value.report.mismatches
    assert m.argument == 1 and np.ravel_multi_index(m.index, inputs["y"].shape) == 7


def test_unknown_engine_is_an_argument_error():
    with pytest.raises(tileiras_async.interp.errors.ArgumentError, match="unknown engine"):
        tileiras_async.run_kernel(b"", (1,), [], engine="gpu")


@requires_corpus
def test_run_cli_engines(refs, tmp_path, monkeypatch):
    from tileiras_async.cli import batch
    cid = "softmax_rows_f16_512"
    inputs, _, grid = corpus_case(refs, cid)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    results = {}
    for engine in ("interpret", "emulate", "both"):
        out = tmp_path / f"{engine}.npz"
        rc = batch.main(["run", str(PUBLIC / f"{cid}.v13.4.tileirbc"), "--grid", ",".join(map(str, grid)),
                         "--args", str(tmp_path / "in.npz"), "--out", str(out), "--engine", engine])
        assert rc == 0
        results[engine] = np.load(out)["1"]
    assert np.array_equal(results["interpret"], results["emulate"])
    assert isinstance(RunReport, type)


@requires_corpus
@pytest.mark.parametrize("engine", ["interpret", "emulate", "both"])
def test_non_contiguous_views_are_updated_in_place(engine):
    path = PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"
    a = np.arange(2000, dtype=np.float32)[::2]            # stride 2 elements
    b = np.full(1000, 0.5, dtype=np.float32)
    backing = np.full(3000, -7.0, dtype=np.float32)
    c = backing[::3]                                        # output with stride 3
    tileiras_async.run_kernel(str(path), (8,), [a, b, c], engine=engine)
    assert np.array_equal(c, a + b)
    assert (np.delete(backing, np.arange(0, 3000, 3)) == -7.0).all()  # the gaps are untouched
