"""Synthetic event streams with fixed timings: the benchmark's 500 queued modules, and the
deterministic runs behind the snapshot tests.

`synthetic_run()` plays a supervisor: modules admitted in order a few at a time, each parsed,
then per target its kernels lowered (and scheduled), codegen, ptxas, outputs; `-j` workers
with fixed pids; chosen modules fail at parse (with a located diagnostic), in ptxas (with tool
stderr), or lose their worker (crash + restart).  Every `t` comes from a simulated clock, so the
same arguments always give the same stream.  The events are the pipeline's own types.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from tileiras_async.pipeline import events as ev
from tileiras_async.schedule.report import (ArmResult, DepEdge, IIAttempt, RRTCell, RRTRow, ScheduledOp,
                                            ScheduleReport, SlotUse)
from tileiras_async.toolchain.resources import KernelResources

STAGE_COST = {"parse": 0.020, "schedule": 0.006, "lower": 0.012, "codegen": 0.045, "assemble": 0.060}


def sample_schedule(kernel: str, module: str = "", gpu: str = "sm_100", loop: int = 0) -> ScheduleReport:
    """A modulo-scheduled loop of 6 ops: II 3 fails on the TMA slot, II 4 succeeds in 2 stages."""
    spec = [  # name, rclass, start, latency, slots
        ("load_view_tko", "tma_load", 0, 8, [(12, "tma", 0, 2), (16, "tp_smem_wr", 1, 1)]),
        ("load_view_tko", "tma_load", 2, 8, [(12, "tma", 0, 2), (16, "tp_smem_wr", 1, 1)]),
        ("mmaf", "mma", 8, 8, [(11, "tc_and_mma", 0, 2), (19, "tp_mma", 0, 2)]),
        ("addf", "alu", 10, 2, [(3, "alu", 0, 1)]),
        ("store_view_tko", "tma_store", 11, 6, [(13, "tma_st", 0, 1)]),
        ("addi", "alu", 1, 1, [(3, "alu", 0, 1)]),
    ]
    ii = 4
    ops = []
    for order, (index, (name, rclass, start, lat, slots)) in enumerate(
            sorted(enumerate(spec), key=lambda p: (p[1][2] // ii, p[1][2]))):
        ops.append(ScheduledOp(index=index, name=name, rclass=rclass, start=start, stage=start // ii,
                               order=order, cycle=start % ii, latency=lat,
                               duration=max(o + d for _s, _n, o, d in slots),
                               slots=[SlotUse(s, n, o, d) for s, n, o, d in slots], loc=10 + index,
                               async_capable=rclass.startswith("tma") or rclass == "mma", arm="sms"))
    cells: dict[int, dict[str, RRTCell]] = {c: {} for c in range(ii)}
    for o in ops:
        for s in o.slots:
            for k in range(s.duration):
                row = (o.start + s.offset + k) % ii
                old = cells[row].get(s.name)
                holders = (old.ops if old else []) + [o.index]
                cells[row][s.name] = RRTCell(s.slot, s.name, len(holders), 2 if s.name == "alu" else 1, holders)
    rrt = [RRTRow(cycle=c, mask=sum(1 << (x.slot - 1) for x in cells[c].values()),
                  full=sum(1 << (x.slot - 1) for x in cells[c].values() if x.used >= x.capacity),
                  cells=sorted(cells[c].values(), key=lambda x: x.slot)) for c in range(ii)]
    slot_names = [n for _s, n in sorted({(s.slot, s.name) for o in ops for s in o.slots})]
    attempts = [
        IIAttempt(ii=3, ok=False, reason="sms: tma busy at row 2; serial: over cap",
                  arms=[ArmResult("sms", False, "tma busy at row 2", steps=14, evictions=2),
                        ArmResult("serial", False, "over cap", steps=6)],
                  conflict_op=1, conflict_start=2, conflict_row=2, conflict_resource="tma", conflict_holders=[0]),
        IIAttempt(ii=4, ok=True, arm="sms", arms=[ArmResult("sms", True, steps=9)]),
    ]
    edges = [DepEdge(0, 2, 8, 0, "data"), DepEdge(1, 2, 8, 0, "data"), DepEdge(2, 3, 8, 0, "data"),
             DepEdge(3, 4, 2, 0, "data"), DepEdge(2, 2, 8, 1, "carried"), DepEdge(5, 5, 1, 1, "carried")]
    return ScheduleReport(kernel=kernel, loop=loop, loop_op="for", gpu_name=gpu, family=gpu, strategy="modulo",
                          rule="async loads feed an mma", ok=True, ii=ii, mii=3, res_mii=2, rec_mii=3, fine_mii=2,
                          dep_mii=1, ii_cap=24, stage_count=3, module=module, loc=9, res_bottleneck="tma",
                          span_stages=3, prologue_copies=2, num_ops=len(ops), ops=ops, edges=edges,
                          attempts=attempts, rrt=rrt, rrt_slots=slot_names)


def sample_ir_dumps(kernel: str) -> list:
    """A kernel's IR after three passes, as the tile-GPU printer writes it: each snapshot a constant more,
    a tile in the default layout from assign-layouts on, the barrier insert-barriers adds."""
    import numpy as np
    from tileiras_async.ir import types as T
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.core import Operation
    from tileiras_async.stages import IRDump
    from tileiras_async.tilegpu import ops  # noqa: F401  (declares the tile-GPU ops)
    from tileiras_async.tilegpu.ir import KernelIR
    from tileiras_async.tilegpu.options import CodegenOptions
    from tileiras_async.tilegpu.printer import print_kernel
    from tileiras_async.tilegpu.types import with_layout
    options = CodegenOptions()
    acc = with_layout(tile(T.F32, 32, 32), options.default_layout((32, 32)))
    out = []
    for n, name in enumerate(("convert-to-tilegpu", "assign-layouts", "insert-barriers")):
        mb = ModuleBuilder((13, 4, 0))
        with mb.kernel(kernel, []) as kb:
            for i in range(n + 1):
                kb.constant(np.int32(i), tile(T.I32))
            if n:
                kb.constant(np.float32(0.5), acc)
            if name == "insert-barriers":
                kb.block.ops.append(Operation("tilegpu.barrier"))
            kb.op("return")
        k = KernelIR(mb.module, mb.module.functions[0], options)
        out.append(IRDump(kernel, "after", name, print_kernel(k)))
    return out


@dataclass
class _Sim:
    events: list
    seq: itertools.count

    def emit(self, cls, t: float, **fields) -> None:
        heapq.heappush(self.events, (round(t, 6), next(self.seq), cls(t=round(t, 6), **fields)))


def sample_resources(n: int, target: str) -> KernelResources:
    """Made-up but plausible resources of the n-th kernel (what the cubin would say)."""
    regs = (32, 40, 90, 128, 168)[n % 5]
    mma = {"sm_100": "tcgen05", "sm_90": "wgmma"}.get(target, "mma.sync") if regs >= 90 else "none"
    shared = 33792 if regs >= 90 else 1024 * (n % 3)
    return KernelResources(registers=regs, spill_store_bytes=8 * (regs == 168), spill_load_bytes=12 * (regs == 168),
                           stack_frame_bytes=8 * (regs == 168), shared_static_bytes=shared,
                           tmem_columns=64 if mma == "tcgen05" else None, threads=128,
                           ctas_per_sm=min(16, 65536 // (regs * 128)), occupancy_limit="registers" if regs >= 40
                           else "threads", tensor_core=mma, copy_engine="cp.async" if regs >= 90 else "plain")


def synthetic_run(n_modules: int = 500, *, targets=("sm_100",), jobs: int = 4, kernels=(1, 1, 2),
                  parse_fail_every: int = 0, ptxas_fail_every: int = 0, crash_every: int = 0,
                  schedules: bool = True, prefix: str = "corpus/", in_flight: int | None = None,
                  run_finished: bool = True, modules: list[str] | None = None,
                  parse_fail_location: str | None = None, ir_dumps: bool = False) -> list:
    """The events of one simulated batch, in time order (see the module docstring).

    `kernels` cycles the number of kernels per module; `in_flight` modules are admitted at once
    (default: all of them -- "500 modules in flight"); `modules` names the inputs (default:
    made-up paths; real bytecode files give the diagnostics view an IR to show), and
    `parse_fail_location` is the file:line:col of every parse failure's diagnostic; `ir_dumps`: each
    lowered kernel reports tile-GPU IR snapshots (`sample_ir_dumps`), as with --print-ir-after-all."""
    sim = _Sim([], itertools.count())
    paths = list(modules) if modules else [f"{prefix}m{i:04d}.v13.4.tileirbc" for i in range(n_modules)]
    n_modules = len(paths)
    out_dir = "out"
    sim.emit(ev.RunStarted, 0.0, version="0.1.0", modules=paths, targets=list(targets), jobs=jobs, opt_level=3,
             out_dir=out_dir, supervisor_pid=1000, stage_timeout_s=600.0, memory_limit_bytes=4 << 30)
    worker_free = [(0.05, 1001 + w) for w in range(jobs)]  # (free at, pid)
    heapq.heapify(worker_free)
    for w in range(jobs):
        sim.emit(ev.WorkerStarted, 0.04 + 0.001 * w, pid=1001 + w)
    next_pid = 1001 + jobs
    job_ids = itertools.count(1)
    admit = in_flight or n_modules
    module_end: list[float] = []
    kern_cycle = itertools.cycle(kernels)
    fail_at = {}
    for i, path in enumerate(paths):
        kcount = next(kern_cycle)
        start = 0.01 * i if i < admit else sorted(module_end)[i - admit]
        sim.emit(ev.ModuleStarted, start, module=path, index=i)

        def run_stage(stage: str, ready: float, target=None, kernel=None, ok=True, crash=False) -> tuple[float, bool]:
            nonlocal next_pid
            free_at, pid = heapq.heappop(worker_free)
            begin = max(ready, free_at)
            job = next(job_ids)
            cost = STAGE_COST[stage] * (1 + (i % 7) / 10)
            sim.emit(ev.StageStarted, begin, job=job, stage=stage, module=path, target=target, kernel=kernel,
                     worker_pid=pid, queued_s=round(begin - ready, 6))
            end = begin + cost
            if crash:
                sim.emit(ev.StageFinished, end, job=job, stage=stage, module=path, ok=False, elapsed_s=cost,
                         target=target, kernel=kernel, worker_pid=pid, peak_rss_bytes=220 << 20)
                sim.emit(ev.WorkerExited, end, pid=pid, reason="crashed", exit_code=-11, signal="SIGSEGV", job=job)
                pid, next_pid = next_pid, next_pid + 1
                sim.emit(ev.WorkerStarted, end + 0.03, pid=pid)
                heapq.heappush(worker_free, (end + 0.03, pid))
                return end, False
            sim.emit(ev.StageFinished, end, job=job, stage=stage, module=path, ok=ok, elapsed_s=cost, target=target,
                     kernel=kernel, worker_pid=pid, rss_bytes=(120 + (pid % 7) * 9) << 20,
                     peak_rss_bytes=(140 + (pid % 7) * 9) << 20, overhead_s=0.0009)
            heapq.heappush(worker_free, (end, pid))
            return end, ok

        parse_ok = not (parse_fail_every and i % parse_fail_every == parse_fail_every - 1)
        t, _ = run_stage("parse", start, ok=parse_ok)
        names = [f"kernel{i:04d}_{k}" for k in range(kcount)]
        if not parse_ok:
            where = parse_fail_location or f"gen_{i:04d}.py:{10 + i % 40}:{4 + i % 9}"
            sim.emit(ev.Diagnostic, t, module=path, severity="error", stage="parse", location=where,
                     message="'cuda_tile.divi' op rounding mode 'negative_inf' is not allowed with 'unsigned' flag")
            sim.emit(ev.Diagnostic, t, module=path, severity="error", stage="parse",
                     message="verification failed for deserialized cuda_tile::ModuleOp")
            sim.emit(ev.ModuleFinished, t + 0.0001, module=path, ok=False, exit_code=3,
                     elapsed_s=round(t + 0.0001 - start, 6))
            module_end.append(t + 0.0001)
            continue
        worst = 0
        t_module = t
        for target in targets:
            sim.emit(ev.TargetStarted, t, module=path, target=target)
            lowered_at = t
            crashed = False
            lowered: list[tuple[str, float]] = []   # their KernelFinished comes once the cubin exists
            for k, name in enumerate(names):
                sim.emit(ev.KernelStarted, t, module=path, target=target, kernel=name)
                crash = bool(crash_every) and i % crash_every == crash_every - 1 and k == 0
                end, ok = run_stage("lower", t, target, name, crash=crash)
                if crash:
                    crashed = True
                    sim.emit(ev.Diagnostic, end, module=path, severity="error", stage="lower", target=target,
                             kernel=name, message=f"worker {1001} died (signal SIGSEGV (Segmentation fault)) "
                                                  f"during lower")
                if ir_dumps and ok and not crash:
                    sim.emit(ev.KernelIRDumped, end, module=path, target=target, kernel=name,
                             dumps=sample_ir_dumps(name))
                if ok:
                    lowered.append((name, round(end - t, 6)))
                else:
                    sim.emit(ev.KernelFinished, end, module=path, target=target, kernel=name, ok=False,
                             elapsed_s=round(end - t, 6))
                lowered_at = max(lowered_at, end)
                if schedules:
                    send, _ = run_stage("schedule", t, target, name)
                    reports = [sample_schedule(name, path, target)] if k == 0 else []
                    sim.emit(ev.KernelScheduled, send, module=path, target=target, kernel=name, reports=reports)
                    lowered_at = max(lowered_at, send)
            stem = path.rsplit("/", 1)[-1].removesuffix(".tileirbc")
            if crashed:
                code, outputs, tend = 4, [], lowered_at
            else:
                tend, _ = run_stage("codegen", lowered_at, target)
                job = next(job_ids)
                sim.emit(ev.StageStarted, tend, job=job, stage="assemble", module=path, target=target)
                cost = STAGE_COST["assemble"]
                ptxas_ok = not (ptxas_fail_every and i % ptxas_fail_every == ptxas_fail_every - 1)
                sim.emit(ev.StageFinished, tend + cost, job=job, stage="assemble", module=path, ok=ptxas_ok,
                         elapsed_s=cost, target=target)
                tend += cost
                if ptxas_ok:
                    code, outputs = 0, [f"{out_dir}/{stem}.{target}.ptx", f"{out_dir}/{stem}.{target}.cubin"]
                else:
                    code, outputs = 5, [f"{out_dir}/{stem}.{target}.ptx"]
                    sim.emit(ev.Diagnostic, tend, module=path, severity="error", stage="assemble", target=target,
                             message="ptxas failed with exit code 255",
                             tool_stderr="ptxas /tmp/kernel.ptx, line 42; error   : Unknown symbol 'x'\n"
                                         "ptxas fatal   : Ptx assembly aborted due to errors\n")
            for k, (name, elapsed) in enumerate(lowered):
                sim.emit(ev.KernelFinished, tend, module=path, target=target, kernel=name, ok=True, elapsed_s=elapsed,
                         resources=sample_resources(i + k, target) if code == 0 else None)
            sim.emit(ev.TargetFinished, tend, module=path, target=target, ok=code == 0, exit_code=code,
                     elapsed_s=round(tend - t, 6), outputs=outputs)
            worst = max(worst, code)
            t_module = max(t_module, tend)
        fail_at[i] = worst
        sim.emit(ev.ModuleFinished, t_module + 0.0001, module=path, ok=worst == 0, exit_code=worst,
                 elapsed_s=round(t_module + 0.0001 - start, 6), version="13.4", kernels=names)
        module_end.append(t_module + 0.0001)
    events = [e for _t, _s, e in sorted(sim.events)]
    if run_finished:
        end = events[-1].t + 0.001
        failed = [p for p, (c) in zip(paths, [fail_at.get(i, 3) for i in range(n_modules)]) if c]
        kernels_total = sum(1 for e in events if isinstance(e, ev.KernelFinished))
        kernels_failed = sum(1 for e in events if isinstance(e, ev.KernelFinished) and not e.ok)
        outputs = [o for e in events if isinstance(e, ev.TargetFinished) for o in e.outputs]
        events.append(ev.RunFinished(t=round(end, 6), ok=not failed, exit_code=max(
            [fail_at.get(i, 3) for i in range(n_modules)], default=0), elapsed_s=round(end, 6), modules=n_modules,
            modules_failed=len(failed), kernels=kernels_total, kernels_failed=kernels_failed, outputs=outputs))
    return events
