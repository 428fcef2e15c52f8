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
from ..stages import (AssembleRequest, CodegenRequest, CompileOptions, LoweredKernel, LowerRequest, ParsedModule,
                      ParseRequest, PtxModule, StageDiagnostic)
from ..toolchain import OutputWriteError, write_atomic
from . import tools
from .config import BatchConfig, expand_inputs, output_stem  # noqa: F401  (re-exported)
from .events import (Diagnostic, KernelFinished, KernelScheduled, KernelStarted, ModuleFinished, ModuleStarted,
                     RunFinished, RunStarted, StageFinished, StageStarted, TargetFinished, TargetStarted)
from .pool import PrioritySlots, StageRaised, WorkerFault, WorkerPool

EXIT_UNREADABLE = 1
EXIT_CONFIG = 2            # an output file could not be written
EXIT_BAD_INPUT = 3         # bytecode that does not parse or verify
EXIT_INTERNAL = 4          # a worker crashed / was killed, or a stage raised
EXIT_CODEGEN = 5
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}

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


@dataclass
class _ModuleState:
    exit_code: int = 0
    target_codes: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)


class Batch:
    """One batch run.  `await Batch(config, sinks).run()` -> RunFinished (also emitted)."""

    def __init__(self, config: BatchConfig, sinks: list[Sink]):
        self.config = config
        self.sinks = sinks
        self.t0 = time.monotonic()
        self.cancelled: str | None = None
        self.kernels = 0
        self.kernels_failed = 0
        self.modules: list[_ModuleState] = []
        self.pool: WorkerPool | None = None
        self.slots = PrioritySlots(max(1, config.jobs))
        self._data: dict[int, bytes] = {}   # input bytes of the modules in flight

    def emit(self, cls, **fields) -> None:
        event = cls(t=time.monotonic() - self.t0, **fields)
        for sink in self.sinks:
            sink(event)

    # ------------------------------------------------------------------ run

    async def run(self) -> RunFinished:
        cfg = self.config
        self.t0 = time.monotonic()
        self.modules = [_ModuleState() for _ in cfg.inputs]
        self.emit(RunStarted, version=__version__, modules=list(cfg.inputs), targets=list(cfg.targets),
                  jobs=cfg.jobs, opt_level=cfg.opt_level, out_dir=cfg.out_dir, supervisor_pid=os.getpid(),
                  stage_timeout_s=cfg.stage_timeout_s, memory_limit_bytes=cfg.memory_limit_bytes)
        async with trio.open_nursery() as outer:
            if cfg.handle_signals and threading.current_thread() is threading.main_thread():
                await outer.start(self._watch_signals, outer.cancel_scope)
            if cfg.inputs:
                await self._run_modules()
            outer.cancel_scope.cancel()
        return self._finish()

    async def _watch_signals(self, scope: trio.CancelScope, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                self.cancelled = signal.Signals(signum).name
                scope.cancel()
                return

    async def _run_modules(self) -> None:
        cfg = self.config
        admission = trio.Semaphore(max(4, 2 * cfg.jobs))
        try:
            os.makedirs(cfg.out_dir, exist_ok=True)
        except OSError:
            pass  # every write then fails with its own diagnostic
        async with WorkerPool(cfg.jobs, emit=self.emit, stage_timeout_s=cfg.stage_timeout_s,
                              memory_limit_bytes=cfg.memory_limit_bytes, slots=self.slots, fault=cfg.fault,
                              warm_targets=cfg.targets, opt_level=cfg.opt_level) as pool:
            self.pool = pool
            async with trio.open_nursery() as nursery:
                for index, path in enumerate(cfg.inputs):
                    await admission.acquire()  # in input order: trio's semaphore is FIFO
                    nursery.start_soon(self._module_task, admission, index, path)

    async def _module_task(self, admission: trio.Semaphore, index: int, path: str) -> None:
        try:
            await self._module(index, path)
        finally:
            admission.release()

    def _finish(self) -> RunFinished:
        failed = [m for m in self.modules if m.exit_code]
        outputs = [o for m in self.modules for t in self.config.targets for o in m.outputs.get(t, [])]
        if self.cancelled:
            exit_code = SIGNAL_EXIT.get(self.cancelled, 130)
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
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            self._diagnose(path, "parse", [StageDiagnostic(
                "error", f"unable to read input file '{path}': {e.strerror or e}")])
            state.exit_code = EXIT_UNREADABLE
            return None
        self._data[index] = data
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
        cfg = self.config
        options = CompileOptions(target, cfg.opt_level)
        data = self._data[index]
        lowered: list[LoweredKernel | None] = [None] * len(parsed.kernels)

        async def lower_one(i: int, kernel: str) -> None:
            t0 = time.monotonic()
            self.emit(KernelStarted, module=path, target=target, kernel=kernel)
            result = await self._in_worker(index, path, "lower", LowerRequest(path, data, kernel, options),
                                           target=target, kernel=kernel)
            lowered[i] = result
            ok = result is not None and result.ok
            self.kernels += 1
            self.kernels_failed += not ok
            if result is not None and not result.ok:
                self._diagnose(path, "lower", result.diagnostics, target, kernel)
            self.emit(KernelFinished, module=path, target=target, kernel=kernel, ok=ok,
                      elapsed_s=time.monotonic() - t0)

        schedules: list[list | None] = [None] * len(parsed.kernels)

        async def schedule_one(i: int, kernel: str) -> None:
            result = await self._in_worker(index, path, "schedule", LowerRequest(path, data, kernel, options),
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
        stem = os.path.join(cfg.out_dir, f"{output_stem(path)}.{target}")
        outputs: list[str] = []
        if cfg.schedules and all(s is not None for s in schedules):
            from ..schedule.report import schedule_trace_json
            trace = schedule_trace_json([r for per_kernel in schedules for r in per_kernel]) + "\n"
            if not self._write(path, target, f"{stem}.schedule.json", trace.encode(), outputs):
                return EXIT_CONFIG, outputs
        if cfg.keep_ptx and not self._write(path, target, f"{stem}.ptx", ptx.ptx.encode(), outputs):
            return EXIT_CONFIG, outputs
        cubin = await self._supervised(index, path, target, "assemble", partial(
            tools.assemble, AssembleRequest(ptx.ptx, options, timeout_s=cfg.stage_timeout_s), cfg.toolchain))
        if not cubin.ok:
            self._diagnose(path, "assemble", cubin.diagnostics, target, tool_stderr=cubin.tool_stderr)
            return cubin.exit_code or tools.EXIT_TOOL_FAILED, outputs
        if not self._write(path, target, f"{stem}.cubin", cubin.cubin, outputs):
            return EXIT_CONFIG, outputs
        if cfg.keep_sass:
            sass = await self._supervised(index, path, target, "disasm", partial(
                tools.disassemble, cubin.cubin, timeout=cfg.stage_timeout_s, toolchain=cfg.toolchain))
            if not sass.ok:
                self._diagnose(path, "disasm", [StageDiagnostic("error", sass.message)], target,
                               tool_stderr=sass.stderr)
                return tools.EXIT_TOOL_FAILED, outputs
            if not self._write(path, target, f"{stem}.sass", sass.stdout, outputs):
                return EXIT_CONFIG, outputs
        return 0, outputs

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



async def run_batch(config: BatchConfig, sinks: list[Sink]) -> RunFinished:
    return await Batch(config, sinks).run()


def compile_batch(config: BatchConfig, sinks: list[Sink]) -> RunFinished:
    """Synchronous entry point: one trio run for one batch."""
    return trio.run(run_batch, config, sinks)
