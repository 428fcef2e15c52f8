"""Turn a run of run_on_device.py (its --out JSON) into a results file and the README's figures.

    python bench/gpu/report.py GPU.json [--save bench/results/gpu_<device>.json]

Prints a Markdown table (case, grid, ours us, NVIDIA us, ratio ours/NVIDIA, correct on both sides) and the
summary lines: the geometric mean of the ratios over the corpus sizes (launch-bound: a few microseconds) and
over the large sizes (where the generated code dominates), and which sides failed or gave wrong outputs.
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


def markdown(doc: dict) -> list[str]:
    dev = doc["device"]
    job = doc["job"]
    other = other_side(doc)
    against = other if job.get("versus") else f"NVIDIA's {job.get('nvidia_tileiras', '?')}"
    lines = [f"{dev['name']} (cc {dev['cc']}, {dev['sms']} SMs, driver {dev['driver_version']}); cubins for "
             f"{job.get('gpu_name', '?')} at -O{job.get('opt_level', 3)}, ours at {job.get('src_commit', '?')}, "
             f"{against}; median per launch in a CUDA graph",
             "",
             f"| case | grid | ours µs | {other} µs | ours/{other} | correct (ours, {other}) |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in doc["rows"]:
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        grid = "x".join(str(g) for g in r["grid"])
        lines.append(f"| {r['case']} | {grid} | {_us(r['ours'])} | {_us(r['nvidia'])} | {ratio} | "
                     f"{_state(r['ours'])}, {_state(r['nvidia'])} |")
    return lines


def summary(doc: dict) -> list[str]:
    out = []
    for size in ("corpus", "large"):
        ratios = [r["ratio"] for r in doc["rows"] if r.get("size", "corpus") == size and r.get("ratio")]
        g = _geomean(ratios)
        if g is not None:
            out.append(f"{size} sizes: geometric mean ours/{other_side(doc)} {g:.2f} over {len(ratios)} cases "
                       f"(best {min(ratios):.2f}, worst {max(ratios):.2f})")
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
