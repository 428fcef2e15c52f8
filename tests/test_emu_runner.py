"""`emu.runner.run_compiled`: compile with our pipeline (ptxas included) and run on numpy arrays.

Covers cuTile's calling convention (pointer, shape, strides in elements),
in-place results in non-contiguous views, arrays passed twice, read-only
arrays, and argument errors.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import PUBLIC, requires_corpus

from tileiras_async.emu import LaunchError, MemoryFault
from tileiras_async.emu.runner import run_compiled

VEC_ADD = PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"
SAXPY = PUBLIC / "saxpy_f32_t128.v13.4.tileirbc"
TRANSPOSE = PUBLIC / "transpose2d_f32_32x32.v13.4.tileirbc"

pytestmark = requires_corpus


def grid1(n, t=128):
    return (-(-n // t),)


def test_vec_add_contiguous_and_report():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    c = np.zeros(1000, np.float32)
    run = run_compiled(VEC_ADD, grid1(1000), [a, b, c])
    assert np.array_equal(c, a + b)
    assert run.cubin and run.kernel.startswith("vec_add_Kt1_") and run.block[0] >= 32
    assert run.ptx.lstrip().startswith("//") and ".entry " + run.kernel in run.ptx
    rep = run.report
    assert rep.ctas == 8 and rep.thread_instructions > 0 and rep.thread_instructions_per_s > 0
    # entry parameters: pointer, shape, stride per array (strides in elements)
    assert run.params[1:3] == [1000, 1] and run.params[4:6] == [1000, 1]


def test_non_contiguous_views_are_read_and_written_in_place():
    rng = np.random.default_rng(1)
    abase = rng.standard_normal(2000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    cbase = np.full(3000, -7.0, np.float32)
    a, c = abase[::2], cbase[::3]
    run = run_compiled(VEC_ADD, grid1(1000), [a, b, c], opt_level=2)
    assert np.array_equal(c, a + b)
    gaps = np.ones(3000, bool)
    gaps[::3] = False
    assert (cbase[gaps] == -7.0).all()
    assert run.params[2] == 2 and run.params[8] == 3          # strides in elements


def _without_stride_assumes(path) -> bytes:
    """The module with its tensor views' strides no longer `assume`d non-negative (cuTile states that fact for
    the arrays it exports with; the compiler may rely on it, so a kernel meant for negative strides lacks it)."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.bytecode.writer import write_module
    mod = read_module(path.read_bytes())
    body = mod.functions[0].body
    dropped = set()
    for op in body.ops:
        if op.name == "make_tensor_view":
            strides = []
            for v in op.operands["dynamicStrides"]:
                if v.owner.name == "assume":
                    dropped.add(id(v.owner))
                    v = v.owner.operands["value"]
                strides.append(v)
            op.operands["dynamicStrides"] = strides
    body.ops = [op for op in body.ops if id(op) not in dropped]
    return write_module(mod)


def test_negative_and_2d_strides():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 50)).astype(np.float32)
    xin = x[::-1]                                   # negative row stride
    out = np.zeros((50, 40), np.float32)
    outv = np.zeros((40, 50), np.float32).T         # column-major output view
    kernel = _without_stride_assumes(TRANSPOSE)
    for dst in (out, outv):
        run_compiled(kernel, (2, 2), [xin, dst])
        assert np.array_equal(dst, xin.T)
    with pytest.raises(LaunchError, match=r"entry parameter \d+ is -50, but the kernel assumes 0 <= x"):
        run_compiled(TRANSPOSE, (2, 2), [xin, out])      # as exported: strides assumed non-negative


def test_same_array_passed_twice_shares_memory():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    expect = a + b
    run_compiled(VEC_ADD, grid1(1000), [a, b, a])     # a += b in place
    assert np.array_equal(a, expect)


def test_scalars_follow_the_entry_types():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(2000).astype(np.float32)
    y = rng.standard_normal(2000).astype(np.float32)
    y0 = y.copy()
    run_compiled(SAXPY, grid1(2000), [np.float32(1.5), x, y], gpu_name="sm_80")
    assert np.allclose(y, np.float32(1.5) * x + y0, rtol=1e-6, atol=1e-6)
    y = y0.copy()
    run_compiled(SAXPY, grid1(2000), [2, x, y])                 # a Python int for an f32 scalar
    assert np.allclose(y, 2 * x + y0, rtol=1e-6, atol=1e-6)


def test_read_only_output_is_a_fault_and_argument_errors():
    a = np.ones(100, np.float32)
    b = np.ones(100, np.float32)
    c = np.zeros(100, np.float32)
    c.setflags(write=False)
    with pytest.raises(MemoryFault, match="read-only"):
        run_compiled(VEC_ADD, (1,), [a, b, c])
    with pytest.raises(LaunchError):
        run_compiled(VEC_ADD, (1,), [a, b])
    with pytest.raises(LaunchError):
        run_compiled(VEC_ADD, (1,), [a, b, np.zeros((10, 10), np.float32)])
    with pytest.raises(LaunchError, match="unknown GPU"):
        run_compiled(VEC_ADD, (1,), [a, b, np.zeros(100, np.float32)], gpu_name="sm_75")
    with pytest.raises(LaunchError, match="no kernel"):
        run_compiled(VEC_ADD, (1,), [a, b, np.zeros(100, np.float32)], kernel="nope")


def test_kernel_by_python_name_and_bytes_input():
    a = np.arange(300, dtype=np.float32)
    c = np.zeros(300, np.float32)
    run_compiled(VEC_ADD.read_bytes(), grid1(300), [a, a, c], kernel="vec_add")
    assert np.array_equal(c, 2 * a)
