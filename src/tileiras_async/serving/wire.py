"""The msgpack subset the drop-in's client speaks, without msgspec: importing msgspec costs a drop-in
call more CPU time than Python's own start-up, and the client sends one small map and reads one.

    pack(value) / unpack(bytes) for None, bool, int, float, str, bytes, list/tuple and dict

The server decodes and encodes with msgspec (protocol.py defines the messages); tests check that
both sides read what the other writes.
"""
from __future__ import annotations

import struct

_F64 = struct.Struct(">d")
MAX_FRAME = 1 << 30        # the largest message either side accepts (a frame's 4-byte length)


class WireError(ValueError):
    """Bytes that are not (this subset of) msgpack."""


def pack(value) -> bytes:
    out = bytearray()
    _pack(value, out)
    return bytes(out)


def _pack(v, out: bytearray) -> None:
    if v is None:
        out.append(0xC0)
    elif v is True or v is False:
        out.append(0xC3 if v else 0xC2)
    elif isinstance(v, int):
        if 0 <= v < 0x80:
            out.append(v)
        elif -32 <= v < 0:
            out.append(v & 0xFF)
        elif 0 <= v < 1 << 64:
            out += b"\xcf" + v.to_bytes(8, "big")
        elif -(1 << 63) <= v < 0:
            out += b"\xd3" + v.to_bytes(8, "big", signed=True)
        else:
            raise WireError(f"integer out of range: {v}")
    elif isinstance(v, float):
        out += b"\xcb" + _F64.pack(v)
    elif isinstance(v, str):
        raw = v.encode("utf-8")
        _head(out, len(raw), 0xA0, 32, 0xD9, 0xDA, 0xDB)
        out += raw
    elif isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        _head(out, len(raw), None, 0, 0xC4, 0xC5, 0xC6)
        out += raw
    elif isinstance(v, (list, tuple)):
        _head(out, len(v), 0x90, 16, None, 0xDC, 0xDD)
        for item in v:
            _pack(item, out)
    elif isinstance(v, dict):
        _head(out, len(v), 0x80, 16, None, 0xDE, 0xDF)
        for k, item in v.items():
            _pack(k, out)
            _pack(item, out)
    else:
        raise WireError(f"cannot send a {type(v).__name__}")


def _head(out: bytearray, n: int, fix: int | None, fix_limit: int, b8: int | None, b16: int, b32: int) -> None:
    if fix is not None and n < fix_limit:
        out.append(fix | n)
    elif b8 is not None and n < 1 << 8:
        out += bytes((b8, n))
    elif n < 1 << 16:
        out.append(b16)
        out += n.to_bytes(2, "big")
    else:
        out.append(b32)
        out += n.to_bytes(4, "big")


def unpack(data: bytes):
    value, end = _unpack(memoryview(data), 0)
    if end != len(data):
        raise WireError("trailing bytes")
    return value


def _unpack(b: memoryview, i: int):
    try:
        t = b[i]
    except IndexError:
        raise WireError("truncated") from None
    i += 1
    if t < 0x80:
        return t, i
    if t >= 0xE0:
        return t - 0x100, i
    if 0x80 <= t <= 0x8F:
        return _map(b, i, t & 0x0F)
    if 0x90 <= t <= 0x9F:
        return _array(b, i, t & 0x0F)
    if 0xA0 <= t <= 0xBF:
        return _str(b, i, t & 0x1F)
    if t == 0xC0:
        return None, i
    if t in (0xC2, 0xC3):
        return t == 0xC3, i
    sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}
    if t in sizes:
        w = sizes[t]
        n = _uint(b, i, w)
        i += w
        if t <= 0xC6:
            return _bin(b, i, n)
        if t <= 0xDB:
            return _str(b, i, n)
        return (_array if t <= 0xDD else _map)(b, i, n)
    ints = {0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False),
            0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True)}
    if t in ints:
        w, signed = ints[t]
        _need(b, i, w)
        return int.from_bytes(b[i:i + w], "big", signed=signed), i + w
    if t == 0xCB:
        _need(b, i, 8)
        return _F64.unpack(b[i:i + 8])[0], i + 8
    if t == 0xCA:
        _need(b, i, 4)
        return struct.unpack(">f", b[i:i + 4])[0], i + 4
    raise WireError(f"unsupported msgpack type 0x{t:02x}")


def _need(b: memoryview, i: int, n: int) -> None:
    if i + n > len(b):
        raise WireError("truncated")


def _uint(b: memoryview, i: int, w: int) -> int:
    _need(b, i, w)
    return int.from_bytes(b[i:i + w], "big")


def _bin(b: memoryview, i: int, n: int):
    _need(b, i, n)
    return bytes(b[i:i + n]), i + n


def _str(b: memoryview, i: int, n: int):
    _need(b, i, n)
    try:
        return bytes(b[i:i + n]).decode("utf-8"), i + n
    except UnicodeDecodeError:
        raise WireError("invalid UTF-8") from None


def _array(b: memoryview, i: int, n: int):
    out = []
    for _ in range(n):
        v, i = _unpack(b, i)
        out.append(v)
    return out, i


def _map(b: memoryview, i: int, n: int):
    out = {}
    for _ in range(n):
        k, i = _unpack(b, i)
        v, i = _unpack(b, i)
        try:
            out[k] = v
        except TypeError:
            raise WireError("unhashable map key") from None
    return out, i
