"""One cache entry on disk: named byte sections behind a magic and a checksum.

    magic (10 bytes) | BLAKE2b-256 of the rest (32 bytes) | sections...
    section = name length (1 byte) | name (ASCII) | data length (8 bytes, little endian) | data

A file that was cut short, overwritten or bit-flipped fails the checksum and is treated as absent
(the caller recompiles and replaces it).  Only byte operations: no import beyond the hash.
"""
from __future__ import annotations

from .key import blake2b

MAGIC = b"TIACACHE\x01\n"
_SUM = 32


class CorruptEntry(Exception):
    """The bytes are not an intact entry."""


def encode(sections: dict[str, bytes]) -> bytes:
    parts: list[bytes] = []
    for name in sorted(sections):
        raw = name.encode("ascii")
        data = sections[name]
        parts += [bytes((len(raw),)), raw, len(data).to_bytes(8, "little"), data]
    body = b"".join(parts)
    return MAGIC + blake2b(body, digest_size=_SUM).digest() + body


def decode(blob: bytes) -> dict[str, bytes]:
    head = len(MAGIC) + _SUM
    if len(blob) < head or not blob.startswith(MAGIC):
        raise CorruptEntry("not a cache entry")
    body = memoryview(blob)[head:]
    if blake2b(body, digest_size=_SUM).digest() != blob[len(MAGIC):head]:
        raise CorruptEntry("checksum mismatch")
    sections: dict[str, bytes] = {}
    i, end = 0, len(body)
    while i < end:
        n = body[i]
        name = bytes(body[i + 1:i + 1 + n]).decode("ascii", "replace")
        i += 1 + n
        size = int.from_bytes(body[i:i + 8], "little")
        i += 8
        if i + size > end:
            raise CorruptEntry("truncated section")
        sections[name] = bytes(body[i:i + size])
        i += size
    return sections
