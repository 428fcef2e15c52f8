"""What the drop-in and the compile server say to each other over the Unix socket.

Every message is one frame: a 4-byte big-endian length, then a msgspec msgpack body (a tagged union,
so a reply says what it is).  One request and one reply per connection.

    CompileRequest -> Compiled (the outcome, encoded as a cache entry: checksummed sections)
                    | Failed   (a clear error: the worker crashed or timed out; it was replaced)
                    | Stale    (the server runs another compiler or toolchain than the client's
                                fingerprint: compile in-process)
    StatusRequest  -> Status
    StopRequest    -> Stopping
"""
from __future__ import annotations

from typing import Union

import msgspec

from .wire import MAX_FRAME  # noqa: F401  (re-exported: the limit both sides apply)


class _Message(msgspec.Struct, frozen=True, tag_field="kind"):
    pass


class CompileRequest(_Message, tag="compile"):
    path: str                                  # as given on the command line (only named in messages)
    data: bytes                                # the input bytecode
    options: dict[str, Union[bool, str, list[str]]]   # tileiras.compile_options(): the cache key's request
    fingerprint: str                           # the client's compiler + toolchain (cache.fingerprint)
    timeout_s: float = 600.0


class StatusRequest(_Message, tag="status"):
    pass


class StopRequest(_Message, tag="stop"):
    pass


class Compiled(_Message, tag="compiled"):
    entry: bytes                               # cache.entry.encode(DropInResult sections + "cacheable")


class Failed(_Message, tag="failed"):
    message: str                               # the `error: ...` line the drop-in prints
    exit_code: int = 4


class Stale(_Message, tag="stale"):
    reason: str


class Status(_Message, tag="status"):
    pid: int
    version: str
    socket: str
    uptime_s: float
    workers: int
    idle_timeout_s: float
    request_timeout_s: float
    requests: int = 0
    failed: int = 0
    stale: int = 0
    in_flight: int = 0
    workers_replaced: int = 0


class Stopping(_Message, tag="stopping"):
    pid: int


Request = Union[CompileRequest, StatusRequest, StopRequest]
Reply = Union[Compiled, Failed, Stale, Status, Stopping]

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Request)
_reply_decoder = msgspec.msgpack.Decoder(Reply)


def frame(message: _Message) -> bytes:
    body = _encoder.encode(message)
    return len(body).to_bytes(4, "big") + body


def decode_request(body: bytes):
    return _request_decoder.decode(body)


def decode_reply(body: bytes):
    return _reply_decoder.decode(body)
