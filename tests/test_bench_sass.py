"""The code-quality benchmarks' readers (bench/_sass.py, bench/_build.py) on small fixed inputs: nvdisasm
text, control-flow loops, cubin ELF attributes, tensor-memory columns in PTX.  One check runs ptxas to make
sure the ELF figures are the ones `ptxas -v` states."""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LAUNCH, PUBLIC, nvidia_bin, requires_corpus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import _build  # noqa: E402
import _sass  # noqa: E402

# nvdisasm -c layout, trimmed: a K-loop with a nested spin-wait, an out-of-line retry block after EXIT that
# jumps back (no loop), a call to an internal function, conditional branch forms, padding.
SASS = """\
\t.target\tsm_90a

//--------------------- .text.kern --------------------------
\t.section\t.text.kern,"ax",@progbits
        .global         kern
        .type           kern,@function
kern:
.text.kern:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
        /*0030*/               @P0 BRA `(.L_x_9) ;
.L_x_0:
        /*0040*/                   LDGSTS.E [R2], desc[UR4][R4.64] ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_1:
        /*0060*/                   SHFL.BFLY PT, R6, R5, 0x1, 0x1f ;
        /*0070*/                   IADD3 R7, R7, 0x1, RZ ;
        /*0080*/                   ISETP.GE.AND P1, PT, R7, 0x4, PT ;
        /*0090*/              @!P1 BRA `(.L_x_1) ;
        /*00a0*/                   LDS.128 R8, [R2] ;
        /*00b0*/                   HMMA.16816.F32 R12, R8, R10, R12 ;
        /*00c0*/                   HMMA.16816.F32 R16, R8, R11, R16 ;
        /*00d0*/                   IMAD.WIDE R4, R3, 0x2, R4 ;
        /*00e0*/                   BRA.U !UP0, `(.L_x_8) ;
.L_x_7:
        /*00f0*/                   STS [R2], R12 ;
        /*0100*/                   SEL R3, R3, RZ, P2 ;
        /*0110*/               @P2 BRA `(.L_x_0) ;
        /*0120*/                   STL [R1], R3 ;
        /*0130*/                   CALL.REL.NOINC `($__internal_0_$__trap) ;
        /*0140*/                   STG.E desc[UR4][R4.64], R12 ;
        /*0150*/                   EXIT ;
.L_x_8:
        /*0160*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5+URZ+0x7010], R0 ;
        /*0170*/                   BRA `(.L_x_7) ;
.L_x_9:
        /*0180*/                   REDUX.SUM UR4, R0 ;
        /*0190*/                   BRA `(.L_x_0) ;
        .type           $__internal_0_$__trap,@function
$__internal_0_$__trap:
        /*01a0*/                   BPT.TRAP 0x1 ;
        /*01b0*/                   RET.REL.NODEC R2 `(kern) ;
.L_x_10:
        /*01c0*/                   BRA `(.L_x_10);
        /*01d0*/                   NOP;
        /*01e0*/                   NOP;
.L_x_11:


//--------------------- SYMBOLS --------------------------
"""


def test_parse_sass_reads_instructions_labels_and_entries():
    (fn,) = _sass.parse_sass(SASS)
    assert fn.section == "kern"
    assert fn.entries == ["kern", "$__internal_0_$__trap"]
    assert len(fn.instrs) == 31
    assert fn.labels[".L_x_1"] == 0x60 and fn.labels["$__internal_0_$__trap"] == 0x1A0
    bra = fn.instrs[3]
    assert (bra.guard, bra.opcode, _sass.branch_target(bra)) == ("@P0", "BRA", ".L_x_9")
    assert fn.instrs[5].base == "BAR" and fn.instrs[5].opcode == "BAR.SYNC.DEFER_BLOCKING"


def test_static_count_and_classes_leave_out_padding():
    (fn,) = _sass.parse_sass(SASS)
    assert _sass.static_count(fn) == 28          # 31 less two NOPs and the trailing self-branch
    ops = _sass.opcode_counts(fn.instrs, fn)
    assert "NOP" not in ops and ops["BRA"] == 6
    c = _sass.class_counts(ops)
    assert (c["BAR"], c["SHFL"], c["REDUX"], c["HMMA"], c["LDS"], c["STS"], c["LDGSTS"], c["STG"]) == \
           (1, 1, 1, 2, 1, 1, 1, 1)
    assert c["LOCAL"] == 1                       # the STL: what a spill becomes
    assert c["ADDR"] == 5                        # ISETP x2, IADD3, IMAD.WIDE, SEL
    assert c["HGMMA"] == c["UTCMMA"] == 0
    assert _sass.tensor_core_ops(ops) == {"HMMA": 2}
    assert _sass.class_of("UTCQMMA") == "UTCMMA" and _sass.TENSOR_CORE.match("UTCHMMA")


def test_loops_come_from_dominators_not_addresses():
    (fn,) = _sass.parse_sass(SASS)
    loops = _sass.natural_loops(fn)
    by_header = {lp.header: lp for lp in loops}
    # the K-loop (.L_x_0 .. the @P2 BRA back to it, through the out-of-line block at .L_x_8) and the inner
    # shuffle loop; the jump back from .L_x_8 to .L_x_7 and the one from .L_x_9 to .L_x_0 are no back-edges
    assert sorted(by_header) == [0x40, 0x60]
    outer, inner = by_header[0x40], by_header[0x60]
    assert inner.depth == 2 and outer.depth == 1
    assert [i.addr for i in inner.instrs] == [0x60, 0x70, 0x80, 0x90]
    assert {i.addr for i in outer.instrs} == set(range(0x40, 0x120, 0x10)) | {0x160, 0x170}
    assert _sass.innermost(loops) == [inner]
    assert _sass.main_loop(loops) is outer        # the loop holding the HMMAs, not the larger-count rule


def test_branch_forms_that_fall_through():
    mk = _sass.Instr
    assert _sass._falls_through(mk(0, "@!P0", "BRA", "`(.L_x_1)"))
    assert _sass._falls_through(mk(0, "", "BRA.U", "UP0, `(.L_x_1)"))
    assert _sass._falls_through(mk(0, "", "BRA.DIV", "~URZ, `(.L_x_1)"))
    assert not _sass._falls_through(mk(0, "", "BRA", "`(.L_x_1)"))
    assert not _sass._falls_through(mk(0, "", "RET.REL.NODEC", "R2 `(kern)"))
    assert not _sass._falls_through(mk(0, "", "EXIT", ""))
    assert _sass._falls_through(mk(0, "@P1", "EXIT", ""))


def _elf(arch: int, regs: int, frame: int, shared: int | None) -> bytes:
    """A minimal cubin-shaped ELF64: symbols, a module .nv.info with REGCOUNT/FRAME_SIZE, text, shared."""
    names = [b"", b".shstrtab", b".strtab", b".symtab", b".nv.info", b".text.k"] + \
            ([b".nv.shared.k"] if shared is not None else [])
    shstr = b"\0".join(names) + b"\0"
    strtab = b"\0k\0"
    symtab = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0x10, 5, 0, 16)   # symbol 1 = k, in .text.k
    info = (struct.pack("<BBHII", 4, _sass.EIATTR_REGCOUNT, 8, 1, regs)
            + struct.pack("<BBHI", 3, 0x1B, 0xFF, 0)[:4]                    # an inline-value attribute
            + struct.pack("<BBHII", 4, _sass.EIATTR_FRAME_SIZE, 8, 1, frame))
    text = bytes(16)
    blobs = [b"", shstr, strtab, symtab, info, text] + ([b""] if shared is not None else [])
    types = [0, 3, 3, 2, 0x70000000, 1] + ([8] if shared is not None else [])
    links = [0, 0, 0, 2, 3, 3, 0]
    sizes = [len(b) for b in blobs]
    if shared is not None:
        sizes[-1] = shared                                                  # NOBITS: a size, no bytes
    body, offs = b"", []
    for b in blobs:
        offs.append(64 + len(body))
        body += b
    shoff = 64 + len(body)
    hdr = bytearray(64)
    hdr[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", hdr, 0x28, shoff)
    struct.pack_into("<I", hdr, 0x30, (arch << 8) | 4)
    struct.pack_into("<HHH", hdr, 0x3A, 64, len(blobs), 1)
    name_off = [shstr.index(n + b"\0") if n else 0 for n in names]
    sh = b"".join(struct.pack("<IIQQQQIIQQ", name_off[i], types[i], 0, 0, offs[i], sizes[i], links[i], 0, 1,
                              24 if types[i] == 2 else 0) for i in range(len(blobs)))
    return bytes(hdr) + body + sh


def test_cubin_resources_from_elf_attributes():
    d = _elf(80, regs=40, frame=16, shared=512)
    assert _sass.cubin_arch(d) == 80
    assert _sass.cubin_resources(d) == {"k": _sass.Resources(40, 16, 512)}
    # sm_90+: the kernel's shared section holds the 1 KiB the driver reserves; ptxas -v leaves it out
    assert _sass.cubin_resources(_elf(90, 40, 0, 1024 + 512))["k"].shared_bytes == 512
    assert _sass.cubin_resources(_elf(100, 7, 0, None))["k"] == _sass.Resources(7, 0, 0)
    with pytest.raises(ValueError):
        _sass.cubin_resources(b"not an elf at all" * 8)


@requires_corpus
@pytest.mark.skipif(nvidia_bin("ptxas") is None, reason="ptxas (wheel nvidia-cuda-nvcc) not installed")
@pytest.mark.parametrize("gpu,arch", [("sm_90", "sm_90a"), ("sm_100", "sm_100a")])
def test_cubin_resources_agree_with_ptxas_v(tmp_path, gpu, arch):
    ptx = PUBLIC / f"softmax_rows_f32_128.v13.4.{gpu}.ptx"
    out = tmp_path / "k.cubin"
    proc = subprocess.run([str(nvidia_bin("ptxas")), "-v", "-arch", arch, str(ptx), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", proc.stderr)
    frame = int(re.search(r"(\d+) bytes stack frame", proc.stderr).group(1))
    (res,) = _sass.cubin_resources(out.read_bytes()).values()
    assert (res.registers, res.shared_bytes, res.frame_bytes) == (int(m.group(1)), int(m.group(2)), frame)


def test_tmem_columns_from_ptx():
    assert _build.tmem_columns(None) is None
    assert _build.tmem_columns("add.s32 %r1, %r2, 1;") == 0
    lit = "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [smem+16], 128;"
    assert _build.tmem_columns(lit) == 128
    reg = ("mov.b32 \t%r95, 64;\n\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 "
           "\t[global_smem_k+28704], %r95;")
    assert _build.tmem_columns(reg) == 64


def test_corpus_selection_and_cache_key(tmp_path):
    for name in ("a_f32.v13.4.tileirbc", "ab_f16.v13.4.tileirbc", "a_f32.v13.3.tileirbc", "c.v13.4.tileirbc"):
        (tmp_path / name).write_bytes(b"")
    ids = [_build.kernel_id(p) for p in _build.corpus_kernels(tmp_path)]
    assert ids == ["a_f32", "ab_f16", "c"]
    assert [_build.kernel_id(p) for p in _build.corpus_kernels(tmp_path, "a_f32,c")] == ["a_f32", "c"]
    assert [_build.kernel_id(p) for p in _build.corpus_kernels(tmp_path, "f16")] == ["ab_f16"]
    assert [_build.kernel_id(p) for p in _build.corpus_kernels(tmp_path, sample=2)] == ["a_f32", "c"]
    k = _build.real_cache_key(b"x", "sm_90", "V13.5.37")
    assert k == _build.real_cache_key(b"x", "sm_90", "V13.5.37")
    assert len({k, _build.real_cache_key(b"x", "sm_80", "V13.5.37"), _build.real_cache_key(b"y", "sm_90", "V13.5.37"),
                _build.real_cache_key(b"x", "sm_90", "V13.5.38")}) == 4


@pytest.mark.parametrize("name, cap", [("flash_attention_causal_gqa_f16", 125), ("flash_attention_ragged_f16", 123)])
def test_attention_registers_stay_near_the_real_tools(name, cap):
    """Issue 13's attention figure, sm_90: our cubin's registers within 1.1x of NVIDIA's for the same
    bytecode, 0 spills (stack frame). Q staged once before the loops (hoist-operand-staging), the thread's
    coordinates computed again after each top-level loop and as shifts of the thread id, and sizes and strides
    widened as the non-negative values they are assumed to be keep them at 125/123 where they were 146/151
    (NVIDIA: 116/114)."""
    if _build.real_tool() is None or nvidia_bin("nvdisasm") is None:
        pytest.skip("NVIDIA's tileiras or nvdisasm is not installed")
    path = Path(__file__).resolve().parents[1] / "examples" / "suite" / f"{name}.v13.4.tileirbc"
    ours = _build.measure_safely(_build.compile_ours(path, "sm_90"))
    real = _build.measure_safely(_build.compile_real(path, "sm_90", cache_dir=None))
    assert ours["ok"] and real["ok"], (ours.get("error"), real.get("error"))
    assert ours["frame"] == 0
    assert ours["registers"] <= 1.1 * real["registers"], (ours["registers"], real["registers"])
    assert ours["registers"] <= cap


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_shuffles_in_a_loop_that_breaks_keep_their_fast_path(gpu):
    """first_exceed_f32_16 breaks out of its loop on a shuffled sum: with the branch marked warp-uniform
    (vote.sync.any) ptxas emits plain SHFLs, no call to its diverged-warp routine, and the kernel takes fewer
    instructions and registers than with the slow paths (124 and 21 on sm_80)."""
    if nvidia_bin("nvdisasm") is None:
        pytest.skip("nvdisasm is not installed")
    ours = _build.measure_safely(_build.compile_ours(PUBLIC / "first_exceed_f32_16.v13.4.tileirbc", gpu))
    assert ours["ok"], ours.get("error")
    assert ours["classes"]["SHFL"] >= 4
    assert not ours["opcodes"].get("CALL") and not ours["opcodes"].get("WARPSYNC")
    assert ours["static"] <= 100 and ours["registers"] <= 20


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_launch_matmuls_take_no_more_barriers_than_nvidia(gpu):
    """Issue 30: on the launch set every matmul and batched matmul takes no more CTA barrier instructions
    (SASS BAR) than NVIDIA's tileiras for the same bytecode: mbarriers order what the consumer's barriers did
    around tcgen05's tensor memory (sm_100) and release the buffers of an mma.sync TMA ring (both targets).
    The real tool's cubins come from the benchmarks' cache (compiled there when missing)."""
    if _build.real_tool() is None or nvidia_bin("nvdisasm") is None:
        pytest.skip("NVIDIA's tileiras or nvdisasm is not installed")
    paths = sorted(p for p in LAUNCH.glob("*.v13.4.tileirbc") if p.name.startswith(("matmul", "bmm")))
    assert len(paths) >= 10
    over = {}
    for path in paths:
        ours = _build.measure_safely(_build.compile_ours(path, gpu))
        real = _build.measure_safely(_build.compile_real(path, gpu))
        assert ours["ok"] and real["ok"], (path.name, ours.get("error"), real.get("error"))
        if ours["classes"]["BAR"] > real["classes"]["BAR"]:
            over[_build.kernel_id(path)] = (ours["classes"]["BAR"], real["classes"]["BAR"])
    assert not over, f"ours > NVIDIA's BAR (ours, NVIDIA's): {over}"
