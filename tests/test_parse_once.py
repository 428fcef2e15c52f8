"""Parse once per module: the parse stage reads the bytes; lower and schedule get their kernel as data."""
from __future__ import annotations

import msgspec
import pytest

from tileiras_async.bytecode import reader
from tileiras_async.bytecode.reader import read_module
from tileiras_async.fuzz import hostile
from tileiras_async.ir.diagnostics import resolve_loc
from tileiras_async.ir.printer import print_function
from tileiras_async.irdata import KernelData, kernel_data, kernel_module
from tileiras_async.pipeline import events as ev
from tileiras_async.stages import (CompileOptions, LowerRequest, ParseRequest, compile_in_process, parse)

from conftest import corpus_files
from test_pipeline_batch import run_batch


@pytest.fixture
def reads(monkeypatch):
    """How many times a module's bytes were parsed in this process."""
    count = [0]
    real = reader._ModuleReader.read

    def counted(self):
        count[0] += 1
        return real(self)

    monkeypatch.setattr(reader._ModuleReader, "read", counted)
    return count


def test_drop_in_reads_the_module_once(reads):
    data = hostile.many_kernels(3)
    result = compile_in_process("m.tileirbc", data, CompileOptions("sm_90"), with_schedules=True)
    assert result.ok, result.diagnostics
    assert reads[0] == 1


def test_batch_parses_each_file_once_and_lowers_each_kernel_per_target(tmp_path):
    path = tmp_path / "three.tileirbc"
    path.write_bytes(hostile.many_kernels(3))
    finished, events = run_batch([path], tmp_path / "out", targets=("sm_80", "sm_90"), jobs=2)
    assert finished.ok
    started = [e for e in events if isinstance(e, ev.StageStarted)]
    assert sum(e.stage == "parse" for e in started) == 1
    assert sum(e.stage == "lower" for e in started) == 6


def _encoded_lower_request(kernels: int) -> bytes:
    parsed = parse(ParseRequest("m", hostile.many_kernels(kernels)))
    return msgspec.msgpack.encode(LowerRequest("m", parsed.kernel_ir[0], CompileOptions("sm_90")))


def test_a_lower_request_does_not_grow_with_the_module():
    """What a kernel's lowering receives is that kernel, not the module (the cause of quadratic batches)."""
    assert len(_encoded_lower_request(1)) == len(_encoded_lower_request(40))


def _round_trip(module, fn):
    data = msgspec.msgpack.decode(msgspec.msgpack.encode(kernel_data(module, fn)), type=KernelData)
    return kernel_module(data).functions[0]


@pytest.mark.parametrize("build", [lambda: hostile.nested_if(300), lambda: hostile.nested_for(40),
                                   lambda: hostile.straight_line(200)], ids=["if", "for", "chain"])
def test_kernel_data_round_trips_hostile_shapes(build):
    module = read_module(build())
    fn = module.functions[0]
    assert print_function(_round_trip(module, fn)) == print_function(fn)


def test_kernel_data_round_trips_the_corpus_with_locations():
    files = corpus_files("*.v13.*.tileirbc")
    if not files:
        pytest.skip("corpus not found")
    checked = 0
    for path in files[::5]:
        try:
            module = read_module(path.read_bytes())
        except Exception:  # noqa: BLE001 - the corpus holds files the real reader rejects too
            continue
        for fn in module.functions:
            copy = _round_trip(module, fn)
            assert print_function(copy) == print_function(fn), path.name
            copy_module = kernel_module(kernel_data(module, fn))
            for a, b in zip([fn, *fn.walk()], [copy, *copy.walk()]):
                assert resolve_loc(copy_module, b.loc) == resolve_loc(module, a.loc), path.name
            checked += 1
    assert checked > 20
