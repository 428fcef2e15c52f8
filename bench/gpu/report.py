"""Turn a run of run_on_device.py (its --out JSON) into a results file and the README's figures.

    python bench/gpu/report.py GPU.json [--save bench/results/gpu_<device>.json]

Prints a Markdown table (case, grid, ours us, NVIDIA us, ratio ours/NVIDIA, TFLOP/s of each side for matmuls
and attention with the share of the device's dense f16 tensor-core peak where the device is known, correct on
both sides) under a header that names the bytecode set (as cuTile launches, or unhinted), and the summary
lines: the geometric mean of the ratios over the corpus sizes (launch-bound: a few microseconds) and over the
large sizes (where the generated code dominates), and which sides failed or gave wrong outputs.
--save writes the run as {"meta": {device, job, options}, "rows": [...]} with one row per line (the format of
bench/baselines).  Exit status 0, or 2 when the file is not a run's output.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/

from _build import save_json  # noqa: E402

SIDES = ("ours", "nvidia")

# Dense (no sparsity) f16/bf16 tensor-core peak in TFLOP/s by device name (as cuDeviceGetName says it), from
# NVIDIA's datasheets (H100: "NVIDIA H100 Tensor Core GPU" datasheet, FP16 Tensor Core 1,979 TFLOPS for SXM,
# 1,513 for PCIe, 1,671 for NVL, each "with sparsity", i.e. twice the dense figure; H200: "NVIDIA H200 Tensor
# Core GPU" datasheet, 1,979 SXM and 1,671 NVL with sparsity).  First match wins: the specific forms first.
PEAK_F16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.5), ("H200 NVL", 835.5), ("H200", 989.4),
                   ("H100", 989.4))
PEAK_SOURCE = "dense f16 tensor-core peak from NVIDIA's H100/H200 datasheets (half the sparsity figure)"


def peak_tflops(device_name: str) -> float | None:
    """The device's dense f16 tensor-core peak (PEAK_F16_TFLOPS), None for a device not in the table."""
    return next((peak for key, peak in PEAK_F16_TFLOPS if key in (device_name or "")), None)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _state(r: dict) -> str:
    if not r.get("ok"):
        return "error"
    return "yes" if r.get("correct") else "**no**"


def _us(r: dict) -> str:
    return f"{r['us']:.2f}" if r.get("us") is not None else "-"


def other_side(doc: dict) -> str:
    """What the second side of a run is: NVIDIA, or ours at a revision (build.py --versus)."""
    return doc["job"].get("versus") or "NVIDIA"


def _tflops(r: dict, side: str, peak: float | None) -> str:
    """A side's TFLOP/s (and share of the peak) for a row with a FLOP count."""
    if not r.get("flops") or not r[side].get("us"):
        return "-"
    t = r["flops"] / r[side]["us"] / 1e6
    return f"{t:.1f} ({100 * t / peak:.0f}%)" if peak else f"{t:.1f}"


def set_label(job: dict) -> str:
    """The bytecode the run compiled: the launch set (as cuTile launches) or the unhinted export (runs from
    before the launch set were of the unhinted export)."""
    label = job.get("set_label", "unhinted bytecode")
    return f"launch set ({label})" if job.get("set") == "launch" else label


def markdown(doc: dict) -> list[str]:
    dev = doc["device"]
    job = doc["job"]
    other = other_side(doc)
    against = other if job.get("versus") else f"NVIDIA's {job.get('nvidia_tileiras', '?')}"
    peak = peak_tflops(dev.get("name", ""))
    loader = doc.get("options", {}).get("loader", "module")
    how = ("cuLibraryLoadData + cuLaunchKernelEx, user parameters only" if loader == "library"
           else "cuModuleLoadData + cuLaunchKernel")
    lines = [f"{dev['name']} (cc {dev['cc']}, {dev['sms']} SMs, driver {dev['driver_version']}); cubins for "
             f"{job.get('gpu_name', '?')} at -O{job.get('opt_level', 3)} from the {set_label(job)}, ours at "
             f"{job.get('src_commit', '?')}, {against}; loaded with {how}; median per launch in a CUDA graph, "
             f"both sides timed batch by batch in turn",
             "",
             f"| case | grid | ours µs | {other} µs | ours/{other} | ours TFLOP/s | {other} TFLOP/s | "
             f"correct (ours, {other}) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in doc["rows"]:
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        grid = "x".join(str(g) for g in r["grid"])
        lines.append(f"| {r['case']} | {grid} | {_us(r['ours'])} | {_us(r['nvidia'])} | {ratio} | "
                     f"{_tflops(r, 'ours', peak)} | {_tflops(r, 'nvidia', peak)} | "
                     f"{_state(r['ours'])}, {_state(r['nvidia'])} |")
    if any(r.get("flops") for r in doc["rows"]):
        lines += ["", f"TFLOP/s: the case's FLOP count (2 per multiply-add; attention 4·D per unmasked query-key "
                      f"pair) over the median µs; " + (f"% of {peak:g} TFLOP/s, the {PEAK_SOURCE}" if peak
                                                      else "no peak known for this device")]
    return lines


def summary(doc: dict) -> list[str]:
    out = []
    for size in ("corpus", "large"):
        ratios = [r["ratio"] for r in doc["rows"] if r.get("size", "corpus") == size and r.get("ratio")]
        g = _geomean(ratios)
        if g is not None:
            out.append(f"{size} sizes: geometric mean ours/{other_side(doc)} {g:.2f} over {len(ratios)} cases "
                       f"(best {min(ratios):.2f}, worst {max(ratios):.2f})")
    differ = [r["case"] for r in doc["rows"] if r.get("sides_agree") is False]
    if differ:
        out.append(f"the two sides' outputs differ beyond tolerance: {', '.join(differ)}")
    for side in SIDES:
        failed = [r["case"] for r in doc["rows"] if not r[side].get("ok")]
        wrong = [r["case"] for r in doc["rows"] if r[side].get("ok") and not r[side].get("correct")]
        n = len(doc["rows"])
        out.append(f"{side}: {n - len(failed) - len(wrong)}/{n} correct"
                   + (f"; failed: {', '.join(failed)}" if failed else "")
                   + (f"; wrong output: {', '.join(wrong)}" if wrong else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the JSON run_on_device.py wrote with --out")
    ap.add_argument("--save", type=Path, help="write the results file here")
    args = ap.parse_args(argv)
    try:
        doc = json.loads(args.run.read_text())
        doc["device"], doc["job"], doc["rows"]      # noqa: B018 - the keys a run has
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {args.run} is not the output of run_on_device.py --out: {e}", file=sys.stderr)
        return 2
    for line in markdown(doc) + [""] + summary(doc):
        print(line)
    if args.save:
        meta = {"device": doc["device"], "job": doc["job"], "options": doc.get("options", {}),
                "wall_s": doc.get("wall_s")}
        save_json(args.save, {"meta": meta, "rows": doc["rows"]})
        print(f"\nsaved {len(doc['rows'])} rows to {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
