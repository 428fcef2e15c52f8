"""Structure-aware mutations of TileIR bytecode.

A file is split into its structure (header, sections, the Func section's function records, the
String table) and the fields the reader decodes are found by tracing our own reader over it (every
varint, byte and fixed-width integer it reads, with what it was reading).  A mutation changes one
structural thing: a field's value, a section's id, order, alignment or presence, a string table
entry or offset, a function's flags, location or name, a Debug section taken from another file, an
op record's field, a truncation or a splice.  Most mutations then re-encode the enclosing lengths
(section and function body lengths, table offsets, alignment padding), so the mutant gets past
the framing and exercises the checks behind it; some leave the framing broken on purpose.

Deterministic: `Mutator(sources, seed).mutant(i)` is a pure function of the sources, the seed and i.
"""
from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field

from ..bytecode import wire
from ..bytecode.errors import BytecodeError
from ..bytecode.reader import MAGIC, SEC_CONSTANT, SEC_DEBUG, SEC_FUNC, SEC_STRING, SEC_TYPE, read_module
from ..bytecode.wire import ALIGN_BYTE, encode_varint
from ..bytecode.writer import _table

HEADER_SIZE = len(MAGIC) + 4      # magic, major, minor, 2-byte tag

INTERESTING = (0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
               2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70)
NAMES = (b"", b"\xff\xfe", b"a b", b'q"uote', b"back\\slash", b"0digit", b"k\xc3\xa9", b"$dollar", b"a.b",
         b"-dash", b"nul\x00byte", b"@at", b"x" * 300, b"%pct", b"new\nline", b"llvm.nvvm.barrier0",
         b"__nv_sinf", b"tab\tname", b"\xc0\x80", b"\xed\xa0\x80")


# ------------------------------------------------------------------ tracing our reader

@dataclass(frozen=True)
class Field:
    start: int          # absolute offset in the file
    end: int
    kind: str           # varint | u8 | fixed
    what: str           # what the reader was reading ("function flags", "opcode", ...)
    value: int


@contextlib.contextmanager
def _tracing(root: bytes, out: list[Field]):
    """Record every integer our reader decodes from `root` itself (not from copied table entries)."""
    cls = wire.ByteReader
    saved = cls.varint, cls.u8, cls.fixed

    def varint(self, what="varint"):
        start = self.pos
        value = saved[0](self, what)
        if self.data is root:
            out.append(Field(start, self.pos, "varint", what, value))
        return value

    def u8(self, what="byte"):
        start = self.pos
        value = saved[1](self, what)
        if self.data is root:
            out.append(Field(start, self.pos, "u8", what, value))
        return value

    def fixed(self, width, signed=False, what="integer"):
        start = self.pos
        value = saved[2](self, width, signed, what)
        if self.data is root:
            out.append(Field(start, self.pos, "fixed", what, value))
        return value

    cls.varint, cls.u8, cls.fixed = varint, u8, fixed
    try:
        yield
    finally:
        cls.varint, cls.u8, cls.fixed = saved


def trace_fields(data: bytes) -> list[Field]:
    """The integer fields our reader decodes, in reading order (up to the first failure)."""
    data = bytes(data)
    out: list[Field] = []
    with _tracing(data, out):
        try:
            read_module(data)
        except Exception:  # noqa: BLE001 - a broken file is traced as far as it reads
            pass
    return out


# ------------------------------------------------------------------ structure

@dataclass
class Function:
    head: bytearray                     # name, type, flags, location, hints
    body: bytearray
    head_at: int = -1                   # absolute offsets in the source file (-1: not from it)
    body_at: int = -1


@dataclass
class Section:
    id_byte: int                        # id, with 0x80 when an alignment follows
    alignment: int | None
    payload: bytearray
    payload_at: int = -1
    functions: list[Function] | None = None    # the Func section, split
    count: bytearray = field(default_factory=bytearray)   # the Func section's function count

    @property
    def sid(self) -> int:
        return self.id_byte & 0x7F


@dataclass
class Layout:
    header: bytearray
    sections: list[Section]
    tail: bytearray                     # the end section and anything after it

    def section(self, sid: int) -> Section | None:
        return next((s for s in self.sections if s.sid == sid), None)


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    r = wire.ByteReader(data, pos)
    return r.varint(), r.pos


def parse_layout(data: bytes, fields: list[Field] | None = None) -> Layout | None:
    """Split a file into header, sections and (from the trace) function records; None if the
    section framing itself does not parse."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        return None
    pos = HEADER_SIZE
    sections: list[Section] = []
    try:
        while True:
            id_byte = data[pos]
            pos += 1
            if id_byte & 0x7F == 0:
                tail = bytearray(data[pos - 1:])
                break
            length, pos = _varint_at(data, pos)
            alignment = None
            if id_byte & 0x80:
                alignment, pos = _varint_at(data, pos)
                if alignment == 0 or alignment & (alignment - 1):
                    return None
                pos += -pos % alignment
            if pos + length > len(data):
                return None
            sections.append(Section(id_byte, alignment, bytearray(data[pos:pos + length]), pos))
            pos += length
    except (IndexError, BytecodeError):
        return None
    layout = Layout(bytearray(data[:HEADER_SIZE]), sections, tail)
    _split_functions(layout, data, trace_fields(data) if fields is None else fields)
    return layout


def _split_functions(layout: Layout, data: bytes, fields: list[Field]) -> None:
    func = layout.section(SEC_FUNC)
    if func is None:
        return
    start, end = func.payload_at, func.payload_at + len(func.payload)
    lengths = [f for f in fields if f.what == "function body length" and start <= f.start < end]
    count = [f for f in fields if f.what == "function count" and f.start == start]
    if not count or len(lengths) != count[0].value:
        return   # not fully read: the section stays one opaque payload
    functions = []
    head_at = count[0].end
    for f in lengths:
        body_at, body_end = f.end, f.end + f.value
        if body_end > end:
            return
        functions.append(Function(bytearray(data[head_at:f.start]), bytearray(data[body_at:body_end]),
                                  head_at, body_at))
        head_at = body_end
    if head_at != end:
        return
    func.count = bytearray(data[start:count[0].end])
    func.functions = functions


def build(layout: Layout) -> bytes:
    """The file, with every section length, function body length and alignment re-encoded."""
    out = bytearray(layout.header)
    for s in layout.sections:
        payload = s.payload
        if s.functions is not None:
            payload = bytearray(s.count)
            for fn in s.functions:
                payload += fn.head
                encode_varint(len(fn.body), payload)
                payload += fn.body
        out.append(s.id_byte)
        encode_varint(len(payload), out)
        if s.id_byte & 0x80:
            encode_varint(s.alignment or 1, out)
            out += bytes([ALIGN_BYTE]) * (-len(out) % (s.alignment or 1))
        out += payload
    out += layout.tail
    return bytes(out)


# ------------------------------------------------------------------ string tables

def split_table(payload: bytes, width: int = 4) -> tuple[list[bytes], bytes] | None:
    """(entries, trailing bytes) of a `count; pad; offsets; data` table, or None."""
    try:
        n, pos = _varint_at(payload, 0)
    except BytecodeError:
        return None
    pos += -pos % width
    if n * width > len(payload) - pos:
        return None
    offs = [int.from_bytes(payload[pos + i * width:pos + (i + 1) * width], "little") for i in range(n)]
    base = pos + n * width
    size = len(payload) - base
    entries = []
    for i, off in enumerate(offs):
        end = offs[i + 1] if i + 1 < n else size
        if not 0 <= off <= end <= size:
            return None
        entries.append(bytes(payload[base + off:base + end]))
    return entries, b""


def join_table(entries: list[bytes], width: int = 4) -> bytearray:
    """A `count; pad; offsets; data` table payload, as the writer lays one out."""
    return _table(entries, width)


# ------------------------------------------------------------------ mutations

def varint_bytes(value: int, pad_to: int = 0) -> bytes:
    """LEB128; `pad_to` > its length gives a non-canonical encoding of that many bytes."""
    out = bytearray()
    encode_varint(value, out)
    while len(out) < pad_to:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


@dataclass
class Source:
    name: str
    data: bytes
    fields: list[Field]
    layout: Layout | None

    @classmethod
    def of(cls, name: str, data: bytes) -> "Source":
        fields = trace_fields(data)
        return cls(name, data, fields, parse_layout(data, fields))


@dataclass(frozen=True)
class Mutant:
    data: bytes
    source: str
    operator: str
    detail: str


class Mutator:
    """Mutants of a list of sources; `mutant(i)` depends only on (sources, seed, i)."""

    def __init__(self, sources: list[Source], seed: int):
        self.sources = sources
        self.seed = seed
        self.operators = [(op, weight) for op, weight in _WEIGHTS.items()]

    def mutant(self, index: int) -> Mutant:
        rng = random.Random(f"{self.seed}:{index}")
        src = rng.choice(self.sources)
        names = [op for op, _ in self.operators]
        weights = [w for _, w in self.operators]
        for _ in range(8):   # an operator may not apply to this source: draw again
            op = rng.choices(names, weights)[0]
            result = OPERATORS[op](src, rng, self.sources)
            if result is not None and result[0] != src.data:
                return Mutant(result[0], src.name, op, result[1])
        return Mutant(_raw_flip(src, rng, self.sources)[0], src.name, "raw_flip", "fallback")


def _copy_section(s: Section) -> Section:
    return _copy(Layout(bytearray(), [s], bytearray())).sections[0]


def _editable(src: Source, sid: int) -> tuple[Layout, Section] | None:
    """A copy of the source's structure to mutate, and its section `sid` (None: no such section)."""
    if src.layout is None:
        return None
    layout = _copy(src.layout)
    sec = layout.section(sid)
    return None if sec is None else (layout, sec)


def _copy(layout: Layout) -> Layout:
    sections = []
    for s in layout.sections:
        fns = None if s.functions is None else [Function(bytearray(f.head), bytearray(f.body), f.head_at, f.body_at)
                                                for f in s.functions]
        sections.append(Section(s.id_byte, s.alignment, bytearray(s.payload), s.payload_at, fns, bytearray(s.count)))
    return Layout(bytearray(layout.header), sections, bytearray(layout.tail))


def _new_value(rng: random.Random, value: int) -> int:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(INTERESTING)
    if pick < 0.8:
        return max(0, value + rng.choice((-2, -1, 1, 2)))
    return rng.getrandbits(rng.choice((4, 8, 16, 32, 64)))


def _encode_field(f: Field, value: int, rng: random.Random) -> bytes:
    width = f.end - f.start
    if f.kind == "varint":
        return varint_bytes(value, rng.choice((0, 0, 0, width, width + 1)))
    return (value % (1 << (8 * width))).to_bytes(width, "little")


def _replace_field(src: Source, f: Field, new: bytes, fixup: bool) -> bytes | None:
    """The file with field `f` replaced by `new`: in the structure (lengths re-encoded) when
    `fixup` and the field lies in a known container, else in the raw bytes."""
    layout = src.layout
    if fixup and layout is not None:
        layout = _copy(layout)
        if f.end <= HEADER_SIZE:
            layout.header[f.start:f.end] = new
            return build(layout)
        for s in layout.sections:
            if s.functions is not None:
                for fn in s.functions:
                    for part, at in ((fn.head, fn.head_at), (fn.body, fn.body_at)):
                        if at <= f.start and f.end <= at + len(part):
                            part[f.start - at:f.end - at] = new
                            return build(layout)
            elif s.payload_at <= f.start and f.end <= s.payload_at + len(s.payload):
                s.payload[f.start - s.payload_at:f.end - s.payload_at] = new
                return build(layout)
    return src.data[:f.start] + new + src.data[f.end:]


def _field_mutation(src: Source, rng: random.Random, want) -> tuple[bytes, str] | None:
    fields = [f for f in src.fields if want(f)]
    if not fields:
        return None
    f = rng.choice(fields)
    value = _new_value(rng, f.value)
    data = _replace_field(src, f, _encode_field(f, value, rng), fixup=rng.random() < 0.85)
    return data, f"{f.what}@{f.start}: {f.value} -> {value}"


_OP_FIELDS = ("opcode", "operand", "type index", "result count", "flags", "operand count", "region count",
              "block count", "argument count", "op count")


def _op_field(src, rng, _sources):
    return _field_mutation(src, rng, lambda f: f.what in _OP_FIELDS or f.what.startswith("varint"))


def _any_field(src, rng, _sources):
    return _field_mutation(src, rng, lambda f: True)


def _func_field(what: str):
    def mutate(src, rng, _sources):
        return _field_mutation(src, rng, lambda f: f.what == what)
    return mutate


def _func_flag_bit(src, rng, _sources):
    flags = [f for f in src.fields if f.what == "function flags"]
    if not flags:
        return None
    f = rng.choice(flags)
    value = f.value ^ (1 << rng.randrange(8))
    return _replace_field(src, f, bytes([value]), True), f"function flags@{f.start}: {f.value:#x} -> {value:#x}"


def _header_field(src, rng, _sources):
    data = bytearray(src.data)
    if len(data) < HEADER_SIZE:
        return None
    i = rng.randrange(len(MAGIC), HEADER_SIZE)
    old = data[i]
    data[i] = rng.choice((0, 1, 2, 3, 4, 5, 0x80, 0xFF, old ^ (1 << rng.randrange(8))))
    return bytes(data), f"header byte {i}: {old:#x} -> {data[i]:#x}"


def _section_op(src, rng, sources):
    if src.layout is None or not src.layout.sections:
        return None
    layout = _copy(src.layout)
    secs = layout.sections
    i = rng.randrange(len(secs))
    choice = rng.randrange(6)
    if choice == 0 and len(secs) > 1:
        j = rng.randrange(len(secs))
        secs[i], secs[j] = secs[j], secs[i]
        detail = f"swap sections {i} and {j}"
    elif choice == 1:
        secs.insert(i, _copy_section(secs[i]))
        detail = f"duplicate section {secs[i].sid}"
    elif choice == 2:
        detail = f"drop section {secs[i].sid}"
        del secs[i]
    elif choice == 3:
        new = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x7F))
        detail = f"section {secs[i].sid} id -> {new}"
        secs[i].id_byte = new | (secs[i].id_byte & 0x80)
    elif choice == 4:
        s = secs[i]
        if s.id_byte & 0x80 and rng.random() < 0.5:
            s.id_byte &= 0x7F
            detail = f"section {s.sid}: no alignment"
        else:
            s.id_byte |= 0x80
            s.alignment = rng.choice((1, 2, 4, 8, 16, 64, 3, 0))
            detail = f"section {s.sid}: alignment {s.alignment}"
            if s.alignment in (0, 3):
                out = bytearray(build(_copy(Layout(layout.header, secs[:i], bytearray()))))
                out.append(s.id_byte)
                encode_varint(len(s.payload), out)
                encode_varint(s.alignment, out)
                return bytes(out + s.payload + build(Layout(bytearray(), secs[i + 1:], layout.tail))), detail
    else:
        other = rng.choice(sources)
        if other.layout is None or not other.layout.sections:
            return None
        sec = rng.choice(other.layout.sections)
        secs.insert(i, _copy_section(sec))
        detail = f"splice section {sec.sid} from {other.name}"
    return build(layout), detail


def _strings_op(src, rng, _sources):
    edit = _editable(src, SEC_STRING)
    table = split_table(edit[1].payload) if edit else None
    if not table or not table[0]:
        return None
    layout, sec = edit
    entries = list(table[0])
    i = rng.randrange(len(entries))
    choice = rng.randrange(5)
    if choice == 0:
        new = rng.choice(NAMES)
        detail = f"string {i}: {entries[i][:20]!r} -> {new[:20]!r}"
        entries[i] = new
    elif choice == 1:
        j = rng.randrange(len(entries))
        entries[i] = entries[j]
        detail = f"string {i} := string {j}"
    elif choice == 2:
        detail = f"string {i}: drop a byte"
        entries[i] = entries[i][:-1] if entries[i] else b"\x80"
    elif choice == 3:   # raw offsets, not re-encoded
        payload = join_table(entries)
        n, pos = _varint_at(payload, 0)
        pos += -pos % 4 + 4 * i
        value = _new_value(rng, int.from_bytes(payload[pos:pos + 4], "little")) % (1 << 32)
        payload[pos:pos + 4] = value.to_bytes(4, "little")
        sec.payload = payload
        return build(layout), f"string offset {i} -> {value}"
    else:
        payload = join_table(entries)
        count = _new_value(rng, len(entries))
        head = varint_bytes(count)
        sec.payload = bytearray(head) + payload[len(varint_bytes(len(entries))):]
        return build(layout), f"string count {len(entries)} -> {count}"
    sec.payload = join_table(entries)
    return build(layout), detail


def _functions_op(src, rng, sources):
    edit = _editable(src, SEC_FUNC)
    if not edit or not edit[1].functions:
        return None
    layout, sec = edit
    fns = sec.functions
    i = rng.randrange(len(fns))
    choice = rng.randrange(4)
    if choice == 0:
        fns.insert(i, Function(bytearray(fns[i].head), bytearray(fns[i].body)))
        detail = f"duplicate function {i}"
    elif choice == 1 and len(fns) > 1:
        detail = f"drop function {i}"
        del fns[i]
    elif choice == 2:
        other = rng.choice(sources)
        osec = other.layout.section(SEC_FUNC) if other.layout else None
        if not osec or not osec.functions:
            return None
        fns[i].body = bytearray(rng.choice(osec.functions).body)
        detail = f"function {i}: body from {other.name}"
    else:
        body = fns[i].body
        cut = rng.randrange(len(body) + 1)
        fns[i].body = body[:cut]
        detail = f"function {i}: body cut at {cut}"
    sec.count = bytearray(varint_bytes(len(fns)))
    return build(layout), detail


def _debug_swap(src, rng, sources):
    if src.layout is None:
        return None
    layout = _copy(src.layout)
    others = [o for o in sources if o.layout is not None and o.layout.section(SEC_DEBUG) is not None]
    mine = layout.section(SEC_DEBUG)
    if not others:
        return None
    other = rng.choice(others)
    theirs = other.layout.section(SEC_DEBUG)
    if mine is None:
        layout.sections.append(_copy_section(theirs))
    elif rng.random() < 0.2:
        layout.sections.remove(mine)
        return build(layout), "drop the debug section"
    else:
        mine.payload = bytearray(theirs.payload)
    return build(layout), f"debug section from {other.name}"


def _debug_table(payload: bytes) -> tuple[bytes, list[bytes]] | None:
    """(the index arrays before it, the entries) of a Debug section's attribute table, or None."""
    try:
        r = wire.ByteReader(payload)
        n = r.varint()
        r.align(4)
        r.pos += 4 * n
        m = r.varint()
        r.align(8)
        r.pos += 8 * m
    except BytecodeError:
        return None
    table = split_table(payload[r.pos:]) if r.pos <= len(payload) else None
    return None if table is None else (payload[:r.pos], table[0])


def _table_entry(src, rng, _sources):
    """One entry of the Type, Constant or Debug table, which the trace does not see (the reader decodes
    copies): its tag (a constant's size) given high bits, one of its varints changed, or the entry cut short."""
    sid = rng.choice((SEC_TYPE, SEC_DEBUG, SEC_CONSTANT))
    edit = _editable(src, sid)
    if edit is None:
        return None
    layout, sec = edit
    width = 8 if sid == SEC_CONSTANT else 4
    if sid == SEC_DEBUG:
        prefix, entries = _debug_table(bytes(sec.payload)) or (b"", None)
    else:
        prefix, table = b"", split_table(sec.payload, width)
        entries = table[0] if table else None
    if not entries:
        return None
    i = rng.randrange(len(entries))
    entry = entries[i]
    try:
        tag, end = _varint_at(entry, 0)
    except BytecodeError:
        return None
    choice = rng.randrange(3)
    if choice == 0:
        high = rng.choice((1, 2, 255, 1 << 24, rng.getrandbits(32)))
        entries[i] = varint_bytes(tag + (high << 8)) + entry[end:]
        detail = f"tag {tag} -> {tag + (high << 8)}"
    elif choice == 1:
        starts = [0]
        try:
            while starts[-1] < len(entry):
                starts.append(_varint_at(entry, starts[-1])[1])
        except BytecodeError:
            starts.pop()
        k = rng.randrange(len(starts) - 1) if len(starts) > 1 else 0
        old, stop = _varint_at(entry, starts[k])
        value = _new_value(rng, old)
        entries[i] = entry[:starts[k]] + varint_bytes(value) + entry[stop:]
        detail = f"varint {k} {old} -> {value}"
    else:
        entries[i] = entry[:rng.randrange(len(entry))]
        detail = f"cut to {len(entries[i])} bytes"
    sec.payload = bytearray(prefix) + join_table(entries, width)
    name = {SEC_TYPE: "type", SEC_DEBUG: "debug", SEC_CONSTANT: "constant"}[sid]
    return build(layout), f"{name} entry {i}: {detail}"


def _truncate(src, rng, _sources):
    if src.fields and rng.random() < 0.7:
        cut = rng.choice(src.fields).start
    else:
        cut = rng.randrange(len(src.data))
    return src.data[:cut], f"truncate at {cut}"


def _raw_flip(src, rng, _sources):
    b = bytearray(src.data)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b), "bit flips"


def _raw_splice(src, rng, sources):
    other = rng.choice(sources).data
    a = rng.randrange(len(src.data))
    b = rng.randrange(len(other))
    n = rng.randint(1, 64)
    return src.data[:a] + other[b:b + n] + src.data[a + rng.randint(0, n):], f"splice {n} bytes at {a}"


OPERATORS = {
    "field": _any_field,
    "op_field": _op_field,
    "func_name": _func_field("function name"),
    "func_type": _func_field("function type"),
    "func_loc": _func_field("function location"),
    "func_flags": _func_flag_bit,
    "header": _header_field,
    "section": _section_op,
    "strings": _strings_op,
    "functions": _functions_op,
    "debug_swap": _debug_swap,
    "table_entry": _table_entry,
    "truncate": _truncate,
    "raw_flip": _raw_flip,
    "raw_splice": _raw_splice,
}
_WEIGHTS = {"field": 6, "op_field": 6, "func_name": 2, "func_type": 1, "func_loc": 2, "func_flags": 2,
            "header": 1, "section": 3, "strings": 3, "functions": 2, "debug_swap": 2, "table_entry": 3,
            "truncate": 1, "raw_flip": 2, "raw_splice": 1}
