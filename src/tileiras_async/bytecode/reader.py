"""Read TileIR bytecode into the in-memory cuda_tile IR.

Sections are scanned first, then parsed in dependency order (strings, types,
constants, globals, debug, functions).  Ops are decoded by walking their
op definition (ir/cuda_tile.py); nothing here knows an individual op.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import types as T
from ..ir.attrs import DenseElements, OptimizationHintsAttr
from ..ir.core import Block, DebugEntry, Function, Global, Module, Operation, Region, Value
from ..ir.opdef import NegativeSegment, OpDef
from .attrs_codec import AttrContext, read_inline, read_tagged
from .errors import BytecodeError, MalformedConstant, NestingTooDeep, NotTileIR, UnsupportedVersion
from .opspec import MAX_MINOR, OPS_BY_CODE, BASE_MINOR
from .types_codec import RawType, TypeDecoder
from .wire import MAX_COUNT, ByteReader

MAX_OPCODE = max(OPS_BY_CODE)   # unassigned opcodes below it are gaps in the table
MAGIC = b"\x7fTileIR\x00"
MLIR_MAGIC = b"ML\xefR"
NOT_TILE_IR = "input does not correspond to Tile IR bytecode"
SUPPORTED_VERSIONS = tuple((13, m) for m in range(BASE_MINOR, MAX_MINOR + 1))

SEC_END, SEC_STRING, SEC_FUNC, SEC_DEBUG, SEC_CONSTANT, SEC_TYPE, SEC_GLOBAL = range(7)
KNOWN_SECTION_IDS = 8  # ids 0..7 are accepted by the real reader (7 is reserved and ignored)
# section id -> required alignment multiple (Global has none)
SECTION_ALIGNMENT = {SEC_STRING: 4, SEC_TYPE: 4, SEC_CONSTANT: 8, SEC_DEBUG: 8, SEC_FUNC: 8}

TAG_PREVIEW = 1           # the only version tag bit a reader knows
FUNC_FLAG_PRIVATE = 0b1   # symbol visibility (the verifier requires entries to be public)
FUNC_FLAG_KERNEL = 0b10
FUNC_FLAG_HINTS = 0b100
FUNC_FLAGS_KNOWN = FUNC_FLAG_PRIVATE | FUNC_FLAG_KERNEL | FUNC_FLAG_HINTS
# How deep ops may nest (regions inside regions).  Reading, verifying, printing and compiling use
# explicit stacks, so this bounds memory, not Python's recursion limit.
MAX_NESTING = 10_000
_OP, _REGION, _BLOCK = range(3)   # frame kinds of _BodyReader._read_op_tree


@dataclass
class _Section:
    id: int
    reader: ByteReader


def read_module(data: bytes) -> Module:
    """Parse a whole bytecode file; raises BytecodeError (with the real tool's diagnostics)."""
    data = bytes(data)
    top = ByteReader(data)
    version = _read_header(top)
    sections = _scan_sections(top)
    return _ModuleReader(data, version, sections).read()


def _read_header(r: ByteReader) -> tuple[int, int, int]:
    data = r.data
    if data[:len(MLIR_MAGIC)] == MLIR_MAGIC:
        raise NotTileIR(NOT_TILE_IR + " (it looks like MLIR bytecode instead)")
    if data[:len(MAGIC)] != MAGIC:
        raise NotTileIR(NOT_TILE_IR)
    r.pos = len(MAGIC)
    try:
        major = r.u8("version")
        minor = r.u8("version")
        tag = r.fixed(2, what="version tag")
    except BytecodeError:
        raise BytecodeError("failed to parse bytecode header", r.offset) from None
    if (major, minor) not in SUPPORTED_VERSIONS:
        raise UnsupportedVersion(f"unsupported Tile version {major}.{minor}.{tag}, this reader supports "
                                 f"versions [13.{BASE_MINOR} - 13.{MAX_MINOR}]", r.offset) \
            .add_context("failed to parse bytecode header", r.offset)
    if tag & ~TAG_PREVIEW:     # checked before the preview bit, as the real reader does; its hex digits upper case
        raise BytecodeError(f"header has unrecognized version tag bits (0x{tag & ~TAG_PREVIEW:X});", r.offset) \
            .add_context("failed to parse bytecode header", r.offset)
    if tag & TAG_PREVIEW:
        raise BytecodeError(f"public-preview bytecode at version {major}.{minor}.{tag} is not readable; "
                            f"preview content is only valid at the current version 13.{MAX_MINOR}", r.offset)
    return (major, minor, tag)


def peek_version(data: bytes) -> tuple[int, int] | None:
    """The (major, minor) a driver sees before parsing: bytes 8 and 9, missing bytes read as 0."""
    if data[:len(MAGIC)] != MAGIC:
        return None
    major = data[8] if len(data) > 8 else 0
    minor = data[9] if len(data) > 9 else 0
    return major, minor


def _scan_sections(r: ByteReader) -> dict[int, _Section]:
    sections: dict[int, _Section] = {}
    while True:
        try:
            sid, length, alignment = _read_section_header(r)
        except BytecodeError as e:
            raise e.add_context("failed to parse section header", r.offset)
        if sid == SEC_END:
            if not r.at_end():
                raise BytecodeError("end section is not the last section", r.offset)
            break
        required = SECTION_ALIGNMENT.get(sid)
        if required is not None:
            if alignment is None:
                raise BytecodeError(f"section {sid} must have alignment that is a multiple of {required} "
                                    f"bytes, but has no alignment flag set", r.offset)
            if alignment % required:
                raise BytecodeError(f"section {sid} must have alignment that is a multiple of {required} "
                                    f"bytes, but has alignment of {alignment}", r.offset)
        if length > r.remaining():      # the payload fits, but not after its alignment padding
            raise BytecodeError(f"section length {length} exceeds remaining bytecode data. {r.remaining()}",
                                r.offset)
        payload = r.sub(length)
        # offsets inside a section are reported relative to its payload
        sections[sid] = _Section(sid, ByteReader(r.data, payload.pos, payload.end, -payload.pos))
    if SEC_STRING not in sections:
        raise BytecodeError("string section is mandatory", r.offset)
    return sections


def _read_section_header(r: ByteReader) -> tuple[int, int, int | None]:
    if r.at_end():
        raise r.fail("unexpected end of data while reading section header")
    byte = r.u8()
    sid, has_align = byte & 0x7F, bool(byte & 0x80)
    if sid >= KNOWN_SECTION_IDS:
        raise r.fail(f"unknown section ID: {sid}")
    if sid == SEC_END:
        if has_align:
            raise r.fail("end section should not have alignment flag set")
        return sid, 0, None
    length = r.field("failed to read section length")
    if length > r.remaining():
        raise r.fail(f"section length {length} exceeds remaining data size {r.remaining()}")
    alignment = None
    if has_align:
        alignment = r.field(None, "section alignment")     # unreadable: the section header's context only
        if alignment == 0 or alignment & (alignment - 1):
            raise r.fail(f"invalid alignment value: {alignment}")
        try:
            r.align(alignment)  # padding is relative to the absolute file offset
        except BytecodeError:
            raise BytecodeError(None) from None     # the section header's context only
    return sid, length, alignment


@dataclass(frozen=True)
class _ArrayWords:
    """The real reader's words for failures around a counted array of the Debug section (the other
    sections' tables report only through their section's context)."""
    count: str
    padding: str
    pointer: str


_DEBUG_FUNCS = _ArrayWords("failed to read total number of operations with debug info",
                           "failed to skip padding for debug info index offset pointer",
                           "failed to read debug info index offset pointer.")
_DEBUG_IDS = _ArrayWords("failed to read total number of debug info indices",
                         "failed to skip padding for debug info indices pointer",
                         "failed to read debug info indices pointer")
_DEBUG_ATTRS = _ArrayWords("failed to read total number of debug info attributes",
                           "failed to skip padding for debug info offset pointer",
                           "failed to read debug info offset pointer")


def _must_fit(r: ByteReader, n: int, width: int, noun: str) -> None:
    """`n` entries of `width` bytes must fit in what is left of the payload."""
    if n * width > r.remaining():
        raise r.fail(f"number of {noun} ({n}) exceeds the maximum of {r.remaining() // width} that can fit in "
                     f"the remaining payload of {r.remaining()} bytes.")


def _skip_padding(r: ByteReader, width: int, start: int, failure: str | None) -> None:
    """Padding up to `width` (relative to `start`); a short payload fails as `failure` (None: only through
    the section's context)."""
    try:
        r.align(width, start)
    except BytecodeError:
        raise (BytecodeError(None) if failure is None else r.fail(failure)) from None


def _array_start(r: ByteReader, words: _ArrayWords, width: int, start: int, noun: str) -> int:
    """A Debug-section array's count, its padding skipped: the real reader then takes a pointer to the
    array, which fails at the end of the payload even for no element."""
    n = r.field(words.count)
    _skip_padding(r, width, start, words.padding)
    _must_fit(r, n, width, noun)
    if r.at_end():
        raise r.fail(words.pointer)
    return n


def _read_table(r: ByteReader, index_width: int, section_start: int | None = None,
                strict: bool = False, noun: str = "", bounded: str = "",
                words: _ArrayWords | None = None) -> list[bytes | None]:
    """`varint n; pad; n offsets; data` — entry i is data[off[i]:off[i+1]].

    Padding is relative to the start of the enclosing section payload.  `strict` (the Type and
    Debug sections): an entry outside the data or inverted is None (unreadable), as the real
    reader's bounds-checked slices are; otherwise (strings) entries are sliced as StringRef::substr.
    `words`: the Debug section's own words for a failed count, padding or offsets pointer; without
    them an unreadable count (an empty section too) is reported by the section's context alone, and
    an empty table needs no padding.
    """
    start = r.pos if section_start is None else section_start
    try:
        n = r.varint("table size")
    except BytecodeError:
        if words:
            raise r.fail(words.count) from None
        raise BytecodeError(None) from None    # the section's context only
    if bounded and n >= MAX_COUNT:
        raise r.fail(f"varint value exceeds maximum supported capacity. (expected value less than {MAX_COUNT}, "
                     f"got {n}).")
    if noun:
        _must_fit(r, n, index_width, noun)
    if n == 0 and not words:
        return []
    _skip_padding(r, index_width, start, words and words.padding)
    if words and r.at_end():
        raise r.fail(words.pointer)
    if n * index_width > r.remaining():
        if bounded:
            raise r.fail(f"insufficient data for {bounded} indices")
        raise BytecodeError(None)   # offsets that fit only before the padding: the section's context alone
    offsets = [r.fixed(index_width) for _ in range(n)]
    data_start, data_len = r.pos, r.remaining()
    if bounded:   # checked eagerly, each entry's size taken as unsigned (an inverted one is huge)
        for i, start in enumerate(offsets):
            end = offsets[i + 1] if i + 1 < n else data_len
            if end < start:
                raise r.fail(f"invalid {bounded} start indices: end ({end}) is less than start ({start}) for "
                             f"{bounded} {i}")
            size = (end - start) % (1 << (8 * index_width))
            if start + size > data_len:
                raise r.fail(f"{bounded} {i} extends beyond available data: size={size}, start={start}, "
                             f"total data size={data_len}")
    entries = []
    for i, off in enumerate(offsets):
        if strict:
            end = offsets[i + 1] if i + 1 < n else data_len
            entries.append(bytes(r.data[data_start + off:data_start + end]) if off <= end <= data_len else None)
            continue
        # the real reader slices without validating, as StringRef::substr(off, next - off): the start
        # is clamped to the data, and an inverted entry (a size that wraps around) runs to its end
        start = min(off, data_len)
        size = offsets[i + 1] - off if i + 1 < n else data_len
        end = data_len if size < 0 else min(start + size, data_len)
        entries.append(bytes(r.data[data_start + start:data_start + end]))
    r.pos = r.end
    return entries


class _ModuleReader:
    def __init__(self, data: bytes, version: tuple[int, int, int], sections: dict[int, _Section]):
        self.data = data
        self.eof = len(data)
        self.version = version
        self.minor = version[1]
        self.sections = sections
        self.module = Module(version=version)

    # -- tables ---------------------------------------------------------

    def string(self, i: int) -> bytes:
        if i >= len(self.module.strings):
            raise BytecodeError(f"string index {i} out of bounds")
        return self.module.strings[i]

    def constant(self, i: int) -> bytes:
        if i >= len(self.constant_blobs):
            raise BytecodeError(f"constant index {i} out of bounds")
        blob = self.constant_blobs[i]
        if isinstance(blob, tuple):     # (message, offset): a blob that cannot be read
            raise MalformedConstant(*blob)
        return blob

    def type(self, i: int) -> T.Type:
        return self.types.get(i)

    def _reader(self, sid: int) -> ByteReader | None:
        s = self.sections.get(sid)
        return None if s is None else s.reader

    def read(self) -> Module:
        self._read_tables()
        self.attr_ctx = AttrContext(self.string, self.type, self.constant, self.minor)
        self._read_globals()
        self._read_debug()
        self._read_functions()
        self._finish_type_table()
        return self.module

    def _read_tables(self) -> None:
        try:
            self.module.strings = _read_table(self._reader(SEC_STRING), 4, noun="strings")
        except BytecodeError as e:
            raise e.add_context("failed to parse string section", self.eof)
        tr = self._reader(SEC_TYPE)
        try:
            self.types = TypeDecoder(_read_table(tr, 4, strict=True, noun="types") if tr else [], self.minor)
        except BytecodeError as e:
            raise e.add_context("failed to parse type section", self.eof)
        cr = self._reader(SEC_CONSTANT)
        self.constant_blobs = []
        try:
            blobs = _read_table(cr, 8, bounded="constant") if cr else []
        except BytecodeError as e:
            raise e.add_context("failed to parse constant section", self.eof)
        self.module.constants = []
        for blob in blobs:      # read when an attribute uses it
            br = ByteReader(blob)
            try:
                size = br.varint("constant size")
            except BytecodeError:
                decoded = ("failed to read the size of the data buffer", br.offset)
            else:
                try:
                    decoded = br.bytes(size, "constant data")
                except BytecodeError:
                    decoded = ("failed to read the raw byte data", br.offset)
            self.constant_blobs.append(decoded)
            self.module.constants.append(decoded if isinstance(decoded, bytes) else blob)

    def _finish_type_table(self) -> None:
        out = []
        for i, raw in enumerate(self.types.entries):
            try:
                out.append(self.types.get(i))
            except BytecodeError:
                out.append(RawType(raw or b""))  # never referenced; keep bytes for exact rewriting
        self.module.types = out

    def _read_globals(self) -> None:
        r = self._reader(SEC_GLOBAL)
        if r is None:
            return
        for _ in range(r.varint()):
            index, type_index, constant_index, alignment = (r.varint() for _ in range(4))
            visibility, constant = 0, False
            if self.minor >= 3:
                visibility = r.varint()
                constant = bool(r.varint())
            if constant_index >= len(self.constant_blobs):
                raise BytecodeError("global value constant index out of bounds", self.eof) \
                    .add_context("failed to create global from bytecode", self.eof)
            try:
                name = self.string(index)
            except BytecodeError as e:
                raise e.add_context(f"failed to get global symbol name string for index {index}", self.eof) \
                    .add_context("failed to create global from bytecode", self.eof)
            t = self.type(type_index)
            raw = self.constant(constant_index)
            self.module.globals.append(Global(name, t, DenseElements(t, raw), alignment, visibility, constant))

    def _read_debug(self) -> None:
        self.func_debug_starts: list[int] = []
        self.debug_ids: list[int] = []
        self.debug_checker = _DebugChecker([], self)
        r = self._reader(SEC_DEBUG)
        if r is None:
            return
        start = r.pos
        try:
            nfuncs = _array_start(r, _DEBUG_FUNCS, 4, start, "operations with debug info")
            self.func_debug_starts = [r.fixed(4) for _ in range(nfuncs)]
            nids = _array_start(r, _DEBUG_IDS, 8, start, "debug info indices")
            self.debug_ids = [r.fixed(8) for _ in range(nids)]
            entries = _read_table(r, 4, start, strict=True, noun="debug info attributes", words=_DEBUG_ATTRS)
        except BytecodeError as e:
            raise e.add_context("failed to parse debug section", self.eof)
        self.module.debug = [_decode_debug_entry(raw) for raw in entries]
        self.debug_checker = _DebugChecker(self.module.debug, self)

    # -- functions ------------------------------------------------------

    def _read_functions(self) -> None:
        """The whole Func section is parsed first ("failed to parse function section"), then each
        function is created ("failed to create function from bytecode"), as the real reader does:
        a malformed record of a later function is reported before an earlier function's body."""
        r = self._reader(SEC_FUNC)
        if r is None:
            raise BytecodeError("function section is mandatory", self.eof)
        try:
            count = r.varint("function count")
        except BytecodeError as e:
            raise e.add_context("failed to parse function section", self.eof)
        records = [self._read_function_record(r) for _ in range(count)]
        for record in records:
            self.module.functions.append(self._create_function(*record))

    def _fail_function(self, e: BytecodeError, msg: str, offset: int) -> BytecodeError:
        return e.add_context(msg, offset).add_context("failed to create function from bytecode", offset)

    def _read_function_record(self, r: ByteReader) -> tuple:
        try:     # an unreadable index: the real reader names only the section
            name_index = r.field(None, "function name")
            sig_index = r.field(None, "function type")
            flags = r.u8("function flags")
            loc_idx = r.field(None, "function location")
            if self.minor >= 4 and flags & ~FUNC_FLAGS_KNOWN:   # checked from 13.4 on
                raise r.fail(f"function entry has unrecognized flag bits (0x{flags & ~FUNC_FLAGS_KNOWN:X});")
            hints = None
            if flags & FUNC_FLAG_HINTS and flags & FUNC_FLAG_KERNEL:    # a non-entry has none to read
                hints = read_tagged(r, self.attr_ctx)    # any attribute here; checked when the function is made
            body_len = r.varint("function body length")
            if body_len > r.remaining():
                raise r.fail(f"function body length {body_len} exceeds remaining bytecode data "
                             f"({r.remaining()} bytes)")
            body = r.sub(body_len)
        except BytecodeError as e:
            raise e.add_context("failed to parse function section", self.eof)
        return name_index, sig_index, flags, loc_idx, hints, body

    def _create_function(self, name_index: int, sig_index: int, flags: int, loc_idx: int,
                         hints: OptimizationHintsAttr | None, body: ByteReader) -> Function:
        try:
            name = self.string(name_index)
        except BytecodeError as e:
            raise self._fail_function(e, f"failed to get function name string at index {name_index}", self.eof)
        if not name:
            raise BytecodeError(f"function name at index {name_index} is empty", self.eof) \
                .add_context("failed to create function from bytecode", self.eof)
        shown = name.decode(errors="replace")
        if sig_index >= len(self.types.entries):
            raise BytecodeError(f"function signature index {sig_index} out of bounds for function '{shown}'",
                                self.eof).add_context("failed to create function from bytecode", self.eof)
        try:
            sig = self.type(sig_index)
        except BytecodeError as e:
            # the real message lacks the closing quote
            raise self._fail_function(e, f"failed to parse type at index {sig_index} for function '{shown}",
                                      self.eof)
        if not isinstance(sig, T.FunctionType):
            from ..ir.printer import mlir_type_str
            raise BytecodeError(f"function signature index {sig_index} does not refer to a function type for "
                                f"function '{shown}', got type: '{mlir_type_str(sig)}'", self.eof) \
                .add_context("failed to create function from bytecode", self.eof)
        try:
            first = self._location_start(loc_idx)
            fn_loc = self.debug_ids[first] if first is not None else 0
            self._check_location(fn_loc)
        except BytecodeError as e:
            raise self._fail_function(e, f"failed to read function location for '{shown}'", self.eof)
        if hints is not None and not isinstance(hints, OptimizationHintsAttr):
            raise BytecodeError(f"invalid optimization hints attribute for function '{shown}'", self.eof) \
                .add_context("failed to create function from bytecode", self.eof)
        block = Block(sig.inputs)
        try:
            body_reader = ByteReader(body.data, body.pos, body.end, -body.pos)
            _BodyReader(self, body_reader, None if first is None else first + 1).read_top(block)
        except BytecodeError as e:
            raise self._fail_function(e, f"failed to parse function body for function '{shown}'", self.eof)
        if not flags & FUNC_FLAG_KERNEL:   # checked once the body is read, as the real reader does
            raise BytecodeError(f"un-expected non-entry function '{shown}'", self.eof)
        return Function(name, sig, block, flags, hints, fn_loc, has_debug=loc_idx != 0)

    def _check_location(self, debug_id: int) -> None:
        if debug_id:
            self.debug_checker.expect(debug_id, _LOCATION_TAGS)

    def _location_start(self, loc_idx: int) -> int | None:
        """Where a function's debug ids start in the Debug section's id table (its own location, then
        one per op in pre-order); None when it has no debug entry (loc_idx 0: every location unknown)."""
        if loc_idx == 0:
            return None
        if loc_idx > len(self.func_debug_starts) or self.func_debug_starts[loc_idx - 1] >= len(self.debug_ids):
            raise BytecodeError(None)
        return self.func_debug_starts[loc_idx - 1]

    def op_location(self, index: int) -> int:
        """The debug id at `index` of the id table; a function's ops may run into the next function's
        ids, but not past the table."""
        if index >= len(self.debug_ids):
            raise BytecodeError(None)
        return self.debug_ids[index]


DEBUG_COMPILE_UNIT, DEBUG_FILE, DEBUG_LEXICAL_BLOCK, DEBUG_LOC, DEBUG_SUBPROGRAM, DEBUG_CALLSITE = range(1, 7)
_LOCATION_TAGS = (DEBUG_LOC, DEBUG_CALLSITE)
_SCOPE_TAGS = (DEBUG_SUBPROGRAM, DEBUG_LEXICAL_BLOCK)
# tag -> (attribute name in diagnostics, [(field name, tags a reference must have, or None for a plain value)])
_DEBUG_LAYOUT = {
    DEBUG_COMPILE_UNIT: ("DICompileUnitAttr", [("file attribute", (DEBUG_FILE,))]),
    DEBUG_FILE: ("DIFileAttr", [("file name attribute", None), ("directory attribute", None)]),
    DEBUG_LEXICAL_BLOCK: ("DILexicalBlockAttr", [("scope attribute", _SCOPE_TAGS), ("file attribute", (DEBUG_FILE,)),
                                                 ("line number", None), ("column number", None)]),
    # the filename is read as the FileLineColLoc inside the DILoc, and reported so
    DEBUG_LOC: ("DILocAttr", [("scope attribute", _SCOPE_TAGS), ("file name attribute@FileLineColLoc", None),
                              ("line number@FileLineColLoc", None), ("column number@FileLineColLoc", None)]),
    DEBUG_SUBPROGRAM: ("DISubprogramAttr", [("file attribute", (DEBUG_FILE,)), ("line number", None),
                                            ("name attribute", None), ("linkage name attribute", None),
                                            ("compile unit attribute", (DEBUG_COMPILE_UNIT,)),
                                            ("scope line number", None)]),
    DEBUG_CALLSITE: ("CallSiteLoc", [("callee attribute", _LOCATION_TAGS), ("caller attribute", _LOCATION_TAGS)]),
}
_STRING_FIELDS = frozenset({"file name attribute", "directory attribute", "name attribute", "linkage name attribute"})


class _DebugChecker:
    """Validates Debug-section references the way the real reader decodes them (lazily, with a cycle guard).

    An id of an unknown tag reads as an unknown location; a reference to the wrong kind, a missing
    field or a cycle fails, reported through the caller's context.
    """

    def __init__(self, entries: list[DebugEntry], mr: "_ModuleReader"):
        self.entries = entries
        self.mr = mr
        self.good: set[int] = set()
        self.active: set[int] = set()

    def expect(self, debug_id: int, tags: tuple[int, ...]) -> None:
        if not 0 < debug_id <= len(self.entries):
            raise BytecodeError(None)
        entry = self.entries[debug_id - 1]
        if entry.tag < 0:
            raise BytecodeError(None)   # not even a tag can be read from it
        if entry.tag not in _DEBUG_LAYOUT:
            if tags == _LOCATION_TAGS:
                return  # read as an unknown location
            raise BytecodeError(None)
        if debug_id in self.active:
            raise BytecodeError(None)  # a reference cycle
        if debug_id not in self.good:  # the attribute is decoded before its kind is checked
            self.active.add(debug_id)
            try:
                self._fields(entry)
            finally:
                self.active.discard(debug_id)
            self.good.add(debug_id)
        if entry.tag not in tags:
            raise BytecodeError(None)

    def _fields(self, entry: DebugEntry) -> None:
        kind, layout = _DEBUG_LAYOUT[entry.tag]
        r = ByteReader(entry.raw)
        r.varint()
        r.base = -r.pos  # offsets are relative to the payload after the tag
        for field, tags in layout:
            field, _, parsing = field.partition("@")
            context = f"failed to read {field} when parsing {parsing or kind}"
            try:
                value = r.varint()
            except BytecodeError:
                raise BytecodeError(context, r.offset) from None
            if tags is None:
                if field in _STRING_FIELDS:
                    self._string(value, context, r)
                continue
            try:
                self.expect(value, tags)
            except BytecodeError as e:
                raise e.add_context(context, r.offset)

    def _string(self, index: int, context: str, r: ByteReader) -> None:
        if index >= len(self.mr.module.strings):
            raise BytecodeError(f"string index {index} out of bounds").add_context(context, r.offset)


def _decode_debug_entry(raw: bytes) -> DebugEntry:
    """Tag and varint fields; tag -1 when no tag can be read, the fields up to a malformed one."""
    if raw is None:
        return DebugEntry(-1, (), b"")
    r = ByteReader(raw)
    try:
        tag = r.varint() & 0xFF     # kept as a byte by NVIDIA's reader, as attribute and type tags are
    except BytecodeError:
        return DebugEntry(-1, (), raw)
    fields = []
    try:
        while not r.at_end():
            fields.append(r.varint())
    except BytecodeError:
        pass
    return DebugEntry(tag, tuple(fields), raw)


class _BodyReader:
    """Decodes one function body: ops, regions and block-scoped value numbering."""

    def __init__(self, mr: _ModuleReader, r: ByteReader, next_loc: int | None):
        self.mr = mr
        self.r = r
        self.minor = mr.minor
        self.next_loc = next_loc   # index of the next op's debug id; None: the function has none
        self.values: list[Value] = []

    def read_top(self, block: Block) -> None:
        self.values.extend(block.args)
        while not self.r.at_end():
            block.ops.append(self._read_op_tree())

    def _read_op_tree(self) -> Operation:
        """One op and everything nested in it, with an explicit stack of frames (no recursion on
        the input's nesting depth, which is limited only by MAX_NESTING).

        The frames are [kind, node, count, index, saved]: an op reading its `count` regions, a
        region reading its `count` blocks, a block reading its `count` ops; `index` is the child
        being read.  A failure takes the contexts the real reader adds on the way out, innermost
        first: "operation i in block", "block i in region", "region i".
        """
        r = self.r
        stack: list[list] = []
        try:
            root = self._read_op()
            if root.spec.regions:
                stack.append([_OP, root, self._region_count(root.spec), 0, 0])
            else:
                self.values.extend(root.results)
            while stack:
                frame = stack[-1]
                kind, node, count, index = frame[0], frame[1], frame[2], frame[3]
                if index == count:  # the node is complete
                    if kind == _BLOCK:
                        last = node.ops[-1]
                        if not last.spec.is_terminator:
                            raise r.fail("invalid block structure: block is expected to have a terminator "
                                         f"operation, but the last operation 'cuda_tile.{last.name}' is not a "
                                         "terminator.")
                        del self.values[frame[4]:]
                    elif kind == _OP:
                        self.values.extend(node.results)
                    stack.pop()
                    if stack:
                        stack[-1][3] += 1
                    continue
                if kind == _OP:
                    region = Region()
                    node.regions.append(region)
                    stack.append([_REGION, region, self._count("block count", "region block count"), 0, 0])
                elif kind == _REGION:
                    block, saved, nops = self._read_block_header()
                    node.blocks.append(block)
                    stack.append([_BLOCK, block, nops, 0, saved])
                else:
                    op = self._read_op()
                    node.ops.append(op)
                    if op.spec.regions:
                        if len(stack) >= 3 * MAX_NESTING:
                            raise NestingTooDeep(f"operations are nested more than {MAX_NESTING} deep", r.offset)
                        stack.append([_OP, op, self._region_count(op.spec), 0, 0])
                    else:
                        self.values.extend(op.results)
                        frame[3] += 1
        except NestingTooDeep:
            raise   # one line, not one context per level
        except BytecodeError as e:
            offset = r.offset
            for kind, _node, count, index, _saved in reversed(stack):
                if kind == _BLOCK and index < count:
                    e.add_context(f"failed to parse operation {index} in block.", offset)
                elif kind == _REGION:
                    e.add_context(f"failed to parse block {index} in region.", offset)
                elif kind == _OP:
                    e.add_context(f"failed to parse region {index}", offset)
            raise
        return root

    def _region_count(self, spec: OpDef) -> int:
        r = self.r
        n = r.field("failed to read number of regions to parse.", "region count")
        if n != len(spec.regions):
            raise r.fail(f"cuda_tile.{spec.name} op expected {len(spec.regions)} regions, got {n}")
        return n

    def _read_block_header(self) -> tuple[Block, int, int]:
        """A block's argument types and op count; its arguments become visible values.
        Returns (block, the value count to restore at its end, op count)."""
        r = self.r
        nargs = r.field("failed to read block argument count.", "argument count")
        arg_types = [self._block_arg_type(i) for i in range(nargs)]
        block = Block(arg_types)
        saved = len(self.values)
        self.values.extend(block.args)
        nops = r.field("failed to read block operation count.", "op count")
        if nops == 0:
            raise r.fail("invalid block structure: block is expected to have a terminator operation, "
                         "but it is empty")
        return block, saved, nops

    def _value(self, which: str) -> Value:
        """One operand; `which` names it as the real reader does ("operand 2" in an op of fixed
        operands, "index segment, element 1" in an op with optional or variadic segments)."""
        r = self.r
        try:
            idx = r.varint("operand")
        except BytecodeError:
            raise r.fail(f"failed to read operand index{' for ' if 'segment' in which else ' '}"
                         f"{which.removeprefix('operand ')}") from None
        if idx >= len(self.values):
            raise r.fail(f"operand index {idx} out of bounds (size={len(self.values)}) for {which}")
        return self.values[idx]

    def _block_arg_type(self, i: int) -> T.Type:
        try:
            return self.mr.type(self.r.varint("type index"))
        except BytecodeError:   # unreadable, out of range or malformed: one message for all
            raise self.r.fail(f"failed to read block argument type: {i}") from None

    def _count(self, what: str, reading: str) -> int:
        try:
            return self.r.varint(what)
        except BytecodeError:
            raise self.r.fail(f"failed to read {reading}") from None

    def _type(self, what: str, unreadable: str | None = None) -> T.Type:
        """A type by index; `what` is the context of a bad index, `unreadable` the message when the
        index itself cannot be read (default: `what` as context of an empty error)."""
        try:
            index = self.r.varint("type index")
        except BytecodeError:
            if unreadable is not None:
                raise self.r.fail(unreadable) from None
            raise BytecodeError(None).add_context(what, self.r.offset) from None
        try:
            return self.mr.type(index)
        except BytecodeError as e:
            if not e.lines[:1] or e.lines[0].startswith(f"error at offset {self.r.offset}: unexpected end"):
                e = BytecodeError(None)
            raise e.add_context(what, self.r.offset)

    def _read_op(self) -> Operation:
        r = self.r
        try:
            opcode = r.varint("opcode")
        except BytecodeError:
            raise r.fail("failed to read operation opcode.") from None
        opcode &= 0xFFFFFFFF    # the real reader keeps an opcode in 32 bits
        spec = OPS_BY_CODE.get(opcode)
        if spec is None and opcode < MAX_OPCODE:
            raise r.fail(f"unknown or unimplemented opcode: {opcode}")   # a gap in the opcode table
        if spec is None or spec.since > self.minor:
            raise r.fail(f"unsupported opcode {opcode} for bytecode version 13.{self.minor}")
        try:
            loc = 0
            if self.next_loc is not None:
                loc = self.mr.op_location(self.next_loc)
                self.next_loc += 1
            self.mr._check_location(loc)
        except BytecodeError as e:
            raise e.add_context("failed to read operation location.", r.offset)
        if spec.counted_results:
            n = r.count(f"failed to read number of result types for {spec.cls}", "result count")
            result_types = [self._type(f"failed to get result type {i} for {spec.cls}") for i in range(n)]
        else:
            result_types = [self._type(f"failed to get result type {i} for {spec.cls}")
                            for i in range(len(spec.results))]
        flags = r.field("failed to read flags field", "flags") if spec.has_flags(self.minor) else 0
        attrs = self._read_attrs(spec, flags, result_types)
        operands = self._read_operands(spec, flags)
        return Operation(spec, operands, attrs, result_types, loc=loc)

    def _read_attrs(self, spec: OpDef, flags: int, result_types) -> dict:
        attrs = {}
        for a in spec.attrs:
            if a.since > self.minor:
                continue
            if a.kind == "unit":
                attrs[a.name] = bool(flags >> a.bit & 1)
                continue
            if a.bit is not None and not flags >> a.bit & 1:
                continue
            try:
                attrs[a.name] = read_inline(self.r, a.kind, self.mr.attr_ctx, result_types)
            except BytecodeError as e:
                optional = "optional " if a.bit is not None else ""
                raise e.add_context(f"failed to parse {optional}attribute '{a.name}'", self.r.offset)
        return attrs

    def _read_operands(self, spec: OpDef, flags: int) -> dict:
        operands: dict = {}
        specs = [o for o in spec.operands if o.since <= self.minor]
        counter = iter(range(1 << 30))  # operand numbers, for diagnostics
        if spec.counted_operands:
            total = self.r.count("failed to read operand count", "operand count")
            values = [self._value(f"operand {i}") for i in range(total)]
            fixed = sum(1 for o in specs if o.form == "one")
            takes_rest = any(o.form == "variadic" for o in specs)
            optional = sum(1 for o in specs if o.form == "optional")
            if not takes_rest and total > fixed + optional:
                raise self.r.fail(f"'{spec.cls}' expects {fixed} operands, got {total}")
            # too few are the verifier's to report ("expected 3 or more operands"): the missing are None
            extra = max(0, total - fixed)
            it = iter(values)
            for o in specs:
                if o.form == "one":
                    operands[o.name] = next(it, None)
                elif o.form == "optional":
                    operands[o.name] = next(it) if extra else None
                    extra = max(0, extra - 1)
                else:
                    operands[o.name] = [next(it) for _ in range(extra)]
                    extra = 0
            return operands
        segmented = any(o.form != "one" for o in specs)

        def which(o, k: int) -> str:
            return f"{o.name} segment, element {k}" if segmented else f"operand {next(counter)}"

        read = 0
        for o in specs:
            if o.form == "one":
                operands[o.name] = self._value(which(o, 0))
                read += 1
            elif o.form == "optional":
                present = o.bit is not None and flags >> o.bit & 1
                operands[o.name] = self._value(which(o, 0)) if present else None
                read += bool(present)
            else:
                n = self.r.field(f"failed to read actual size for variadic ODS segment '{o.name}' of op "
                                 f"'cuda_tile.{spec.name}'", "operand count")
                n = (n + (1 << 31) & 0xFFFFFFFF) - (1 << 31)    # kept as a signed 32-bit count
                if (read + n) % (1 << 64) > 0xFFFFFFFF:
                    # the real reader adds the count (sign-extended) to the operands read so far: a negative
                    # one passes only when it does not reach below zero, and then reads no operand
                    raise self.r.fail(f"failed to read operands for {o.name} segment, exceeds maximum supported "
                                      f"capacity")
                operands[o.name] = (NegativeSegment(n) if n < 0 else
                                    [self._value(which(o, k)) for k in range(n)])
                read += max(n, 0)
        return operands
