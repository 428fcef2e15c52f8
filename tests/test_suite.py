"""The workload suite (examples/suite): every kernel compiles like NVIDIA's tileiras and runs like numpy.

* exit codes: ours equals the real tool's (examples/suite/oracle.json, written by examples/record_oracle.py)
  on sm_80, sm_90, sm_100 and sm_120 for every suite file (bytecode 13.1 .. 13.4 as cuTile exports them) and
  every corpus file at 13.1 and 13.4; where it fails, the first stderr line is the real one; never exit 4;
* the target-capability table (ir/capabilities.py) says what the real tool says about every suite file,
  corpus file and capability probe, on every architecture the real tool knows;
* where both compile, the interpreter and the emulator (our PTX) match the numpy references (refs.py), and
  the corpus runs on the emulator for sm_120 too (test_emu_manifest.py covers sm_80, sm_90, sm_100);
* when the real tool is installed, it is run again on a sample (the suite at 13.3/13.4 and the probes on
  the four targets under --run-all; `examples/record_oracle.py --check` re-runs everything) and must
  still say what oracle.json says.

The default run samples (a few kernels x targets); `make test-all` (--run-all) runs everything.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tileiras_async import run_kernel
from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir.capabilities import check_kernel
from tileiras_async.stages import CompileOptions, compile_in_process, stderr_line

from conftest import PUBLIC, manifest_entries, requires_corpus

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "examples" / "suite"
TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")


def _load(name: str, path: Path):
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


refs = _load("tileiras_async_suite_refs", SUITE / "refs.py")
oracle_tool = _load("tileiras_async_record_oracle", REPO / "examples" / "record_oracle.py")
ORACLE = json.loads((SUITE / "oracle.json").read_text())
SUITE_FILES = sorted(p.name for p in SUITE.glob("*.tileirbc"))


def case_of(name: str) -> str:
    return name.split(".v1")[0]


def _path(section: str, name: str) -> Path:
    return (SUITE if section == "suite" else PUBLIC) / name


def _data(section: str, name: str) -> bytes:
    if section == "probes":
        return oracle_tool.load_probes().probes()[name]()
    return _path(section, name).read_bytes()


def _cases(section: str, targets=TARGETS) -> list[tuple[str, str, str]]:
    return [(section, name, t) for name in sorted(ORACLE.get(section, {})) for t in targets
            if t in ORACLE[section][name]["results"]]


def _ids(c) -> str:
    return f"{c[1].removesuffix('.tileirbc')}-{c[2]}"


# Default sample: one target per case, rotating, at 13.4, skipping the slowest compiles (under --run-all).
# (fmha: tests/test_fmha.py compiles it through the drop-in)
_SLOW_COMPILES = ("mx_matmul", "mxfp4", "nvfp4", "flash_attention", "fp8_matmul", "persistent_matmul", "fmha")
_NEWEST = [n for n in SUITE_FILES if n.endswith(".v13.4.tileirbc")]
SAMPLE = [("suite", n, TARGETS[i % len(TARGETS)]) for i, n in enumerate(_NEWEST)
          if not n.startswith(_SLOW_COMPILES)]
# (the corpus at 13.4 is compiled on every target by test_codegen_corpus.py, against the same answers)
EVERYTHING = [c for c in _cases("suite") + _cases("corpus") if c not in SAMPLE
              and not (c[0] == "corpus" and ".v13.4." in c[1])]
# emulation under --run-all: the oldest and the newest bytecode of every case, on every target
EMULATED = [n for n in SUITE_FILES if ".v13.4." in n or ".v13.1." in n or
            (".v13.3." in n and n.replace(".v13.3.", ".v13.1.") not in SUITE_FILES)]


# ----------------------------------------------------------------------------- the oracle file is current
def test_oracle_covers_every_suite_file_as_it_is():
    recorded = ORACLE["suite"]
    assert sorted(recorded) == SUITE_FILES, "re-run examples/record_oracle.py"
    for name in SUITE_FILES:
        digest = hashlib.sha256((SUITE / name).read_bytes()).hexdigest()
        assert recorded[name]["sha256"] == digest, f"{name} changed: re-run examples/record_oracle.py"


def test_oracle_covers_every_probe_as_it_is():
    probes = oracle_tool.load_probes().probes()
    assert sorted(ORACLE["probes"]) == sorted(probes)
    for name, build in probes.items():
        assert ORACLE["probes"][name]["sha256"] == hashlib.sha256(build()).hexdigest(), name


def test_every_case_has_a_reference_and_the_newest_bytecode():
    cases = {case_of(n) for n in SUITE_FILES}
    assert cases == set(refs.REFS)
    assert all(f"{c}.v13.4.tileirbc" in SUITE_FILES and f"{c}.v13.3.tileirbc" in SUITE_FILES for c in cases)


def test_suite_exercises_what_it_claims():
    """The suite really contains the ops it is meant to cover (a kernel edit cannot silently drop them)."""
    ops = {}
    for name in _NEWEST:
        for fn in read_module((SUITE / name).read_bytes()).functions:
            for op in fn.walk():
                ops.setdefault(op.name, set()).add(case_of(name))
    for needed in ("mmaf_scaled", "make_gather_scatter_view", "atomic_cas_tko", "atomic_rmw_tko", "scan",
                   "loop", "for", "unpack", "mmaf", "store_ptr_tko", "load_ptr_tko", "get_num_tile_blocks"):
        assert needed in ops, needed
    # a store inside a `for` whose iter_values carry the token: the persistent kernels
    for name in ("persistent_matmul_f16", "rmsnorm_persistent_f16", "layernorm_bwd_f32"):
        module = read_module((SUITE / f"{name}.v13.4.tileirbc").read_bytes())
        loops = [op for op in module.functions[0].walk() if op.name == "for"]
        assert any(any(str(v.type) == "token" for v in op.operands["initValues"]) for op in loops), name


# ----------------------------------------------------------------------------- capability table
@pytest.mark.parametrize("section", ["suite", "corpus", "probes"])
def test_capability_table_agrees_with_the_real_tool(section):
    if section == "corpus" and not PUBLIC.is_dir():
        pytest.skip("corpus not found")
    checked = 0
    for name, entry in sorted(ORACLE[section].items()):
        if all(r["rc"] == 3 for r in entry["results"].values()):
            continue  # rejected before any target check (bytecode / verifier)
        module = read_module(_data(section, name))
        for target, real in entry["results"].items():
            found = next((inc for fn in module.functions if (inc := check_kernel(module, fn, target))), None)
            if real["rc"] == 5 and "Incompatibility with architecture" in real["stderr"]:
                assert found is not None and found.lines()[0] == real["stderr"], (name, target)
            else:
                assert found is None, (name, target, found and found.message)
            checked += 1
    assert checked


# ----------------------------------------------------------------------------- exit codes
def _compile_like_the_real_tool(section: str, name: str, target: str) -> None:
    if section == "corpus" and not PUBLIC.is_dir():
        pytest.skip("corpus not found")
    real = ORACLE[section][name]["results"][target]
    result = compile_in_process(name, _data(section, name), CompileOptions(target, 3))
    rc = 0 if result.ok else result.exit_code
    first = stderr_line(result.diagnostics[0]) if result.diagnostics else ""
    assert rc != 4, first
    assert rc == real["rc"], (first, result.tool_stderr[-500:])
    if rc:
        assert first == real["stderr"]
    else:
        assert result.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("case", SAMPLE, ids=_ids)
def test_exit_code_matches_the_real_tool(case):
    _compile_like_the_real_tool(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", EVERYTHING, ids=_ids)
def test_exit_code_matches_the_real_tool_everywhere(case):
    _compile_like_the_real_tool(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases("probes", TARGETS), ids=_ids)
def test_probe_exit_code_matches_the_real_tool(case):
    _compile_like_the_real_tool(*case)


# ----------------------------------------------------------------------------- numbers
def _run(name: str, engine: str, target: str) -> None:
    cid = case_of(name)
    inputs, pristine = refs.make_inputs(cid), refs.make_inputs(cid)
    args = list(inputs.values())
    run_kernel((SUITE / name).read_bytes(), refs.grid(cid, inputs), args, engine=engine, gpu_name=target)
    problems = refs.check(cid, pristine, dict(zip(inputs, args)))
    assert not problems, problems


def _compiles(name: str, target: str) -> bool:
    return ORACLE["suite"][name]["results"][target]["rc"] == 0


@pytest.mark.parametrize("name", _NEWEST, ids=case_of)
def test_interpreter_matches_numpy(name):
    _run(name, "interpret", "sm_100")


EMULATE_SAMPLE = [("persistent_matmul_f16.v13.4.tileirbc", "sm_90"), ("splitk_matmul_lock_f16.v13.4.tileirbc", "sm_80"),
                  ("layernorm_bwd_f32.v13.4.tileirbc", "sm_100"), ("rmsnorm_gather_bf16.v13.4.tileirbc", "sm_120"),
                  ("gather_view_rows_f16.v13.4.tileirbc", "sm_80"), ("atomics_int_i32.v13.4.tileirbc", "sm_90"),
                  ("mx_matmul_e5m2.v13.4.tileirbc", "sm_100"), ("lock_counter_i32.v13.4.tileirbc", "sm_120"),
                  ("moe_gather_matmul_f16.v13.4.tileirbc", "sm_100"), ("embedding_grad_bf16.v13.4.tileirbc", "sm_90")]


@pytest.mark.parametrize("name,target", EMULATE_SAMPLE, ids=lambda x: x if x.startswith("sm_") else case_of(x))
def test_emulator_matches_numpy(name, target):
    assert _compiles(name, target)
    _run(name, "emulate", target)


@pytest.mark.slow
@pytest.mark.parametrize("name,target", [(n, t) for n in EMULATED for t in TARGETS
                                         if (n, t) not in EMULATE_SAMPLE and _compiles(n, t)],
                         ids=lambda x: x if x.startswith("sm_") else x.removesuffix(".tileirbc"))
def test_emulator_matches_numpy_everywhere(name, target):
    _run(name, "emulate", target)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SUITE_FILES if n not in _NEWEST], ids=lambda n: n.removesuffix(".tileirbc"))
def test_interpreter_matches_numpy_older_bytecode(name):
    _run(name, "interpret", "sm_100")


# the corpus on sm_120 (test_emu_manifest.py runs it on sm_80, sm_90 and sm_100), oldest and newest bytecode
CORPUS_ENDS = [e for e in manifest_entries() if e["bytecode_version"] in ("13.1", "13.4")]


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("entry", CORPUS_ENDS, ids=[f"{e['id']}@{e['bytecode_version']}" for e in CORPUS_ENDS])
def test_corpus_emulates_on_sm120(refs, entry):
    from test_emu_manifest import run_entry
    run_entry(refs, entry, "sm_120")


# ----------------------------------------------------------------------------- the oracle itself
LIVE_SAMPLE = [("suite", "fp8_roundtrip_e4m3.v13.4.tileirbc", "sm_80"), ("suite", "embedding_grad_bf16.v13.4.tileirbc", "sm_80"),
               ("suite", "mx_matmul_e4m3.v13.4.tileirbc", "sm_90"), ("suite", "grid3d_i32.v13.1.tileirbc", "sm_120"),
               ("probes", "type_f8E8M0FNU", "sm_120"), ("probes", "atomic_addf_bf16", "sm_89")]


def _live(section: str, name: str, target: str) -> None:
    tool = oracle_tool.real_tileiras()
    if tool is None:
        pytest.skip("NVIDIA's tileiras (nvidia-cuda-tileiras) is not installed")
    if section == "corpus" and not PUBLIC.is_dir():
        pytest.skip("corpus not found")
    assert oracle_tool.run_real(tool, _data(section, name), target) == ORACLE[section][name]["results"][target]


@pytest.mark.parametrize("case", LIVE_SAMPLE, ids=_ids)
def test_real_tool_still_says_what_the_oracle_recorded(case):
    _live(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in _cases("suite") + _cases("probes") if c not in LIVE_SAMPLE
                                  and ".v13.1." not in c[1] and ".v13.2." not in c[1]], ids=_ids)
def test_real_tool_still_says_what_the_oracle_recorded_everywhere(case):
    _live(*case)


def test_refs_check_catches_a_wrong_answer():
    """The references are real checks: a perturbed output fails."""
    cid = "layernorm_fwd_f32"
    inputs = refs.make_inputs(cid)
    out = refs.reference(cid, inputs)
    assert refs.check(cid, inputs, {**inputs, **out}) == []
    out["Y"] = out["Y"].copy()
    out["Y"][3, 7] += np.float32(1e-2)
    assert refs.check(cid, inputs, {**inputs, **out})


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_a_persistent_kernel_refills_its_ring_after_the_last_tiles_reads(monkeypatch, target):
    """persistent_matmul_f16 runs its pipelined K-loop once per tile: the next tile's prologue copies write
    the stage buffers the previous tile's last iterations read, so a barrier must come between
    (insert-barriers: `_fresh_rings`).  Without it the emulated values are the same (lanes run in lock step);
    the race check of the emulate engine catches it."""
    from tileiras_async.emu.races import RaceError
    from tileiras_async.tilegpu.passes import insert_barriers
    _run("persistent_matmul_f16.v13.4.tileirbc", "emulate", target)
    monkeypatch.setattr(insert_barriers, "_fresh_rings", lambda pending, body: pending)
    with pytest.raises(RaceError, match="write after a read"):
        _run("persistent_matmul_f16.v13.4.tileirbc", "emulate", target)
