"""Each kernel's resource table (toolchain/resources.py): the figures read from the cubin are `ptxas -v`'s,
and the batch (--resources, --json, the cache), the remarks and the drop-in carry them.

`ptxas -v` is the oracle: the same PTX assembled with the same arguments plus -v (which changes only the
command line recorded in the cubin's .note.nv.tkinfo), its report parsed here.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tileiras_async.stages import CompileOptions, compile_in_process
from tileiras_async.targets import occupancy, target
from tileiras_async.toolchain import PtxasOptions, assemble, default_toolchain
from tileiras_async.toolchain.occupancy import with_register_caps
from tileiras_async.toolchain.resources import KernelResources, entry_bodies, kernel_resources

from conftest import PUBLIC, requires_corpus

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the oracle: ptxas -v


def ptxas_v(ptx: str, gpu_name: str, tmp_path: Path) -> dict[str, dict[str, int]]:
    """Per entry: what `ptxas -v` reports for this PTX (assembled as the product assembles it)."""
    src, out = tmp_path / "oracle.ptx", tmp_path / "oracle.cubin"
    src.write_text(ptx)
    argv = [str(default_toolchain().ptxas), "-arch", target(gpu_name).ptx_target, str(src), "-o", str(out),
            "--opt-level", "3", "-v"]
    report = subprocess.run(argv, capture_output=True, text=True, check=True).stderr
    out_: dict[str, dict[str, int]] = {}
    kernel = None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            kernel = m.group(1)
            out_[kernel] = {"smem": 0, "barriers": 0}
        elif kernel and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                        line)):
            out_[kernel].update(stack=int(m.group(1)), stores=int(m.group(2)), loads=int(m.group(3)))
        elif kernel and (m := re.search(r"Used (\d+) registers", line)):
            out_[kernel]["registers"] = int(m.group(1))
            if b := re.search(r"used (\d+) barriers", line):
                out_[kernel]["barriers"] = int(b.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                out_[kernel]["smem"] = int(s.group(1))
    return out_


def our_ptx(name: str, gpu_name: str) -> str:
    path = PUBLIC / f"{name}.v13.4.tileirbc"
    result = compile_in_process(str(path), path.read_bytes(), CompileOptions(gpu_name))
    assert result.ok, result.diagnostics
    return result.ptx


def capped(ptx: str, registers: int) -> str:
    """The PTX with every entry capped at `registers` (.maxnreg): ptxas then spills."""
    return with_register_caps(ptx, {k: registers for k in entry_bodies(ptx)})


# (corpus kernel, target, register cap or None): a wgmma (sm_90), a tcgen05 (sm_100), an mma.sync (sm_80) and a
# plain kernel (sm_120), and two that spill under a cap (32-bit spills on sm_90; 64-bit and 16-bit ones on sm_80)
CASES = [("matmul_f16_f32acc_64x64x32", "sm_90", None, "wgmma"),
         ("matmul_bf16_64x64x64", "sm_100", None, "tcgen05"),
         ("matmul_tf32_64x64x32", "sm_80", None, "mma.sync"),
         ("layernorm_f32_64", "sm_120", None, "none"),
         ("matmul_bf16_64x64x64", "sm_90", 64, "wgmma"),
         ("matmul_f16_f16out_128x128x64", "sm_80", 48, "mma.sync")]


@requires_corpus
@pytest.mark.parametrize("name,gpu_name,cap,mma", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_figures_are_what_ptxas_v_reports(tmp_path, name, gpu_name, cap, mma):
    ptx = our_ptx(name, gpu_name)
    if cap is not None:
        ptx = capped(ptx, cap)
    cubin = assemble(ptx, PtxasOptions(target(gpu_name).ptx_target, 3))
    ours = kernel_resources(gpu_name, cubin, ptx)
    oracle = ptxas_v(ptx, gpu_name, tmp_path)
    assert set(ours) == set(oracle) and ours
    for kernel, r in ours.items():
        want = oracle[kernel]
        assert (r.registers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes, r.shared_static_bytes) \
            == (want["registers"], want["stack"], want["stores"], want["loads"], want["smem"]), kernel
        assert (r.spill_store_bytes > 0) == (cap is not None)
        assert r.tensor_core == mma and r.copy_engine == ("cp.async" if mma != "none" else "plain")
        assert r.threads == 128 and r.shared_dynamic_bytes == 0
        ctas, limit = occupancy(gpu_name, r.threads, r.registers, r.shared_static_bytes)
        assert (r.ctas_per_sm, r.occupancy_limit) == (ctas, limit) and ctas >= 1
        # the tensor-memory columns are tcgen05.alloc's operand in this kernel's PTX
        alloc = re.findall(r"tcgen05\.alloc\.\S+ \[[^\]]+\], (\d+);", entry_bodies(ptx)[kernel])
        assert r.tmem_columns == (max(map(int, alloc)) if alloc else None)
        assert (r.tmem_columns is not None) == (mma == "tcgen05")


# ---------------------------------------------------------------- occupancy and the PTX facts


@pytest.mark.parametrize("gpu_name,threads,registers,shared,want", [
    ("sm_90", 128, 255, 0, (2, "registers")),          # 8192 registers a warp, 4 warps: 2 of 65536
    ("sm_90", 128, 32, 100_000, (2, "shared memory")),  # 233472 // (100000 + the 1 KiB reserve)
    ("sm_90", 1024, 16, 0, (2, "threads")),             # 64 warps an SM, 32 a CTA
    ("sm_90", 32, 16, 0, (32, "blocks")),               # 32 CTAs an SM at most
    ("sm_120", 128, 32, 0, (12, "threads")),            # 48 warps an SM on sm_120
])
def test_occupancy_names_what_limits_it(gpu_name, threads, registers, shared, want):
    assert occupancy(gpu_name, threads, registers, shared) == want


PTX = """
.version 8.7
.target sm_100a
.address_size 64
.extern .shared .align 16 .b8 dyn[];
.visible .entry tma(.param .u64 p)
.reqntid 128
{
\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];
\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, {%r5,%r6,%r7,%r8}, {%r9,%r10}, {%f1,%f2,%f3,%f4};
\tld.shared.u32 %r11, [dyn];
\tret;
}
.visible .entry plain(.param .u64 p)
{
\twgmma.fence.sync.aligned;
\tcp.async.cg.shared.global [%r1], [%rd1], 16;
\tret;
}
"""


def test_ptx_facts_per_entry():
    bodies = entry_bodies(PTX)
    assert list(bodies) == ["tma", "plain"] and "wgmma" not in bodies["tma"] and "cp.async.bulk" not in bodies["plain"]
    from tileiras_async.toolchain.resources import _COPY_ENGINE, _TENSOR_CORE, _kinds
    assert _kinds(_TENSOR_CORE, bodies["tma"]) == ["mma.sync"] and _kinds(_COPY_ENGINE, bodies["tma"]) == ["TMA"]
    # a wgmma fence is no MMA; cp.async without .bulk is not TMA
    assert _kinds(_TENSOR_CORE, bodies["plain"]) == [] and _kinds(_COPY_ENGINE, bodies["plain"]) == ["cp.async"]


def test_summary_line_names_every_figure():
    r = KernelResources(registers=90, spill_store_bytes=8, spill_load_bytes=12, stack_frame_bytes=16,
                        shared_static_bytes=33776, shared_dynamic_bytes=None, tmem_columns=64, threads=128,
                        ctas_per_sm=5, occupancy_limit="registers", tensor_core="tcgen05", copy_engine="TMA")
    assert r.summary() == ("90 registers, 16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads, "
                           "33776 bytes static shared memory + dynamic (set at launch), 64 tensor-memory columns, "
                           "128 threads per CTA, 5 CTAs per SM (limited by registers), tensor cores: tcgen05, "
                           "copies: TMA")


def test_a_cubin_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        kernel_resources("sm_90", b"\x7fELF\x02" + b"\0" * 10, "")
    with pytest.raises(ValueError):
        kernel_resources("sm_90", b"CUBIN", "")


# ---------------------------------------------------------------- the batch, the cache, the remarks


def batch(*args: str, cwd: Path, cache: bool = False) -> subprocess.CompletedProcess:
    """`tileiras-async compile ARGS`; the session keeps the cache off (conftest) unless `cache`."""
    env = {k: v for k, v in os.environ.items() if not (cache and k == "TILEIRAS_ASYNC_NO_CACHE")}
    return subprocess.run([sys.executable, "-m", "tileiras_async", "compile", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600, env=env)


def kernel_events(stdout: str) -> list[dict]:
    return [e for e in map(json.loads, stdout.splitlines()) if e["event"] == "kernel_finished"]


@requires_corpus
def test_batch_table_json_events_and_cache_agree(tmp_path):
    modules = [str(PUBLIC / f"{n}.v13.4.tileirbc") for n in ("matmul_f16_f32acc_64x64x32", "layernorm_f32_64")]
    args = [*modules, "--gpu-name", "sm_90,sm_100", "--out-dir", str(tmp_path / "out"), "--cache-dir",
            str(tmp_path / "cache"), "--json", "--resources", "-q"]
    first = batch(*args, cwd=tmp_path, cache=True)
    assert first.returncode == 0, first.stderr
    events = kernel_events(first.stdout)
    assert len(events) == 4 and all(e["ok"] and e["resources"] for e in events)
    # each event's figures are the cubin's: the same reader on the written output
    for e in events:
        stem = Path(e["module"]).name.removesuffix(".tileirbc")
        cubin = (tmp_path / "out" / f"{stem}.{e['target']}.cubin").read_bytes()
        assert kernel_resources(e["target"], cubin, our_ptx(stem.removesuffix(".v13.4"), e["target"]))[
            e["kernel"]] == KernelResources(**e["resources"])
    by = {(e["module"], e["target"]): e["resources"] for e in events}
    assert by[(modules[0], "sm_90")]["tensor_core"] == "wgmma"
    assert by[(modules[0], "sm_100")]["tensor_core"] == "tcgen05" and by[(modules[0], "sm_100")]["tmem_columns"]
    # the table: after the summary (on stderr with --json), one row per kernel x target, in input and target order
    lines = first.stderr.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "CTAs/SM" in line):]
    assert table[0].split()[:3] == ["module", "target", "regs"] and set(table[1]) == {"-"}
    rows = table[2:]
    assert [(r.split()[0], r.split()[1]) for r in rows] == [
        (Path(m).name.removesuffix(".tileirbc"), t) for m in modules for t in ("sm_90", "sm_100")]
    for row, e in zip(rows, sorted(events, key=lambda e: (modules.index(e["module"]), e["target"] != "sm_90"))):
        r = e["resources"]
        cells = row.split()
        assert cells[2:4] == [str(r["registers"]), f"{r['spill_store_bytes']}/{r['spill_load_bytes']}"]
        assert cells[-1] == e["kernel"] and f"{r['ctas_per_sm']}  {r['occupancy_limit']}" in row
    # served by the cache: the same figures, nothing compiled
    second = batch(*args, cwd=tmp_path, cache=True)
    lookups = [e["hit"] for e in map(json.loads, second.stdout.splitlines()) if e["event"] == "cache_lookup"]
    assert second.returncode == 0 and lookups == [True] * 4
    assert sorted(map(json.dumps, (e["resources"] for e in kernel_events(second.stdout)))) == \
        sorted(map(json.dumps, (e["resources"] for e in events)))


@requires_corpus
def test_batch_remarks_as_the_drop_in_prints_them(tmp_path):
    module = str(PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc")
    shown = batch(module, "--gpu-name", "sm_100", "--out-dir", str(tmp_path), "--no-cache", "--remarks=all", "-q",
                  cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stderr.splitlines() if ": remark: " in line]
    resource = [line for line in lines if "[-Rpass-analysis=resources]" in line and "registers" in line]
    assert len(resource) == 1 and resource[0].startswith(f"{module}: sm_100: remark: ")
    assert "tensor cores: tcgen05" in resource[0] and "CTAs per SM" in resource[0]
    assert any("[-Rpass=tensorcore]" in line for line in lines)      # the lowering's remarks too
    # the drop-in's line for the same module and target, after the batch's `module: target: `
    drop_in = subprocess.run([sys.executable, "-m", "tileiras_async.cli.tileiras", "--gpu-name", "sm_100",
                              "--remarks=all", "--no-cache", "-o", str(tmp_path / "d.cubin"), module],
                             capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert drop_in.returncode == 0, drop_in.stderr
    assert [f"{module}: sm_100: {line}" for line in drop_in.stderr.splitlines()] == lines
    # through the cache: an entry made without remarks is a miss for --remarks*; one made with them replays them
    cached = ["--gpu-name", "sm_100", "--out-dir", str(tmp_path), "--cache-dir", str(tmp_path / "cache"), "-q"]
    assert batch(module, *cached, cwd=tmp_path, cache=True).returncode == 0
    for hits, misses in ((0, 1), (1, 0)):
        again = batch(module, *cached, "--remarks=all", cwd=tmp_path, cache=True)
        assert f"cache {hits} hits, {misses} misses" in again.stdout
        assert [line for line in again.stderr.splitlines() if ": remark: " in line] == lines
    # --json: the remarks the options ask for ride on kernel_finished; without --remarks* there are none
    only = batch(module, "--gpu-name", "sm_100", "--out-dir", str(tmp_path), "--no-cache", "--json",
                 "--remarks-analysis=resources", cwd=tmp_path)
    (event,) = kernel_events(only.stdout)
    assert [(r["kind"], r["category"], r["name"]) for r in event["remarks"]] == [
        ("analysis", "resources", "ResourceUsage")]
    assert event["remarks"][0]["message"] == KernelResources(**event["resources"]).summary()
    plain = batch(module, "--gpu-name", "sm_100", "--out-dir", str(tmp_path), "--no-cache", "--json",
                  cwd=tmp_path)
    assert [e["remarks"] for e in kernel_events(plain.stdout)] == [[]]


def test_batch_refuses_a_remarks_value_the_drop_in_refuses(tmp_path):
    bad = batch("x.tileirbc", "--gpu-name", "sm_90", "--remarks=everything", cwd=tmp_path)
    assert bad.returncode != 0 and "invalid choice: 'everything'" in bad.stderr and "Traceback" not in bad.stderr
