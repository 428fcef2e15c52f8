"""PTX emulator on the whole public corpus: our compiler's PTX, executed, must match the numpy references.

For every manifest entry the module is compiled by our pipeline (ptxas must
accept the PTX), the PTX is emulated on the manifest inputs (`refs.make_inputs`,
strided views included) with the race check on (a shared- or tensor-memory access
that another warp's conflicting one precedes with no barrier between fails: emu/races.py)
and the outputs are checked with `refs.check`.

* Default run: every kernel once (its 13.4 bytecode) for sm_100, plus two kernels at -O0; of the launch set
  (`public-launch`: the same cases with cuTile's launch hints, which our code relies on without checking),
  every matmul at sm_90 and sm_100.
* `--run-all` (`slow`): every bytecode file of the manifest x sm_80, sm_90, sm_100, and every
  kernel at -O0/-O1/-O2; every launch-set kernel x sm_80, sm_90, sm_100, sm_120.

A module our compiler cannot lower yet is skipped with the compile error as the
reason.  A module NVIDIA's tileiras rejects (the manifest records its rc) must
be rejected by our pipeline too.

"""
from __future__ import annotations

import pytest
from conftest import (
    CORPUS,
    LAUNCH,
    corpus_case,
    manifest_entries,
    requires_corpus,
)

ENTRIES = manifest_entries()
TARGETS = ("sm_80", "sm_90", "sm_100")


def run_entry(refs, entry: dict, gpu: str, opt_level: int = 3) -> None:
    from tileiras_async.driver import CodegenUnavailable
    from tileiras_async.emu.runner import run_compiled
    from tileiras_async.frontend import InputError

    cid = entry["id"]
    inputs, orig, grid = corpus_case(refs, cid)
    path = CORPUS / entry["file"]
    nvidia = entry["tileiras"].get(gpu) or entry["tileiras"].get("sm_100") or {}
    if nvidia.get("rc", 0) != 0:
        with pytest.raises(InputError):
            run_compiled(path, grid, list(inputs.values()), gpu_name=gpu, opt_level=opt_level)
        return
    try:
        run = run_compiled(path, grid, list(inputs.values()), gpu_name=gpu, opt_level=opt_level, check_races=True)
    except CodegenUnavailable as e:
        pytest.skip(f"our compiler cannot compile {cid} yet: {e}")
    assert run.cubin, "ptxas produced no cubin"
    problems = refs.check(cid, orig, inputs)
    assert not problems, f"{cid} ({entry['file']}, {gpu}, -O{opt_level}): " + "; ".join(problems)
    assert run.report.thread_instructions > 0


def _ids(entries, with_version: bool):
    return [e["id"] + (f"@{e['bytecode_version']}" if with_version else "") for e in entries]


LATEST = [e for e in ENTRIES if e["bytecode_version"] == "13.4"]


@requires_corpus
@pytest.mark.parametrize("entry", LATEST, ids=_ids(LATEST, False))
def test_corpus_kernel_sm100(refs, entry):
    run_entry(refs, entry, "sm_100")


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("gpu", TARGETS)
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES, True))
def test_corpus_every_file_every_target(refs, entry, gpu):
    run_entry(refs, entry, gpu)


O0_SAMPLE = [e for e in LATEST if e["id"] in ("math_chain_f32_t256", "softmax_rows_f32_128")]


@requires_corpus
@pytest.mark.parametrize("entry", O0_SAMPLE, ids=_ids(O0_SAMPLE, False))
def test_corpus_kernel_O0(refs, entry):
    # -O0 keeps libdevice functions as calls with .param passing and local memory
    run_entry(refs, entry, "sm_100", opt_level=0)


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("opt_level", (0, 1, 2))
@pytest.mark.parametrize("entry", LATEST, ids=_ids(LATEST, False))
def test_corpus_kernel_other_opt_levels(refs, entry, opt_level):
    run_entry(refs, entry, "sm_100", opt_level=opt_level)


@requires_corpus
def test_manifest_is_walked_completely():
    # the sweep covers every entry; the default run covers every kernel id once
    assert len(ENTRIES) == 224 and len({e["id"] for e in LATEST}) == len({e["id"] for e in ENTRIES})


LAUNCH_ENTRIES = manifest_entries(LAUNCH)
LAUNCH_MATMULS = [e for e in LAUNCH_ENTRIES if "matmul" in e["id"] or e["id"].startswith("bmm")]


@requires_corpus
@pytest.mark.parametrize("gpu", ("sm_90", "sm_100"))
@pytest.mark.parametrize("entry", LAUNCH_MATMULS, ids=_ids(LAUNCH_MATMULS, False))
def test_launch_matmul(refs, entry, gpu):
    run_entry(refs, entry, gpu)


@requires_corpus
@pytest.mark.slow
@pytest.mark.parametrize("gpu", TARGETS + ("sm_120",))
@pytest.mark.parametrize("entry", LAUNCH_ENTRIES, ids=_ids(LAUNCH_ENTRIES, False))
def test_launch_every_kernel_every_target(refs, entry, gpu):
    run_entry(refs, entry, gpu)


@requires_corpus
def test_launch_set_is_the_public_set_with_hints():
    assert {e["id"] for e in LAUNCH_ENTRIES} == {e["id"] for e in LATEST}
    assert len(LAUNCH_MATMULS) >= 8
