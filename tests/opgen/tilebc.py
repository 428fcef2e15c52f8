"""Thin helpers over cuTile's real bytecode writer (``cuda.tile._bytecode``).

Used by ``build_ops.py`` to emit small TileIR bytecode modules.  Everything that
touches the wire format goes through NVIDIA's own producer code; this module only
adds conveniences (type shorthands, constant packing, opcode bookkeeping, debug
locations) and a module writer that does not need the function count up front.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Callable, Optional, Sequence

import cuda.tile._bytecode as bc
from cuda.tile._bytecode import encodings as enc
from cuda.tile._bytecode import writer as bcw
from cuda.tile._bytecode.attribute import AttributeTag, TaggedAttribute, Dictionary, AssumePredicate
from cuda.tile._bytecode.basic import encode_varint, encode_int_list
from cuda.tile._bytecode.type import SimpleType
from cuda.tile._bytecode.float import float_to_bits, float_bit_size

V = bc.BytecodeVersion
VERSIONS = {"13.1": V.V_13_1, "13.2": V.V_13_2, "13.3": V.V_13_3, "13.4": V.V_13_4}

# enum shorthands
RM = enc.RoundingMode
OVF = enc.IntegerOverflow
SGN = enc.Signedness
PRED = enc.ComparisonPredicate
ORD = enc.ComparisonOrdering
MEM = enc.MemoryOrderingSemantics
SCOPE = enc.MemoryScope
RMW = enc.AtomicRMWMode
PAD = bc.PaddingValue
PTRATTR = bc.PtrAttr
VIS = enc.SymbolVisibility
DYN = bc.DYNAMIC_SHAPE

SIMPLE = {
    "i1": SimpleType.I1, "i8": SimpleType.I8, "i16": SimpleType.I16,
    "i32": SimpleType.I32, "i64": SimpleType.I64, "f16": SimpleType.F16,
    "bf16": SimpleType.BF16, "f32": SimpleType.F32, "tf32": SimpleType.TF32,
    "f64": SimpleType.F64, "f8E4M3FN": SimpleType.F8E4M3FN,
    "f8E5M2": SimpleType.F8E5M2, "token": SimpleType.Token,
    "f8E8M0FNU": SimpleType.F8E8M0FNU, "f4E2M1FN": SimpleType.F4E2M1FN,
    "i4": SimpleType.I4,
}
INT_WIDTH = {"i1": 1, "i4": 4, "i8": 8, "i16": 16, "i32": 32, "i64": 64}


# opcode -> mnemonic as printed by tileirdisasm (13.1 names; 85 is `print` in 13.1
# bytecode but the 13.5 disassembler prints every print as `print_tko`)
OPNAMES = {
    0: "absf", 1: "absi", 2: "addf", 3: "addi", 4: "andi", 5: "assert", 6: "assume",
    7: "atomic_cas_tko", 8: "atomic_rmw_tko", 9: "bitcast", 10: "break", 11: "broadcast",
    12: "cat", 13: "ceil", 14: "cmpf", 15: "cmpi", 16: "constant", 17: "continue", 18: "cos",
    19: "cosh", 20: "divf", 21: "divi", 22: "entry", 23: "exp", 24: "exp2", 37: "exti",
    38: "extract", 39: "floor", 40: "fma", 41: "for", 42: "ftof", 43: "ftoi", 44: "get_global",
    45: "get_index_space_shape", 46: "get_num_tile_blocks", 47: "get_tensor_shape",
    48: "get_tile_block_id", 49: "global", 50: "if", 51: "int_to_ptr", 58: "iota", 59: "itof",
    60: "join_tokens", 61: "load_ptr_tko", 62: "load_view_tko", 63: "log", 64: "log2",
    65: "loop", 66: "make_partition_view", 67: "make_tensor_view", 68: "make_token",
    69: "maxf", 70: "maxi", 71: "minf", 72: "mini", 73: "mmaf", 74: "mmai", 75: "module",
    76: "mulf", 77: "mulhii", 78: "muli", 79: "negf", 80: "negi", 81: "offset", 82: "ori",
    83: "permute", 84: "fpowf", 85: "print_tko", 86: "ptr_to_int", 87: "ptr_to_ptr",
    88: "reduce", 89: "remf", 90: "remi", 91: "reshape", 92: "return", 93: "rsqrt", 94: "scan",
    95: "select", 96: "shli", 97: "shri", 98: "sin", 99: "sinh", 100: "sqrt",
    101: "store_ptr_tko", 102: "store_view_tko", 103: "subf", 104: "subi", 105: "tan",
    106: "tanh", 107: "trunci", 108: "xori", 109: "yield", 110: "atan2", 111: "pack",
    112: "unpack", 113: "alloca", 114: "mmaf_scaled", 115: "make_gather_scatter_view",
    116: "make_strided_view", 117: "atomic_red_view_tko", 118: "insert",
    119: "gdc_launch_dependents_tko", 120: "gdc_wait_tko", 121: "fpowi",
    122: "memory_fence_alias_tko",
}


def _read_varint(buf: bytes, pos: int) -> int:
    shift = 0
    val = 0
    while True:
        b = buf[pos]
        val |= (b & 0x7F) << shift
        pos += 1
        shift += 7
        if not b & 0x80:
            return val


class SameElements(AssumePredicate):
    """Tag 9 + intlist<8> (the producer's dataclass has no encoder)."""

    def __init__(self, values: Sequence[int]):
        self.values = list(values)

    def encode_tagged(self, string_table, buf):
        buf.extend(AttributeTag.SameElements._value_)
        encode_int_list(self.values, 8, buf)


class RawHints(TaggedAttribute):
    """OptimizationHints built from explicit (arch, [(key, attr)]) pairs."""

    def __init__(self, by_arch):
        self.by_arch = [(a, Dictionary(list(items))) for a, items in by_arch]

    def encode_tagged(self, string_table, buf):
        buf.extend(AttributeTag.OptimizationHints._value_)
        self._untagged(string_table, buf)

    def _untagged(self, string_table, buf):
        from cuda.tile._bytecode.attribute import encode_dictionary_untagged
        encode_dictionary_untagged(self.by_arch, string_table, buf)

    # CodeBuilder.encode_opattr_optimization_hints reads .hints_by_arch
    @property
    def hints_by_arch(self):
        return self.by_arch


def i32attr(v: int):
    return bc.Integer.create_i32(v)


class Kernel:
    """State while emitting one function body."""

    def __init__(self, mod: "Module", cb: bc.CodeBuilder, params, subprogram, fname):
        self.mod = mod
        self.cb = cb
        self.params = params
        self.subprogram = subprogram
        self.fname = fname


class Module:
    """Collects the functions/globals of one module and records opcodes."""

    def __init__(self, version: str, family: str, debug: bool = True):
        self.vs = version
        self.version = VERSIONS[version]
        self.family = family
        self.debug = debug
        self.opcodes: set = set()
        self.op_count = 0
        self._line = 10
        self.w: Optional[bcw.BytecodeWriter] = None
        self.k: Optional[Kernel] = None
        self.num_functions = 0
        self._fixed_loc = None

    # ---- version helpers -------------------------------------------------
    def ge(self, v: str) -> bool:
        return self.version >= VERSIONS[v]

    # ---- types -------------------------------------------------------------
    @property
    def tt(self) -> bc.TypeTable:
        return self.w.type_table

    def s(self, name: str) -> bc.TypeId:
        if name == "fnv8E5M3FNU":
            return self.tt[SimpleType.FNV8E5M3FNU._value_]
        return self.tt.simple(SIMPLE[name])

    def tile(self, elem, shape=()) -> bc.TypeId:
        e = self.s(elem) if isinstance(elem, str) else elem
        return self.tt.tile(e, list(shape))

    def ptr(self, elem, attr=PTRATTR.Missing) -> bc.TypeId:
        e = self.s(elem) if isinstance(elem, str) else elem
        return self.tt.pointer(e, attr)

    def tptr(self, elem, shape=(), attr=PTRATTR.Missing) -> bc.TypeId:
        return self.tile(self.ptr(elem, attr), shape)

    def tv(self, elem, shape, strides, attr=PTRATTR.Missing) -> bc.TypeId:
        e = self.s(elem) if isinstance(elem, str) else elem
        return self.tt.tensor_view(e, list(shape), list(strides), attr)

    def pv(self, tile_shape, tv, dim_map=None, pad=PAD.Missing) -> bc.TypeId:
        if dim_map is None:
            dim_map = list(range(len(tile_shape)))
        return self.tt.partition_view(list(tile_shape), tv, list(dim_map), pad)

    @property
    def token(self) -> bc.TypeId:
        return self.s("token")

    # ---- constants -------------------------------------------------------
    def const_bytes(self, elem: str, values: Sequence, nelem: int) -> bytes:
        vals = list(values)
        splat = len(set(map(repr, vals))) == 1
        if splat:
            vals = vals[:1]
        else:
            assert len(vals) == nelem, (elem, len(vals), nelem)
        if elem == "i1":
            if splat:
                return b"\xff" if vals[0] else b"\x00"
            out = bytearray((len(vals) + 7) // 8)
            for i, v in enumerate(vals):
                if v:
                    out[i // 8] |= 1 << (i % 8)
            return bytes(out)
        if elem in INT_WIDTH:
            w = max(1, INT_WIDTH[elem] // 8)
            return b"".join((int(v) & ((1 << (8 * w)) - 1)).to_bytes(w, "little") for v in vals)
        st = SIMPLE[elem] if elem != "fnv8E5M3FNU" else SimpleType.FNV8E5M3FNU
        nbits = float_bit_size(st)
        w = (nbits + 7) // 8
        return b"".join(float_to_bits(float(v), st).to_bytes(w, "little") for v in vals)

    def const(self, elem: str, shape, values, raw: Optional[bytes] = None):
        n = 1
        for d in shape:
            n *= d
        if not isinstance(values, (list, tuple)):
            values = [values]
        data = raw if raw is not None else self.const_bytes(elem, values, n)
        return self.op(enc.encode_ConstantOp, self.tile(elem, shape), data)

    def fattr(self, value: float, elem: str):
        return bc.Float(value, SIMPLE[elem], self.tt)

    def iattr(self, value: int, elem: str):
        return bc.Integer(self.s(elem), INT_WIDTH[elem], value)

    # ---- ops -----------------------------------------------------------------
    @contextlib.contextmanager
    def at(self, loc):
        """Give every op emitted in this block the debug location ``loc``."""
        old = self._fixed_loc
        self._fixed_loc = loc
        try:
            yield
        finally:
            self._fixed_loc = old

    def _loc(self):
        if self._fixed_loc is not None:
            return self._fixed_loc
        if not self.debug or self.k is None or self.k.subprogram is None:
            return bc.MISSING_DEBUG_ATTR_ID
        self._line += 1
        return self.w.debug_attr_table.loc(self.k.subprogram, f"{self.family}.py", self._line, 5)

    def op(self, fn: Callable, *args, **kw):
        cb = self.k.cb
        cb.cur_debug_attr = self._loc()
        pos = len(cb.buf)
        r = fn(cb, *args, **kw)
        self.opcodes.add(_read_varint(cb.buf, pos))
        self.op_count += 1
        return r

    def raw_op(self, opcode: int, payload: bytes, nresults: int):
        """Emit hand-encoded op bytes (used for the invalid corpus)."""
        cb = self.k.cb
        cb.cur_debug_attr = self._loc()
        buf = bytearray()
        encode_varint(opcode, buf)
        cb.buf.extend(buf + payload)
        self.opcodes.add(opcode)
        self.op_count += 1
        return cb.new_op(nresults) if nresults != 1 else cb.new_op()

    @property
    def e(self) -> "OpProxy":
        return OpProxy(self)

    def empty_region(self, nbb):
        """Emit a region with zero blocks (e.g. the missing else of an if)."""
        assert nbb._num_blocks > 0
        self.k.cb.buf.append(0)
        nbb._num_blocks -= 1

    @contextlib.contextmanager
    def block(self, nbb, arg_types=()):
        with nbb.new_block(list(arg_types)) as args:
            yield args

    def ret(self, *vals):
        return self.op(enc.encode_ReturnOp, list(vals))

    def yld(self, *vals):
        return self.op(enc.encode_YieldOp, list(vals))

    # ---- functions -------------------------------------------------------
    def kernel(self, name: str, params: Sequence[bc.TypeId], hints=None,
               body: Callable = None, terminate: bool = True, floc=None, subprogram=None):
        """Emit an entry function; ``body(params)`` emits the ops."""
        w = self.w
        self.num_functions += 1
        if floc is not None:
            sp = subprogram
        elif self.debug:
            f = w.debug_attr_table.file(f"{self.family}.py", "tests/opgen")
            cu = w.debug_attr_table.compile_unit(f)
            sp = w.debug_attr_table.subprogram(f, self._line, name, name, cu, self._line)
            floc = w.debug_attr_table.loc(sp, f"{self.family}.py", self._line, 1)
        else:
            sp = None
            floc = bc.MISSING_DEBUG_ATTR_ID
        if hints is None:
            hints_obj = {}
        else:
            hints_obj = hints
        with _function(w, name, list(params), hints_obj, floc) as (cb, pvals):
            self.k = Kernel(self, cb, pvals, sp, name)
            body(*pvals)
            if terminate:
                self.ret()
            self.k = None
        self._line += 10

    # ---- module -----------------------------------------------------------
    def build(self, content: Callable[["Module"], None]) -> bytes:
        buf = bytearray()
        bcw._write_header(buf, self.version)
        func_buf = bytearray()
        w = bcw.BytecodeWriter(func_buf, self.version)
        self.w = w
        content(self)
        section_buf = bytearray()
        encode_varint(self.num_functions, section_buf)
        section_buf.extend(func_buf)
        with bcw._section(bcw._Section.Func, 8, buf) as sb:
            sb.extend(section_buf)
        bcw._write_global_section(w.global_section, buf)
        with bcw._section(bcw._Section.Constant, 8, buf) as sb:
            bcw._write_table(w.constant_table, 8, sb)
        bcw._write_debug_info_section(w.debug_info, w.debug_attr_table, buf)
        with bcw._section(bcw._Section.Type, 4, buf) as sb:
            bcw._write_table(w.type_table, 4, sb)
        with bcw._section(bcw._Section.String, 4, buf) as sb:
            bcw._write_table(w._string_table, 4, sb)
        buf.append(bcw._Section.EndOfBytecode._value_)
        if self.globals_defined():
            self.opcodes.add(49)
        return bytes(buf)

    def globals_defined(self) -> bool:
        return len(self.w.global_section._defined_names) > 0

    def define_global(self, name, elem, shape, values, alignment=0, constant=False,
                      visibility=VIS.Public):
        n = 1
        for d in shape:
            n *= d
        data = self.const_bytes(elem, values, n)
        kw = {}
        if self.ge("13.3"):
            kw = dict(constant=constant, symbol_visibility=visibility)
        self.w.global_section.define_global(name, self.tile(elem, shape), data, alignment, **kw)


class OpProxy:
    """``m.e.AddI(...)`` == ``m.op(enc.encode_AddIOp, ...)``."""

    def __init__(self, m: Module):
        self._m = m

    def __getattr__(self, name):
        fn = getattr(enc, f"encode_{name}Op", None) or getattr(enc, f"encode_{name}")
        return lambda *a, **kw: self._m.op(fn, *a, **kw)


@contextlib.contextmanager
def _function(w: bcw.BytecodeWriter, name, params, hints, floc):
    """Like BytecodeWriter.function, but ``hints`` may be a RawHints object."""
    if isinstance(hints, RawHints):
        w._num_functions += 1
        from cuda.tile._bytecode.type import encode_typeid
        encode_varint(w._string_table[name.encode()].string_id, w._buf)
        sig = w._type_table.function(params, [])
        encode_typeid(sig, w._buf)
        w._buf.append(0x02 | 0x04)
        w.debug_info.append([floc])
        encode_varint(len(w.debug_info), w._buf)
        hints.encode_tagged(w._string_table, w._buf)
        builder = bc.CodeBuilder(buf=bytearray(), version=w.version,
                                 string_table=w._string_table,
                                 constant_table=w._constant_table,
                                 debug_attr_per_op=w.debug_info[-1])
        yield builder, builder._make_value_tuple(len(params))
        encode_varint(len(builder.buf), w._buf)
        w._buf.extend(builder.buf)
    else:
        with w.function(name=name, parameter_types=params, result_types=(),
                        entry_point=True, hints=hints, debug_attr=floc) as (cb, pvals):
            yield cb, pvals


# ---------------------------------------------------------------------------
# NVIDIA tools
# ---------------------------------------------------------------------------
def tool_env():
    """(CUDA_HOME, env) for the pip-installed nvidia-cuda-tileiras tools."""
    import nvidia.cu13 as cu13  # type: ignore
    home = Path(list(cu13.__path__)[0])
    env = dict(os.environ)
    env["CUDA_HOME"] = str(home)
    return home, env


def run_tool(argv, env, cwd=None):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
