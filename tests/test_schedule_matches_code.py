"""The loop schedules (--schedules, --schedule-trace-file, the dashboard's kernel view) describe the code the
compiler emits for that target: every resource class, and every instruction-specific slot, in a kernel's
schedule reports names an instruction its PTX contains.  A pipelined matmul on each family: its tile loads
are cp.async copies (the code has no TMA), its mma the instruction select-mma chose; as cuTile launches it, the
operands choose-stage-copies made TMA copies are booked as such.  The launch set's reductions,
norms and scans on sm_90/sm_100: the loop loads select-tile-tensor-copies made TMA copies are booked as such."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import LAUNCH, PUBLIC
from tileiras_async.stages import CompileOptions, compile_in_process

REPO = Path(__file__).resolve().parents[1]
MATMUL = REPO / "examples" / "matmul_bias_relu_f16.v13.4.tileirbc"   # 64+ row tiles: wgmma / tcgen05 there
SMALL_MATMUL = PUBLIC / "matmul_ragged_f16_32x32x32.v13.4.tileirbc"  # 32 rows: mma.sync on every family
SERIAL = REPO / "examples" / "online_softmax_f16.v13.4.tileirbc"      # loops kept serial: loads to registers
TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")
# launch-set kernels whose loops load tiles by TMA on sm_90/sm_100 (select-tile-tensor-copies)
TILE_TMA = [LAUNCH / f"{name}.v13.4.tileirbc" for name in (
    "cumsum_carry_f32_t512", "cumsum_carry_i32_t128", "first_exceed_f32_16", "first_exceed_f32_64",
    "layernorm_f16_128", "layernorm_f32_64", "reduce2d_rows_f16_16x128", "reduce2d_rows_f32_8x64")]

# a class (or slot) -> the PTX it stands for
CLASS_PTX = {
    "cp_async_load": r"\bcp\.async\.c[ag]\.shared\.global\b",
    "tma_load": r"\bcp\.async\.bulk\.tensor\b",
    "tma_store": r"\bcp\.async\.bulk\.tensor\b",
    "mma_sync": r"\bmma\.sync\.aligned\b",
    "wgmma": r"\bwgmma\.mma_async\b",
    "tcgen05": r"\btcgen05\.mma\b",
    "global_load": r"\bld\.global\b",
    "global_store": r"\bst\.global\b",
    "smem_write": r"\bst\.shared\b",
    "smem_read": r"\bld\.shared\b",
    "atomic": r"\b(atom|red)\.global\b",
}
SLOT_PTX = {"tma": r"\bcp\.async\.bulk\b", "tp_mma": r"\b(wgmma\.mma_async|tcgen05\.mma)\b",
            "tmem": r"\btcgen05\.", "tp_tmem_rd": r"\btcgen05\.ld\b", "tp_tmem_wr": r"\btcgen05\.st\b"}
PIPELINED_MMA = {("sm_80", MATMUL): "mma_sync", ("sm_90", MATMUL): "wgmma", ("sm_100", MATMUL): "tcgen05",
                 ("sm_120", MATMUL): "mma_sync"}


def _compile(path: Path, gpu: str):
    if not path.exists():
        pytest.skip(f"{path} not found")
    result = compile_in_process(str(path), path.read_bytes(), CompileOptions(gpu), with_schedules=True)
    assert result.ok, result.diagnostics
    assert result.schedules, "a kernel with loops has schedule reports"
    return result


def _unbacked(result) -> list[str]:
    """Every class or slot of the reports that names an instruction the PTX lacks."""
    out = []
    for report in result.schedules:
        for o in report.ops:
            pattern = CLASS_PTX.get(o.rclass)
            if pattern and not re.search(pattern, result.ptx):
                out.append(f"loop {report.loop}: {o.name} classed {o.rclass}")
            out += [f"loop {report.loop}: {o.name} holds slot {s.name}" for s in o.slots
                    if s.name in SLOT_PTX and not re.search(SLOT_PTX[s.name], result.ptx)]
    return out


@pytest.mark.parametrize("gpu", TARGETS)
@pytest.mark.parametrize("path", [MATMUL, SMALL_MATMUL, SERIAL], ids=lambda p: p.name.split(".")[0])
def test_every_class_of_the_schedule_is_in_the_ptx(path, gpu):
    result = _compile(path, gpu)
    assert _unbacked(result) == []
    # the report of code without TMA claims none ("not warp-specialised: ..." says why a choice was not made)
    if "cp.async.bulk.tensor" not in result.ptx:
        claims = " ".join(n for r in result.schedules for n in r.notes if not n.startswith("not "))
        assert "TMA" not in claims.replace("no TMA", "")


@pytest.mark.parametrize("gpu", TARGETS)
def test_a_pipelined_matmul_copies_with_cp_async_into_the_chosen_mma(gpu):
    result = _compile(MATMUL, gpu)
    [report] = [r for r in result.schedules if r.strategy == "modulo" and r.stage_count >= 2]
    classes = {o.name: o.rclass for o in report.ops}
    assert classes["load_view_tko"] == "cp_async_load"
    assert classes["mmaf"] == PIPELINED_MMA[(gpu, MATMUL)]
    assert not any(s.name == "tma" for o in report.ops for s in o.slots)


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid, booked", [("matmul_f16_f32acc_64x64x32", ["tma_load", "tma_load"]),
                                         ("matmul_ragged_f16_32x32x32", ["cp_async_load", "tma_load"])])
def test_k_loop_stage_copies_are_booked_as_the_decision_made_them(cid, booked, gpu):
    """choose-stage-copies decides, before the schedule, which K-loop operands are copied by TMA: the report
    books those copies `tma_load` and the others `cp_async_load`, each backed by the PTX (cp.async.bulk.tensor,
    cp.async), and splits the loop where A and B are both TMA (the wgmma/tcgen05 matmul)."""
    result = _compile(LAUNCH / f"{cid}.v13.4.tileirbc", gpu)
    assert _unbacked(result) == []
    [report] = [r for r in result.schedules if r.strategy == "modulo" and r.stage_count >= 2]
    assert [o.rclass for o in report.ops if o.name == "load_view_tko"] == booked
    assert bool(report.partitions) == (booked == ["tma_load", "tma_load"])
    assert all(any(s.name == "tma" for s in o.slots) for o in report.ops if o.rclass == "tma_load")


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_a_small_matmul_keeps_mma_sync_in_its_schedule_too(gpu):
    result = _compile(SMALL_MATMUL, gpu)
    mmas = {o.rclass for r in result.schedules for o in r.ops if o.name == "mmaf"}
    assert mmas == {"mma_sync"}
    assert not re.search(CLASS_PTX["wgmma"], result.ptx) and not re.search(CLASS_PTX["tcgen05"], result.ptx)


def test_the_check_sees_a_class_the_code_lacks():
    """A report booking TMA against PTX without bulk copies is reported (what the sm_90 schedules did)."""
    import msgspec

    result = _compile(MATMUL, "sm_90")
    report = result.schedules[0]
    ops = [msgspec.structs.replace(o, rclass="tma_load") if o.name == "load_view_tko" else o for o in report.ops]
    forged = msgspec.structs.replace(result, schedules=[msgspec.structs.replace(report, ops=ops)])
    assert any("classed tma_load" in line for line in _unbacked(forged))


def _loop_loads(result) -> list[str]:
    return [o.rclass for r in result.schedules for o in r.ops if o.name == "load_view_tko"]


@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("path", TILE_TMA, ids=lambda p: p.name.split(".")[0])
def test_tile_tma_loads_are_booked_as_tma(path, gpu):
    """Every load the decision made TMA is `tma_load` in its loop's report, as many as the loops' issues in the
    PTX (one cp.async.bulk.tensor a box), and no TMA load is also prefetched through registers."""
    result = _compile(path, gpu)
    assert _unbacked(result) == []
    classes = _loop_loads(result)
    assert "tma_load" in classes
    assert "global_load" not in classes or re.search(CLASS_PTX["global_load"], result.ptx)
    for report in result.schedules:   # a TMA load runs with the body it feeds, never stages ahead of it
        assert all(o.stage == report.stage_count - 1 for o in report.ops if o.rclass == "tma_load")
        assert all(any(s.name == "tma" for s in o.slots) for o in report.ops if o.rclass == "tma_load")


@pytest.mark.parametrize("gpu", ["sm_80", "sm_120"])
def test_no_tile_tma_where_the_target_has_none_known(gpu):
    """sm_80 has no TMA, sm_120's hook layout is not known: the same kernels' loops load with ld.global."""
    result = _compile(TILE_TMA[0], gpu)
    assert set(_loop_loads(result)) == {"global_load"}
    assert not re.search(CLASS_PTX["tma_load"], result.ptx)


@pytest.mark.parametrize("booked", ["global_load", "cp_async_load"])
def test_a_forged_tile_tma_report_is_caught(booked):
    """A report of a tile-TMA loop that books its loads as ld.global (what the reports said while the decision
    came after the schedule) or as cp.async copies, neither of which its PTX has, is reported."""
    import msgspec

    result = _compile(TILE_TMA[2], "sm_90")
    report = result.schedules[0]
    ops = [msgspec.structs.replace(o, rclass=booked) if o.rclass == "tma_load" else o for o in report.ops]
    forged = msgspec.structs.replace(result, schedules=[msgspec.structs.replace(report, ops=ops)])
    assert any(f"classed {booked}" in line for line in _unbacked(forged))


@pytest.mark.parametrize("path", [TILE_TMA[1], TILE_TMA[5]], ids=lambda p: p.name.split(".")[0])
def test_a_tma_load_is_not_also_prefetched(path):
    """A load is TMA or prefetched through registers, never both: the loops sm_80 prefetches (no TMA there)
    are kept serial on sm_90, their loads TMA copies, the PTX carrying no tile in registers across iterations."""
    ampere, hopper = _compile(path, "sm_80"), _compile(path, "sm_90")
    assert all(r.rule.startswith("prefetched") for r in ampere.schedules)
    assert set(_loop_loads(ampere)) == {"global_load"}
    for report in hopper.schedules:
        assert report.rule.startswith("kept serial") and report.stage_count == 1
        assert {o.rclass for o in report.ops if o.name == "load_view_tko"} == {"tma_load"}
