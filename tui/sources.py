"""Where the dashboard's events come from: a live batch, or a recorded JSON-lines stream.

Both hand out events in batches (`drain()`), never one callback per event into the UI:

* `LiveSource` runs the pipeline's `compile_batch` in a thread (trio there, Textual's asyncio
  loop here) with `handle_signals=False` and a `BatchControl` for retry / cancel / quit; the
  supervisor's sink appends each event to a deque (thread-safe, lock-free) that the UI drains
  on its refresh timer.
* `ReplaySource` reads what `tileiras-async compile --json` printed (one event per line, lines
  that are not events are skipped), either all at once or paced by the events' own clock.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Iterable

from tileiras_async.pipeline import events as ev


class Source:
    live = False
    control = None

    def drain(self, limit: int | None = None) -> list:
        raise NotImplementedError

    @property
    def exhausted(self) -> bool:
        """Nothing more will come."""
        raise NotImplementedError

    def close(self, cancel: bool = False) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        pass


class _Queue:
    def __init__(self):
        self._q: collections.deque = collections.deque()

    def put(self, event) -> None:
        self._q.append(event)

    def take(self, limit: int | None) -> list:
        q = self._q
        n = len(q) if limit is None else min(limit, len(q))
        return [q.popleft() for _ in range(n)]

    def __len__(self) -> int:
        return len(self._q)


class ListSource(Source):
    """Events already in memory (tests, benchmarks, replays read in full)."""

    def __init__(self, events: Iterable = ()):
        self._queue = _Queue()
        for e in events:
            self._queue.put(e)
        self._closed = False

    def feed(self, events: Iterable) -> None:
        for e in events:
            self._queue.put(e)

    def end(self) -> None:
        self._closed = True

    def drain(self, limit: int | None = None) -> list:
        return self._queue.take(limit)

    @property
    def exhausted(self) -> bool:
        return self._closed and not len(self._queue)


def read_events(path: str) -> tuple[list, int]:
    """(events, lines skipped) of a JSON-lines file (`compile --json` output)."""
    events, skipped = [], 0
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                events.append(ev.decode_json(line))
            except Exception:  # noqa: BLE001 - a summary line, or an event type from a newer version
                skipped += 1
    return events, skipped


class ReplaySource(Source):
    """A recorded stream.  speed=None: everything at once (the UI still takes it in batches);
    speed=s: paced so that event time t arrives s times faster than it was recorded."""

    def __init__(self, events: list, speed: float | None = None, clock=time.monotonic):
        self._events = events
        self._pos = 0
        self.speed = speed
        self._clock = clock
        self._t0: float | None = None

    @classmethod
    def from_file(cls, path: str, speed: float | None = None) -> "ReplaySource":
        events, _skipped = read_events(path)
        return cls(events, speed)

    def drain(self, limit: int | None = None) -> list:
        end = len(self._events)
        if self.speed:
            if self._t0 is None:
                self._t0 = self._clock()
            horizon = (self._clock() - self._t0) * self.speed
            lo, hi = self._pos, end
            while lo < hi:  # the first event later than the horizon
                mid = (lo + hi) // 2
                if self._events[mid].t <= horizon:
                    lo = mid + 1
                else:
                    hi = mid
            end = lo
        if limit is not None:
            end = min(end, self._pos + limit)
        out = self._events[self._pos:end]
        self._pos = end
        return out

    @property
    def exhausted(self) -> bool:
        return self._pos >= len(self._events)


class LiveSource(Source):
    """A batch compiling in a background thread; `control` is its BatchControl."""
    live = True

    def __init__(self, config, *, hold_open: bool = True, sinks: Iterable = ()):
        from tileiras_async.pipeline.supervisor import BatchControl
        config.handle_signals = False   # trio is not on the main thread; the dashboard owns the keys
        self.config = config
        self.control = BatchControl(hold_open=hold_open)
        self._queue = _Queue()
        self._sinks = [self._queue.put, *sinks]
        self.finished: ev.RunFinished | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tileiras-async-batch", daemon=True)
        self._done = threading.Event()

    def start(self) -> "LiveSource":
        # multiprocessing's resource tracker (started with the first spawned worker) passes on
        # sys.stderr's descriptor, which is not a real one once Textual captures the streams:
        # start it now, while the streams are the process's own.
        import sys
        saved = sys.stderr
        try:
            from multiprocessing import resource_tracker
            if sys.__stderr__ is not None:
                sys.stderr = sys.__stderr__
            resource_tracker.ensure_running()
        except Exception:  # noqa: BLE001 - the first worker starts it then (or fails with a diagnostic)
            pass
        finally:
            sys.stderr = saved
        self._thread.start()
        return self

    def _run(self) -> None:
        from tileiras_async.pipeline.supervisor import compile_batch
        try:
            self.finished = compile_batch(self.config, self._sinks, self.control)
        except BaseException as e:  # noqa: BLE001 - shown by the dashboard, re-raised by the CLI
            self.error = e
        finally:
            self._done.set()

    def drain(self, limit: int | None = None) -> list:
        return self._queue.take(limit)

    @property
    def exhausted(self) -> bool:
        return self._done.is_set() and not len(self._queue)

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def close(self, cancel: bool = False) -> None:
        self.control.close(cancel=cancel)

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)
