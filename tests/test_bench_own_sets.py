"""The benches on this project's kernels (--set suite, suite-launch, examples, examples-launch): the folders,
the references that check them, and NVIDIA's PTX for them kept from the real tool (the corpus has none)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import _build  # noqa: E402
import codegen_quality as cq  # noqa: E402
import dynamic_instructions as dyn  # noqa: E402
from conftest import CORPUS  # noqa: E402

AXPBY = REPO / "examples" / "launch" / "axpby_f32.v13.4.tileirbc"


def _needs_real_tool():
    if _build.real_tool() is None:
        pytest.skip("NVIDIA's tileiras (nvidia-cuda-tileiras) is not installed")


def test_both_still_means_the_corpus_pair():
    assert {name for name, _ in _build.corpus_sets(CORPUS, "both")} <= {"public", "public-launch"}


@pytest.mark.parametrize("name,folder", [("suite", "examples/suite"), ("suite-launch", "examples/suite/launch"),
                                         ("examples", "examples"), ("examples-launch", "examples/launch")])
def test_own_sets_are_our_folders(name, folder):
    assert _build.corpus_sets(CORPUS, name) == [(name, REPO / folder)]
    files = _build.corpus_kernels(REPO / folder)
    kernels = _build._export_all().load_kernels(_build.OWN_FOLDERS[name][1]).EXAMPLES
    assert sorted(_build.kernel_id(f) for f in files) == sorted(ex.name for ex in kernels)
    assert all(f.name.endswith(".v13.4.tileirbc") for f in files)
    assert all(_build.own_set_of(f) == name for f in files)


def test_each_set_is_checked_by_its_own_references():
    assert "fmha_f16" in _build.refs_for(REPO / "examples/suite/launch/fmha_f16.v13.4.tileirbc").REFS
    assert "axpby_f32" in _build.refs_for(AXPBY).REFS
    assert _build.own_set_of(CORPUS / "out" / "public" / "x.v13.4.tileirbc") is None


def test_nvidia_ptx_for_our_kernels_is_what_the_real_tool_hands_ptxas(tmp_path):
    _needs_real_tool()
    ptx = _build.real_ptx(AXPBY, "sm_90", tmp_path)
    assert ptx is not None and ptx.parent == tmp_path
    text = ptx.read_text()
    assert ".entry axpby_Kt1_" in text and ".target sm_90a" in text
    cached = _build.compile_real(AXPBY, "sm_90", tmp_path)
    assert cached["ok"] and cached["cached"]
    assert _build.real_ptx(AXPBY, "sm_90", tmp_path) == ptx        # kept: not compiled again
    assert _build.real_ptx(AXPBY, "sm_90", None) is None            # no cache, nothing kept


def test_dynamic_row_runs_both_sides_on_our_references():
    _needs_real_tool()
    row = dyn.dynamic_row(AXPBY, "sm_90")
    assert dyn.counted(row["ours"]) and dyn.counted(row["nvidia"]), row
    assert row["nvidia"]["thread_instructions"] > 0


def test_codegen_quality_names_the_set(tmp_path, capsys):
    _needs_real_tool()
    assert cq.main(["--set", "examples-launch", "--kernels", "axpby_f32", "--gpu-name", "sm_90", "-j", "1",
                    "--cache-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "== examples as cuTile launches (examples/launch): 1 kernels ==" in text
    assert "both compiled: 1" in text


FMHA = REPO / "examples" / "suite" / "launch" / "fmha_f16.v13.4.tileirbc"


def test_nvidia_rank_4_attention_ptx_computes_the_reference(tmp_path):
    """NVIDIA's PTX for fmha as cuTile launches it loads Q, K, V and stores O through rank-4 tensor maps
    (cp.async.bulk.tensor.4d) its host object's hook fills; emulated, it matches the reference."""
    _needs_real_tool()
    ptx = _build.real_ptx(FMHA, "sm_90", tmp_path)
    assert ptx is not None
    text = ptx.read_text()
    assert "cp.async.bulk.tensor.4d.shared::cta.global.tile" in text
    assert "cp.async.bulk.tensor.4d.global.shared::cta.tile" in text
    res = _build.emulate_on_corpus(text, "fmha_f16", FMHA, host_object=ptx.with_suffix(".host.o"))
    assert res["ok"], res
    assert res["correct"], res["problems"]
    assert res["classes"]["tensor_core"] > 0
