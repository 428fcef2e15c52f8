"""The batch compile: a trio supervisor moving stage messages between worker processes.

    module ─ parse ─┬─ target A ─┬─ lower kernel 1 ─┐
                    │            ├─ lower kernel 2 ─┴─ codegen ─ assemble (ptxas) ─ write outputs
                    └─ target B ─ ...

One task per module (admitted a few at a time, in input order), one per target, one per
kernel: kernels of a module advance independently after parsing.  parse / lower / codegen
run in the worker pool; ptxas (and nvdisasm for --keep-sass) runs from the supervisor through
the async harness.  All of them share the -j slots, later stages first.  The supervisor knows
stage names and message types, never op semantics.

Outputs depend only on (input bytes, target, flags): kernels reach codegen in the module's
order, never in completion order, and each file is written atomically, so any -j and any
interleaving give byte-identical files, and an interrupted run leaves no partial file.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import trio

from .. import __version__
from ..inputs import InputError
from ..stages import (AssembleRequest, CodegenRequest, CompileOptions, LoweredKernel, LowerRequest, ParsedModule,
                      ParseRequest, PtxModule, StageDiagnostic)
from ..toolchain import OutputWriteError, tempdirs, write_atomic
from . import tools
from .config import BatchConfig, ensure_dir_of, expand_inputs, output_stem  # noqa: F401  (re-exported)
from .events import (CacheLookup, Diagnostic, KernelFinished, KernelIRDumped, KernelScheduled, KernelStarted,
                     ModuleFinished, ModuleStarted, RunFinished, RunStarted, StageFinished, StageStarted,
                     TargetFinished, TargetStarted)
from .inputs import read_input
from .pool import PrioritySlots, StageRaised, WorkerFault, WorkerPool

from .config import (EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_CODEGEN, EXIT_CONFIG, EXIT_INTERNAL,  # noqa: F401
                     EXIT_UNREADABLE, SIGNAL_EXIT)

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# stage -> scheduling rank: finish what has started before starting new work
_RANK = {"assemble": 0, "disasm": 0, "codegen": 1, "lower": 2, "schedule": 2, "parse": 3}
_LOCATION_RE = re.compile(r"(?:^|\bat )([^\s():]+:\d+:\d+)(?:\)|: |$)")
_MLIR_LOC_RE = re.compile(r'loc\("([^"]+)":(\d+):(\d+)\)')


def split_location(message: str) -> tuple[str | None, str]:
    """(file:line:col, message) from a diagnostic's text.  Handles "... at f.py:1:2)" (codegen),
    "f.py:1:2: error: ..." and the verifier's "#cuda_tile.di_loc<loc("f.py":1:2) in ...>: error: ..."
    (whose debug attribute is replaced by the plain location)."""
    if message.startswith("#cuda_tile.di_loc<"):
        depth = 0
        for i, ch in enumerate(message):
            depth += (ch == "<") - (ch == ">")
            if depth == 0 and ch == ">":
                m = _MLIR_LOC_RE.search(message, 0, i)
                rest = message[i + 1:].removeprefix(": ").removeprefix("error: ")
                return (f"{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else None), rest
    m = _LOCATION_RE.search(message)
    return (m.group(1) if m else None), message

Sink = Callable[[object], None]


class BatchControl:
    """The control channel into a running batch (the dashboard's retry / cancel / quit keys).

    Every method is thread-safe and returns at once: the request runs on the batch's trio thread
    (requests made before the run starts are queued).  Modules are named by their path, as in
    the events.

        cancel(module)   stop one module: its worker jobs are cancelled (trio-parallel kills and
                         replaces the workers running them), its ptxas is killed; it finishes with
                         ModuleFinished(ok=False, exit_code=EXIT_CANCELLED).  A module not admitted
                         yet finishes that way as soon as its turn comes.
        cancel_all()     cancel every module that has not finished.
        retry(module)    run a finished module again from the start: ModuleStarted ... ModuleFinished
                         once more, with the same index; its earlier outcome no longer counts in
                         RunFinished.  Ignored while the module runs, and once the batch is closing.
        close(cancel)    let a held-open batch finish once its modules are done; with cancel=True,
                         stop what still runs (RunFinished.cancelled = "user", exit status 130).

    `hold_open=True` keeps the batch (and its worker pool) alive after its last module, until
    close(): a dashboard that stays open can retry modules after the batch is done.
    """

    def __init__(self, hold_open: bool = False):
        self.hold_open = hold_open
        self._lock = threading.Lock()
        self._pending: list[tuple] = []
        self._batch: "Batch | None" = None
        self._token = None
        self._ended = False

    def cancel(self, module: str) -> None:
        self._send("cancel", module)

    def cancel_all(self) -> None:
        self._send("cancel_all", None)

    def retry(self, module: str) -> None:
        self._send("retry", module)

    def close(self, cancel: bool = False) -> None:
        self._send("close", cancel)

    def _send(self, op: str, arg) -> None:
        with self._lock:
            if self._ended:
                return
            if self._token is None:
                self._pending.append((op, arg))
                return
            token, batch = self._token, self._batch
        try:
            token.run_sync_soon(batch._control, op, arg)
        except trio.RunFinishedError:
            pass

    def _attach(self, batch: "Batch") -> None:
        with self._lock:
            self._batch, self._token = batch, trio.lowlevel.current_trio_token()
            pending, self._pending = self._pending, []
        for op, arg in pending:
            batch._control(op, arg)

    def _detach(self) -> None:
        with self._lock:
            self._batch = self._token = None
            self._ended = True


@dataclass
class _ModuleState:
    exit_code: int = 0
    target_codes: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)
    # BatchControl bookkeeping
    running: bool = False
    done: bool = False
    cancel_requested: bool = False
    scope: trio.CancelScope | None = None
    kernels: int = 0
    kernels_failed: int = 0


@dataclass
class _TargetKernels:
    """A target's kernels that lowered fine: their KernelFinished waits for the target's cubin, whose
    resources (and, with --remarks*, remarks) it carries."""
    names: list[str]                                            # the module's kernels, in its order
    lowered_s: dict[str, float] = field(default_factory=dict)   # kernel -> its lowering's seconds
    lowering: dict[str, list] = field(default_factory=dict)     # kernel -> its lowering's remarks
    assembly: list = field(default_factory=list)                # the assembly's remarks (all kernels)
    resources: dict = field(default_factory=dict)               # kernel -> KernelResources, once assembled

    def remarks_of(self, kernel: str) -> list:
        return self.lowering.get(kernel, []) + [r for r in self.assembly if r.function == kernel]

    def all_remarks(self) -> list:
        """In stages.compile_in_process's order (what a cache entry holds)."""
        return [r for k in self.names for r in self.lowering.get(k, [])] + self.assembly


class Batch:
    """One batch run.  `await Batch(config, sinks).run()` -> RunFinished (also emitted)."""

    def __init__(self, config: BatchConfig, sinks: list[Sink], control: BatchControl | None = None):
        self.config = config
        self.sinks = sinks
        self.control = control
        self._nursery: trio.Nursery | None = None       # where module tasks run (retries too)
        self._admission: trio.Semaphore | None = None
        self._outer: trio.CancelScope | None = None
        self._closed: trio.Event | None = None
        self.t0 = time.monotonic()
        self.cancelled: str | None = None
        self.kernels = 0
        self.kernels_failed = 0
        self.modules: list[_ModuleState] = []
        self.pool: WorkerPool | None = None
        self.slots = PrioritySlots(max(1, config.jobs))
        self._data: dict[int, bytes] = {}   # input bytes of the modules in flight
        self.cache = None                   # cache.api.ModuleCache when config.cache_dir is set

    def emit(self, cls, **fields) -> None:
        event = cls(t=time.monotonic() - self.t0, **fields)
        for sink in self.sinks:
            sink(event)

    # ------------------------------------------------------------------ run

    async def run(self) -> RunFinished:
        cfg = self.config
        self.t0 = time.monotonic()
        # before any worker exists: the directory's lock gets a lower descriptor than the pool's
        # pipes, so a worker that sees them close after a kill -9 finds the lock already released
        tempdirs.process_dir()
        self.modules = [_ModuleState() for _ in cfg.inputs]
        self.emit(RunStarted, version=__version__, modules=list(cfg.inputs), targets=list(cfg.targets),
                  jobs=cfg.jobs, opt_level=cfg.opt_level, out_dir=cfg.out_dir, supervisor_pid=os.getpid(),
                  stage_timeout_s=cfg.stage_timeout_s, memory_limit_bytes=cfg.memory_limit_bytes,
                  cluster=cfg.cluster)
        self._closed = trio.Event()
        self._index = {path: i for i, path in enumerate(cfg.inputs)}
        # entries are keyed by this machine's default toolchain (a cluster's workers assemble with theirs);
        # IR snapshots come from the lower stage, which a hit skips
        if cfg.cache_dir is not None and cfg.toolchain is None and cfg.print_ir is None and not cfg.cluster:
            from ..cache.api import ModuleCache
            from ..cache.config import max_size_from_env
            from ..cache.store import CacheStore
            self.cache = ModuleCache(CacheStore(cfg.cache_dir, max_size_from_env()))
        watch_signals = cfg.handle_signals and threading.current_thread() is threading.main_thread()
        try:
            # the receiver stays open until the run ends: a second Ctrl-C while the first one's
            # cancellation unwinds is absorbed, never a KeyboardInterrupt in the middle of cleanup
            with (trio.open_signal_receiver(*_SIGNALS) if watch_signals else contextlib.nullcontext()) as signals:
                async with trio.open_nursery() as outer:
                    self._outer = outer.cancel_scope
                    if self.control is not None:
                        self.control._attach(self)
                    if signals is not None:
                        outer.start_soon(self._watch_signals, signals, outer.cancel_scope)
                        if _early_signals:   # one came before the receiver was open
                            self.cancelled = signal.Signals(_early_signals[0]).name
                            outer.cancel_scope.cancel()
                    if cfg.inputs:
                        await self._run_modules()
                    elif self.control is not None and self.control.hold_open:
                        await self._closed.wait()
                    outer.cancel_scope.cancel()
        finally:
            if self.control is not None:
                self.control._detach()
        return self._finish()

    async def _watch_signals(self, signals, scope: trio.CancelScope) -> None:
        async for signum in signals:
            self.cancelled = self.cancelled or signal.Signals(signum).name
            scope.cancel()

    def _make_pool(self) -> WorkerPool:
        cfg = self.config
        kw = dict(emit=self.emit, stage_timeout_s=cfg.stage_timeout_s, memory_limit_bytes=cfg.memory_limit_bytes,
                  slots=self.slots, fault=cfg.fault, warm_targets=cfg.targets, opt_level=cfg.opt_level)
        if cfg.cluster:
            from .dask_pool import DaskPool
            return DaskPool(cfg.cluster, **kw)
        return WorkerPool(cfg.jobs, **kw)

    async def _run_modules(self) -> None:
        cfg = self.config
        async with self._make_pool() as pool:   # (out_dir is made by the first write: _write)
            self.pool = pool
            admission = trio.Semaphore(max(4, 2 * pool.jobs))   # a cluster's size is known once connected
            self._admission = admission
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for index, path in enumerate(cfg.inputs):
                    await admission.acquire()  # in input order: trio's semaphore is FIFO
                    nursery.start_soon(self._module_task, admission, index, path)
                if self.control is not None and self.control.hold_open:
                    await self._closed.wait()
                self._nursery = None  # closing: no more retries

    async def _module_task(self, admission: trio.Semaphore, index: int, path: str) -> None:
        state = self.modules[index]
        state.running = True
        t0 = time.monotonic()
        try:
            with trio.CancelScope() as scope:
                state.scope = scope
                if state.cancel_requested:
                    scope.cancel()
                await self._module(index, path)
            if scope.cancelled_caught:  # BatchControl.cancel (a run-wide cancel propagates instead)
                state.exit_code = EXIT_CANCELLED
                self.emit(ModuleFinished, module=path, ok=False, exit_code=EXIT_CANCELLED,
                          elapsed_s=time.monotonic() - t0)
        finally:
            state.running, state.done, state.scope = False, True, None
            admission.release()

    # ------------------------------------------------------------------ control (BatchControl)

    def _control(self, op: str, arg) -> None:
        """A BatchControl request, on the trio thread."""
        if op == "close":
            assert self._closed is not None
            if arg and any(not m.done for m in self.modules):
                self.cancelled = "user"
                if self._outer is not None:
                    self._outer.cancel()
            self._closed.set()
            return
        if op == "cancel_all":
            for path, index in self._index.items():
                self._control("cancel", path)
            return
        index = self._index.get(arg)
        if index is None or index >= len(self.modules):
            return
        state = self.modules[index]
        if op == "cancel":
            if state.done:
                return
            state.cancel_requested = True
            if state.scope is not None:
                state.scope.cancel()
        elif op == "retry":
            if not state.done or self._nursery is None or self._admission is None:
                return
            self.kernels -= state.kernels
            self.kernels_failed -= state.kernels_failed
            self.modules[index] = _ModuleState()
            self._nursery.start_soon(self._retry_task, index, arg)

    async def _retry_task(self, index: int, path: str) -> None:
        assert self._admission is not None
        self.modules[index].running = True  # not "done" while it waits for admission
        await self._admission.acquire()
        await self._module_task(self._admission, index, path)

    def _finish(self) -> RunFinished:
        failed = [m for m in self.modules if m.exit_code]
        outputs = [o for m in self.modules for t in self.config.targets for o in m.outputs.get(t, [])]
        if self.cancelled:
            exit_code = SIGNAL_EXIT.get(self.cancelled, EXIT_CANCELLED)
        else:
            exit_code = max((m.exit_code for m in self.modules), default=0)
        event = RunFinished(t=time.monotonic() - self.t0, ok=exit_code == 0, exit_code=exit_code,
                            elapsed_s=time.monotonic() - self.t0, modules=len(self.modules),
                            modules_failed=len(failed), kernels=self.kernels, kernels_failed=self.kernels_failed,
                            outputs=outputs, cancelled=self.cancelled)
        for sink in self.sinks:
            sink(event)
        return event

    # ------------------------------------------------------------------ one module

    async def _module(self, index: int, path: str) -> None:
        state = self.modules[index]
        t0 = time.monotonic()
        self.emit(ModuleStarted, module=path, index=index)
        try:
            parsed = await self._parse(index, path)
            if parsed is not None and parsed.ok:
                async with trio.open_nursery() as nursery:
                    for target in self.config.targets:
                        nursery.start_soon(self._target, index, path, parsed, target)
        finally:
            self._data.pop(index, None)
        if parsed is None or not parsed.ok:
            state.exit_code = (parsed.exit_code or EXIT_BAD_INPUT) if parsed is not None else state.exit_code
            self.emit(ModuleFinished, module=path, ok=False, exit_code=state.exit_code,
                      elapsed_s=time.monotonic() - t0)
            return
        state.exit_code = max(state.target_codes.values(), default=0)
        self.emit(ModuleFinished, module=path, ok=state.exit_code == 0, exit_code=state.exit_code,
                  elapsed_s=time.monotonic() - t0, version=parsed.version, kernels=list(parsed.kernels))

    async def _parse(self, index: int, path: str) -> ParsedModule | None:
        state = self.modules[index]
        try:
            data = await read_input(path, timeout=self.config.stage_timeout_s, special=self.config.read_special,
                                    limit=self.config.max_input_bytes)
        except InputError as e:
            self._diagnose(path, "parse", [StageDiagnostic("error", line.removeprefix("error: ")) for line in e.lines])
            state.exit_code = EXIT_UNREADABLE
            return None
        self._data[index] = data   # for the cache key; the later stages get the parsed kernels
        parsed = await self._in_worker(index, path, "parse", ParseRequest(path, data, tool="tileiras-async"))
        if parsed is None:
            state.exit_code = EXIT_INTERNAL
            return None
        if not parsed.ok:
            self._diagnose(path, "parse", parsed.diagnostics)
        return parsed

    async def _in_worker(self, index: int, path: str, stage: str, request, *, target: str | None = None,
                         kernel: str | None = None, severity: str = "error"):
        """A stage in the pool; None (with a diagnostic emitted) when its worker failed."""
        assert self.pool is not None
        try:
            return await self.pool.run(stage, request, module=path, target=target, kernel=kernel,
                                       priority=(_RANK[stage], index))
        except WorkerFault as e:
            message = e.message
        except StageRaised as e:
            message = f"internal error in stage {stage}: {e}"
        self.emit(Diagnostic, module=path, severity=severity, message=message, stage=stage, target=target,
                  kernel=kernel)
        return None

    # ------------------------------------------------------------------ one target

    async def _target(self, index: int, path: str, parsed: ParsedModule, target: str) -> None:
        state = self.modules[index]
        t0 = time.monotonic()
        self.emit(TargetStarted, module=path, target=target)
        code, outputs = await self._compile_target(index, path, parsed, target)
        state.target_codes[target] = code
        state.outputs[target] = outputs
        self.emit(TargetFinished, module=path, target=target, ok=code == 0, exit_code=code,
                  elapsed_s=time.monotonic() - t0, outputs=outputs)

    async def _compile_target(self, index: int, path: str, parsed: ParsedModule, target: str) -> tuple[int, list[str]]:
        kernels = _TargetKernels(list(parsed.kernels))
        try:
            return await self._compile_target_kernels(index, path, parsed, target, kernels)
        finally:
            self._finish_kernels(path, target, kernels)

    def _finish_kernels(self, path: str, target: str, kernels: _TargetKernels) -> None:
        """KernelFinished for the kernels that lowered fine, in the module's order."""
        wanted = self.config.remarks
        for kernel in kernels.names:
            if kernel in kernels.lowered_s:
                remarks = [r for r in kernels.remarks_of(kernel) if wanted.wants(r)] if wanted else []
                self.emit(KernelFinished, module=path, target=target, kernel=kernel, ok=True,
                          elapsed_s=kernels.lowered_s[kernel], resources=kernels.resources.get(kernel),
                          remarks=remarks)

    async def _compile_target_kernels(self, index: int, path: str, parsed: ParsedModule, target: str,
                                      kernels: _TargetKernels) -> tuple[int, list[str]]:
        cfg = self.config
        options = CompileOptions(target, cfg.opt_level, num_stages=cfg.num_stages,
                                 register_caps=cfg.register_caps)
        data = self._data[index]
        state = self.modules[index]
        key = None
        if self.cache is not None:
            key = self.cache.key(data, options)
            hit = self.cache.get(key, path, schedules=cfg.schedules, remarks=bool(cfg.remarks), ok_only=True)
            self.emit(CacheLookup, module=path, target=target, hit=hit is not None, key=key)
            if hit is not None:
                return await self._replay_target(index, path, parsed, target, hit, kernels)
        lowered: list[LoweredKernel | None] = [None] * len(parsed.kernels)

        async def lower_one(i: int, kernel: str) -> None:
            t0 = time.monotonic()
            self.emit(KernelStarted, module=path, target=target, kernel=kernel)
            result = await self._in_worker(index, path, "lower",
                                           LowerRequest(path, parsed.kernel_ir[i], options, cfg.print_ir),
                                           target=target, kernel=kernel)
            lowered[i] = result
            if result is not None and result.ir_dumps:
                self.emit(KernelIRDumped, module=path, target=target, kernel=kernel, dumps=list(result.ir_dumps))
            ok = result is not None and result.ok
            self._count_kernel(state, ok)
            if result is not None and not result.ok:
                self._diagnose(path, "lower", result.diagnostics, target, kernel, tool_stderr=result.tool_stderr)
            if ok:
                kernels.lowered_s[kernel] = time.monotonic() - t0
                kernels.lowering[kernel] = list(result.remarks)
            else:
                self.emit(KernelFinished, module=path, target=target, kernel=kernel, ok=False,
                          elapsed_s=time.monotonic() - t0)

        schedules: list[list | None] = [None] * len(parsed.kernels)

        async def schedule_one(i: int, kernel: str) -> None:
            result = await self._in_worker(index, path, "schedule", LowerRequest(path, parsed.kernel_ir[i], options),
                                           target=target, kernel=kernel, severity="warning")
            if result is not None:
                schedules[i] = list(result.reports)
                self.emit(KernelScheduled, module=path, target=target, kernel=kernel, reports=list(result.reports))

        async with trio.open_nursery() as nursery:
            for i, kernel in enumerate(parsed.kernels):
                nursery.start_soon(lower_one, i, kernel)
                if cfg.schedules:
                    nursery.start_soon(schedule_one, i, kernel)
        if any(k is None for k in lowered):
            return EXIT_INTERNAL, []
        if not all(k.ok for k in lowered):
            return EXIT_CODEGEN, []
        request = CodegenRequest(path, lowered, options, globals_ir=parsed.globals_ir)
        ptx: PtxModule | None = await self._in_worker(index, path, "codegen", request, target=target)
        if ptx is None:
            return EXIT_INTERNAL, []
        if not ptx.ok:
            self._diagnose(path, "codegen", ptx.diagnostics, target)
            return EXIT_CODEGEN, []
        reports = ([r for per_kernel in schedules for r in per_kernel] if cfg.schedules
                   and all(s is not None for s in schedules) else None)
        return await self._outputs(index, path, target, options, ptx.ptx, reports, key, kernels)

    async def _replay_target(self, index: int, path: str, parsed: ParsedModule, target: str, hit,
                             kernels: _TargetKernels) -> tuple[int, list[str]]:
        """A target served by the cache: its kernels' events, then the outputs (no stage runs); the kernels'
        resources and remarks are the entry's."""
        state = self.modules[index]
        for kernel in parsed.kernels:
            self.emit(KernelStarted, module=path, target=target, kernel=kernel)
            if self.config.schedules:
                self.emit(KernelScheduled, module=path, target=target, kernel=kernel,
                          reports=[r for r in hit.schedules if r.kernel == kernel])
            self._count_kernel(state, True)
            kernels.lowered_s[kernel] = 0.0
        kernels.assembly = list(hit.remarks)
        kernels.resources = dict(hit.resources)
        return await self._outputs(index, path, target, None, hit.ptx, hit.schedules if self.config.schedules
                                   else None, None, kernels, cubin=hit.cubin)

    def _count_kernel(self, state: _ModuleState, ok: bool) -> None:
        self.kernels += 1
        self.kernels_failed += not ok
        state.kernels += 1
        state.kernels_failed += not ok

    async def _outputs(self, index: int, path: str, target: str, options: CompileOptions | None, ptx: str,
                       schedules: list | None, key: str | None, kernels: _TargetKernels,
                       cubin: bytes | None = None) -> tuple[int, list[str]]:
        """Write a target's outputs; assembles the PTX first unless `cubin` is given (a cache hit, `kernels`
        then holds its resources), and files a fresh success in the cache under `key`."""
        cfg = self.config
        stem = os.path.join(cfg.out_dir, f"{output_stem(path)}.{target}")
        outputs: list[str] = []
        if schedules is not None:
            from ..schedule.report import schedule_trace_json
            trace = schedule_trace_json(schedules) + "\n"
            if not self._write(path, target, f"{stem}.schedule.json", trace.encode(), outputs):
                return EXIT_CONFIG, outputs
        if cfg.keep_ptx and not self._write(path, target, f"{stem}.ptx", ptx.encode(), outputs):
            return EXIT_CONFIG, outputs
        if cubin is None:
            assembled = await self._assemble(index, path, target,
                                             AssembleRequest(ptx, options, timeout_s=cfg.stage_timeout_s,
                                                             resource_report=bool(cfg.remarks)))
            if assembled is None:
                return EXIT_INTERNAL, outputs
            if not assembled.ok:
                self._diagnose(path, "assemble", assembled.diagnostics, target, tool_stderr=assembled.tool_stderr)
                return assembled.exit_code or tools.EXIT_TOOL_FAILED, outputs
            cubin = assembled.cubin
            kernels.resources = dict(assembled.resources)
            kernels.assembly = list(assembled.remarks)
            if assembled.ptx:
                ptx = assembled.ptx     # register caps were added: keep the PTX ptxas assembled
                rewritten: list[str] = []   # the .ptx output is listed already
                if cfg.keep_ptx and not self._write(path, target, f"{stem}.ptx", ptx.encode(), rewritten):
                    return EXIT_CONFIG, outputs
            if key is not None:
                from ..stages import CompileResult
                self.cache.put(key, CompileResult(True, cubin, ptx, schedules or [], kernels.all_remarks(),
                                                  resources=assembled.resources),
                               schedules=schedules is not None, remarks=bool(cfg.remarks))
        if not self._write(path, target, f"{stem}.cubin", cubin, outputs):
            return EXIT_CONFIG, outputs
        if cfg.keep_sass:
            sass = await self._supervised(index, path, target, "disasm", partial(
                tools.disassemble, cubin, timeout=cfg.stage_timeout_s, toolchain=cfg.toolchain))
            if not sass.ok:
                self._diagnose(path, "disasm", [StageDiagnostic("error", sass.message)], target,
                               tool_stderr=sass.stderr)
                return tools.EXIT_TOOL_FAILED, outputs
            if not self._write(path, target, f"{stem}.sass", sass.stdout, outputs):
                return EXIT_CONFIG, outputs
        return 0, outputs

    async def _assemble(self, index: int, path: str, target: str, request: AssembleRequest):
        """ptxas: by the supervisor (the local pool), or on a cluster worker with its own toolchain (Dask)."""
        if getattr(self.pool, "remote_assemble", False):
            return await self._in_worker(index, path, "assemble", request, target=target)
        return await self._supervised(index, path, target, "assemble", partial(
            tools.assemble, request, self.config.toolchain, self.config.memory_limit_bytes))

    async def _supervised(self, index: int, path: str, target: str, stage: str, run):
        """An external tool run by the supervisor, in one of the -j slots, with stage events."""
        job = self.pool.next_job_id()
        submitted = time.monotonic()
        async with self.slots.acquire((_RANK[stage], index)):
            t0 = time.monotonic()
            self.emit(StageStarted, job=job, stage=stage, module=path, target=target, queued_s=t0 - submitted)
            result = await run()
        ok = getattr(result, "ok", False)
        self.emit(StageFinished, job=job, stage=stage, module=path, ok=ok, elapsed_s=time.monotonic() - t0,
                  target=target)
        return result

    def _write(self, path: str, target: str, out: str, data: bytes, outputs: list[str]) -> bool:
        try:
            ensure_dir_of(out)
            write_atomic(out, data)
        except (OutputWriteError, OSError) as e:
            self.emit(Diagnostic, module=path, severity="error", message=str(e).removeprefix("error: "),
                      stage="write", target=target)
            return False
        outputs.append(out)
        return True

    def _diagnose(self, path: str, stage: str, diagnostics: list[StageDiagnostic], target: str | None = None,
                  kernel: str | None = None, tool_stderr: str = "") -> None:
        for i, d in enumerate(diagnostics):
            message = d.message
            if kernel and message.startswith(f"{kernel}: "):
                message = message[len(kernel) + 2:]
            location, message = split_location(message)
            location = d.location or location
            self.emit(Diagnostic, module=path, severity=d.severity, message=message, stage=stage, target=target,
                      kernel=kernel, location=location, tool_stderr=tool_stderr if i == 0 else "")



async def run_batch(config: BatchConfig, sinks: list[Sink], control: BatchControl | None = None) -> RunFinished:
    return await Batch(config, sinks, control).run()


def compile_batch(config: BatchConfig, sinks: list[Sink], control: BatchControl | None = None) -> RunFinished:
    """Synchronous entry point: one trio run for one batch.  The dashboard runs it in a thread
    (config.handle_signals=False) with a BatchControl, and quits through control.close()."""
    from .dask_pool import ClusterError
    try:
        return _run_with_signals(config, sinks, control)
    except BaseExceptionGroup as group:
        # a cluster that cannot be reached surfaces inside the run's nurseries; it is a usage error
        matched, rest = group.split(ClusterError)
        if matched is not None and rest is None:
            raise _leaves(matched)[0] from None
        raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    return [leaf for e in group.exceptions for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])]


def _run_with_signals(config: BatchConfig, sinks: list[Sink], control: BatchControl | None) -> RunFinished:
    if not (config.handle_signals and threading.current_thread() is threading.main_thread()):
        return trio.run(run_batch, config, sinks, control)
    with signals_deferred():
        return trio.run(run_batch, config, sinks, control)


@contextlib.contextmanager
def signals_deferred():
    """Around a run (and, in the batch command, its summary), SIGINT/SIGTERM/SIGHUP are only recorded:
    trio re-delivers the ones still queued when the batch's receiver closes (a second Ctrl-C during the
    first one's cleanup), one that comes before the receiver opens must still stop the batch (Batch.run
    looks at what was recorded), and one during the summary must not cut it short.  Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _record_signal) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _early_signals.clear()


def ignore_signals() -> None:
    """SIGINT/SIGTERM/SIGHUP ignored from now on (main thread only): for a process already on its way out."""
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


_early_signals: list[int] = []


def _record_signal(signum, _frame) -> None:
    _early_signals.append(signum)
