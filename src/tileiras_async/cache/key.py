"""Cache keys: a BLAKE2b-256 digest of a canonical encoding of everything that decides the output.

The encoding is type-tagged and length-prefixed (no two different requests encode alike, and a
dict's order does not matter), and needs no import beyond the hash: it runs on the drop-in's
cache-hit path, where json and msgspec would cost more than the whole lookup.

A key is made of
    kind         which front door asks (its outputs and diagnostics are worded its own way)
    request      a dict of every option that can change the output; the callers build it from
                 their whole option record (the drop-in's parsed options, the batch's and API's
                 CompileOptions struct), so an option added later is in the key by construction
    data         the input bytecode
    fingerprint  the compiler and toolchain (fingerprint.py)
"""
from __future__ import annotations

try:  # the class hashlib.blake2b re-exports; importing hashlib itself would load OpenSSL first
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other Python implementations
    from hashlib import blake2b

KEY_FORMAT = "tileiras-async-cache-key/1"


def canonical(value) -> bytes:
    """A byte string that identifies `value` (None, bool, int, float, str, bytes, list/tuple, dict)."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value, out: list[bytes]) -> None:
    if value is None:
        out.append(b"N")
    elif value is True or value is False:
        out.append(b"T" if value else b"F")
    elif isinstance(value, int):
        out.append(b"i%d;" % value)
    elif isinstance(value, float):
        out.append(b"f" + value.hex().encode() + b";")
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        out.append(b"s%d:" % len(raw) + raw)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out.append(b"b%d:" % len(raw) + raw)
    elif isinstance(value, (list, tuple)):
        out.append(b"l%d[" % len(value))
        for item in value:
            _encode(item, out)
    elif isinstance(value, dict):
        items = sorted((canonical(k), v) for k, v in value.items())
        out.append(b"d%d{" % len(items))
        for k, v in items:
            out.append(k)
            _encode(v, out)
    else:
        raise TypeError(f"cannot put a {type(value).__name__} into a cache key")


def digest(data: bytes) -> str:
    return blake2b(data, digest_size=32).hexdigest()


def make_key(kind: str, request: dict, data: bytes, fingerprint: str) -> str:
    """The entry name (64 hex digits) for compiling `data` with `request` by `kind`."""
    h = blake2b(digest_size=32)
    h.update(canonical([KEY_FORMAT, kind, fingerprint, request, blake2b(data, digest_size=32).digest()]))
    return h.hexdigest()
