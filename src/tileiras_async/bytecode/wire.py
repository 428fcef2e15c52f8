"""Primitive encodings of TileIR bytecode: LEB128 varints, zig-zag, fixed-width lists, alignment."""
from __future__ import annotations

from .errors import BytecodeError

MAX_COUNT = 2**32 - 2     # the real reader's bound on counts it reads as varints (results, dictionary sizes)

ALIGN_BYTE = 0xCB  # what NVIDIA's writer pads with; readers never check it
_VARINT_MAX_SHIFT = 63
_U64 = (1 << 64) - 1


class ByteReader:
    """A cursor over an immutable byte buffer.

    Offsets in diagnostics are `base + pos`: sub-readers over a function body
    or a table entry report offsets relative to their own start, as the real
    reader does.
    """

    __slots__ = ("data", "pos", "end", "base")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None, base: int = 0):
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.base = base

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def remaining(self) -> int:
        return self.end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self.end

    def fail(self, msg: str) -> BytecodeError:
        return BytecodeError(msg, self.offset)

    def u8(self, what: str = "byte") -> int:
        if self.pos >= self.end:
            raise self.fail(f"unexpected end of data while reading {what}")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def bytes(self, n: int, what: str = "bytes") -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"unexpected end of data while reading {what}")
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def fixed(self, width: int, signed: bool = False, what: str = "integer") -> int:
        return int.from_bytes(self.bytes(width, what), "little", signed=signed)

    def varint(self, what: str = "varint") -> int:
        result = 0
        shift = 0
        while True:
            if self.pos >= self.end:
                raise self.fail(f"unexpected end of data while reading {what}")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result & _U64   # a uint64_t in the real reader: bits past 64 are lost
            shift += 7
            if shift > _VARINT_MAX_SHIFT:
                raise self.fail(f"varint value exceeds maximum supported capacity while reading {what}")

    def field(self, failure: str | None, what: str | None = None, signed: bool = False) -> int:
        """A varint (`what` names it, for tracing readers) whose failure the real reader reports as `failure`
        (None: only through its callers' context)."""
        try:
            return self.svarint(what or "signed varint") if signed else self.varint(what or "varint")
        except BytecodeError:
            if failure is None:
                raise BytecodeError(None) from None
            raise self.fail(failure) from None

    def fixed_list(self, width: int, failure: str) -> list[int]:
        """A varint count of signed `width`-byte integers, read one by one (a short list fails where the
        payload ends, as the real reader's does), any failure reported as `failure`."""
        try:
            n = self.varint()
        except BytecodeError:
            raise self.fail(failure) from None
        if n > MAX_COUNT:
            raise self.fail(f"array size in bytecode ({n}) exceeds maximum supported capacity") \
                .add_context(failure, self.offset)
        try:
            return [self.fixed(width, True) for _ in range(n)]
        except BytecodeError:
            raise self.fail(failure) from None

    def count(self, context: str, what: str = "varint") -> int:
        """A varint count, below MAX_COUNT; any failure reported under `context`."""
        n = self.field(context, what)
        if n >= MAX_COUNT:
            raise self.fail(f"varint value exceeds maximum supported capacity. (expected value less than "
                            f"{MAX_COUNT}, got {n}).").add_context(context, self.offset)
        return n

    def svarint(self, what: str = "signed varint") -> int:
        u = self.varint(what)
        return (u >> 1) ^ -(u & 1)

    def intlist(self, width: int, what: str = "integer list") -> list[int]:
        n = self.varint(what)
        if n * width > self.remaining():
            raise self.fail(f"unexpected end of data while reading {what}")
        return [self.fixed(width, True, what) for _ in range(n)]

    def align(self, alignment: int, relative_to: int = 0) -> None:
        """Skip padding so that (pos - relative_to) is a multiple of alignment."""
        pad = -(self.pos - relative_to) % alignment
        if pad > self.remaining():
            raise self.fail("unexpected end of data while reading padding")
        self.pos += pad

    def sub(self, length: int) -> "ByteReader":
        """A reader over the next `length` bytes, advancing this one past them."""
        if length < 0 or length > self.remaining():
            raise self.fail(f"length {length} exceeds remaining data size {self.remaining()}")
        r = ByteReader(self.data, self.pos, self.pos + length, self.base)
        self.pos += length
        return r


def encode_varint(x: int, out: bytearray) -> None:
    if x < 0:
        raise ValueError(f"varint must be non-negative, got {x}")
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)


def zigzag(x: int) -> int:
    return (x << 1) if x >= 0 else ((-x) << 1) - 1


def encode_svarint(x: int, out: bytearray) -> None:
    encode_varint(zigzag(x), out)


def encode_intlist(values, width: int, out: bytearray) -> None:
    encode_varint(len(values), out)
    for v in values:
        out += int(v).to_bytes(width, "little", signed=True)


def pad_to(out: bytearray, alignment: int, relative_to: int = 0) -> None:
    out += bytes([ALIGN_BYTE]) * (-(len(out) - relative_to) % alignment)
