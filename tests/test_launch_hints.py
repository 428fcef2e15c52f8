"""The launch hints as facts (tilegpu/analysis/facts.py): what cuTile promises at launch removes run-time checks.

The same matmul as exported plainly (`public`) and as cuTile launches it (`public-launch`: `assume div_by` on
pointers, sizes and strides, literal unit strides): the pipelined K-loop of the first keeps its run-time
alignment check and a one-element-at-a-time fallback loop; the second relies on the promise and has only the
16-byte-copy loop. The emulator refuses arguments that break a promise the code relies on.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, corpus_case, requires_corpus

CASE = "matmul_f16_f16out_128x128x64"


def _module(root, cid=CASE):
    from tileiras_async.bytecode.reader import read_module
    return read_module((root / f"{cid}.v13.4.tileirbc").read_bytes())


def _partition_views(module):
    fn = module.functions[0]
    return [op.result for op in fn.body.walk() if op.name == "make_partition_view"]


@requires_corpus
def test_known_divisor_follows_the_assume_chain():
    from tileiras_async.tilegpu.analysis.facts import known_divisor, view_strides_and_base
    launch = _partition_views(_module(LAUNCH))
    base, strides = view_strides_and_base(launch[0])
    assert base == 16                      # div_by<16> on the f16 pointer: bytes
    assert strides == [(0, 8), (1, 1)]     # a dynamic stride promised a multiple of 8 elements, a literal 1
    fn = _module(LAUNCH).functions[0]
    assert known_divisor(fn.body.args[0]) == 1   # the argument itself carries no promise; its assume does
    plain = _partition_views(_module(PUBLIC))
    base, strides = view_strides_and_base(plain[0])
    assert base == 1 and all(div == 1 for _, div in strides)


@requires_corpus
@pytest.mark.parametrize("width,expected", [(16, True), (32, False)])
def test_view_rows_aligned_only_as_far_as_promised(width, expected):
    from tileiras_async.tilegpu.analysis.facts import view_rows_aligned
    assert all(view_rows_aligned(v, 2, 2, width) is expected for v in _partition_views(_module(LAUNCH)))
    assert not any(view_rows_aligned(v, 2, 2, 16) for v in _partition_views(_module(PUBLIC)))


@requires_corpus
def test_view_extent_divisor_follows_the_shape_promise():
    """cuTile promises the tf32 matmul's sizes multiples of 16 (`assume div_by<16>` under `bounded`); the plain
    export promises nothing."""
    from tileiras_async.tilegpu.analysis.facts import view_extent_divisor
    cid = "matmul_tf32_64x64x32"
    for v in _partition_views(_module(LAUNCH, cid)):
        assert [view_extent_divisor(v, d) for d in range(2)] == [16, 16]
    for v in _partition_views(_module(PUBLIC, cid)):
        assert [view_extent_divisor(v, d) for d in range(2)] == [1, 1]


def _pipelining_remark(root, gpu):
    from tileiras_async.cli.tileiras import main
    import contextlib
    import io
    import tempfile
    err = io.StringIO()
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stderr(err):
        rc = main([str(root / f"{CASE}.v13.4.tileirbc"), "--gpu-name", gpu, "-o", f"{d}/k.cubin",
                   "--remarks=all", "--no-cache"])
    assert rc == 0, err.getvalue()
    [line] = [x for x in err.getvalue().splitlines() if "software-pipelined" in x]
    return line


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90", "sm_100"])
def test_hinted_k_loop_has_no_fallback_version(gpu):
    assert "versions: a16+b16, a2+b2)" in _pipelining_remark(PUBLIC, gpu)
    assert "versions: a16+b16)" in _pipelining_remark(LAUNCH, gpu)


@requires_corpus
def test_emulator_refuses_arguments_that_break_a_promise(refs):
    from tileiras_async.emu.errors import LaunchError
    from tileiras_async.emu.runner import run_compiled
    inputs, _, grid = corpus_case(refs, CASE)
    a = inputs["A"]
    wider = np.zeros((a.shape[0], a.shape[1] + 1), a.dtype)
    inputs["A"] = wider[:, :a.shape[1]]    # a row stride of 129 halves: not the promised multiple of 8
    with pytest.raises(LaunchError, match=r"entry parameter 3 is 129, but the kernel assumes it is divisible by 8"):
        run_compiled(LAUNCH / f"{CASE}.v13.4.tileirbc", grid, list(inputs.values()), gpu_name="sm_90")


def _accesses_after_vectorize(root, cid, gpu="sm_90"):
    from tileiras_async.targets import target
    from tileiras_async.tilegpu.ir import KernelIR, clone_function
    from tileiras_async.tilegpu.options import CodegenOptions
    from tileiras_async.tilegpu.passes import run_pipeline
    module = _module(root, cid)
    k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(target=target(gpu)))
    run_pipeline(k, until="vectorize-view-accesses")
    return [op for op in k.fn.body.walk() if op.name in ("load_view_tko", "store_view_tko")]


@requires_corpus
def test_vectorize_marks_only_promised_accesses():
    # the f16 accumulator's pairs of columns: 4-byte stores where the hints promise alignment and extents
    [store] = [op for op in _accesses_after_vectorize(LAUNCH, CASE) if op.name == "store_view_tko"]
    assert store.attrs["vector_width"] == 2
    assert all("vector_width" not in op.attrs for op in _accesses_after_vectorize(PUBLIC, CASE))
    # aligned rows of 4 contiguous halves per thread, but extents not promised divisible: element by element
    assert all("vector_width" not in op.attrs for op in _accesses_after_vectorize(LAUNCH, "reduce2d_rows_f16_16x128"))


@requires_corpus
@pytest.mark.parametrize("root,case,gpu,store,remark", [
    # sm_90's hinted epilogue leaves by TMA (select-tile-tensor-stores, tests/test_tensor_stores.py), so does
    # sm_100's 128x128 one (rows of 256 bytes a thread); a 64x64 tile's accumulator comes out of tensor memory
    # a half row per thread: 8 consecutive bf16 a vector
    (LAUNCH, "matmul_bf16_64x64x64", "sm_100", "st.global.v4.b32",
     "4 predicated 128-bit access(es) per thread (vectors of 8 elements"),
    (PUBLIC, CASE, "sm_90", "st.global.b16",
     "128 predicated 16-bit access(es) per thread (bounds-checked element by element"),
])
def test_vector_stores_in_the_ptx_and_the_remark(tmp_path, root, case, gpu, store, remark):
    import contextlib
    import io
    from tileiras_async.cli.tileiras import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main([str(root / f"{case}.v13.4.tileirbc"), "--gpu-name", gpu, "-o", str(tmp_path / "k.cubin"),
                   "--remarks=memory", "--no-cache"])
    assert rc == 0, err.getvalue()
    assert any(remark in x for x in err.getvalue().splitlines() if "store_view_tko" in x), err.getvalue()
    import tileiras_async
    ptx = tileiras_async.compile_module(str(root / f"{case}.v13.4.tileirbc"), gpu).ptx
    stores = [x for x in ptx.splitlines() if "st.global" in x]
    assert len(stores) == int(remark.split()[0]) and all(store in x for x in stores)


@requires_corpus
def test_vector_store_words_come_straight_from_the_conversions():
    """Each 32-bit word of a vector store of halves is the pair's own cvt.rn.f16x2.f32 result: no 64-bit
    repacking of the words in between (a whole-vector bitcast made NVPTX build them through cvt.u64.u32,
    shl.b64 and or.b64, 10 of the epilogue's 20 instructions per vector).  cuTile's FMHA as launched on sm_100:
    O's rows of 64 halves (128 bytes a thread) leave by vector stores, not TMA."""
    import re
    import tileiras_async
    fmha = Path(__file__).resolve().parents[1] / "examples" / "suite" / "launch" / "fmha_f16.v13.4.tileirbc"
    ptx = tileiras_async.compile_module(str(fmha), "sm_100").ptx
    converted = set(re.findall(r"cvt\.rn\.f16x2\.f32\s+(%r\d+),", ptx))
    stores = re.findall(r"st\.global\.v4\.b32 \[%rd\d+\], \{([^}]*)\}", ptx)
    assert len(stores) == 8
    assert all(w.strip() in converted for words in stores for w in words.split(","))
    widened = re.findall(r"cvt\.u64\.u32\s+%rd\d+, (%r\d+);", ptx)
    assert not converted & set(widened)
