"""Register caps for occupancy (toolchain/occupancy.py): the SM tables, the PTX edit, the keep/drop
decision, and the whole path through ptxas, the drop-in and the batch pipeline."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import PUBLIC, requires_corpus
from tileiras_async.stages import CompileOptions, compile_in_process
from tileiras_async.targets import register_cap_for_more_ctas, resident_ctas
from tileiras_async.toolchain import PtxasOptions
from tileiras_async.toolchain import occupancy
from tileiras_async.toolchain.cubin import KernelCode, kernel_code
from tileiras_async.toolchain.occupancy import OccupancyTrim, with_register_caps
from tileiras_async.toolchain.ptxas import assemble

MATH_CHAIN = PUBLIC / "math_chain_f32_t256.v13.4.tileirbc"


# ---------------------------------------------------------------- the SM tables


@pytest.mark.parametrize("gpu, threads, regs, shared, ctas, cap", [
    # 128 threads = 4 warps; registers are allocated per warp in units of 256 (8 per thread)
    ("sm_90", 128, 50, 0, 9, 48),      # 56 allocated: 65536 / (56*32*4) = 9.1; 48 -> 10
    ("sm_80", 128, 35, 0, 12, 32),     # 40 allocated -> 12; 32 -> 64 warps / 4 = 16 (all an SM holds)
    ("sm_80", 128, 24, 0, 16, None),   # already 64 warps: registers do not limit
    ("sm_90", 128, 125, 0, 4, 96),     # 5 CTAs need <= 102 registers, allocated 96
    ("sm_86", 128, 40, 0, 12, None),   # 48 warps per SM: 12 CTAs already
    ("sm_80", 128, 40, 40 * 1024, 4, None),   # shared memory (41 KiB per CTA of 164 KiB) limits, not registers
])
def test_resident_ctas_and_the_cap_that_adds_one(gpu, threads, regs, shared, ctas, cap):
    assert resident_ctas(gpu, threads, regs, shared) == ctas
    assert register_cap_for_more_ctas(gpu, threads, regs, shared) == cap
    if cap is not None:
        assert resident_ctas(gpu, threads, cap, shared) > ctas


# ---------------------------------------------------------------- the PTX edit

PTX = """.version 8.7
.target sm_90a
.address_size 64

.visible .entry first(
\t.param .u64 first_param_0
)
.reqntid 128
{
\tret;
}

.visible .entry second(
\t.param .u64 second_param_0
)
.reqntid 128
.maxnreg 64
{
\tret;
}
"""


def test_caps_go_into_the_named_entries_directives_only():
    out = with_register_caps(PTX, {"first": 48, "second": 40, "absent": 32})
    assert ".reqntid 128\n.maxnreg 48\n{" in out.split(".entry second")[0]
    assert out.split(".entry second")[1].count(".maxnreg") == 1    # its own cap stays
    assert with_register_caps(PTX, {}) == PTX


# ---------------------------------------------------------------- the decision (fake cubins)


def _code(regs, instructions, frame=0):
    return KernelCode(regs, frame, instructions, 128, 0)


def _trim(monkeypatch, runs: dict[bytes, dict[str, KernelCode]]) -> OccupancyTrim:
    monkeypatch.setattr(occupancy, "kernel_code", lambda cubin: runs[cubin])
    return OccupancyTrim("sm_90", PTX, b"first")


def test_a_cap_is_kept_only_when_it_costs_next_to_nothing(monkeypatch):
    # at most 1 in 128 more instructions: 700 may become 705, 400 only 403
    runs = {b"first": {"first": _code(50, 700), "second": _code(53, 400)},
            b"capped": {"first": _code(48, 705), "second": _code(48, 404)},
            b"first only": {"first": _code(48, 705), "second": _code(53, 400)}}
    trim = _trim(monkeypatch, runs)
    assert trim.caps == {"first": 48, "second": 48}
    ptx = trim.next_ptx()
    assert ptx.count(".maxnreg 48") == 1           # second already had a .maxnreg: left as written
    trim.feed(b"capped")
    again = trim.next_ptx()                         # only the kept cap, assembled once more
    assert again == with_register_caps(PTX, {"first": 48})
    trim.feed(b"first only")
    assert trim.next_ptx() is None
    ptx, cubin, caps = trim.result()
    assert (ptx, cubin) == (again, b"first only")
    assert [(c.kernel, c.kept) for c in caps] == [("first", True), ("second", False)]
    assert "9 -> 10 CTAs per SM, 700 -> 705 instructions" in caps[0].describe()
    assert caps[1].describe().startswith("a register cap of 48 for occupancy was dropped: it costs more instr")


def test_spills_drop_a_cap_and_nothing_is_tried_at_full_occupancy(monkeypatch):
    runs = {b"first": {"first": _code(50, 700), "second": _code(30, 100)},
            b"capped": {"first": _code(48, 650, frame=16), "second": _code(30, 100)}}
    trim = _trim(monkeypatch, runs)
    assert trim.caps == {"first": 48}               # 30 registers: 16 CTAs already
    trim.feed(b"capped")
    assert trim.next_ptx() is None
    ptx, cubin, caps = trim.result()
    assert (ptx, cubin) == (PTX, b"first")          # as first assembled
    assert "spills" in caps[0].describe()


def test_far_caps_are_not_tried(monkeypatch):
    # 40 -> 32 registers would give 16 CTAs instead of 12, but cuts a fifth of them
    trim = _trim(monkeypatch, {b"first": {"first": _code(40, 300), "second": _code(16, 50)}})
    assert trim.caps == {} and trim.next_ptx() is None


# ---------------------------------------------------------------- through ptxas


@requires_corpus
def test_math_chain_gets_full_occupancy_on_sm_80_when_asked(tmp_path):
    """ptxas gives math_chain_f32_t256 35 registers on sm_80 (12 CTAs per SM); capped at 32 it fits 16
    with no more instructions, and the drop-in (`--register-caps`) and the batch write that code and the PTX it
    came from."""
    result = compile_in_process(str(MATH_CHAIN), MATH_CHAIN.read_bytes(), CompileOptions("sm_80", register_caps=True),
                                with_remarks=True)
    assert result.ok and ".maxnreg 32" in result.ptx
    ((name, capped),) = kernel_code(result.cubin).items()
    assert capped.registers <= 32 and capped.frame_bytes == 0
    assert resident_ctas("sm_80", capped.threads, capped.registers, capped.shared_bytes) == 16
    plain = kernel_code(assemble(re.sub(r"^\.maxnreg 32\n", "", result.ptx, flags=re.M),
                                 PtxasOptions("sm_80", 3)))[name]
    assert plain.registers > 32 and capped.instructions <= plain.instructions + plain.instructions // 128
    (remark,) = [r for r in result.remarks if r.name == "OccupancyRegisterCap"]
    assert remark.kind == "passed" and "12 -> 16 CTAs per SM" in remark.message

    from test_pipeline_batch import run_batch
    finished, _ = run_batch([MATH_CHAIN], tmp_path, targets=("sm_80",), jobs=1, keep_ptx=True, register_caps=True)
    assert finished.exit_code == 0
    stem = tmp_path / "math_chain_f32_t256.v13.4.sm_80"
    assert Path(f"{stem}.cubin").read_bytes() == result.cubin
    assert Path(f"{stem}.ptx").read_text() == result.ptx

    from tileiras_async.cli.tileiras import main
    out = tmp_path / "dropin.cubin"
    assert main(["--gpu-name", "sm_80", "--register-caps", str(MATH_CHAIN), "-o", str(out)]) == 0
    assert out.read_bytes() == result.cubin


@requires_corpus
def test_no_cap_unless_asked(tmp_path):
    """Off by default: on an H100 no capped kernel ran faster (bench/results/gpu_h100_ab.json)."""
    result = compile_in_process(str(MATH_CHAIN), MATH_CHAIN.read_bytes(), CompileOptions("sm_80"),
                                with_remarks=True)
    assert result.ok and ".maxnreg" not in result.ptx
    assert not [r for r in result.remarks if r.name == "OccupancyRegisterCap"]
    assert result.cubin == assemble(result.ptx, PtxasOptions("sm_80", 3))


@requires_corpus
def test_no_cap_below_O3(tmp_path):
    result = compile_in_process(str(MATH_CHAIN), MATH_CHAIN.read_bytes(),
                                CompileOptions("sm_80", opt_level=2, register_caps=True))
    assert result.ok and ".maxnreg" not in result.ptx


@requires_corpus
def test_a_capped_run_that_fails_leaves_the_first_assembly(monkeypatch):
    from tileiras_async.toolchain import ptxas
    real = ptxas.assemble_with_report

    def refuse_caps(text, opts, **kw):
        if ".maxnreg" in text:
            raise ptxas.PtxasError("ptxas timed out", stderr="", ptxas_rc=None)
        return real(text, opts, **kw)

    monkeypatch.setattr(ptxas, "assemble_with_report", refuse_caps)
    result = compile_in_process(str(MATH_CHAIN), MATH_CHAIN.read_bytes(), CompileOptions("sm_80", register_caps=True))
    assert result.ok and ".maxnreg" not in result.ptx
    assert result.cubin == assemble(result.ptx, PtxasOptions("sm_80", 3))


@requires_corpus
def test_a_module_keeps_one_kernels_cap_and_drops_the_others():
    """Two kernels in one PTX module (one ptxas run each time): math_chain's cap is kept, cumsum_carry's
    (48 -> 40 registers) costs instructions; the third run, with the kept cap only, gives each kernel the
    code of its own best run."""
    from tileiras_async import stages
    from tileiras_async.stages import AssembleRequest, CodegenRequest, LowerRequest, ParseRequest
    opts = CompileOptions("sm_80", register_caps=True)
    lowered, globals_ir = [], None
    for path in (MATH_CHAIN, PUBLIC / "cumsum_carry_f32_t512.v13.4.tileirbc"):
        parsed = stages.parse(ParseRequest(str(path), path.read_bytes()))
        lowered += [stages.lower(LowerRequest(str(path), k, opts)) for k in parsed.kernel_ir]
        globals_ir = parsed.globals_ir
    ptx = stages.codegen(CodegenRequest("two.tileirbc", lowered, opts, globals_ir)).ptx
    cubin = stages.assemble(AssembleRequest(ptx, opts, resource_report=True))
    assert cubin.ok and cubin.ptx.count(".maxnreg") == 1
    caps = {r.function.split("_Kt")[0]: r for r in cubin.remarks if r.name == "OccupancyRegisterCap"}
    assert caps["math_chain"].kind == "passed" and caps["cumsum_carry"].kind == "missed"
    code = {k.split("_Kt")[0]: c for k, c in kernel_code(cubin.cubin).items()}
    alone = {k.split("_Kt")[0]: c for k, c in kernel_code(assemble(ptx, PtxasOptions("sm_80", 3))).items()}
    assert code["cumsum_carry"] == alone["cumsum_carry"]
    assert code["math_chain"].registers <= 32 < alone["math_chain"].registers
