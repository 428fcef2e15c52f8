"""A software-pipelined loop as it runs, drawn from its schedule report (the kernel view's schedules tab).

The report is the schedule the emitted code follows: the pipeline pass puts every op of a K-loop in the
stage the modulo scheduler chose.  With S stages, iteration i runs its stage s in step i + s (one step is II
cycles), so the first S - 1 steps are the *prologue* (the pipeline fills: the copies of the first iterations
run before any mma), the steps in which every stage works for a different iteration are the *steady state*
(the loop's body), and the last S - 1 steps are the *drain*.  A loop kept serial has no such picture: its
report says why (`kept serial: ...`).
"""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

STAGE_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")
PROLOGUE, STEADY, DRAIN = "prologue", "steady", "drain"


def pipelined(report) -> bool:
    """Whether the report's loop is software-pipelined (a modulo schedule over two or more stages)."""
    return report.ok and report.strategy == "modulo" and report.stage_count >= 2


def phase(step: int, stages: int, iterations: int) -> str:
    """Which part of the pipelined loop step `step` is, for `iterations` iterations of `stages` stages."""
    if step < stages - 1:
        return PROLOGUE
    if step >= iterations:
        return DRAIN
    return STEADY


def stage_ops(report) -> dict[int, list]:
    """stage -> its ops (ScheduledOp) in the order the schedule runs them."""
    out: dict[int, list] = {}
    for o in sorted(report.ops, key=lambda o: (o.stage, o.order)):
        out.setdefault(o.stage, []).append(o)
    return out


def _stage_style(stage: int) -> str:
    return STAGE_COLORS[stage % len(STAGE_COLORS)]


def pipelined_loop(report, iterations: int | None = None) -> list:
    """Renderables: the iterations x steps grid (phase of each step on top, `s<k>` where an iteration runs
    stage k) and which ops each stage runs.  `iterations` defaults to S + 1: two steady-state steps."""
    if not pipelined(report):
        why = report.rule if report.ok else f"no schedule ({report.message})"
        return [Text(f"not software-pipelined: {why}", style="dim")]
    s = report.stage_count
    n = max(iterations or s + 1, s)
    steps = n + s - 1
    title = (f"pipelined loop ({s} stages; a step is II = {report.ii} cycles: prologue {s - 1} steps, steady "
             f"state, drain {s - 1} steps)")
    grid = Table(title=title, title_justify="left", title_style="bold", box=None, padding=(0, 1),
                 header_style="bold dim")
    grid.add_column("iteration \\ step", justify="left")
    for t in range(steps):
        grid.add_column(str(t), justify="center")
    phase_style = {PROLOGUE: "yellow", STEADY: "green", DRAIN: "magenta"}
    grid.add_row(Text("phase", style="bold"),
                 *(Text(_phase_label(phase(t, s, n)), style=phase_style[phase(t, s, n)]) for t in range(steps)))
    for i in range(n):
        cells = []
        for t in range(steps):
            k = t - i
            cells.append(Text(f"s{k}", style=_stage_style(k)) if 0 <= k < s else Text("·", style="dim"))
        grid.add_row(Text(f"iteration {i}"), *cells)
    legend = Text()
    by_stage = stage_ops(report)
    for k in range(s):
        legend.append(f"s{k}", style=f"bold {_stage_style(k)}")
        names = ", ".join(f"#{o.index} {o.name}" + (f" [{o.partition}]" if o.partition else "")
                          for o in by_stage.get(k, [])) or "(no ops)"
        legend.append(f"  {names}\n")
    for p in report.partitions:     # a warp-specialised loop: which warpgroup runs which ops
        regs = f"setmaxnreg {p.registers}" if p.name == "producer" else f"{p.registers} registers"
        legend.append(f"{p.name}", style="bold")
        legend.append(f"  warpgroup {p.warpgroup} ({regs}), ring of {report.ring_depth} stage buffers\n")
    return [grid, legend]


def _phase_label(name: str) -> str:
    return {PROLOGUE: "pro", STEADY: "steady", DRAIN: "drain"}[name]
