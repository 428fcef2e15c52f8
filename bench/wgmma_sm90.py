"""The corpus matmuls on sm_90 with wgmma forced, next to NVIDIA's tileiras: what the tensor-core code looks like.

    python bench/wgmma_sm90.py [--kernels ID,ID...] [--json FILE]

For every public-corpus kernel with an mma op, three builds go through the same `ptxas -v -O3 -arch sm_90a`
and nvdisasm:

* ours with `CodegenOptions(mma_instruction="auto")` (tilegpu/wgmma.py where it applies, mma.sync where
  select_wgmma keeps it; wgmma K-loops are not software-pipelined yet),
* ours by default (mma.sync, software-pipelined K-loops),
* NVIDIA's: the corpus's sm_90 PTX of the real tool (`*.v13.4.sm_90.ptx`), assembled the same way, so both
  sides' figures come from one ptxas.

Per build: tensor-core instructions in the SASS (HGMMA = wgmma, HMMA/IMMA = mma.sync) with their static
counts, registers, spill stores, static shared memory (ptxas -v), static SASS instructions of the kernel
and of its K-loop (the innermost loop holding the most tensor-core instructions, as bench_pipelining.py
finds it; `-` where no loop holds one), and ours / NVIDIA's ratios.  Nothing runs on a GPU.  At the end:
the kernels where NVIDIA emits HGMMA and whether ours (wgmma forced) does too, with 0 spills.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _common import nvidia_bin  # noqa: E402  (also puts src/ on sys.path)
from bench_pipelining import CORPUS, sass_kloop

from tileiras_async.bytecode.reader import read_module
from tileiras_async.codegen.driver import emit_kernel, link_kernels_ptx, module_globals_ir
from tileiras_async.codegen.emitter import CodegenOptions
from tileiras_async.targets import target

GPU = "sm_90"
TC = re.compile(r"^(HGMMA|HMMA|IMMA|QGMMA|IGMMA)\S*")


@dataclass
class Measure:
    build: str
    tc: dict = field(default_factory=dict)      # tensor-core opcode (with shape) -> static count
    regs: int | None = None
    spill: int | None = None
    smem: int | None = None
    static: int | None = None
    kloop: int | None = None
    note: str = ""

    @property
    def tc_text(self) -> str:
        return ", ".join(f"{k} x{v}" for k, v in sorted(self.tc.items())) or "none"

    def has(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for k in self.tc)


def mma_kernels() -> list[Path]:
    out = []
    for p in sorted(CORPUS.glob("*.v13.4.tileirbc")):
        d = p.with_name(p.name.replace(".tileirbc", ".disasm.txt"))
        if d.is_file() and re.search(r"\bmma[fi]\b", d.read_text()):
            out.append(p)
    return out


def our_ptx(path: Path, **opts) -> tuple[str, list[str]]:
    module = read_module(path.read_bytes())
    options = CodegenOptions(opt_level=3, target=GPU, **opts)
    ems = [emit_kernel(module, fn, options) for fn in module.functions]
    ptx = link_kernels_ptx([e.module_ir.render() for e in ems], [f.name.decode() for f in module.functions],
                           target(GPU), 3, module_globals_ir(module))
    remarks = list(dict.fromkeys(r.message for e in ems for r in e.remarks if getattr(r, "category", "") == "tensorcore"))
    return ptx, remarks


def measure(build: str, ptx: str, nvdisasm: Path | None) -> Measure:
    from tileiras_async.toolchain.discovery import default_toolchain
    m = Measure(build)
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d, "k.ptx"), Path(d, "k.cubin")
        src.write_text(ptx)
        r = subprocess.run([str(default_toolchain().ptxas), "-v", "-O3", "-arch", target(GPU).ptx_target, str(src),
                            "-o", str(out)], capture_output=True, text=True, timeout=600, check=False)
        if r.returncode:
            m.note = "ptxas failed: " + r.stderr.strip()[:200]
            return m
        for key, rx in (("regs", r"Used (\d+) registers"), ("spill", r"(\d+) bytes spill stores"),
                        ("smem", r"(\d+) bytes smem")):
            x = re.search(rx, r.stderr)
            setattr(m, key, int(x.group(1)) if x else 0)
        if nvdisasm is None:
            m.note = "nvdisasm not found: no SASS figures"
            return m
        sass = subprocess.run([str(nvdisasm), "-c", str(out)], capture_output=True, text=True, timeout=600,
                              check=False).stdout
    ops = [x.group(1).strip() for x in re.finditer(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", sass, re.M)]
    ops = [re.sub(r"^@!?U?P\w+\s+", "", o) for o in ops]
    m.static = sum(1 for o in ops if not o.startswith("NOP"))
    for o in ops:
        t = TC.match(o)
        if t:
            name = t.group(0)
            m.tc[name] = m.tc.get(name, 0) + 1
    loop = sass_kloop(sass, None)
    m.kloop = loop.instructions if loop is not None else None
    return m


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="", help="comma-separated corpus ids (default: every mma kernel)")
    ap.add_argument("--json", default="", help="also write the figures here")
    args = ap.parse_args(argv)
    nvdisasm = nvidia_bin("nvdisasm")
    paths = mma_kernels()
    if args.kernels:
        want = set(args.kernels.split(","))
        paths = [p for p in paths if p.name.split(".v13")[0] in want]
    print(f"{GPU}: ours with wgmma forced / ours by default / NVIDIA's corpus PTX, one ptxas -O3 -arch sm_90a")
    head = f"  {'build':<16} {'tensor cores (static)':<34} {'regs':>4} {'spill':>5} {'smem':>6} {'static':>6} {'K-loop':>6}"
    rows, summary = [], []
    for path in paths:
        kid = path.name.split(".v13")[0]
        forced_ptx, why = our_ptx(path, mma_instruction="auto")
        builds = [measure("ours, wgmma", forced_ptx, nvdisasm), measure("ours, default", our_ptx(path)[0], nvdisasm)]
        theirs = path.with_name(f"{kid}.v13.4.{GPU}.ptx")
        if theirs.is_file():
            builds.append(measure("NVIDIA", theirs.read_text(), nvdisasm))
        print(f"\n{kid}\n{head}")
        nv = builds[-1] if builds[-1].build == "NVIDIA" else None
        for b in builds:
            print(f"  {b.build:<16} {b.tc_text:<34} {b.regs!s:>4} {b.spill!s:>5} {b.smem!s:>6} {b.static!s:>6} "
                  f"{'-' if b.kloop is None else b.kloop:>6}" + (f"  {b.note}" if b.note else ""))
        if nv is not None:
            w = builds[0]
            print(f"  {'wgmma / NVIDIA':<16} {'':<34} {_ratio(w.regs, nv.regs):>4} {'':>5} {_ratio(w.smem, nv.smem):>6} "
                  f"{_ratio(w.static, nv.static):>6} {_ratio(w.kloop, nv.kloop):>6}")
        for r in why:
            print(f"  remark: {r}")
        if nv is not None and nv.has("HGMMA"):
            summary.append((kid, builds[0].has("HGMMA"), builds[0].spill, builds[0].kloop, nv.kloop))
        rows.append({"kernel": kid, "builds": [asdict(b) for b in builds], "remarks": why})
    print(f"\nwhere NVIDIA emits HGMMA on {GPU}: ours with wgmma forced")
    for kid, hg, spill, kl, nkl in summary:
        print(f"  {kid:<32} HGMMA {'yes' if hg else 'NO '}  spill {spill} B  K-loop {kl} vs {nkl} "
              f"({_ratio(kl, nkl)})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
