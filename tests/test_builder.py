"""Modules built with the Python API are written, read back and accepted by NVIDIA's disassembler."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import BoundedAttr
from tileiras_async.ir.builder import ModuleBuilder, encode_dense, tile
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO, RoundingMode

from conftest import nvidia_bin, nvidia_env

DYN = T.DYNAMIC


def build_vec_add(version=(13, 4, 0)) -> bytes:
    mb = ModuleBuilder(version)
    i32 = tile(T.I32)
    ptr = tile(T.PointerType(T.F32))
    tv_t = T.TensorViewType(T.F32, (DYN,), (1,))
    pv_t = T.PartitionViewType((128,), tv_t, (0,))
    with mb.kernel("vec_add", [ptr, i32, ptr, i32]) as k:
        x_ptr, n, y_ptr, m = k.args
        n = k.op("assume", [i32], value=n, predicate=BoundedAttr(0, None)).result
        tvx = k.op("make_tensor_view", [tv_t], base=x_ptr, dynamicShape=[n], dynamicStrides=[]).result
        tvy = k.op("make_tensor_view", [tv_t], base=y_ptr, dynamicShape=[m], dynamicStrides=[]).result
        bid = k.op("get_tile_block_id", [i32, i32, i32]).results[0]
        pvx = k.op("make_partition_view", [pv_t], tensor_view=tvx).result
        pvy = k.op("make_partition_view", [pv_t], tensor_view=tvy).result
        load = k.op("load_view_tko", [tile(T.F32, 128), T.TOKEN], view=pvx, index=[bid],
                    memory_ordering_semantics=MO.weak, inbounds=(False,))
        one = k.constant(np.float32(1.0), tile(T.F32, 128))
        s = k.op("addf", [tile(T.F32, 128)], lhs=load.results[0], rhs=one,
                 rounding_mode=RoundingMode.nearest_even).result
        k.op("store_view_tko", [T.TOKEN], tile=s, view=pvy, index=[bid], token=load.results[1],
             memory_ordering_semantics=MO.weak, inbounds=(False,))
        k.op("return")
    return write_module(mb.module)


def test_built_module_round_trips():
    data = build_vec_add()
    module = read_module(data)
    assert write_module(module) == data
    fn = module.functions[0]
    assert fn.name == b"vec_add"
    names = [op.name for op in fn.walk()]
    assert names[0] == "assume" and names[-1] == "return"
    store = next(op for op in fn.walk() if op.name == "store_view_tko")
    assert store.operands["token"] is next(op for op in fn.walk() if op.name == "load_view_tko").results[1]


@pytest.mark.parametrize("version", [(13, 1, 0), (13, 2, 0), (13, 3, 0), (13, 4, 0)])
def test_built_module_is_accepted_by_nvidia_disassembler(version, tmp_path):
    tool = nvidia_bin("tileirdisasm")
    if tool is None:
        pytest.skip("NVIDIA tileirdisasm not installed")
    path = tmp_path / "m.tileirbc"
    path.write_bytes(build_vec_add(version))
    proc = subprocess.run([str(tool), str(path)], capture_output=True, text=True, env=nvidia_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "entry @vec_add" in proc.stdout
    assert "addf" in proc.stdout


def test_dense_encodings():
    assert encode_dense(True, tile(T.I1)) == b"\xff"
    assert encode_dense(np.array([1, 0, 1, 1, 0, 0, 0, 0, 1]), tile(T.I1, 9)) == b"\x0d\x01"
    assert encode_dense(np.float32(1.0), tile(T.F32)) == b"\x00\x00\x80\x3f"


def test_unknown_field_is_rejected():
    mb = ModuleBuilder()
    with mb.kernel("k", []) as k:
        with pytest.raises(TypeError, match="unknown fields"):
            k.op("return", bogus=1)
