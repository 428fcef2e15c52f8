"""Benchmark: emulated thread-instructions per second of the PTX emulator (goal: >= 10 M/s).

    python bench/bench_emu.py [--corpus DIR] [-n REPS] [--gpu sm_100] [--all] [--nvidia]

Each case is a corpus kernel compiled by our pipeline (LLVM -> PTX; not timed),
emulated on the corpus inputs (`refs.make_inputs`) N times after one warm-up.
A "thread-instruction" is one PTX instruction executed by one thread (the unit
the goal is stated in).  Two rates per case, medians over the repetitions:

    e2e   emulate_ptx end to end: building the per-instruction closures for the
          launch plus running every CTA (what `run --engine emulate` pays)
    run   running the CTAs only (closures already built)

The default cases are softmax and matmul; --all adds every kernel of the corpus
(13.4 files), --nvidia also runs NVIDIA's own PTX for the same kernels (from the
corpus).  Two tensor-core lines always run NVIDIA's PTX of TENSOR_CASES (our
compiler does not emit wgmma/tcgen05 yet): its sm_90 build (wgmma) and its
sm_100 build (tcgen05, a warp-specialised CTA synchronised through mbarriers).
Results are checked against the references so a fast wrong answer does not
count.  Always exits 0.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _common import DEFAULT_CORPUS

GOAL = 10e6
TENSOR_CASES = {"sm_90": ("matmul_f16_f32acc_64x64x32", "wgmma"), "sm_100": ("matmul_f16_f32acc_64x64x32", "tcgen05")}
DEFAULT_CASES = ["softmax_rows_f32_128", "softmax_rows_f16_512", "matmul_f16_f32acc_64x64x32",
                 "matmul_tf32_64x64x32", "matmul_f16_f16out_128x128x64", "matmul_bf16_64x64x64"]


def _problems(refs, cid: str, orig: dict, outputs: dict) -> list:
    """refs.check, except for the bf16 matmuls: cuTile rounds each k-step's bf16 `a @ b` to bf16
    before accumulating in f32 (as NVIDIA's PTX does); refs.py does not (see tests/test_emu_manifest.py)."""
    import numpy as np
    tk = {"matmul_bf16_f32out_32x64x32": 32, "matmul_bf16_64x64x64": 64}.get(cid)
    if tk is None:
        return refs.check(cid, orig, outputs)
    A = refs.bf16_to_f32(orig["A"]).astype(np.float64)
    B = refs.bf16_to_f32(orig["B"]).astype(np.float64)
    acc = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for k0 in range(0, A.shape[1], tk):
        acc = acc + refs.bf16_to_f32(refs.f32_to_bf16((A[:, k0:k0 + tk] @ B[k0:k0 + tk]).astype(np.float32)))
    dt = refs.REFS[cid].dtypes["C"]
    e = refs.to_f64(refs.cast_to(acc, dt), dt)
    g = refs.to_f64(outputs["C"], dt)
    rtol, atol = refs.tolerance(cid, "C")
    return [] if np.allclose(g, e, rtol=rtol, atol=atol) else ["C differs"]


def bench_case(refs, ptx: str, cid: str, reps: int, label: str) -> dict | None:
    import numpy as np  # noqa: F401

    from tileiras_async.emu import DeviceMemory, EmuError, load_program
    from tileiras_async.emu.machine import Machine
    from tileiras_async.emu.runner import default_block, map_arguments

    prog = load_program(ptx)
    block = default_block(prog)
    e2e, run, ti = [], [], 0
    ok = None
    for rep in range(reps + 1):
        inputs = refs.make_inputs(cid)
        orig = refs.make_inputs(cid)
        mem = DeviceMemory()
        params, arrays = map_arguments(prog, list(inputs.values()), mem)
        grid = refs.grid(cid, inputs)
        t0 = time.perf_counter()
        try:
            mc = Machine(prog, mem, params, grid, block)
            t1 = time.perf_counter()
            mc.run()
        except EmuError as e:
            print(f"  {label:<40} {cid}: not emulated ({type(e).__name__}: {str(e)[:90]})")
            return None
        t2 = time.perf_counter()
        if rep == 0:
            args = list(inputs.values())
            for i, addr in arrays:
                mem.copy_back(addr, args[i])
            ok = not _problems(refs, cid, orig, inputs)
            continue
        ti = mc.thread_instructions
        e2e.append(t2 - t0)
        run.append(t2 - t1)
    res = {"case": cid, "source": label, "lanes": mc.L, "ctas": mc.ncta, "instructions": len(prog.code),
           "thread_instructions": ti, "e2e_s": statistics.median(e2e), "run_s": statistics.median(run),
           "correct": ok}
    res["e2e_rate"] = ti / res["e2e_s"]
    res["run_rate"] = ti / res["run_s"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("-n", "--reps", type=int, default=5)
    ap.add_argument("--gpu", default="sm_100")
    ap.add_argument("--all", action="store_true", help="every kernel of the corpus")
    ap.add_argument("--nvidia", action="store_true", help="also NVIDIA's PTX from the corpus")
    ap.add_argument("--json", type=Path, help="write the results as JSON")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(args.corpus))
    import refs

    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.driver import module_ptx
    from tileiras_async.targets import target

    public = args.corpus / "out" / "public"
    man = json.loads((public / "manifest.json").read_text())
    ids = [e["id"] for e in man["entries"] if e["bytecode_version"] == "13.4"]
    cases = ids if args.all else [c for c in DEFAULT_CASES if c in ids]
    results = []
    print(f"PTX emulator benchmark ({args.gpu}, {args.reps} reps, median; goal >= {GOAL / 1e6:.0f} M "
          f"thread-instr/s)")
    print(f"  {'case':<32} {'source':<14} {'ctas':>4} {'lanes':>5} {'thr-instr':>10} {'e2e M/s':>8} "
          f"{'run M/s':>8}  ok")
    for cid in cases:
        sources = []
        try:
            mod = read_module((public / f"{cid}.v13.4.tileirbc").read_bytes())
            sources.append(("ours", module_ptx(mod, target(args.gpu))))
        except Exception as e:  # noqa: BLE001 - report and continue
            print(f"  {cid:<32} ours: does not compile yet ({type(e).__name__}: {str(e)[:80]})")
        if args.nvidia:
            for gpu in ("sm_90", "sm_100"):
                p = public / f"{cid}.v13.4.{gpu}.ptx"
                if p.is_file():
                    sources.append((f"nvidia {gpu}", p.read_text()))
        for label, ptx in sources:
            r = bench_case(refs, ptx, cid, args.reps, label)
            if r is None:
                continue
            results.append(r)
            print(f"  {cid:<32} {label:<14} {r['ctas']:>4} {r['lanes']:>5} {r['thread_instructions']:>10} "
                  f"{r['e2e_rate'] / 1e6:>8.1f} {r['run_rate'] / 1e6:>8.1f}  {'yes' if r['correct'] else 'NO'}")
    for gpu, (cid, unit) in TENSOR_CASES.items():
        p = public / f"{cid}.v13.4.{gpu}.ptx"
        if cid in ids and p.is_file() and not (args.nvidia and cid in cases):
            r = bench_case(refs, p.read_text(), cid, args.reps, f"nvidia {gpu}")
            if r is not None:
                results.append(r)
                print(f"  {cid:<32} {r['source']:<14} {r['ctas']:>4} {r['lanes']:>5} {r['thread_instructions']:>10} "
                      f"{r['e2e_rate'] / 1e6:>8.1f} {r['run_rate'] / 1e6:>8.1f}  {'yes' if r['correct'] else 'NO'}")
    if results:
        for gpu, (cid, unit) in TENSOR_CASES.items():
            sel = [r for r in results if r["case"] == cid and r["source"] == f"nvidia {gpu}"]
            if sel:
                r = sel[0]
                print(f"  {unit:<8} (NVIDIA's {gpu} PTX of {cid}): e2e {r['e2e_rate'] / 1e6:.1f} M/s, "
                      f"run {r['run_rate'] / 1e6:.1f} M/s, {r['run_s'] * 1e3:.0f} ms per launch, "
                      f"{'correct' if r['correct'] else 'WRONG'}")
        for kind in ("softmax", "matmul"):
            sel = [r for r in results if r["case"].startswith(kind) and r["source"] == "ours"]
            if sel:
                ti = sum(r["thread_instructions"] for r in sel)
                e2e = ti / sum(r["e2e_s"] for r in sel)
                run = ti / sum(r["run_s"] for r in sel)
                verdict = "meets" if e2e >= GOAL else "BELOW"
                print(f"  {kind:<8} overall: e2e {e2e / 1e6:.1f} M/s, run {run / 1e6:.1f} M/s -> {verdict} "
                      f"the {GOAL / 1e6:.0f} M/s goal")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
