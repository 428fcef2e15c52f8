"""Executed instructions, ours next to NVIDIA's: our PTX and the real tileiras's PTX run in our PTX emulator.

    python bench/dynamic_instructions.py [--gpu-name sm_90,sm_100] [--kernels ID,ID... | --all] [-j N]
                                         [--save FILE.json] [--corpus DIR] [--set public|public-launch|both|
                                                                            suite|suite-launch|examples|examples-launch]

Per corpus kernel with a reduction or a scan (default; --kernels picks any, --all takes every kernel) and per
target: our PTX (compiled in-process, ptxas included) and NVIDIA's PTX for the same target (the corpus's
`<id>.v13.4.<target>.ptx`, what the real tileiras handed to ptxas) both run on the kernel's corpus inputs
(`refs.make_inputs`) and are checked with `refs.check`: a wrong answer does not count.  The figure is the
emulator's thread-instructions (PTX instructions executed, summed over the threads that executed them).
Kernels whose NVIDIA PTX the emulator cannot run (an instruction it lacks) are listed as such, never dropped.
NVIDIA's PTX runs with `memcheck="device"`, as on a GPU (emu/memory.py): its `int_ops` kernels read just past
an array without using the bytes, which the row notes; ours runs `strict`.  A kernel both tools refuse with
the same status and error (NVIDIA's as the set's manifest.json records it) is listed as such, not as a failure.

Both exports of the corpus, one table each (--set picks one): "unhinted bytecode" (out/public) and "as cuTile
launches" (out/public-launch: the same kernels with cuTile's launch-time facts, NVIDIA's PTX for those, run
with the host object beside it that fills its tensor maps).  --set suite / suite-launch / examples /
examples-launch runs this project's kernels on their own references (examples/refs.py, examples/suite/refs.py);
NVIDIA's PTX for them is what the real tileiras hands ptxas, kept under build/bench-cache/real (_build.real_ptx).

Issue 13's goal, over the reduction/scan kernels: ratio ours/NVIDIA median <= 1.0 and none above 1.5.
Always exits 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import _build
from _build import fmt_ratio, median, ratio
from _common import DEFAULT_CORPUS
from tileiras_async.toolchain.cubin import host_object

DEFAULT_TARGETS = "sm_90,sm_100"
GOAL_MEDIAN, GOAL_MAX = 1.0, 1.5


def dynamic_row(path: Path, gpu: str, corpus: Path = DEFAULT_CORPUS) -> dict:
    """Ours and NVIDIA's PTX for one kernel (bytecode `path`, in one of the corpus's sets) and target, each
    emulated and checked."""
    cid = _build.kernel_id(path)
    built = _build.compile_ours(path, gpu)
    if built["ok"]:
        with tempfile.TemporaryDirectory() as tmp:   # our TMA kernels: the hooks ptxas embedded fill the maps
            embedded = host_object(built["cubin"])
            host = Path(tmp) / "ours.host.o" if embedded else None
            if host is not None:
                host.write_bytes(embedded)
            ours = _build.emulate_on_corpus(built["ptx"], cid, path, corpus, host)
    else:
        ours = {"ok": False, "error": f"does not compile: {built['error']}"}
    nv = _build.real_ptx(path, gpu)
    rejected = _build.nvidia_rejection(path.parent, cid, gpu) if nv is None else None
    if rejected is not None:
        nvidia = {"ok": False, "error": f"NVIDIA's tileiras rejects it: {rejected}", "rejected": rejected}
    elif nv is None:
        nvidia = {"ok": False, "error": f"no NVIDIA PTX for {gpu} (not in the corpus; for this project's sets: "
                                        "NVIDIA's tileiras absent or failing)"}
    else:
        host = nv.with_suffix(".host.o")        # the launch sets': fills the PTX's tensor maps
        nvidia = _build.emulate_on_corpus(nv.read_text(), cid, path, corpus, host if host.is_file() else None,
                                          memcheck="device")   # as on a GPU: int_ops reads past `b` (a warning)
    return {"kernel": cid, "target": gpu, "ours": ours, "nvidia": nvidia}


def counted(side: dict) -> bool:
    return bool(side.get("ok") and side.get("correct"))


def both_reject(row: dict) -> bool:
    """NVIDIA's tileiras and ours refuse the kernel with the same status and error (invalid input, not a failure
    of either)."""
    rejected = row["nvidia"].get("rejected")
    return rejected is not None and row["ours"].get("error") == f"does not compile: {rejected}"


def row_ratio(row: dict) -> float | None:
    if not (counted(row["ours"]) and counted(row["nvidia"])):
        return None
    return ratio(row["ours"]["thread_instructions"], row["nvidia"]["thread_instructions"])


def _cell(side: dict) -> str:
    if not side.get("ok"):
        return "not emulated" if side.get("unsupported") else "error"
    return f"{side['thread_instructions']:>12,}{'' if side['correct'] else ' WRONG'}"


HEADER = f"{'kernel':<30} {'target':<6} {'ours':>18} {'NVIDIA':>18} {'ratio':>6}  note"


def row_line(row: dict) -> str:
    notes = [f"both reject it: {row['nvidia']['rejected'][:80]}"] if both_reject(row) else []
    for label, side in (("ours", row["ours"]), ("NVIDIA", row["nvidia"])):
        if notes:
            break
        if not side.get("ok"):
            notes.append(f"{label}: {side['error'][:70]}")
        elif not side["correct"]:
            notes.append(f"{label} wrong: {'; '.join(side['problems'])[:70]}")
        elif side.get("warnings"):   # memcheck="device": NVIDIA's unguarded read past an array
            notes.append(f"{label} reads {side['warnings'][0].split(' reads ', 1)[-1].split(' at PTX')[0][:70]}")
    return (f"{_build.row_head(row)} {_cell(row['ours']):>18} {_cell(row['nvidia']):>18} "
            f"{fmt_ratio(row_ratio(row)):>6}  {' | '.join(notes)}")


def summary_lines(rows: list[dict], goal: bool = True) -> list[str]:
    """The figures; `goal`: the rows are issue 13's reduction/scan kernels, so its verdict applies."""
    out = []
    paired = [r for r in rows if row_ratio(r) is not None]
    targets = sorted({r["target"] for r in rows}, key=lambda t: int(t[3:]))
    out.append(f"kernels x targets: {len(rows)}; compared (both ran and matched the reference): {len(paired)}")
    if paired:
        ratios = [row_ratio(r) for r in paired]
        over = sorted((r for r in paired if row_ratio(r) > GOAL_MAX), key=row_ratio, reverse=True)
        med = median(ratios)
        out.append(f"thread-instructions ours/NVIDIA: median {fmt_ratio(med)}, max {fmt_ratio(max(ratios))} ("
                   + ", ".join(f"{t} median {fmt_ratio(median(row_ratio(r) for r in paired if r['target'] == t))}"
                               for t in targets) + ")")
        verdict = "met" if med <= GOAL_MEDIAN and not over else "not met"
        listed = ": " + ", ".join(f"{r['kernel']} {r['target']} {fmt_ratio(row_ratio(r))}" for r in over[:10])
        out.append((f"issue 13 goal (median <= {GOAL_MEDIAN}, none above {GOAL_MAX}): {verdict}; " if goal else "")
                   + f"above {GOAL_MAX}: {len(over)}" + (listed if over else ""))
    unsupported = [r for r in rows if r["nvidia"].get("unsupported")]
    if unsupported:
        out.append(f"NVIDIA PTX the emulator cannot run yet: {len(unsupported)}: " +
                   ", ".join(f"{r['kernel']} {r['target']} ({r['nvidia']['unsupported']})" for r in unsupported))
    agreed = [r for r in rows if both_reject(r)]
    if agreed:
        out.append(f"rejected by NVIDIA's tileiras and ours alike (same status and error; not failures): "
                   f"{len(agreed)}: " + ", ".join(f"{r['kernel']} {r['target']}" for r in agreed))
    for label in ("ours", "nvidia"):
        bad = [r for r in rows if not counted(r[label]) and not r[label].get("unsupported") and not both_reject(r)]
        if bad:
            out.append(f"{'ours' if label == 'ours' else 'NVIDIA'} failed or wrong: {len(bad)}: " +
                       ", ".join(f"{r['kernel']} {r['target']}" for r in bad))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-name", default=DEFAULT_TARGETS, help="comma-separated targets (default sm_90,sm_100)")
    ap.add_argument("--kernels", default="", help="comma-separated kernel ids or substrings")
    ap.add_argument("--all", action="store_true", help="every corpus kernel, not only reductions and scans")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--save", type=Path, help="write the results as JSON")
    _build.add_set_option(ap)
    args = ap.parse_args(argv)

    gpus = [g.strip() for g in args.gpu_name.split(",") if g.strip()]
    default_set = not (args.all or args.kernels)

    def files_of(folder: Path) -> list[Path]:
        files = _build.corpus_kernels(folder, args.kernels)
        return [f for f in files if _build.has_reduction(f)] if default_set else files

    def measure(files: list[Path], _folder: Path) -> list[dict]:
        return _build.run_pool(dynamic_row, [(f, g, args.corpus) for f in files for g in gpus], args.jobs,
                               lambda f, g, _c: {"kernel": _build.kernel_id(f), "target": g})

    t0 = time.perf_counter()
    rows = _build.measure_sets(_build.corpus_sets(args.corpus, args.corpus_set), files_of, measure)
    if not rows:
        print(f"error: no matching 13.4 corpus kernels in {args.corpus / 'out'} ({args.corpus_set})")
        return 0
    print(f"dynamic instructions in the PTX emulator: ours ({_build.git_head()}) vs NVIDIA's PTX "
          "(the corpus's, or the real tool's for our sets), "
          f"{len({_build.row_key(r)[:2] for r in rows})} kernels x {', '.join(gpus)}; "
          f"{time.perf_counter() - t0:.1f} s on {args.jobs} workers\n")
    _build.print_report(HEADER, rows, row_line, lambda part: summary_lines(part, goal=default_set), args.save,
                        {"targets": gpus, "set": args.corpus_set})
    return 0


if __name__ == "__main__":
    sys.exit(main())
