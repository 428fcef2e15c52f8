"""Generated code, ours next to NVIDIA's tileiras: static SASS figures per corpus kernel and target.

    python bench/codegen_quality.py [--gpu-name sm_80,sm_90] [--kernels ID,ID...] [--sample N] [-j N]
                                    [--save FILE.json] [--baseline FILE.json] [--loops] [--cache-dir DIR]
                                    [--corpus DIR] [--set public|public-launch|both|suite|suite-launch|
                                                          examples|examples-launch]

Each 13.4 corpus kernel is compiled for each target by ours (in-process, through tileiras_async.stages) and by
the real tileiras (cached on disk: build/bench-cache/real), and both cubins are measured the same way
(bench/_sass.py): `nvdisasm` -> static instruction count (NOPs and the never-reached trailing self-branch
left out), counts per class (BAR, SHFL, REDUX, HMMA, HGMMA, UTC*MMA, LDS, STS, LDG, STG, LDGSTS, local
memory, and address math = IMAD+IADD3+SEL+ISETP), natural loops of the control-flow graph; registers, stack
frame and static shared memory from the cubin's ELF attributes (shared memory as `ptxas -v` states it).

Columns: `o/r` = ours/real; `instr` also gives the ratio; `SH+RX` = SHFL+REDUX; `TC` = tensor-core
instructions (HMMA/IMMA, HGMMA, UTC*MMA); `LDS+STS`; `ADDR` = address math; `loop` = static instructions of
the main loop (the innermost loop holding the most tensor-core instructions, else the largest innermost loop);
`local` = local-memory instructions (spills), `+` when only the stack frame is non-zero.  --loops lists every
innermost loop of both sides under its row (static instructions and classes per loop).

Both exports of the corpus are measured, one table and summary each (--set picks one): "unhinted bytecode"
(out/public, plain signatures) and "as cuTile launches" (out/public-launch: the same kernels with the unit
strides, divisibility and alignment cuTile states at launch, which NVIDIA's tool turns into vector loads and
TMA); a last line puts the two medians side by side.  --set suite / suite-launch / examples / examples-launch
measures this project's kernels instead (examples/suite, examples/suite/launch, examples, examples/launch: see
examples/export_all.py), where the corpus has nothing: attention (cuTile's FMHA sample, flash attention),
persistent matmul.

--save writes every figure as JSON; --baseline compares ours now with ours in a saved run: per kernel
before/after/delta, and a `WORSE:` line for every kernel x target whose static instructions, BAR or registers
grew, that has spills, or that no longer compiles.  Always exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import _build
from _build import fmt_ratio, median, ratio
from _common import DEFAULT_CORPUS
from tileiras_async.targets import resident_ctas

DEFAULT_TARGETS = "sm_80,sm_90"


# ---------------------------------------------------------------- one row


def _tc(m: dict) -> str:
    tc = m.get("tensor_core") or {}
    return "+".join(f"{k}{v}" for k, v in sorted(tc.items())) or "-"


def _pair(o, r) -> str:
    return f"{'-' if o is None else o}/{'-' if r is None else r}"


def _local(m: dict) -> str:
    n = m["classes"]["LOCAL"]
    return f"{n}{'+' if m['frame'] and not n else ''}"


def _loop(m: dict):
    lp = m.get("main_loop")
    return lp["static"] if lp else None


HEADER = (f"{'kernel':<30} {'target':<6} {'instr o/r':>11} {'ratio':>5} {'BAR':>5} {'SH+RX':>7} "
          f"{'TC o | r':<20} {'LDS+STS':>9} {'ADDR':>9} {'regs':>7} {'smem':>11} {'local':>5} {'loop':>9}")


def row_line(row: dict) -> str:
    failed = _build.failed_row(row)
    if failed:
        return failed
    o, r, head = row["ours"], row["real"], _build.row_head(row)
    oc, rc = o["classes"], r["classes"]
    return (f"{head} {_pair(o['static'], r['static']):>11} {fmt_ratio(ratio(o['static'], r['static'])):>5} "
            f"{_pair(oc['BAR'], rc['BAR']):>5} "
            f"{_pair(oc['SHFL'] + oc['REDUX'], rc['SHFL'] + rc['REDUX']):>7} "
            f"{(_tc(o) + ' | ' + _tc(r))[:20]:<20} "
            f"{_pair(oc['LDS'] + oc['STS'], rc['LDS'] + rc['STS']):>9} {_pair(oc['ADDR'], rc['ADDR']):>9} "
            f"{_pair(o['registers'], r['registers']):>7} {_pair(o['shared'], r['shared']):>11} "
            f"{_pair(_local(o), _local(r)):>5} {_pair(_loop(o), _loop(r)):>9}")


def loop_lines(row: dict) -> list[str]:
    """Every innermost loop of both sides: header address, static instructions, classes in it."""
    out = []
    for side in ("ours", "real"):
        m = row[side]
        if not m.get("ok"):
            continue
        for lp in m["loops"]:
            cls = " ".join(f"{k} {v}" for k, v in sorted(lp["classes"].items()))
            out.append(f"    {side} loop @{lp['header']:#06x} depth {lp['depth']}: {lp['static']} instructions"
                       + (f" ({cls})" if cls else ""))
    return out


# ---------------------------------------------------------------- summaries (the issues' figures)


def _both(rows):
    return [x for x in rows if x["ours"].get("ok") and x["real"].get("ok")]


def _name(x) -> str:
    return f"{x['kernel']} {x['target']}"


def spills(m: dict) -> bool:
    return bool(m["classes"]["LOCAL"] or m["frame"])


def summary_lines(rows: list[dict], features: dict[str, set[str]]) -> list[str]:
    """The figures issues 12-15 are judged by.  `features`: kernel id -> {"reduction", "mma"}."""
    out = []
    both = _both(rows)
    targets = sorted({x["target"] for x in rows}, key=lambda t: int(t[3:]))
    ours_failed = [x for x in rows if not x["ours"].get("ok")]
    real_failed = [x for x in rows if not x["real"].get("ok")]
    out.append(f"kernels x targets: {len(rows)} ({len({x['kernel'] for x in rows})} kernels; {', '.join(targets)});"
               f" both compiled: {len(both)}")
    for label, failed, side in (("ours", ours_failed, "ours"), ("real", real_failed, "real")):
        if failed:
            out.append(f"  {label} failed on {len(failed)}: " +
                       ", ".join(f"{_name(x)} ({x[side]['error'][:60]})" for x in failed[:8]) +
                       (" ..." if len(failed) > 8 else ""))
    if not both:
        return out

    def per_target(key) -> str:
        parts = [f"{t} {fmt_ratio(median(key(x) for x in both if x['target'] == t))}" for t in targets]
        return ", ".join(parts)

    def static_ratio(x):
        return ratio(x["ours"]["static"], x["real"]["static"])

    above = sorted((x for x in both if (static_ratio(x) or 0) > 1.5), key=static_ratio, reverse=True)
    out.append(f"static instructions ours/real: median {fmt_ratio(median(static_ratio(x) for x in both))} "
               f"({per_target(static_ratio)}); above 1.5x: {len(above)} (issue 13 goal: 0)")
    worst = sorted(both, key=lambda x: static_ratio(x) or 0, reverse=True)[:6]
    out.append("  worst: " + ", ".join(f"{_name(x)} {fmt_ratio(static_ratio(x))}" for x in worst))
    best = sorted(both, key=lambda x: static_ratio(x) or 0)[:3]
    out.append("  best:  " + ", ".join(f"{_name(x)} {fmt_ratio(static_ratio(x))}" for x in best))

    def reg_ratio(x):
        return ratio(x["ours"]["registers"], x["real"]["registers"])

    out.append(f"registers ours/real: median {fmt_ratio(median(reg_ratio(x) for x in both))} "
               f"({per_target(reg_ratio)}); worst: " +
               ", ".join(f"{_name(x)} {x['ours']['registers']}/{x['real']['registers']}"
                         for x in sorted(both, key=lambda x: reg_ratio(x) or 0, reverse=True)[:4]))

    def addr_ratio(x):
        return ratio(x["ours"]["classes"]["ADDR"], x["real"]["classes"]["ADDR"])

    out.append("address math (IMAD+IADD3+SEL+ISETP) ours/real: median "
               f"{fmt_ratio(median(addr_ratio(x) for x in both))}")
    bar_over = [x for x in both if x["ours"]["classes"]["BAR"] > x["real"]["classes"]["BAR"] + 1]
    out.append(f"BAR: ours {sum(x['ours']['classes']['BAR'] for x in both)}, real "
               f"{sum(x['real']['classes']['BAR'] for x in both)} in total; kernels with ours > real + 1: "
               f"{len(bar_over)}" + "".join(f" ({t}: {sum(1 for x in bar_over if x['target'] == t)})"
                                            for t in targets) + " (issue 13 goal: 0 on sm_90)")
    red = [x for x in both if "reduction" in features.get(x["kernel"], ())]
    no_shfl = [x for x in red if not (x["ours"]["classes"]["SHFL"] or x["ours"]["classes"]["REDUX"])]
    out.append(f"SHFL/REDUX: ours {sum(x['ours']['classes']['SHFL'] + x['ours']['classes']['REDUX'] for x in both)}, "
               f"real {sum(x['real']['classes']['SHFL'] + x['real']['classes']['REDUX'] for x in both)}; "
               f"reduction/scan kernels without either (ours): {len(no_shfl)} of {len(red)} (issue 13 goal: 0)")
    for cls, issue in (("HGMMA", "14"), ("UTCMMA", "15")):
        want = [x for x in both if x["real"]["classes"][cls]]
        if want:
            have = [x for x in want if x["ours"]["classes"][cls]]
            out.append(f"{cls}: ours on {len(have)} of the {len(want)} kernel x targets where the real tool uses it "
                       f"(issue {issue} goal: all)")
    sp_o = [x for x in both if spills(x["ours"])]
    sp_r = [x for x in both if spills(x["real"])]
    out.append(f"spills (local-memory instructions or a stack frame): ours {len(sp_o)}, real {len(sp_r)}"
               + (": " + ", ".join(_name(x) for x in sp_o[:8]) if sp_o else ""))
    plain = [x for x in both if not features.get(x["kernel"])]
    sm_o = [x for x in plain if x["ours"]["shared"]]
    sm_r = [x for x in plain if x["real"]["shared"]]
    out.append(f"shared memory in kernels with no reduction, scan or mma: ours {len(sm_o)} of {len(plain)}, "
               f"real {len(sm_r)} (issue 13: only where a layout conversion needs it)")
    return out


def sets_lines(rows: list[dict]) -> list[str]:
    """The two sets side by side, on the kernel x targets both compiled in both: the median ours/real of
    static instructions and registers, unhinted vs as cuTile launches (nothing when one set is measured)."""
    both = {name: {(x["kernel"], x["target"]): x for x in _both(rows) if _build.set_of(x) == name}
            for name in _build.CORPUS_SETS}
    common = sorted(set.intersection(*(set(b) for b in both.values())))
    if not common:
        return []
    labels = list(_build.CORPUS_SETS.values())

    def medians(field) -> str:
        return ", ".join(f"{label} {fmt_ratio(median(ratio(field(b[k]['ours']), field(b[k]['real'])) for k in common))}"
                         for label, b in zip(labels, both.values()))

    real = [sum(b[k]["real"]["static"] for k in common) for b in both.values()]
    return [f"unhinted vs launched, on the {len(common)} kernel x targets compiled both ways in both sets:",
            f"  static instructions ours/real median: {medians(lambda m: m['static'])}",
            f"  registers ours/real median: {medians(lambda m: m['registers'])}",
            f"  real tool's static instructions in total: {labels[0]} {real[0]}, {labels[1]} {real[1]}"]


# ---------------------------------------------------------------- against a saved run


def _spill_text(m: dict) -> str:
    return f"spills ({m['classes']['LOCAL']} local-memory instructions, {m['frame']} bytes of stack)"


COMPARED = (("static", "static instructions", lambda m: m["static"]),
            ("BAR", "BAR", lambda m: m["classes"]["BAR"]),
            ("registers", "registers", lambda m: m["registers"]))


def _ctas(target: str, m: dict, now: dict) -> int:
    """CTAs per SM that `m`'s registers and shared memory allow (the block size as measured now)."""
    return resident_ctas(target, now.get("threads") or 128, m["registers"], m.get("shared") or 0)


def _where(key: tuple[str, str, str]) -> str:
    """`kernel target`, and the set when it is the launch set (the unhinted set is the baselines' own)."""
    corpus_set, kernel, target = key
    return f"{kernel} {target}" + ("" if corpus_set == "public" else f" ({_build.SETS[corpus_set]})")


def compare_lines(before: list[dict], after: list[dict]) -> list[str]:
    """Ours in `after` against ours in `before`, per kernel x target; `WORSE:` lines for regressions."""
    old = {_build.row_key(x): x["ours"] for x in before}
    out = [f"{'kernel':<30} {'target':<6} {'instr before->after':>21} {'delta':>6} {'BAR':>7} {'regs':>9} "
           f"{'local':>5}"]
    worse, better, same, new, failing, occupancy_kept = [], 0, 0, 0, 0, 0
    several_sets = len({_build.set_of(x) for x in after}) > 1
    for i, x in enumerate(after):
        key = _build.row_key(x)
        if several_sets and (i == 0 or _build.set_of(after[i - 1]) != key[0]):
            out.append(f"-- {_build.SETS[key[0]]} ({_build.set_place(key[0])})")
        a, b = x["ours"], old.get(key)
        head = _build.row_head(x)
        if b is None:
            new += 1
            out.append(f"{head} new (not in the baseline)")
            continue
        if not a.get("ok"):
            out.append(f"{head} ours fails{' now' if b.get('ok') else ', as in the baseline'}: {a['error']}")
            if b.get("ok"):
                worse.append(f"WORSE: {_where(key)}: no longer compiles ({a['error'][:80]})")
            else:
                failing += 1
            continue
        if not b.get("ok"):
            out.append(f"{head} compiles now (failed in the baseline)")
            if spills(a):
                worse.append(f"WORSE: {_where(key)}: {_spill_text(a)}")
            else:
                better += 1
            continue
        d = a["static"] - b["static"]
        out.append(f"{head} {b['static']:>10}->{a['static']:<10} {d:>+6} "
                   f"{b['classes']['BAR']:>3}->{a['classes']['BAR']:<3}"
                   f" {b['registers']:>4}->{a['registers']:<4} {_local(a):>5}")
        grew = [f"{label} {f(b)} -> {f(a)} ({f(a) - f(b):+d})" for _k, label, f in COMPARED if f(a) > f(b)]
        if spills(a):
            grew.append(_spill_text(a))
        if grew:
            if a["registers"] > b["registers"]:
                ctas = [_ctas(key[2], m, a) for m in (b, a)]
                grew.append(f"CTAs per SM {ctas[0]} -> {ctas[1]}")
                occupancy_kept += ctas[1] >= ctas[0] and len(grew) == 2
            worse.append(f"WORSE: {_where(key)}: " + "; ".join(grew))
        elif any(f(a) < f(b) for _k, _l, f in COMPARED):
            better += 1
        else:
            same += 1
    gone = sorted(set(old) - {_build.row_key(x) for x in after})
    out.extend(worse)
    out.append(f"against the baseline: {len(worse)} worse ({occupancy_kept} in registers only, with as many "
               f"CTAs per SM), {better} better, {same} unchanged, {new} new"
               + (f", {failing} failing before and now" if failing else "")
               + (f", {len(gone)} not measured now" if gone else ""))
    return out


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-name", default=DEFAULT_TARGETS, help="comma-separated targets (default sm_80,sm_90)")
    ap.add_argument("--kernels", default="", help="comma-separated kernel ids or substrings (default: all)")
    ap.add_argument("--sample", type=int, default=0, help="every N-th kernel only")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--cache-dir", type=Path, default=_build.DEFAULT_CACHE,
                    help="where the real tool's cubins are kept (default build/bench-cache/real)")
    ap.add_argument("--save", type=Path, help="write every figure as JSON")
    ap.add_argument("--baseline", type=Path, help="a --save file to compare ours with")
    ap.add_argument("--loops", action="store_true", help="list every innermost loop under each row")
    _build.add_set_option(ap)
    args = ap.parse_args(argv)

    sets = _build.corpus_sets(args.corpus, args.corpus_set)
    files = {folder: _build.corpus_kernels(folder, args.kernels, args.sample) for _name, folder in sets}
    if not any(files.values()):
        print(f"error: no 13.4 corpus kernels in {args.corpus / 'out'} ({args.corpus_set})"
              + (f" matching {args.kernels!r}" if args.kernels else ""))
        return 0
    gpus = [g.strip() for g in args.gpu_name.split(",") if g.strip()]
    baseline = None
    if args.baseline:
        try:
            baseline = json.loads(args.baseline.read_text())
        except (OSError, ValueError) as e:
            print(f"error: cannot read the baseline {args.baseline}: {e}")
    t0 = time.perf_counter()
    rows = _build.measure_sets(sets, lambda folder: files[folder],
                               lambda fs, folder: _build.measure_all(fs, gpus, args.cache_dir, args.jobs, folder))
    wall = time.perf_counter() - t0
    features = {_build.kernel_id(p): ({"reduction"} if _build.has_reduction(p) else set()) |
                ({"mma"} if _build.has_mma(p) else set()) for fs in files.values() for p in fs}
    tool = _build.real_tool()
    print(f"codegen quality: ours ({_build.git_head()}) vs NVIDIA tileiras ({tool[2] if tool else 'absent'}), "
          f"-O{_build.OPT_LEVEL}, {len(features)} kernels x {', '.join(gpus)} "
          f"({' and '.join(_build.SETS[name] for name, _ in sets)}); {wall:.1f} s on {args.jobs} workers\n")
    after = sets_lines(rows)
    if baseline is not None:
        commit = baseline.get("meta", {}).get("src_commit") or baseline.get("meta", {}).get("commit", "?")
        after += ["", f"ours now vs the baseline {args.baseline} (compiler at {commit}):"]
        after += compare_lines(baseline.get("rows", []), rows)
    line = (lambda r: "\n".join([row_line(r)] + loop_lines(r))) if args.loops else row_line
    _build.print_report(HEADER, rows, line, lambda part: summary_lines(part, features), args.save,
                        {"real_tool": tool[2] if tool else None, "targets": gpus, "opt_level": _build.OPT_LEVEL,
                         "set": args.corpus_set}, after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
