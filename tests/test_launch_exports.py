"""The launch forms of our kernels (examples/launch/, examples/suite/launch/): what cuTile sends at launch.

* one file per kernel with a reference, exactly what examples/export_all.py writes (deterministic: a fresh
  export gives the committed bytes);
* the specialisation follows the arrays (cuTile's launch rules: a unit stride is a literal 1 in the view, a
  16-byte multiple stride or an extent of a multiple of 16 is `assume div_by`, a 16-byte aligned base is
  `div_by<16>` on the pointer, an unaligned view gets none);
* they compile and compute their references on the interpreter and the emulator (--engine both) at sm_90
  and sm_100: a sample here, attention included (one through `tileiras-async run --engine both`); every
  kernel under --run-all.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tileiras_async import run_kernel
from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir.printer import print_module

from test_examples import _load_export_all

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("sm_90", "sm_100")


ea = _load_export_all()
SETS = sorted(ea.SETS)
LAUNCHED = [(which, cid) for which in SETS for cid in sorted(ea.load_refs(which).REFS)]


def _file(which: str, cid: str) -> Path:
    return ea.out_path(ea.out_dir_of(which, form="launch"), cid, ea.LAUNCH_VERSION)


def _text(data: bytes) -> str:
    return print_module(read_module(data))


def _example(which: str, cid: str):
    return next(ex for ex in ea.load_kernels(which).EXAMPLES if ex.name == cid)


# ----------------------------------------------------------------------------- the files
@pytest.mark.parametrize("which", SETS)
def test_launch_folder_holds_one_file_per_referenced_kernel(which):
    refs = ea.load_refs(which)
    kernels = {ex.name for ex in ea.load_kernels(which).EXAMPLES}
    assert set(refs.REFS) == kernels
    folder = ea.out_dir_of(which, form="launch")
    assert sorted(p.name for p in folder.glob("*.tileirbc")) == sorted(_file(which, c).name for c in kernels)


# flash_attention inlines the frontend's own Tile methods (reshape): their file must not name this machine's venv
@pytest.mark.parametrize("which,cid", [("suite", "fmha_causal_f16"), ("suite", "flash_attention_ragged_f16"),
                                       ("examples", "matmul_bias_relu_f16")])
def test_launch_reexport_is_identical(tmp_path, which, cid):
    """Exporting twice gives the committed bytes: the launch form depends on the arrays' layout only."""
    for _ in range(2):
        assert ea.main(["--out", str(tmp_path), "--set", which, "--form", "launch", "--only", cid]) == 0
        fresh = ea.out_path(ea.out_dir_of(which, tmp_path, "launch"), cid, ea.LAUNCH_VERSION)
        assert fresh.read_bytes() == _file(which, cid).read_bytes()
    assert not ea.out_path(ea.out_dir_of(which, tmp_path), cid, "13.4").exists()   # --form launch only


def test_exports_carry_no_machine_paths():
    """Neither form (the plain suite files inline the same helpers) names this machine's directories."""
    plain = sorted((REPO / "examples" / "suite").glob("*.tileirbc"))
    for path in [_file(which, cid) for which, cid in LAUNCHED] + plain:
        data = path.read_bytes()
        assert b"site-packages" not in data and str(REPO).encode() not in data, path.name
    assert ea.FRONTEND_STUB.encode() in _file("suite", "flash_attention_ragged_f16").read_bytes()


def test_the_frontend_is_left_as_it_was():
    from cuda.tile import _stub
    before = {fn: fn.__code__.co_filename for fn in ea._stub_functions(_stub)}
    ea.export_bytes(_example("suite", "flash_attention_ragged_f16"), "13.4")
    assert before and {fn: fn.__code__.co_filename for fn in ea._stub_functions(_stub)} == before


# ----------------------------------------------------------------------------- the facts follow the arrays
def test_launch_facts_of_a_contiguous_array():
    a = np.zeros((64, 40), np.float16)
    facts = ea.launch_facts(a, 4096)
    assert facts == {"stride_constant": (None, 1), "stride_divisible_by": (8, 1),
                     "shape_divisible_by": (16, 1), "base_addr_divisible_by": 16}


def test_launch_facts_of_views():
    base = np.zeros((48, 36), np.float32)
    t = base.T                                    # unit stride on axis 0, 144-byte rows on axis 1
    assert ea.launch_facts(t, 256)["stride_constant"] == (1, None)
    assert ea.launch_facts(t, 256)["stride_divisible_by"] == (1, 4)
    odd = np.zeros((5, 7), np.float32)[:, :3]     # 28-byte rows: no stride divisibility
    assert ea.launch_facts(odd, 256)["stride_divisible_by"] == (1, 1)
    strided = np.zeros(64, np.int32)[::2]         # no unit stride anywhere
    assert ea.launch_facts(strided, 256)["stride_constant"] is None
    assert ea.launch_facts(strided, 256)["stride_divisible_by"] == (1,)


def test_device_addresses_keep_a_views_offset():
    whole = np.zeros(100, np.float16)
    other = np.zeros(8, np.float32)
    addrs = ea.device_addresses([whole, whole[1:], other, whole[8:]])
    assert addrs[0] % ea.ALLOCATION_ALIGN == 0 and addrs[2] % ea.ALLOCATION_ALIGN == 0 and addrs[0] != addrs[2]
    assert addrs[1] == addrs[0] + 2 and addrs[3] == addrs[0] + 16


def _assumed(text: str) -> set[tuple[int, str]]:
    """(argument number, divisor) of every `assume div_by<d>, %argN` in a printed module."""
    return {(int(n), d) for d, n in re.findall(r"assume div_by<(\d+)>, %arg(\d+) ", text)}


def test_launch_form_states_what_the_arrays_give():
    """matmul_bias_relu on A 128x96, B 96x128, bias 128, C 128x128 (f16, fresh allocations): every view has
    the literal unit stride, every pointer and row stride and every extent (all multiples of 16) is assumed
    divisible; the plain export assumes nothing of the kind."""
    text = _text(_file("examples", "matmul_bias_relu_f16").read_bytes())
    views = re.findall(r"make_tensor_view .*-> tensor_view<[^>]*strides=\[([^\]]*)\]>", text)
    assert views == ["?,1", "?,1", "1", "?,1"]
    # arguments: A (ptr 0, shape 1-2, strides 3-4), B (5, 6-7, 8-9), bias (10, 11, 12), C (13, 14-15, 16-17)
    assert _assumed(text) == {(0, "16"), (1, "16"), (2, "16"), (3, "8"), (5, "16"), (6, "16"), (7, "16"),
                              (8, "8"), (10, "16"), (11, "16"), (13, "16"), (14, "16"), (15, "16"), (16, "8")}
    plain = _text(ea.out_path(ea.out_dir_of("examples"), "matmul_bias_relu_f16", "13.4").read_bytes())
    assert "strides=[?,1]" not in plain and not {d for _, d in _assumed(plain)} & {"8", "16"}


def test_ragged_extents_get_no_shape_divisibility():
    """flash_attention_ragged: K and V hold 50 rows (not a multiple of 16), Q and Out 32."""
    text = _text(_file("suite", "flash_attention_ragged_f16").read_bytes())
    assumed = _assumed(text)
    # per 4-d array: ptr, 4 extents, 4 strides; K is arguments 9..17, its row extent argument 12
    assert (3, "16") in assumed and (12, "16") not in assumed and (21, "16") not in assumed
    assert (13, "16") in assumed                   # K's head dimension, 32


def test_an_unaligned_view_gets_no_base_divisibility():
    """The same kernel launched with Q starting one element into its allocation: Q's pointer loses
    div_by<16>, the other arrays keep theirs."""
    refs = ea.load_refs("suite")
    inputs = refs.make_inputs("fmha_f16")
    q = inputs["Q"]
    inputs["Q"] = np.zeros(q.size + 1, q.dtype)[1:].reshape(q.shape)
    case = ea.launch_case(_example("suite", "fmha_f16"), inputs)
    assumed = _assumed(_text(ea.export_bytes(case, ea.LAUNCH_VERSION)))
    assert (0, "16") not in assumed and (9, "16") in assumed and (18, "16") in assumed
    assert _assumed(_text(_file("suite", "fmha_f16").read_bytes())) >= {(0, "16"), (9, "16")}


def test_wrong_inputs_are_refused():
    refs = ea.load_refs("examples")
    inputs = refs.make_inputs("axpby_f32")
    with pytest.raises(ValueError, match="runtime parameters"):
        ea.launch_case(_example("examples", "axpby_f32"), {k: inputs[k] for k in list(inputs)[:-1]})
    inputs["x"] = inputs["x"].reshape(10, 100)
    with pytest.raises(ValueError, match="rank 2 for a rank-1"):
        ea.launch_case(_example("examples", "axpby_f32"), inputs)


# ----------------------------------------------------------------------------- they run
def _run(which: str, cid: str, target: str) -> None:
    refs = ea.load_refs(which)
    inputs, pristine = refs.make_inputs(cid), refs.make_inputs(cid)
    args = list(inputs.values())
    run_kernel(_file(which, cid).read_bytes(), refs.grid(cid, inputs), args, engine="both", gpu_name=target)
    problems = refs.check(cid, pristine, dict(zip(inputs, args)))
    assert not problems, problems


# where the real tool refuses the plain form for a target (examples/suite/oracle.json: block-scaled types
# before sm_100), the launch form has nothing to run
ORACLE = json.loads((REPO / "examples" / "suite" / "oracle.json").read_text())["suite"]


def _target_takes(which: str, cid: str, target: str) -> bool:
    entry = ORACLE.get(f"{cid}.v{ea.LAUNCH_VERSION}.tileirbc") if which == "suite" else None
    return entry is None or entry["results"][target]["rc"] == 0


SAMPLE = [("suite", "fmha_f16", "sm_90"), ("suite", "fmha_causal_f16", "sm_100"),
          ("suite", "flash_attention_causal_gqa_f16", "sm_100"), ("suite", "flash_attention_ragged_f16", "sm_90"),
          ("suite", "persistent_matmul_f16", "sm_100"), ("suite", "layernorm_bwd_f32", "sm_90"),
          ("examples", "matmul_bias_relu_f16", "sm_90"), ("examples", "online_softmax_f16", "sm_100")]


@pytest.mark.parametrize("which,cid,target", SAMPLE, ids=[f"{c}-{t}" for _, c, t in SAMPLE])
def test_launch_form_matches_numpy_on_both_engines(which, cid, target):
    _run(which, cid, target)


EVERYTHING = [(w, c, t) for w, c in LAUNCHED for t in TARGETS if (w, c, t) not in SAMPLE and _target_takes(w, c, t)]


@pytest.mark.slow
@pytest.mark.parametrize("which,cid,target", EVERYTHING, ids=[f"{c}-{t}" for _, c, t in EVERYTHING])
def test_launch_form_matches_numpy_everywhere(which, cid, target):
    _run(which, cid, target)


def test_examples_refs_catch_a_wrong_answer():
    refs = ea.load_refs("examples")
    inputs = refs.make_inputs("batched_transpose_f32")
    out = refs.reference("batched_transpose_f32", inputs)
    assert refs.check("batched_transpose_f32", inputs, {**inputs, **out}) == []
    out["Y"] = out["Y"].copy()
    out["Y"][1, 2, 3] += np.float32(1e-3)
    assert refs.check("batched_transpose_f32", inputs, {**inputs, **out})


def test_the_command_line_runs_a_launch_form(tmp_path, capsys):
    """`tileiras-async run --engine both` on cuTile's FMHA sample as launched: the engines agree and the
    output written is numpy's attention."""
    from tileiras_async.cli import batch
    refs = ea.load_refs("suite")
    cid = "fmha_causal_f16"
    inputs = refs.make_inputs(cid)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    argv = ["run", str(_file("suite", cid)), "--grid", ",".join(map(str, refs.grid(cid, inputs))),
            "--args", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"), "--engine", "both",
            "--gpu-name", "sm_90"]
    assert batch.main(argv) == 0
    assert "engines agree" in capsys.readouterr().out
    with np.load(tmp_path / "out.npz") as z:
        outputs = {name: z[str(i)] for i, name in enumerate(inputs) if str(i) in z.files}
    assert refs.check(cid, refs.make_inputs(cid), outputs) == []
