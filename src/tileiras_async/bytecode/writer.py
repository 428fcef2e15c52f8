"""Write the in-memory cuda_tile IR as TileIR bytecode.

Section order and padding follow NVIDIA's producer (Func, Global, Constant,
Debug, Type, String, End), and the module's tables keep their order, so
`write_module(read_module(b)) == b` for producer-written files.
"""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Block, DebugEntry, Function, Module, Operation
from ..ir.opdef import OpDef
from .attrs_codec import AttrSink, write_inline, write_tagged
from .reader import (FUNC_FLAG_HINTS, MAGIC, SEC_CONSTANT, SEC_DEBUG, SEC_END, SEC_FUNC, SEC_GLOBAL,
                     SEC_STRING, SEC_TYPE)
from .types_codec import encode_type
from .wire import encode_varint, pad_to

# A Debug section with an empty attribute table trips NVIDIA's reader, so
# the producer always writes one placeholder entry; so do we.
_DUMMY_DEBUG_ENTRY = DebugEntry(0, (), b"\x00")


class _Interner:
    """An ordered table: existing entries keep their index, new ones are appended."""

    def __init__(self, items):
        self.items = list(items)
        self.index = {}
        for i, item in enumerate(self.items):
            self.index.setdefault(item, i)

    def __call__(self, item) -> int:
        i = self.index.get(item)
        if i is None:
            i = len(self.items)
            self.items.append(item)
            self.index[item] = i
        return i


class _TypeInterner(_Interner):
    """Interns a type after its components, as a producer must."""

    def __init__(self, items, minor: int):
        super().__init__(items)
        self.minor = minor
        self.encoded: dict[int, bytes] = {}

    def __call__(self, t: T.Type) -> int:
        i = self.index.get(t)
        if i is not None:
            return i
        encoded = encode_type(t, self, self.minor)  # interns components first
        i = super().__call__(t)
        self.encoded[i] = encoded
        return i

    def entries(self) -> list[bytes]:
        out = []
        for i, t in enumerate(self.items):
            if i not in self.encoded:
                self.encoded[i] = encode_type(t, self, self.minor)
            out.append(self.encoded[i])
        return out


def write_module(module: Module) -> bytes:
    minor = module.minor
    strings = _Interner(module.strings)
    types = _TypeInterner(module.types, minor)
    constants = _Interner(module.constants)
    sink = AttrSink(strings, types, constants)

    debug_ids_per_func: list[list[int]] = []
    func_payload = bytearray()
    encode_varint(len(module.functions), func_payload)
    for fn in module.functions:
        _write_function(fn, func_payload, sink, minor, debug_ids_per_func)

    global_payload = None
    if module.globals:
        global_payload = bytearray()
        encode_varint(len(module.globals), global_payload)
        for g in module.globals:
            encode_varint(strings(g.name), global_payload)
            encode_varint(types(g.type), global_payload)
            encode_varint(constants(g.value.raw), global_payload)
            encode_varint(g.alignment, global_payload)
            if minor >= 3:
                encode_varint(g.visibility, global_payload)
                encode_varint(int(g.constant), global_payload)

    debug_payload = _debug_section(module.debug or [_DUMMY_DEBUG_ENTRY], debug_ids_per_func)
    constant_payload = _table([_sized(c) for c in constants.items], 8)
    type_payload = _table(types.entries(), 4)
    string_payload = _table(strings.items, 4)

    out = bytearray(MAGIC)
    major, minor_, tag = module.version
    out += bytes([major, minor_]) + tag.to_bytes(2, "little")
    _section(out, SEC_FUNC, func_payload, 8)
    if global_payload is not None:
        _section(out, SEC_GLOBAL, global_payload, None)
    _section(out, SEC_CONSTANT, constant_payload, 8)
    _section(out, SEC_DEBUG, debug_payload, 8)
    _section(out, SEC_TYPE, type_payload, 4)
    _section(out, SEC_STRING, string_payload, 4)
    out.append(SEC_END)
    return bytes(out)


def _sized(blob: bytes) -> bytes:
    out = bytearray()
    encode_varint(len(blob), out)
    return bytes(out + blob)


def _section(out: bytearray, sid: int, payload: bytes, alignment: int | None) -> None:
    out.append(sid | (0x80 if alignment else 0))
    encode_varint(len(payload), out)
    if alignment:
        encode_varint(alignment, out)
        pad_to(out, alignment)
    out += payload


def _table(entries: list[bytes], index_width: int, out: bytearray | None = None) -> bytearray:
    out = bytearray() if out is None else out
    encode_varint(len(entries), out)
    pad_to(out, index_width)
    offset = 0
    for e in entries:
        out += offset.to_bytes(index_width, "little")
        offset += len(e)
    for e in entries:
        out += e
    return out


def _debug_section(entries: list[DebugEntry], ids_per_func: list[list[int]]) -> bytearray:
    out = bytearray()
    encode_varint(len(ids_per_func), out)
    pad_to(out, 4)
    start = 0
    for ids in ids_per_func:
        out += start.to_bytes(4, "little")
        start += len(ids)
    encode_varint(start, out)
    pad_to(out, 8)
    for ids in ids_per_func:
        for i in ids:
            out += i.to_bytes(8, "little")
    return _table([_debug_entry_bytes(e) for e in entries], 4, out)


def _debug_entry_bytes(e: DebugEntry) -> bytes:
    if e.raw:
        return e.raw
    out = bytearray()
    encode_varint(e.tag, out)
    for f in e.fields:
        encode_varint(f, out)
    return bytes(out)


def _write_function(fn: Function, out: bytearray, sink: AttrSink, minor: int,
                    debug_ids_per_func: list[list[int]]) -> None:
    encode_varint(sink.string(fn.name), out)
    encode_varint(sink.type(fn.type), out)
    flags = fn.flags & ~FUNC_FLAG_HINTS | (FUNC_FLAG_HINTS if fn.hints is not None else 0)
    out.append(flags)
    if fn.has_debug:
        ids = [fn.loc]
        ids.extend(op.loc for op in fn.walk())
        debug_ids_per_func.append(ids)
        encode_varint(len(debug_ids_per_func), out)
    else:
        encode_varint(0, out)
    if fn.hints is not None:
        write_tagged(fn.hints, out, sink)
    body = _BodyWriter(sink, minor)
    body.write_top(fn.body)
    encode_varint(len(body.out), out)
    out += body.out


class _BodyWriter:
    def __init__(self, sink: AttrSink, minor: int):
        self.sink = sink
        self.minor = minor
        self.out = bytearray()
        self.ids: dict[int, int] = {}  # id(Value) -> value number in the current scope
        self.next_id = 0

    def _define(self, values) -> None:
        for v in values:
            self.ids[id(v)] = self.next_id
            self.next_id += 1

    def _ref(self, v) -> int:
        try:
            return self.ids[id(v)]
        except KeyError:
            raise ValueError(f"operand {v!r} is not defined before its use") from None

    def write_top(self, block: Block) -> None:
        """Ops in pre-order, nested blocks through an explicit stack of steps (no recursion on the
        input's nesting depth): ("ops", iterator) writes the next op of a block, ("count", n) a
        region's block count, ("block", b) a block header, ("restore", n) the value numbering at a
        block's end, ("define", op) an op's results once its regions are written."""
        self._define(block.args)
        out = self.out
        stack: list[tuple[str, object]] = [("ops", iter(block.ops))]
        while stack:
            kind, item = stack[-1]
            if kind == "ops":
                op = next(item, None)
                if op is None:
                    stack.pop()
                    continue
                self._op_header(op)
                stack.append(("define", op))
                if op.spec.regions:
                    encode_varint(len(op.regions), out)
                    for region in reversed(op.regions):
                        stack.extend(("block", b) for b in reversed(region.blocks))
                        stack.append(("count", len(region.blocks)))
                continue
            stack.pop()
            if kind == "define":
                self._define(item.results)
            elif kind == "count":
                encode_varint(item, out)
            elif kind == "restore":
                self.next_id = item
            else:
                stack.append(("restore", self._block_header(item)))
                stack.append(("ops", iter(item.ops)))

    def _op_header(self, op: Operation) -> None:
        """Everything of an op's record before its regions."""
        spec: OpDef = op.spec
        out, sink = self.out, self.sink
        if spec.opcode is None:
            raise ValueError(f"'{spec.qualified_name}' has no bytecode encoding")
        encode_varint(spec.opcode, out)
        if spec.counted_results:
            encode_varint(len(op.results), out)
        for r in op.results:
            encode_varint(sink.type(r.type), out)
        if spec.has_flags(self.minor):
            encode_varint(self._flags(op), out)
        for a in spec.attrs:
            if a.since > self.minor or a.kind == "unit":
                continue
            if a.name not in op.attrs:
                if a.bit is None:
                    raise ValueError(f"{spec.name}: missing required attribute '{a.name}'")
                continue
            write_inline(op.attrs[a.name], a.kind, out, sink)
        self._operands(op)

    def _flags(self, op: Operation) -> int:
        flags = 0
        for a in op.spec.attrs:
            if a.bit is None or a.since > self.minor:
                continue
            present = bool(op.attrs.get(a.name)) if a.kind == "unit" else a.name in op.attrs
            flags |= present << a.bit
        for o in op.spec.operands:
            if o.bit is not None and o.since <= self.minor and op.operands.get(o.name) is not None:
                flags |= 1 << o.bit
        return flags

    def _operands(self, op: Operation) -> None:
        out = self.out
        specs = [o for o in op.spec.operands if o.since <= self.minor]
        if op.spec.counted_operands:
            values = []
            for o in specs:
                v = op.operands.get(o.name)
                if v is None:
                    continue
                values.extend(v if isinstance(v, list) else [v])
            encode_varint(len(values), out)
            for v in values:
                encode_varint(self._ref(v), out)
            return
        for o in specs:
            v = op.operands.get(o.name)
            if o.form == "variadic":
                v = v or []
                encode_varint(len(v), out)
                for x in v:
                    encode_varint(self._ref(x), out)
            elif v is not None:
                encode_varint(self._ref(v), out)
            elif o.form == "one":
                raise ValueError(f"{op.name}: missing operand '{o.name}'")

    def _block_header(self, block: Block) -> int:
        """A block's arguments and op count; returns the value numbering to restore at its end."""
        out = self.out
        encode_varint(len(block.args), out)
        for a in block.args:
            encode_varint(self.sink.type(a.type), out)
        saved = self.next_id
        self._define(block.args)
        encode_varint(len(block.ops), out)
        return saved
