"""The drop-in's side of the compile server: connect (starting a server when asked), send one request,
read one reply.  Blocking sockets; imported only on a cache miss (or by `serve --status/--stop`).
The messages are protocol.py's, written and read with wire.py (no msgspec in the drop-in).

A server that is not there, refuses the connection, dies mid-request or runs another compiler
raises ServerUnavailable, and the drop-in compiles in-process instead: the right cubin either way.
A worker that crashed or timed out on the request is ServerFailed: a clear error, not a retry.
"""
from __future__ import annotations

import os
import sys
import time

# The C module beneath `socket`: the client needs only its socket type, and `socket` itself imports enum and
# selectors (with collections, functools, ...), about 10 ms of a call that the server answers in 60
import _socket

from ..cache import entry as cache_entry
from . import paths, wire

START_WAIT_S = 20.0        # how long a client waits for a server it started (or saw starting) to listen
REPLY_GRACE_S = 30.0       # on top of the request timeout: the server answers timeouts itself
POLL_S = 0.02


class ServerUnavailable(Exception):
    """No usable server: compile in-process."""


class ServerFailed(Exception):
    """The server answered the request with an error (its worker crashed or timed out)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def compile_remote(sock_path: str, path: str, data: bytes, options: dict, fingerprint: str, *,
                   start: bool = False, timeout_s: float = 600.0) -> dict[str, bytes]:
    """The outcome's sections (see tileiras.DropInResult) with "cacheable" added."""
    message = {"kind": "compile", "path": path, "data": data, "options": options, "fingerprint": fingerprint,
               "timeout_s": float(timeout_s)}
    reply = request(sock_path, message, timeout_s + REPLY_GRACE_S, start=start)
    if reply.kind == "compiled" and isinstance(reply.entry, bytes):
        try:
            return cache_entry.decode(reply.entry)
        except cache_entry.CorruptEntry as e:
            raise ServerUnavailable(f"garbled reply: {e}") from None
    if reply.kind == "failed":
        raise ServerFailed(str(reply.message), int(reply.exit_code))
    raise ServerUnavailable(str(reply.get("reason", f"unexpected reply {reply.kind!r}")))


def status(sock_path: str, timeout_s: float = 10.0) -> "Reply":
    """The server's protocol.Status, as a Reply."""
    return _expect(request(sock_path, {"kind": "status"}, timeout_s), "status")


def stop(sock_path: str, timeout_s: float = 10.0) -> "Reply":
    return _expect(request(sock_path, {"kind": "stop"}, timeout_s), "stopping")


class Reply(dict):
    """A reply's fields (protocol.py), readable as attributes: reply.kind, reply.pid, ..."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _expect(reply: Reply, kind: str) -> Reply:
    if reply.kind != kind:
        raise ServerUnavailable(f"unexpected reply {reply.kind!r}")
    return reply


def request(sock_path: str, message: dict, timeout_s: float, *, start: bool = False) -> Reply:
    body = wire.pack(message)
    conn = connect(sock_path, start=start)
    try:
        conn.settimeout(timeout_s)
        conn.sendall(len(body).to_bytes(4, "big") + body)
        size = int.from_bytes(_recv_exact(conn, 4), "big")
        if size > wire.MAX_FRAME:
            raise ServerUnavailable("reply too large")
        body = _recv_exact(conn, size)
    except OSError as e:   # a timeout is one too
        raise ServerUnavailable(f"connection lost: {e}") from None
    finally:
        conn.close()
    try:
        reply = wire.unpack(body)
    except wire.WireError as e:
        raise ServerUnavailable(f"garbled reply: {e}") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("kind"), str):
        raise ServerUnavailable("garbled reply: not a message")
    return Reply(reply)


def connect(sock_path: str, *, start: bool = False, wait_s: float = START_WAIT_S) -> _socket.socket:
    try:
        return _connect(sock_path)
    except OSError as e:
        if not start:
            raise ServerUnavailable(f"no server on {sock_path}: {e.strerror or e}") from None
    if not server_running(sock_path):
        spawn(sock_path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _connect(sock_path)
        except OSError as e:
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the server on {sock_path} did not start: {e.strerror or e}") from None
        time.sleep(POLL_S)


def _connect(sock_path: str) -> _socket.socket:
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
        if not paths.same_user(conn):
            raise PermissionError(f"the server on {sock_path} runs as another user")
    except BaseException:
        conn.close()
        raise
    return conn


def _recv_exact(conn: _socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def server_running(sock_path: str) -> bool:
    """Whether a server holds the socket's lock (it may still be starting)."""
    import fcntl
    try:
        fd = os.open(paths.lock_path(sock_path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock, if we got it
    return False


def spawn(sock_path: str, args: tuple[str, ...] = ()):
    """Start a server in the background, detached from this process (its own session, output to the
    log beside the socket); returns the Popen.  A second server started meanwhile exits on its own."""
    import subprocess
    if os.path.dirname(sock_path) == paths.runtime_dir():
        paths.ensure_private_dir(os.path.dirname(sock_path))
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = os.open(paths.log_path(sock_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen([sys.executable, "-m", "tileiras_async.server", "--socket", sock_path, *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", env=env,
                                start_new_session=True)
    finally:
        os.close(log)
