"""The tile-GPU IR text reads back (tilegpu/parser.py): every section `--print-ir-after-all` prints parses and
prints back identically, compiling on from a parsed section gives the normal compile's PTX byte for byte, bad
text gets one `error: FILE:LINE:COL: ...` line, and `tileiras-async opt` runs passes over text."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir import types as T
from tileiras_async.ir.core import Operation
from tileiras_async.cli.batch import run as batch_run
from tileiras_async.driver import CodegenUnavailable, kernel_llvm_ir, module_ptx, resumed_kernel_ptx
from tileiras_async.targets import target
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.parser import ParseError, parse_kernel, split_sections
from tileiras_async.tilegpu.passes import IRPrinting, PASS_NAMES
from tileiras_async.tilegpu.printer import print_kernel
from tileiras_async.tilegpu.records import RECORDS

from conftest import LAUNCH, PUBLIC, positioned_refusals, requires_corpus

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SUITE = EXAMPLES / "suite"
SUITE_LAUNCH = SUITE / "launch"   # the suite's kernels as cuTile launches them: attention pipelined by TMA
TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")
# a few of each set: mma (mma.sync / wgmma / tcgen05, pipelined), scans, reductions, control flow, gathers
SAMPLE = [PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc", PUBLIC / "cumsum_carry_f32_t512.v13.4.tileirbc",
          PUBLIC / "argmax_rows_f16_256.v13.4.tileirbc", LAUNCH / "matmul_f16_f16out_128x128x64.v13.4.tileirbc",
          LAUNCH / "layernorm_f16_128.v13.4.tileirbc", LAUNCH / "gather_idx_f32_t128.v13.4.tileirbc"]
# and of this project's own sets (no corpus needed), on the targets whose lowerings differ most: attention-shaped
# loops (causal fmha's two, each with its `attention_plan`, on wgmma and on tcgen05), a split-K matmul under a lock,
# a scan
OWN_SAMPLE = [SUITE_LAUNCH / "fmha_causal_f16.v13.4.tileirbc",
              SUITE / "splitk_matmul_lock_f16.v13.4.tileirbc", EXAMPLES / "exclusive_scan_max_i32.v13.4.tileirbc"]
OWN_TARGETS = ("sm_90", "sm_100")
# the sections both runs compile on from (every section reads back): the passes' first decision, the schedules and
# pipeline plans on the loops, the pipeline's output, the final IR
RESUME_FROM = ("select-mma", "schedule-loops", "pipeline", "mark-uniform-branches")


def _everything() -> list[Path]:
    """Every kernel of the corpus's sets (`public`, `public-launch`: NVIDIA's goldens) and of this project's."""
    sets = [PUBLIC, LAUNCH, SUITE_LAUNCH, SUITE, EXAMPLES / "launch", EXAMPLES]
    return [p for d in sets if d.is_dir() for p in sorted(d.glob("*.v13.4.tileirbc"))]


def _case_id(path: Path, gpu: str) -> str:
    """The corpus's by their set (`public-launch/...`), this project's by their path (`examples/suite/...`):
    `-k examples` picks this project's sets."""
    where = path.parent.relative_to(REPO) if path.is_relative_to(REPO) else path.parent.name
    return f"{where}/{path.name.split('.')[0]}-{gpu}"


def _sections(path: Path, gpu: str):
    module = read_module(path.read_bytes())
    snapshots = []
    try:
        kernel_llvm_ir(module, module.functions[0], CodegenOptions(target=gpu), printing=IRPrinting(after_all=True),
                       snapshots=snapshots)
    except CodegenUnavailable as e:   # what the target cannot run (the real tool refuses it too)
        pytest.skip(f"not compiled for {gpu}: {e}")
    return module, snapshots


def _round_trip(path: Path, gpu: str, resume_from) -> None:
    module, snapshots = _sections(path, gpu)
    assert [s.pass_name for s in snapshots] == list(PASS_NAMES)
    for s in snapshots:
        assert print_kernel(parse_kernel(s.text, s.pass_name)) == s.text, f"{path.name} {gpu} after {s.pass_name}"
    expected = module_ptx(module, target(gpu))
    for s in snapshots:
        if resume_from is not None and s.pass_name not in resume_from:
            continue
        k = parse_kernel(s.text)
        got = resumed_kernel_ptx(k, s.pass_name, target(gpu), module)   # the module's globals: not in the text
        assert got == expected, f"{path.name} {gpu}: PTX compiled on from the text after {s.pass_name} differs"


@requires_corpus
@pytest.mark.parametrize("gpu", TARGETS)
@pytest.mark.parametrize("path", SAMPLE, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_sections_read_back_and_compile_on(path, gpu):
    _round_trip(path, gpu, RESUME_FROM)


@pytest.mark.parametrize("path,gpu", [pytest.param(p, g, id=_case_id(p, g)) for p in OWN_SAMPLE for g in OWN_TARGETS])
def test_own_sections_read_back_and_compile_on(path, gpu):
    _round_trip(path, gpu, RESUME_FROM)


def _every_case():
    for path in _everything():
        for gpu in TARGETS:
            yield pytest.param(path, gpu, id=_case_id(path, gpu))


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("path,gpu", list(_every_case()))
def test_every_kernel_reads_back_and_compiles_on(path, gpu):
    _round_trip(path, gpu, RESUME_FROM)


@requires_corpus
def test_a_dump_with_its_banner_reads_back(tmp_path):
    """What --print-ir-after-all writes on stderr: sections with banners, each readable on its own."""
    path = LAUNCH / "matmul_f16_f16out_128x128x64.v13.4.tileirbc"
    r = subprocess.run([sys.executable, "-m", "tileiras_async.cli.tileiras", "--gpu-name", "sm_90",
                        "--print-ir-after=pipeline", "--print-ir-after=insert-barriers", "-o",
                        str(tmp_path / "k.cubin"), str(path)], capture_output=True, text=True)
    sections = split_sections(r.stderr)
    assert len(sections) == 2 and all(s.startswith("// -----// IR Dump After") for s in sections)
    for s in sections:
        body = s.split("\n", 1)[1]
        assert print_kernel(parse_kernel(s)) == body
    with pytest.raises(ParseError, match=r"^<input>:\d+:1: a second dump section \(of 2\)"):
        parse_kernel(r.stderr)


def test_every_record_kind_is_a_dataclass_the_printer_names_the_same():
    from tileiras_async.tilegpu.printer import _kind
    assert all(_kind(cls) == kind for kind, cls in RECORDS.items())


_HEAD = 'tilegpu.options {target = "sm_90", num_warps = 4}\n'


@pytest.mark.parametrize("text, where, what", [
    ("tilegpu.kernel @k() {\n}\n", "1:1", "expected 'tilegpu.options'"),
    ('tilegpu.options {num_warps = 4}\ntilegpu.kernel @k() {\n}\n', "1:17", "do not name the target"),
    (_HEAD + "tilegpu.kernel @k() {\n  %0 = \"cuda_tile.nope\"() : () -> (tile<i32>)\n}\n", "3:8", "unknown op"),
    (_HEAD + "tilegpu.kernel @k() {\n  \"cuda_tile.return\"(%7) : (tile<i32>) -> ()\n}\n", "3:22",
     "undefined value '%7'"),
    (_HEAD + "tilegpu.kernel @k(%0: tile<4xwat>) {\n}\n", "2:30", "unknown type 'wat'"),
    (_HEAD + "tilegpu.kernel @k(%0: tile<4xf32, #blocked3>) {\n}\n", "2:35", "undeclared layout"),
    (_HEAD + "tilegpu.kernel @k() {\n  \"cuda_tile.return\"() {x = #tilegpu.bogus<a = 1>} : () -> ()\n}\n",
     "3:29", "unknown record kind 'bogus'"),
    (_HEAD + "tilegpu.kernel @k() {\n", "3:1", "expected"),
    (_HEAD + "tilegpu.kernel @k(%0: partition_view<tile=(4), padding_value = wat, tensor_view<?xf32, strides=[1]>>) {\n}\n",
     "2:64", "unknown PaddingValue 'wat'"),
])
def test_bad_text_is_one_positioned_error(text, where, what):
    with pytest.raises(ParseError) as e:
        parse_kernel(text, "in.tir")
    assert str(e.value).startswith(f"in.tir:{where}: ") and what in str(e.value), str(e.value)


def test_opt_without_passes_prints_what_it_read(tmp_path, capsys):
    text = _small_kernel_text()
    (tmp_path / "k.tir").write_text(text)
    assert batch_run(["opt", str(tmp_path / "k.tir")]) == 0
    assert capsys.readouterr().out == text


def test_opt_runs_the_named_passes_and_reports_errors(tmp_path, capsys):
    text = _small_kernel_text()
    (tmp_path / "k.tir").write_text(text)
    assert batch_run(["opt", str(tmp_path / "k.tir"), "--passes", "assign-layouts"]) == 0
    out = capsys.readouterr().out
    assert "#blocked0 = #tilegpu.linear<" in out and "#blocked0 = " not in text
    assert batch_run(["opt", str(tmp_path / "k.tir"), "--passes", "no-such-pass"]) == 1
    assert capsys.readouterr().err.startswith("error: unknown pass 'no-such-pass'")
    (tmp_path / "bad.tir").write_text(text.replace("tilegpu.kernel", "tilegpu.kernal"))
    assert batch_run(["opt", str(tmp_path / "bad.tir")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'bad.tir'}:2:1: expected 'tilegpu.kernel'") and err.count("\n") == 1
    assert batch_run(["opt", str(tmp_path / "missing.tir")]) == 1
    assert capsys.readouterr().err.startswith("error: cannot read")


def test_opt_gpu_name_replaces_the_target(tmp_path, capsys):
    (tmp_path / "k.tir").write_text(_small_kernel_text())
    assert batch_run(["opt", str(tmp_path / "k.tir"), "--gpu-name", "sm_120"]) == 0
    assert capsys.readouterr().out.startswith('tilegpu.options {target = "sm_120", ')


def _small_kernel_text() -> str:
    module = read_module((REPO / "examples" / "axpby_f32.v13.4.tileirbc").read_bytes())
    snapshots = []
    kernel_llvm_ir(module, module.functions[0], CodegenOptions(target="sm_90"),
                   printing=IRPrinting(before=frozenset({"assign-layouts"})), snapshots=snapshots)
    return snapshots[0].text


def test_records_shared_records_op_references_and_detached_ops_read_back():
    """The printer test's kernel: a record declared once and held by two ops reads back as one object, an
    attribute naming an op further down or a detached op reads back as that op."""
    from test_tilegpu_printer import _constants_module, _kernel
    from tileiras_async.ir import types as T
    from tileiras_async.ir.attrs import FloatAttr
    from tileiras_async.ir.core import Operation
    from tileiras_async.tilegpu.analysis.software_pipeline import Geometry
    k = _kernel(_constants_module())
    ops = k.fn.body.ops
    gone = Operation("addi", {"lhs": ops[0].result, "rhs": ops[0].result}, {}, [ops[0].result.type])
    ops[0].attrs.update(plan=Geometry(stages=4, chunks=2, kc=32, unit_bytes=8192), ahead=ops[2], gone=gone,
                        widths={"a": 16, "b": 8}, identities=[FloatAttr(T.F16, 0x3C00)])
    ops[1].attrs["ring"] = ops[2].attrs["ring"] = Geometry(stages=3, chunks=1, kc=16, unit_bytes=1024)
    text = print_kernel(k)
    back = parse_kernel(text)
    assert print_kernel(back) == text
    ops = back.fn.body.ops
    assert ops[1].attrs["ring"] is ops[2].attrs["ring"] and ops[1].attrs["ring"].stages == 3
    assert ops[0].attrs["ahead"] is ops[2] and ops[0].attrs["gone"].name == "addi"
    assert ops[0].attrs["gone"] not in ops and ops[0].attrs["widths"] == {"a": 16, "b": 8}
    assert ops[0].attrs["identities"] == [FloatAttr(T.F16, 0x3C00)]


def test_op_hints_read_back_as_cuda_tile_attributes():
    """cuTile's latency hints on a load: `#tilegpu.hints<...>`, every value with its type, in the order given."""
    from tileiras_async.ir import attrs as A
    text = _small_kernel_text()
    assert "optimization_hints" not in text
    hinted = text.replace("memory_ordering_semantics = weak, operand_segments = [1, 1, 1]}",
                          'memory_ordering_semantics = weak, operand_segments = [1, 1, 1], optimization_hints = '
                          '#tilegpu.hints<sm_90 = {latency = 3 : i32, allow_tma = false, "odd key" = 1 : i1}, '
                          'default = {}>}', 1)
    assert hinted != text
    k = parse_kernel(hinted)
    assert print_kernel(k).split("\n", 1)[1] == hinted.split("\n", 1)[1]
    hints = next(op.attrs["optimization_hints"] for op in k.fn.body.walk() if "optimization_hints" in op.attrs)
    assert hints == A.OptimizationHintsAttr((
        (b"sm_90", A.DictAttr(((b"latency", A.IntegerAttr(T.I32, 3)), (b"allow_tma", A.BoolAttr(False)),
                                (b"odd key", A.IntegerAttr(T.I1, 1))))),
        (b"default", A.DictAttr(()))))
    with pytest.raises(ParseError, match=r"a hint is a typed number"):
        parse_kernel(hinted.replace("latency = 3 : i32", "latency = 3"), "in.tir")


def test_instructions_read_back_as_the_very_constants():
    """Code generation tells mma instructions apart by identity (`instr is F8_F32`): a plan read back holds
    the module's constant, not an equal copy (a copy made fp8 block products accumulate in half)."""
    from tileiras_async.tilegpu.analysis.mma import F8_F32, MmaPlan
    from tileiras_async.tilegpu.records import canonical
    plan = MmaPlan(F8_F32, False, 1, 64, 64, 32, 4)
    text = _small_kernel_text().replace("{flush_to_zero = false,", f"{{plan = {{}}, flush_to_zero = false,", 1)
    k = parse_kernel(text)
    op = next(o for o in k.fn.body.walk() if "plan" in o.attrs)
    op.attrs["plan"] = plan
    back = next(o for o in parse_kernel(print_kernel(k)).fn.body.walk() if "plan" in o.attrs).attrs["plan"]
    assert back.instr is F8_F32 and back.instr == plan.instr
    copy = type(F8_F32)(*(getattr(F8_F32, f) for f in ("key", "m", "n", "k", "elem_bits", "word", "acc")))
    assert copy is not F8_F32 and canonical(copy) is F8_F32 and canonical(plan) is plan


@requires_corpus
def test_the_stage_copy_decision_reads_back_and_drives_the_schedule():
    """choose-stage-copies' `stage_copy = "tma"` on a K-loop's loads reads back as the decision: schedule-loops,
    run on the parsed text, books those loads as TMA copies and splits the loop (A and B both TMA); without
    the attribute the same text schedules cp.async copies and one warpgroup."""
    from tileiras_async.tilegpu.decisions import SCHEDULE_REPORT, STAGE_COPY
    from tileiras_async.tilegpu.ir import walk_ops
    from tileiras_async.tilegpu.passes import run_pipeline
    module = read_module((LAUNCH / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc").read_bytes())
    snapshots = []
    kernel_llvm_ir(module, module.functions[0], CodegenOptions(target="sm_90"),
                   printing=IRPrinting(after=frozenset({"choose-stage-copies"})), snapshots=snapshots)
    text = snapshots[0].text
    assert text.count('stage_copy = "tma"') == 2
    assert print_kernel(parse_kernel(text)) == text
    for decided in (True, False):
        k = parse_kernel(text if decided else text.replace(', stage_copy = "tma"', ""))
        loads = [op for op in walk_ops(k.fn.body) if op.name == "load_view_tko"]
        assert [op.attrs.get(STAGE_COPY) for op in loads] == (["tma", "tma"] if decided else [None, None])
        run_pipeline(k, after="choose-stage-copies", until="schedule-loops")
        [report] = [op.attrs[SCHEDULE_REPORT] for op in walk_ops(k.fn.body) if SCHEDULE_REPORT in op.attrs]
        booked = {o.rclass for o in report.ops if o.name == "load_view_tko"}
        assert booked == ({"tma_load"} if decided else {"cp_async_load"})
        assert bool(report.partitions) == decided


def _plain(v, at: dict[int, int]):
    """A record as nested tuples, each op it names as its place in the kernel: records of two kernels compare."""
    if isinstance(v, Operation):
        return ("op", at[id(v)])
    if isinstance(v, msgspec.Struct):
        return (type(v).__name__, *(_plain(getattr(v, f), at) for f in v.__struct_fields__))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return (type(v).__name__, *(_plain(getattr(v, f.name), at) for f in dataclasses.fields(v)))
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x, at) for x in v)
    return v


def _attention_plans(k) -> list:
    from tileiras_async.tilegpu.decisions import ATTENTION_PLAN
    from tileiras_async.tilegpu.ir import walk_ops
    at = {id(op): i for i, op in enumerate(walk_ops(k.fn.body))}
    return [_plain(op.attrs[ATTENTION_PLAN], at) for op in walk_ops(k.fn.body) if ATTENTION_PLAN in op.attrs]


@pytest.mark.parametrize("gpu", OWN_TARGETS)
def test_the_attention_plan_reads_back_and_drives_the_attention_loop(gpu):
    """schedule-loops' `attention_plan` on fmha's loop (as cuTile launches it) reads back as the record the
    pass made (its ops the parsed kernel's); the pipeline pass, run on the text, expands the loop as the normal
    compile does; the text's slot count is what it builds; without the record the loop stays a plain one."""
    from tileiras_async.tilegpu.analysis.attention_pipeline import AttentionPlan
    from tileiras_async.tilegpu.decisions import ATTENTION_PLAN
    from tileiras_async.tilegpu.ir import walk_ops
    from tileiras_async.tilegpu.passes import run_pipeline
    module = read_module((SUITE_LAUNCH / "fmha_f16.v13.4.tileirbc").read_bytes())
    snapshots = []
    kernel_llvm_ir(module, module.functions[0], CodegenOptions(target=gpu), snapshots=snapshots,
                   printing=IRPrinting(after=frozenset({"choose-stage-copies", "select-tensor-copies", "pipeline"})))
    unplanned, planned, pipelined = (s.text for s in snapshots)
    made = parse_kernel(unplanned)
    run_pipeline(made, after="choose-stage-copies", until="select-tensor-copies")
    [plan] = [op.attrs[ATTENTION_PLAN] for op in walk_ops(made.fn.body) if ATTENTION_PLAN in op.attrs]
    assert isinstance(plan, AttentionPlan) and plan.stages == 3 and len(plan.landed) == 2
    back = parse_kernel(planned)
    [read] = [op.attrs[ATTENTION_PLAN] for op in walk_ops(back.fn.body) if ATTENTION_PLAN in op.attrs]
    assert isinstance(read, AttentionPlan) and ATTENTION_PLAN in read.loop.attrs
    assert all(ld.mma.name == "mmaf" for ld in read.landed)
    assert _attention_plans(back) == _attention_plans(made)

    run_pipeline(back, after="select-tensor-copies", until="pipeline")
    assert print_kernel(back) == pipelined

    def built(text: str, keep_plan: bool = True):
        k = parse_kernel(text)
        if not keep_plan:
            [loop] = [op for op in walk_ops(k.fn.body) if ATTENTION_PLAN in op.attrs]
            del loop.attrs[ATTENTION_PLAN]
        run_pipeline(k, after="select-tensor-copies", until="pipeline")
        ops = list(walk_ops(k.fn.body))
        return ([op.attrs["stages"] for op in ops if op.name == "tilegpu.tma_barriers"],
                sum(op.name == "tilegpu.mma_landed" for op in ops))
    two = planned.replace("stages = 3, unit_bytes = 32768", "stages = 2, unit_bytes = 32768")
    assert two.count("stages = 2, unit_bytes = 32768") == 1
    # (Q's own mbarrier, then the ring's: one per slot)
    assert built(planned) == ([1, 3], 2) and built(two) == ([1, 2], 2) and built(planned, keep_plan=False) == ([], 0)


@requires_corpus
def test_locations_read_back():
    """--print-debuginfo's `loc("file":line:col)` on each op reads back into the kernel's module."""
    module = read_module((LAUNCH / "softmax_rows_f16_512.v13.4.tileirbc").read_bytes())
    snapshots = []
    kernel_llvm_ir(module, module.functions[0], CodegenOptions(target="sm_90"),
                   printing=IRPrinting(after=frozenset({"insert-barriers"}), debuginfo=True), snapshots=snapshots)
    text = snapshots[0].text
    assert ' loc("' in text
    k = parse_kernel(text)
    assert print_kernel(k, debuginfo=True) == text
    assert print_kernel(k) != text and " loc(" not in print_kernel(k)


def test_every_type_spelling_reads_back():
    """Types no corpus dump happens to show: pointer attributes, padded, strided, gather/scatter and dim-mapped
    views, shared-memory buffers, rank-0 and dynamic tiles."""
    types = ["tile<ptr<f32, <none>>>", "tensor_view<?x8xf16, strides=[?,1], #cuda_tile.ptr_attr<none>>",
             "partition_view<tile=(4x8), padding_value = neg_inf, tensor_view<?x?xf32, strides=[?,1]>, dim_map=[1, 0]>",
             "strided_view<tile=(4), traversal_strides=[2], tensor_view<?xbf16, strides=[1]>>",
             "gather_scatter_view<tile=(16x4), tensor_view<?x?xf8E4M3FN, strides=[?,1]>, sparse_dim=0>",
             "smem<1024>", "tile<i1>", "token", "tile<2x4xtf32>"]
    args = ", ".join(f"%{i}: {t}" for i, t in enumerate(types))
    text = (f'{_HEAD}tilegpu.kernel @"odd name"({args}) {{\n  "cuda_tile.return"() : () -> ()\n}}\n')
    # (the options line comes back with every option: those the text leaves out at their defaults)
    assert print_kernel(parse_kernel(text)).split("\n", 1)[1] == text.split("\n", 1)[1]


@pytest.mark.parametrize("tail", ["[" * 100000, "#tilegpu.geometry<stages = " * 50000, "dense<" + "[" * 100000])
def test_deep_nesting_is_an_error_not_a_crash(tail):
    text = _HEAD + 'tilegpu.kernel @k() {\n  "cuda_tile.return"() {x = ' + tail
    with pytest.raises(ParseError, match=r"^in\.tir:3:\d+: attributes or types nested too deeply"):
        parse_kernel(text, "in.tir")


def test_mangled_dumps_get_positioned_errors():
    """Cut, spliced and mutated copies of a real section: each parses or fails with a ParseError."""
    # nearly every mangling breaks the text
    assert positioned_refusals(parse_kernel, [_small_kernel_text()], 300, ParseError, "m.tir") > 200


def test_opt_reads_standard_input_and_exits_1_on_bad_text(monkeypatch, capsys):
    import io
    from tileiras_async.cli.batch import main
    text = _small_kernel_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["opt", "-", "--passes", "dce"]) == 0
    assert capsys.readouterr().out == text   # nothing dead in axpby
    monkeypatch.setattr(sys, "stdin", io.StringIO(text.replace("tile<f32>", "tile<f33>", 1)))
    assert main(["opt", "-"]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: <stdin>:2:\d+: unknown type 'f33'\n", err), err
