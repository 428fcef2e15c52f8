"""Batch over the corpus gives the same cubins as one-by-one compiles, at -j1 and -j2.

The default run takes a sample (every 16th module, and the drop-in binary for a few of them);
`--run-all` (make test-all) compiles the whole public corpus both ways.
"""
from __future__ import annotations

import subprocess

import pytest

from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.config import output_stem

from conftest import corpus_files, requires_corpus
from test_pipeline_batch import BIN, assert_consistent, descendants, of, one_by_one, run_batch

ALL = corpus_files("*.tileirbc")
SAMPLE = ALL[::16]


def compare(files, tmp_path, jobs, target="sm_100"):
    before = descendants()
    finished, events = run_batch(files, tmp_path, targets=(target,), jobs=jobs)
    assert descendants() <= before
    assert_consistent(events)
    mismatches, compiled = [], 0
    for path in files:
        want = one_by_one(path, target)
        out = tmp_path / f"{output_stem(str(path))}.{target}.cubin"
        got = out.read_bytes() if out.exists() else None
        compiled += want is not None
        if got != want:
            mismatches.append(path.name)
    assert mismatches == []
    assert len(finished.outputs) == compiled
    failed = {e.module for e in of(events, ev.ModuleFinished) if not e.ok}
    assert (finished.exit_code != 0) == bool(failed)
    for module in failed:  # every failure comes with a diagnostic
        assert any(d.module == module for d in of(events, ev.Diagnostic)), module
    return finished


@requires_corpus
@pytest.mark.parametrize("jobs", [1, 2])
def test_corpus_sample(tmp_path, jobs):
    compare(SAMPLE, tmp_path, jobs)


@requires_corpus
def test_sample_against_the_drop_in_binary(tmp_path):
    files = SAMPLE[:4]
    run_batch(files, tmp_path / "batch", targets=("sm_90",), jobs=2)
    for path in files:
        out = tmp_path / f"{path.name}.cubin"
        r = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_90", "-o", str(out), str(path)],
                           capture_output=True, timeout=300)
        batch_out = tmp_path / "batch" / f"{output_stem(str(path))}.sm_90.cubin"
        assert out.exists() == batch_out.exists() == (r.returncode == 0), r.stderr
        if out.exists():
            assert out.read_bytes() == batch_out.read_bytes()


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_whole_corpus(tmp_path, jobs):
    compare(ALL, tmp_path, jobs)
