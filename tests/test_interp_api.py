"""run_kernel's interface and errors, and the `tileiras-async run` command line."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from conftest import PUBLIC, requires_corpus
from test_interp_helpers import TK

import tileiras_async
from tileiras_async.cli.batch import main as batch_main
from tileiras_async.interp import (
    ArgumentError,
    EngineNotImplemented,
    InvalidModule,
    RunReport,
    UnsupportedOp,
    run_kernel,
)
from tileiras_async.ir import types as T
from tileiras_async.ir.builder import tile

VEC_ADD = PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"


def test_public_signature_is_exact():
    sig = inspect.signature(tileiras_async.run_kernel)
    assert str(sig) == ("(module: 'str | os.PathLike[str] | bytes | Module', grid: 'Sequence[int]', args: 'list[Any]', "
                        "*, kernel: 'str | None' = None, engine: 'Engine' = 'interpret', gpu_name: 'str' = 'sm_100', "
                        "opt_level: 'int' = 3, stdout: 'Callable[[str], None] | None' = None) -> 'RunReport'")


@requires_corpus
def test_report_and_path_or_bytes():
    a, b = np.ones(300, np.float32), np.arange(300, dtype=np.float32)
    c = np.zeros(300, np.float32)
    rep = tileiras_async.run_kernel(str(VEC_ADD), (3,), [a, b, c])
    assert isinstance(rep, RunReport) and rep.engine == "interpret" and rep["engine"] == "interpret"
    assert rep.kernel.startswith("vec_add_") and rep.grid == (3, 1, 1) and rep.time_s >= 0
    assert rep.counters["tile_blocks"] == 3 and rep.counters["loads"] == 6 and rep.counters["stores"] == 3
    assert rep.counters["ops"] > 0 and rep.counters["elements"] > 0
    assert (c == b + 1).all()
    c[:] = 0
    tileiras_async.run_kernel(VEC_ADD.read_bytes(), [3], [a, b, c])
    assert (c == b + 1).all()


@requires_corpus
@pytest.mark.parametrize("args,match", [
    (lambda: [np.ones(4, np.float32)] * 2, (r"got 2 argument\(s\); kernel vec_add_\S+ takes 3 argument\(s\): "
                                            r"0: float32 array \(1-D\); 1: float32 array \(1-D\); 2: float32")),
    (lambda: [np.ones(4, np.float32), 1.0, np.ones(4, np.float32)], r"argument 1: expected an array \(float32 array"),
    (lambda: [np.ones(4, np.float64)] * 3, r"argument 0: the kernel's element type is f32: expected float32, got float64"),
    (lambda: [np.ones((2, 2), np.float32)] * 3, r"argument 0: expected a 1-D array, got a 2-D array"),
])
def test_argument_errors_list_the_expected_parameters(args, match):
    with pytest.raises(ArgumentError, match=match):
        run_kernel(VEC_ADD, (1,), args())


@requires_corpus
def test_scalar_argument_checks():
    path = PUBLIC / "branch_scalar_pos_t128.v13.4.tileirbc"
    x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
    run_kernel(path, (1,), [x, y, np.array(2, np.int32)])  # a 0-d array is a scalar
    assert (y == 3).all()
    with pytest.raises(ArgumentError, match="expected an integer scalar"):
        run_kernel(path, (1,), [x, y, 2.5])
    with pytest.raises(ArgumentError, match="does not fit"):
        run_kernel(path, (1,), [x, y, 2**40])
    with pytest.raises(ArgumentError, match=r"argument 2: expected a scalar \(int32 scalar\), got a 1-D array"):
        run_kernel(path, (1,), [x, y, np.ones(3, np.int32)])


@requires_corpus
def test_bf16_arrays_travel_as_raw_bits_of_the_right_width():
    path = PUBLIC / "rmsnorm_bf16_1024.v13.4.tileirbc"
    X = np.zeros((2, 1000), np.uint16)
    W = np.zeros(1000, np.uint16)
    with pytest.raises(ArgumentError, match="bfloat16 raw bits in a uint16 array, got uint8"):
        run_kernel(path, (2,), [X, W.view(np.uint8)[:1000], X.copy(), np.float32(1e-6)])
    with pytest.raises(ArgumentError, match="got float32"):
        run_kernel(path, (2,), [X.astype(np.float32), W, X.copy(), np.float32(1e-6)])
    run_kernel(path, (2,), [X, W, X.copy(), np.float32(1e-6)])


@requires_corpus
@pytest.mark.parametrize("grid", [(0,), (-1,), (), (1, 2, 3, 4), ("a",), (1.5,), (2**24,)])
def test_bad_grids(grid):
    with pytest.raises(ArgumentError, match="grid"):
        run_kernel(VEC_ADD, grid, [np.ones(4, np.float32)] * 3)


@requires_corpus
def test_engines_and_options():
    args = [np.ones(4, np.float32)] * 3
    from tileiras_async.interp.runner import run_kernel as interpreter_only
    for engine in ("emulate", "both"):  # the interpreter's own entry point runs only itself
        with pytest.raises(EngineNotImplemented, match="not implemented"):
            interpreter_only(VEC_ADD, (1,), args, engine=engine)
        assert issubclass(EngineNotImplemented, NotImplementedError)
    with pytest.raises(ArgumentError, match="unknown engine"):
        run_kernel(VEC_ADD, (1,), args, engine="gpu")
    with pytest.raises(ArgumentError, match="opt_level"):
        run_kernel(VEC_ADD, (1,), args, opt_level=7)


def test_invalid_modules():
    with pytest.raises(InvalidModule, match="does not correspond to Tile IR bytecode"):
        run_kernel(b"not bytecode", (1,), [])
    with pytest.raises(ArgumentError, match="cannot read module"):
        run_kernel("/nonexistent/k.tileirbc", (1,), [])


def _two_kernels():
    tk = TK()
    o = tk.array(T.I32, 1)
    for name, val in (("first", 1), ("second", 2)):
        with tk.body(name) as b:
            b.store(o, (1,), b.const(np.array([val], np.int32), T.I32, (1,)))
    return tk.bytes()


def test_kernel_selection():
    data = _two_kernels()
    out = np.zeros(1, np.int32)
    with pytest.raises(ArgumentError, match=r"2 kernels \(first, second\); pick one"):
        run_kernel(data, (1,), [out])
    run_kernel(data, (1,), [out], kernel="second")
    assert out[0] == 2
    with pytest.raises(ArgumentError, match="no kernel named 'third'"):
        run_kernel(data, (1,), [out], kernel="third")


def test_structural_binding_without_a_mangled_name():
    tk = TK()
    tk.array(T.F32, 2)
    tk.scalar(T.I32)
    with tk.body():
        pass
    tk.run((1,), [np.zeros((2, 3), np.float32), 5])
    with pytest.raises(ArgumentError, match=r"entry parameters \(ptr<f32>, i32, i32, i32, i32, i32\)"):
        tk.run((1,), [np.zeros(3, np.float32), 5])
    with pytest.raises(ArgumentError, match="too few arguments"):
        tk.run((1,), [np.zeros((2, 3), np.float32)])


def test_unsupported_ops_are_named(monkeypatch):
    from tileiras_async.interp import registry
    tk = TK()
    o = tk.array(T.F32, 1)
    with tk.body() as b:
        b.store(o, (1,), b.op("negf", [tile(T.F32, 1)], source=b.const(np.ones(1, np.float32), T.F32, (1,))).result)
    monkeypatch.delitem(registry.HANDLERS, "negf")
    with pytest.raises(UnsupportedOp, match="does not support op 'negf'"):
        tk.run((1,), [np.zeros(1, np.float32)])


def test_every_op_the_reader_knows_has_a_handler():
    import tileiras_async.interp.interpreter  # noqa: F401
    from tileiras_async.bytecode.opspec import OPS_BY_NAME
    from tileiras_async.interp.registry import HANDLERS
    structural = {"entry", "module", "global"}  # not executed as ops (functions / module-level globals)
    missing = sorted(set(OPS_BY_NAME) - set(HANDLERS) - structural)
    assert not missing


# ----------------------------------------------------------------------------- CLI
@requires_corpus
def test_cli_run_round_trip(tmp_path, capsys):
    a = np.arange(200, dtype=np.float32)
    b = np.ones(200, np.float32)
    inp = tmp_path / "in.npz"
    np.savez(inp, **{"0": a, "1": b, "2": np.zeros(200, np.float32)})
    out = tmp_path / "out.npz"
    rc = batch_main(["run", str(VEC_ADD), "--grid", "2", "--args", str(inp), "--out", str(out)])
    assert rc == 0
    with np.load(out) as z:
        assert sorted(z.files) == ["0", "1", "2"]
        assert (z["2"] == a + 1).all() and (z["0"] == a).all()


@requires_corpus
@pytest.mark.parametrize("argv,rc,match", [
    (["--grid", "0"], 2, "error: grid extents must be positive"),
    (["--grid", "1,x"], 2, "error: invalid --grid '1,x'"),
    (["--grid", "2", "--kernel", "nope"], 2, "error: no kernel named 'nope'"),
    (["--grid", "3"], 6, "error: 'load_view_tko' "),
])
def test_cli_errors_are_one_line_and_leave_no_output(tmp_path, capsys, argv, rc, match):
    inp = tmp_path / "in.npz"
    np.savez(inp, **{"0": np.zeros(200, np.float32), "1": np.zeros(200, np.float32),
                     "2": np.zeros(200, np.float32)})
    out = tmp_path / "out.npz"
    got = batch_main(["run", str(VEC_ADD), "--args", str(inp), "--out", str(out)] + argv)
    err = capsys.readouterr().err
    assert got == rc
    assert err.startswith(match) and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_cli_input_errors(tmp_path, capsys):
    bad = tmp_path / "bad.tileirbc"
    bad.write_bytes(b"\x7fTileIR\x00junk")
    inp = tmp_path / "in.npz"
    np.savez(inp, x=np.zeros(3))
    out = tmp_path / "out.npz"
    assert batch_main(["run", str(bad), "--grid", "1", "--args", str(inp), "--out", str(out)]) == 3
    assert batch_main(["run", str(tmp_path / "missing"), "--grid", "1", "--args", str(inp), "--out", str(out)]) == 1
    data = _two_kernels()
    good = tmp_path / "two.tileirbc"
    good.write_bytes(data)
    assert batch_main(["run", str(good), "--kernel", "first", "--grid", "1", "--args", str(inp),
                       "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: arguments in") and "unexpected name(s): x" in err[-1]
    assert batch_main(["run", str(good), "--grid", "1", "--out", str(out)]) == 1  # --args missing
    assert capsys.readouterr().err.startswith("error: the following arguments are required: --args")
    assert not out.exists()


def test_cli_prints_device_output(tmp_path, capsys):
    tk = TK()
    tk.scalar(T.I32)
    with tk.body() as b:
        b.op("print_tko", [T.TOKEN], str=b"x=%d\n", args=[b.k.args[0]], token=b.token)
    mod = tmp_path / "p.tileirbc"
    mod.write_bytes(tk.bytes())
    inp = tmp_path / "in.npz"
    np.savez(inp, **{"0": np.array(41, np.int32)})
    out = tmp_path / "out.npz"
    assert batch_main(["run", str(mod), "--grid", "2", "--args", str(inp), "--out", str(out)]) == 0
    assert capsys.readouterr().out == "x=41\nx=41\n"
    with np.load(out) as z:
        assert z.files == []


def test_other_subcommands_still_work(capsys):
    assert batch_main(["list-versions"]) == 0
    assert "13.4" in capsys.readouterr().out
