"""Where the compile server listens, and whether the drop-in talks to one.

    $TILEIRAS_ASYNC_SOCKET   the socket (default: $XDG_RUNTIME_DIR/tileiras-async/server.sock, or
                             $TMPDIR/tileiras-async-<uid>/server.sock, a directory only we can enter)
    $TILEIRAS_ASYNC_SERVER   unset / "use": use a server when one is up; "start": also start one when
                             none is (as sccache does); "off": always compile in-process
    $TILEIRAS_ASYNC_SERVER_TIMEOUT   the time limit of one compile on the server, in seconds (default
                             600; the server's own --request-timeout may be shorter)

The lock and the log sit beside the socket (<socket>.lock, <socket>.log).  Lean: `os` only.
"""
from __future__ import annotations

import os

ENV_SOCKET = "TILEIRAS_ASYNC_SOCKET"
ENV_SERVER = "TILEIRAS_ASYNC_SERVER"
ENV_TIMEOUT = "TILEIRAS_ASYNC_SERVER_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
SOCKET_NAME = "server.sock"


class UnsafeDirectory(Exception):
    """The socket's directory exists but is not private to this user."""


def server_mode(env=None) -> str:
    """"off", "use" or "start" (see the module docstring)."""
    env = os.environ if env is None else env
    value = env.get(ENV_SERVER, "").strip().lower()
    if value in ("0", "off", "no", "false", "never"):
        return "off"
    if value in ("start", "auto", "spawn"):
        return "start"
    return "use"


def request_timeout(env=None) -> float:
    env = os.environ if env is None else env
    try:
        value = float(env.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if 0 < value < float("inf") else DEFAULT_TIMEOUT_S


def runtime_dir(env=None) -> str:
    env = os.environ if env is None else env
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        return os.path.join(xdg, "tileiras-async")
    return os.path.join(env.get("TMPDIR") or "/tmp", f"tileiras-async-{os.getuid()}")


def socket_path(env=None) -> str:
    """Absolute: a server started elsewhere (another directory) must find the same file."""
    env = os.environ if env is None else env
    return os.path.abspath(env.get(ENV_SOCKET) or os.path.join(runtime_dir(env), SOCKET_NAME))


def lock_path(sock: str) -> str:
    return sock + ".lock"


def log_path(sock: str) -> str:
    return sock + ".log"


def ensure_private_dir(path: str) -> None:
    """Create `path` with mode 0700, or check that an existing one is ours and closed to others (a
    socket in a directory others can write to could be replaced by theirs)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise UnsafeDirectory(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise UnsafeDirectory(f"{path} belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def same_user(conn) -> bool:
    """Whether the process at the other end of a connected Unix socket runs as this user (SO_PEERCRED;
    true where the platform cannot tell).  Both sides check: the server serves only its user, and
    the drop-in sends its input to, and takes cubins from, only a server of its own."""
    import _socket as socket   # the constants only (see client.py: `socket` costs a client ~10 ms)
    import struct
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid == os.getuid()
