"""Executed thread-instructions by class (emu/stats.py): the opcode table, exact counts on hand-written PTX
(divergence included), NVIDIA's corpus PTX with tensor cores, barriers and shuffles, and `run --stats`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import PUBLIC, corpus_case, requires_corpus

from tileiras_async.emu import DeviceMemory, emulate_ptx
from tileiras_async.emu.stats import CLASSES, classify

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"


@pytest.mark.parametrize("opcode,cls", [
    ("ld.global.v4.b32", "memory"), ("st.shared.b32", "memory"), ("atom.global.add.u32", "memory"),
    ("cp.async.cg.shared.global", "memory"), ("cp.async.bulk.shared::cluster.global", "memory"),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "memory"), ("tcgen05.ld.sync.aligned.32x32b.x8.b32", "memory"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "tensor_core"),
    ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", "tensor_core"),
    ("tcgen05.mma.cta_group::1.kind::f16", "tensor_core"),
    ("bar.sync", "barrier"), ("barrier.sync.aligned", "barrier"), ("bar.warp.sync", "barrier"),
    ("mbarrier.try_wait.parity.shared::cta.b64", "barrier"), ("cp.async.mbarrier.arrive.noinc.shared.b64", "barrier"),
    ("shfl.sync.bfly.b32", "shuffle"),
    ("add.s32", "other"), ("wgmma.fence.sync.aligned", "other"), ("bra.uni", "other"), ("fence.proxy.async", "other"),
    ("redux.sync.add.s32", "other"), ("membar.cta", "other"), ("ldu", "memory"), ("lds", "other"),
])
def test_opcode_classes(opcode, cls):
    assert classify(opcode) == cls


# 64 threads per CTA: every thread loads, shuffles, syncs; the odd threads take a branch with one extra add.
PTX = HEAD + """
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;
    bar.sync 0;
    and.b32 %r3, %r1, 1;
    setp.eq.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    add.s32 %r2, %r2, 100;
DONE:
    st.global.u32 [%rd3], %r2;
    ret;
}
"""


def _run_small(ctas: int = 2):
    mem = DeviceMemory()
    out = np.zeros(64, np.uint32)
    addr = mem.alloc_array(out)
    rep = emulate_ptx(PTX, "k", (ctas, 1, 1), (64, 1, 1), [addr], mem)
    mem.copy_back(addr, out)
    return rep, out


def test_exact_counts_with_divergence():
    rep, out = _run_small()
    assert out[1] == 100 and out[0] == 1      # the lanes swap through the shuffle; odd ones added 100
    n = 2 * 64
    # every thread: ld.param and st (memory), shfl, bar, and mov, mul, add, and, setp, bra, ret (other);
    # the odd half one more add
    assert rep.instruction_classes == {"memory": 2 * n, "tensor_core": 0, "barrier": n, "shuffle": n,
                                       "other": 7 * n + n // 2}
    assert sum(rep.instruction_classes.values()) == rep.thread_instructions == 11 * n + n // 2


def test_counts_are_per_launch_and_scale_with_the_grid():
    one, _ = _run_small(1)
    three, _ = _run_small(3)
    assert {k: 3 * v for k, v in one.instruction_classes.items()} == three.instruction_classes
    assert set(one.as_dict()) >= {f"instructions.{c}" for c in CLASSES}


def _nvidia(refs, cid: str, gpu: str = "sm_90"):
    from tileiras_async.emu.runner import run_ptx
    inputs, _orig, grid = corpus_case(refs, cid)
    ptx = (PUBLIC / f"{cid}.v13.4.{gpu}.ptx").read_text()
    return run_ptx(PUBLIC / f"{cid}.v13.4.tileirbc", ptx, grid, list(inputs.values())).report


@requires_corpus
def test_nvidia_ptx_classes(refs):
    mm = _nvidia(refs, "matmul_f16_f32acc_64x64x32").instruction_classes     # wgmma, mbarriers, bar.sync
    assert mm["tensor_core"] > 0 and mm["barrier"] > 0 and mm["memory"] > 0 and mm["other"] > 0
    sm = _nvidia(refs, "softmax_rows_f32_128").instruction_classes           # shfl.bfly reductions
    assert sm["shuffle"] > 0 and sm["memory"] > 0 and sm["tensor_core"] == 0
    again = _nvidia(refs, "softmax_rows_f32_128")
    assert again.instruction_classes == sm and sum(sm.values()) == again.thread_instructions


@requires_corpus
@pytest.mark.parametrize("engine", ["emulate", "both"])
def test_run_stats_file(refs, tmp_path, engine):
    from tileiras_async.cli import batch
    cid = "softmax_rows_f16_512"
    inputs, _, grid = corpus_case(refs, cid)
    np.savez(tmp_path / "in.npz", **{str(i): np.asarray(v) for i, v in enumerate(inputs.values())})
    texts = []
    for k in range(2):
        stats = tmp_path / f"stats{k}.json"
        rc = batch.main(["run", str(PUBLIC / f"{cid}.v13.4.tileirbc"), "--grid", ",".join(map(str, grid)),
                         "--args", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"),
                         "--engine", engine, "--gpu-name", "sm_90", "--stats", str(stats)])
        assert rc == 0
        texts.append(stats.read_text())
    assert texts[0] == texts[1]                                   # deterministic, byte for byte
    doc = json.loads(texts[0])
    ti = doc["thread_instructions"]
    assert doc["kernel"].startswith("softmax_rows") and doc["grid"] == list(grid) + [1] * (3 - len(grid))
    assert set(ti) == {"total", *CLASSES}
    assert sum(ti[c] for c in CLASSES) == ti["total"] > 0
    assert ti["memory"] > 0 and ti["barrier"] + ti["shuffle"] > 0 and ti["tensor_core"] == 0


@requires_corpus
def test_stats_need_the_emulator(tmp_path, capsys):
    from tileiras_async.cli import batch
    np.savez(tmp_path / "in.npz", **{"0": np.zeros(4, np.float32)})
    rc = batch.main(["run", str(PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"), "--grid", "1", "--args",
                     str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz"), "--stats", str(tmp_path / "s.json")])
    assert rc == 1
    assert capsys.readouterr().err.strip() == "error: --stats needs the emulator: --engine emulate or both"
    assert not (tmp_path / "s.json").exists()
