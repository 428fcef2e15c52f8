"""The static effect of software pipelining on the corpus matmuls: the steady-state K-loop, pipelined vs not.

    python bench/bench_pipelining.py [--gpu-name sm_80[,sm_100,...]] [--stages N] [--kernels a,b] [--json FILE]
                                     [--no-real]

Per corpus kernel whose `for` body runs an mma, for our compiler with pipelining off (`pipeline_stages=1`)
and on (`--stages`, default CodegenOptions' 4), and for NVIDIA's tileiras when it is installed:

* the K-loop's instructions -- in our PTX and, with nvdisasm, in the SASS ptxas made of it (the real tool:
  SASS only).  The K-loop is the innermost loop (a backward branch) holding the most tensor-core / FMA
  instructions; for a pipelined kernel, the loop version aligned data runs (16-byte copies);
* inside it: mma (HMMA/…/FFMA in SASS), shared loads, global loads, cp.async (LDGSTS), barriers;
* shared memory: bytes per stage buffer x stages (ours pipelined), the staging buffer (ours synchronous),
  the kernel's total static shared memory (all three); registers and spill bytes (ptxas -v).

Nothing runs on a GPU: this is what the code looks like, not how fast it is.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import _build
import _sass
from _common import REPO, nvidia_bin  # noqa: E402  (also puts src/ on sys.path)

from tileiras_async.bytecode.reader import read_module
from tileiras_async.driver import emit_kernel, link_kernels_ptx, module_globals_ir
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.targets import target
from tileiras_async.toolchain.ptxas import arch_for_target

CORPUS = Path(os.environ.get("TILEIRAS_CORPUS", REPO.parent / "shared" / "corpus")) / "out" / "public"


def kloop_kernels() -> list[Path]:
    """13.4 corpus files whose disassembly has an mma inside a `for`."""
    out = []
    for p in sorted(CORPUS.glob("*.v13.4.tileirbc")):
        d = p.with_name(p.name.replace(".tileirbc", ".disasm.txt"))
        if not d.is_file():
            continue
        text = d.read_text()
        i = text.find(" for ")
        if i >= 0 and re.search(r"\bmma[fi]\b", text[i:]):
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------------------
# loops in PTX and SASS
# ---------------------------------------------------------------------------------------------------------

@dataclass
class LoopStats:
    instructions: int = 0
    counts: dict = field(default_factory=dict)


PTX_CLASSES = {
    "mma": r"^(mma\.sync|fma\.rn\.f32|fma\.rn\.f16)",
    "ld.shared": r"^ld\.shared",
    "ldmatrix": r"^ldmatrix",
    "st.shared": r"^st\.shared",
    "ld.global": r"^ld\.global",
    "cp.async": r"^cp\.async\.c[ag]\.",
    "barrier": r"^(bar\.sync|barrier\.sync)",
    "wait/commit": r"^cp\.async\.(wait|commit)",
}
SASS_CLASSES = {
    "mma": r"^(HMMA|IMMA|DMMA|HGMMA|UTC\w*MMA|QMMA|OMMA|FFMA(?!\.SAT))",
    "ld.shared": r"^LDS(?!M)",
    "ldmatrix": r"^LDSM",
    "st.shared": r"^STS",
    "ld.global": r"^LDG(?!STS|DEPBAR)",
    "cp.async": r"^(LDGSTS|UBLKCP|UTMALDG)",
    "barrier": r"^(BAR|SYNCS)",
    "wait/commit": r"^(LDGDEPBAR|DEPBAR)",
}


def _classify(ops: list[str], classes: dict) -> dict:
    return {k: sum(1 for o in ops if re.match(rx, o)) for k, rx in classes.items()}


def _natural_loops(ops: list[str], label_at: dict[str, int], branches: dict[int, tuple[str, bool]],
                   exits: set[int]) -> list[list[int]]:
    """Natural loops (lists of instruction indices) of a straight-line PTX listing: basic blocks start at
    labels and after branches; loops from dominators (_sass.loop_bodies)."""
    starts = sorted({0, *label_at.values(), *(i + 1 for i in branches), *(i + 1 for i in exits)})
    starts = [x for x in starts if x < len(ops)]
    block_at = {st: k for k, st in enumerate(starts)}
    bounds = [(st, starts[k + 1] if k + 1 < len(starts) else len(ops)) for k, st in enumerate(starts)]
    succs: list[list[int]] = []
    for k, (_st, en) in enumerate(bounds):
        last, falls, out = en - 1, last_falls(en - 1, branches, exits), []
        if last in branches and label_at.get(branches[last][0]) in block_at:
            out.append(block_at[label_at[branches[last][0]]])
        if falls and k + 1 < len(bounds) and k + 1 not in out:
            out.append(k + 1)
        succs.append(out)
    bodies = _sass.loop_bodies(succs, [0]) if succs else {}
    return [sorted(i for b in body for i in range(*bounds[b])) for body in bodies.values()]


def last_falls(i: int, branches: dict[int, tuple[str, bool]], exits: set[int]) -> bool:
    """Whether control reaches instruction i + 1 from instruction i."""
    if i in exits:
        return False
    return branches[i][1] if i in branches else True


def _pick(loops: list[list[int]], ops: list[str], classes: dict, prefer: str | None) -> LoopStats | None:
    """The loop holding the most mma-class instructions (then: containing `prefer`, then the smallest)."""
    best = None
    for idx in loops:
        body = [ops[i] for i in idx]
        n_mma = sum(1 for o in body if re.match(classes["mma"], o))
        if not n_mma:
            continue
        has = 1 if prefer and any(re.match(prefer, o) for o in body) else 0
        key = (n_mma, has, -len(body))
        if best is None or key > best[0]:
            best = (key, body)
    if best is None:
        return None
    return LoopStats(len(best[1]), _classify(best[1], classes))


def ptx_kloop(ptx: str, prefer: str | None = r"^cp\.async\.cg") -> LoopStats | None:
    ops: list[str] = []
    label_at: dict[str, int] = {}
    branches: dict[int, tuple[str, bool]] = {}
    exits: set[int] = set()
    pending = ""
    for raw in ptx.splitlines():
        ln = raw.split("//")[0].strip()
        if not ln:
            continue
        m = re.match(r"^(\$L\w+):", ln)
        if m and not pending:
            label_at[m.group(1)] = len(ops)
            continue
        if not pending and ln.startswith(".") or ln in ("{", "}"):
            continue
        if not ln.endswith((";", "}")):      # a statement spread over several lines (mma.sync operands)
            pending += ln + " "
            continue
        ln, pending = pending + ln, ""
        for st in ln.strip("{} ").split(";"):   # inline asm blocks: { .reg ...; setp ...; @p ld ...; }
            st = st.strip()
            if not st or st.startswith("."):
                continue
            cond = st.startswith("@")
            st = re.sub(r"^@!?%?\w+\s+", "", st)
            b = re.match(r"^bra(\.uni)?\s+(\$L\w+)", st)
            if b:
                branches[len(ops)] = (b.group(2), cond)
            elif re.match(r"^(ret|exit)\b", st) and not cond:
                exits.add(len(ops))
            ops.append(st)
    return _pick(_natural_loops(ops, label_at, branches, exits), ops, PTX_CLASSES, prefer)


def sass_kloop(sass: str, prefer: str | None = r"^LDGSTS\.E\.BYPASS.*\.128") -> LoopStats | None:
    loops = []
    ops_of = {}
    for fn in _sass.parse_sass(sass):
        for lp in _sass.natural_loops(fn):
            loops.append([len(ops_of) + k for k in range(len(lp.instrs))])
            for k, ins in enumerate(lp.instrs):
                ops_of[loops[-1][k]] = f"{ins.opcode} {ins.operands}".strip()
    ops = [ops_of[i] for i in range(len(ops_of))]
    return _pick(loops, ops, SASS_CLASSES, prefer)


# ---------------------------------------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------------------------------------

@dataclass
class Build:
    variant: str
    ptx_loop: LoopStats | None = None
    sass_loop: LoopStats | None = None
    regs: int | None = None
    spill: int | None = None
    smem_total: int | None = None
    per_stage: str = ""
    note: str = ""


def ours(path: Path, gpu: str, stages: int) -> tuple[Build, str]:
    module = read_module(path.read_bytes())
    opts = CodegenOptions(opt_level=3, target=gpu, pipeline_stages=stages)
    irs, names, shared, pipes, remarks = [], [], 0, [], []
    plans = []
    for fn in module.functions:
        em = emit_kernel(module, fn, opts)
        irs.append(em.module_ir.render())
        names.append(fn.name.decode())
        shared = max(shared, em.shared_bytes)
        pipes += em.pipelines
        remarks += em.remarks
        plans += [op for op in fn.walk() if op.name in ("mmaf", "mmai")]
    ptx = link_kernels_ptx(irs, names, target(gpu), 3, module_globals_ir(module))
    b = Build("ours, pipelined" if stages > 1 else "ours, synchronous", ptx_loop=ptx_kloop(ptx))
    b.smem_total = shared
    if pipes:
        p = pipes[0]
        b.per_stage = f"{p.unit_bytes} B x {p.stages} (K {p.kc} x {p.chunks}/iter)"
        b.note = "versions: " + ", ".join(p.versions)
    elif stages <= 1:
        b.per_stage = f"{shared} B x 1 (whole tile)"
    if remarks:
        b.note = "; ".join(r if isinstance(r, str) else r.message for r in remarks)
    return b, ptx


def ptxas_and_sass(ptx: str, gpu: str, b: Build, nvdisasm: Path | None) -> None:
    ptxas = nvidia_bin("ptxas")
    if ptxas is None:
        from tileiras_async.toolchain.discovery import default_toolchain
        ptxas = default_toolchain().ptxas
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d, "k.ptx"), Path(d, "k.cubin")
        src.write_text(ptx)
        r = subprocess.run([str(ptxas), "-v", "-O3", "-arch", arch_for_target(gpu), str(src), "-o", str(out)],
                           capture_output=True, text=True, timeout=600, check=False)
        if r.returncode:
            b.note = f"ptxas failed: {r.stderr.strip()[:200]}"
            return
        regs = re.search(r"Used (\d+) registers", r.stderr)
        sp = re.search(r"(\d+) bytes spill stores", r.stderr)
        b.regs = int(regs.group(1)) if regs else None
        b.spill = int(sp.group(1)) if sp else None
        if nvdisasm is not None:
            b.sass_loop = sass_kloop(subprocess.run([str(nvdisasm), "-c", str(out)], capture_output=True,
                                                    text=True, timeout=600, check=False).stdout)


def real(path: Path, gpu: str, nvdisasm: Path | None) -> Build | None:
    if _build.real_tool() is None or nvdisasm is None:
        return None
    b = Build("NVIDIA tileiras")
    built = _build.compile_real(path, gpu)          # cached: build/bench-cache/real
    if not built["ok"]:
        b.note = f"tileiras {built['error']}"
        return b
    b.sass_loop = sass_kloop(_build.disassemble(built["cubin"]), None)
    res = list(_sass.cubin_resources(built["cubin"]).values())
    b.regs = max((r.registers for r in res), default=None)
    b.smem_total = max((r.shared_bytes for r in res), default=0)
    return b


# ---------------------------------------------------------------------------------------------------------

def _fmt_loop(s: LoopStats | None) -> str:
    if s is None:
        return "-"
    c = s.counts
    return (f"{s.instructions:5d} (mma {c['mma']}, lds {c['ld.shared'] + c['ldmatrix']}, sts {c['st.shared']}, "
            f"ldg {c['ld.global']}, async {c['cp.async']}, bar {c['barrier']})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-name", default="sm_80", help="comma-separated targets (default sm_80)")
    ap.add_argument("--stages", type=int, default=CodegenOptions().pipeline_stages)
    ap.add_argument("--kernels", default="", help="comma-separated kernel ids (default: every corpus K-loop)")
    ap.add_argument("--json", default="", help="also write the numbers here")
    ap.add_argument("--no-real", action="store_true", help="skip NVIDIA's tileiras")
    args = ap.parse_args(argv)
    nvdisasm = nvidia_bin("nvdisasm")
    paths = kloop_kernels()
    if args.kernels:
        want = set(args.kernels.split(","))
        paths = [p for p in paths if p.name.split(".v13")[0] in want]
    print(f"pipeline_stages={args.stages}; SASS: {'nvdisasm ' + str(nvdisasm) if nvdisasm else 'not available'}")
    print("loop columns: instructions in the steady-state K-loop (mma/FFMA, shared loads incl. ldmatrix, shared "
          "stores, global loads, cp.async/LDGSTS, barriers)")
    rows = []
    for gpu in args.gpu_name.split(","):
        for path in paths:
            kid = path.name.split(".v13")[0]
            builds = []
            for stages in (1, args.stages):
                b, ptx = ours(path, gpu, stages)
                ptxas_and_sass(ptx, gpu, b, nvdisasm)
                builds.append(b)
            if not args.no_real:
                r = real(path, gpu, nvdisasm)
                if r is not None:
                    builds.append(r)
            print(f"\n{kid} [{gpu}]")
            for b in builds:
                print(f"  {b.variant:18s} PTX loop {_fmt_loop(b.ptx_loop)}")
                print(f"  {'':18s} SASS loop {_fmt_loop(b.sass_loop)}")
                print(f"  {'':18s} regs {b.regs} spill {b.spill} smem {b.smem_total} B"
                      + (f"; per stage {b.per_stage}" if b.per_stage else "") + (f"; {b.note}" if b.note else ""))
                rows.append({"kernel": kid, "gpu": gpu, "variant": b.variant, "regs": b.regs, "spill": b.spill,
                             "smem_total": b.smem_total, "per_stage": b.per_stage, "note": b.note,
                             "ptx_loop": b.ptx_loop.__dict__ if b.ptx_loop else None,
                             "sass_loop": b.sass_loop.__dict__ if b.sass_loop else None})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
