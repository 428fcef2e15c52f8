"""Pictures of a run, drawn as Rich text from the model (no UI here, so they are unit-testable):

    timeline     one line per worker: which stage it ran when (a letter per stage), idle time as
                 `·`, and a `queued` line with how many jobs waited for a worker in each column
    histogram    per stage, how many jobs took 0-1 ms, 1-3 ms, ... , over 10 s (log buckets)
    throughput   modules finished per time slice as a sparkline, with the mean and the last rate

Every chart takes the width it may use and the run's clock (`now`), so a replay draws the same
picture every time.
"""
from __future__ import annotations

import math

from rich.text import Text

STAGE_MARK = {"parse": ("p", "cyan"), "schedule": ("s", "blue"), "lower": ("l", "green"), "codegen": ("c", "yellow"),
              "assemble": ("a", "magenta"), "disasm": ("d", "bright_blue")}
BUCKETS_S = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
BUCKET_LABELS = ("<1ms", "<3ms", "<10ms", "<30ms", "<.1s", "<.3s", "<1s", "<3s", "<10s", "10s+")
BARS = " ▁▂▃▄▅▆▇█"
LABEL_WIDTH = 22


def _label(text: str, width: int = LABEL_WIDTH) -> str:
    text = text if len(text) <= width else "…" + text[-(width - 1):]
    return text.ljust(width)


def timeline(spans, now: float, width: int) -> Text:
    """`spans`: (worker label, stage, start, end or None while running, queued seconds) per job."""
    out = Text()
    cols = max(10, width - LABEL_WIDTH - 1)
    end = max([now] + [s[3] for s in spans if s[3] is not None] + [0.0])
    if end <= 0:
        return Text("no jobs yet", style="dim")
    step = end / cols
    workers: dict[str, list] = {}
    for span in spans:
        workers.setdefault(span[0], []).append(span)
    queued = [0] * cols
    for label in sorted(workers, key=_worker_order):
        cells: list[tuple[str, str]] = [("·", "dim")] * cols
        for _w, stage, t0, t1, wait in workers[label]:
            mark, style = STAGE_MARK.get(stage, ("?", "white"))
            a = min(cols - 1, int(t0 / step))
            b = min(cols - 1, max(a, math.ceil((t1 if t1 is not None else now) / step) - 1))  # [t0, t1)
            for c in range(a, b + 1):
                cells[c] = (mark, style if t1 is not None else f"bold {style}")
            for c in range(min(cols - 1, int(max(0.0, t0 - wait) / step)), a):
                queued[c] += 1
        out.append(_label(label) + " ")
        for mark, style in cells:
            out.append(mark, style=style)
        out.append("\n")
    out.append(_label("queued (jobs waiting)") + " ", style="dim")
    for n in queued:
        out.append(" " if n == 0 else (str(n) if n < 10 else "+"), style="red" if n else "dim")
    out.append("\n")
    out.append(_label("") + " " + _axis(end, cols), style="dim")
    out.append("\n" + " ".join(f"{m}={name}" for name, (m, _s) in STAGE_MARK.items()), style="dim")
    return out


def _worker_order(label: str):
    return (label == "supervisor", len(label), label)


def _axis(end: float, cols: int) -> str:
    left, right = "0 s", f"{end:.1f} s"
    return left + " " * max(1, cols - len(left) - len(right)) + right


def bucket(seconds: float) -> int:
    for i, limit in enumerate(BUCKETS_S):
        if seconds < limit:
            return i
    return len(BUCKETS_S)


def histogram(stage_times: dict[str, list[float]]) -> Text:
    """Per stage: jobs per log-scale time bucket, as bars of the stage's own maximum."""
    out = Text()
    if not stage_times:
        return Text("no finished jobs yet", style="dim")
    out.append(_label("stage", 10) + " " + " ".join(f"{b:>5}" for b in BUCKET_LABELS) + "   jobs\n", style="dim")
    for stage in [s for s in STAGE_MARK if s in stage_times] + sorted(set(stage_times) - set(STAGE_MARK)):
        counts = [0] * len(BUCKET_LABELS)
        for t in stage_times[stage]:
            counts[bucket(t)] += 1
        top = max(counts) or 1
        _mark, style = STAGE_MARK.get(stage, ("?", "white"))
        out.append(_label(stage, 10) + " ")
        for n in counts:
            bar = BARS[0] if n == 0 else BARS[max(1, round(n / top * (len(BARS) - 1)))]
            out.append(f"{bar * 3:>4}{n if n < 10 else '+':>1} " if n else "    · ", style=style if n else "dim")
        out.append(f"  {len(stage_times[stage]):>4}\n")
    return out


def throughput(finished_at: list[float], now: float, width: int) -> Text:
    """Modules finished per time slice: a sparkline over the run, the mean and the latest rate."""
    cols = max(10, width - LABEL_WIDTH - 52)   # room for the figures after the sparkline
    end = max([now] + finished_at + [0.0])
    if end <= 0 or not finished_at:
        return Text("no module finished yet", style="dim")
    step = end / cols
    counts = [0] * cols
    for t in finished_at:
        counts[min(cols - 1, int(t / step))] += 1
    top = max(counts) or 1
    line = "".join(BARS[0] if n == 0 else BARS[max(1, round(n / top * (len(BARS) - 1)))] for n in counts)
    out = Text(_label("modules/s") + " ")
    out.append(line, style="green")
    recent = [t for t in finished_at if t > end - max(step * 5, 1.0)]
    window = max(step * 5, 1.0)
    out.append(f"  mean {len(finished_at) / end:.1f}/s  last {len(recent) / min(window, end):.1f}/s  "
               f"peak {top / step:.1f}/s")
    return out
