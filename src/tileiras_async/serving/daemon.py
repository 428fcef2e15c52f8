"""The compile server: a trio accept loop in front of a trio-parallel pool of warm worker processes.

    client --Unix socket--> handler --run_sync--> worker (`job`: cli.serve_worker.compile_job) --> reply

The server knows the protocol, not what a compile is: `serve` is given the worker's `job` and `warm`
functions (the drop-in's compile, from cli/serve_worker.py), so this package sits below the command lines.

* One socket per user (0600, in a 0700 directory: see paths.py), connections from other users refused
  (SO_PEERCRED); a lock file held for the server's life makes a second server on the same socket exit.
* Many clients at once: one task per connection; compiles share -j workers (the others queue).
* Each compile has a time limit: past it, the worker is killed (trio-parallel kill_on_cancel) and
  replaced, and the request is answered with a clear error; a worker that dies mid-job is replaced
  the same way.  Never a hang: the client also gives up after the limit plus a grace period.
* The server answers only clients with the same compiler fingerprint (cache.fingerprint: our sources,
  llvmlite, ptxas, libdevice, ...); when its own sources change on disk it stops, so an edited
  checkout never gets outputs of the code that was loaded before the edit.
* It stops after --idle-timeout seconds without requests, on `serve --stop`, on SIGTERM/SIGINT, and
  when its socket file is deleted or taken over; in-flight requests are finished first.
"""
from __future__ import annotations

import math
import os
import signal
import socket as _socket
import sys
import time
from collections.abc import Callable

import trio
import trio_parallel

from .. import __version__
from ..cache import config as cache_config
from ..cache.fingerprint import compute as compute_fingerprint
from . import paths
from .protocol import (MAX_FRAME, CompileRequest, Compiled, Failed, Stale, Status, StatusRequest, Stopping,
                       StopRequest, decode_request, frame)

DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_REQUEST_TIMEOUT_S = 600.0
READ_TIMEOUT_S = 30.0          # a client that connects must send its request within this
WATCH_PERIOD_S = 0.5
GRACE_PERIOD_S = 5.0


class AlreadyRunning(Exception):
    pass


def _ready() -> int:
    return os.getpid()


class Server:
    def __init__(self, sock_path: str, *, jobs: int, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, memo_dir: str | None = None,
                 job: Callable[[bytes, str | None, str | None], bytes], warm: Callable[[], None]):
        self.sock_path = sock_path
        self.job = job      # in a worker process: (CompileRequest msgpack, ptxas, libdevice) -> cache entry
        self.warm = warm    # trio-parallel's `init` of each worker
        self.jobs = max(1, jobs)
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.memo_dir = memo_dir
        self.started = time.monotonic()
        self.last_activity = self.started
        self.counts = {"requests": 0, "failed": 0, "stale": 0, "in_flight": 0, "workers_replaced": 0}
        self.fingerprint = compute_fingerprint(memo_dir)
        self._lock_fd = -1
        self._listener: _socket.socket | None = None
        self._inode = None
        self._accepting: trio.CancelScope | None = None
        self._stop_reason = ""
        self._connections = 0

    # ------------------------------------------------------------------ lifecycle (blocking)

    def run(self) -> int:
        self._acquire_lock()
        try:
            self._bind()
            log(f"listening on {self.sock_path} (pid {os.getpid()}, {self.jobs} workers, idle timeout "
                f"{self.idle_timeout_s:g} s, request timeout {self.request_timeout_s:g} s)")
            trio.run(self._main)
            log(f"stopped ({self._stop_reason or 'done'}); {self.counts['requests']} requests served")
            return 0
        finally:
            self._cleanup()

    def _acquire_lock(self) -> None:
        import fcntl
        directory = os.path.dirname(self.sock_path) or "."
        if directory == paths.runtime_dir():
            paths.ensure_private_dir(directory)
        fd = os.open(paths.lock_path(self.sock_path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise AlreadyRunning(f"a compile server is already running on {self.sock_path}") from None
        os.ftruncate(fd, 0)
        os.write(fd, b"%d\n" % os.getpid())
        self._lock_fd = fd

    def _bind(self) -> None:
        try:
            os.unlink(self.sock_path)  # we hold the lock: whatever is there is a dead server's
        except FileNotFoundError:
            pass
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is created 0600, never briefly wider
        try:
            sock.bind(self.sock_path)
        finally:
            os.umask(old)
        os.chmod(self.sock_path, 0o600)
        sock.listen(128)
        self._listener = sock
        self._inode = os.stat(self.sock_path).st_ino

    def _cleanup(self) -> None:
        if self._listener is not None:
            self._listener.close()
            try:
                if os.stat(self.sock_path).st_ino == self._inode:
                    os.unlink(self.sock_path)
            except OSError:
                pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)

    def stop(self, reason: str) -> None:
        if not self._stop_reason:
            self._stop_reason = reason
        if self._accepting is not None:
            self._accepting.cancel()

    # ------------------------------------------------------------------ trio side

    async def _main(self) -> None:
        self.limiter = trio.CapacityLimiter(self.jobs)
        async with trio_parallel.open_worker_context(init=self.warm, idle_timeout=math.inf, grace_period=GRACE_PERIOD_S,
                                                     worker_type=trio_parallel.WorkerType.SPAWN) as ctx:
            self.ctx = ctx
            async with trio.open_nursery() as helpers:
                helpers.start_soon(self._watch)
                helpers.start_soon(self._signals)
                for _ in range(self.jobs):
                    helpers.start_soon(self._prewarm)
                listener = trio.socket.from_stdlib_socket(self._listener)
                async with trio.open_nursery() as handlers:
                    with trio.CancelScope() as self._accepting:
                        if self._stop_reason:
                            self._accepting.cancel()
                        while True:
                            conn, _ = await listener.accept()
                            handlers.start_soon(self._handle, conn)
                    # stopped accepting: the handlers nursery waits for the requests in flight
                helpers.cancel_scope.cancel()

    async def _prewarm(self) -> None:
        """Start a worker now (imports, libdevice, target machines) rather than on the first request."""
        try:
            await self.ctx.run_sync(_ready, kill_on_cancel=True, limiter=self.limiter)
        except trio_parallel.BrokenWorkerError as e:
            log(f"a worker failed to start: {e}")

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                self.stop(signal.Signals(signum).name)

    async def _watch(self) -> None:
        while True:
            await trio.sleep(WATCH_PERIOD_S)
            try:
                inode = os.stat(self.sock_path).st_ino
            except OSError:
                inode = None
            if inode != self._inode:
                self.stop("the socket file was removed or replaced")
            elif (self._connections == 0 and self.idle_timeout_s > 0
                  and time.monotonic() - self.last_activity > self.idle_timeout_s):
                self.stop(f"idle for {self.idle_timeout_s:g} s")

    async def _handle(self, conn) -> None:
        stream = trio.SocketStream(conn)
        self._connections += 1
        self.last_activity = time.monotonic()
        try:
            if not paths.same_user(conn):
                return
            body = None
            with trio.move_on_after(READ_TIMEOUT_S):
                body = await _read_frame(stream)
            if body is None:
                return
            try:
                req = decode_request(body)
            except Exception:  # noqa: BLE001 - not our protocol: drop the connection
                return
            reply = await self._dispatch(req, body)
            await stream.send_all(frame(reply))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away; nothing to answer
        finally:
            self._connections -= 1
            self.last_activity = time.monotonic()
            await stream.aclose()

    async def _dispatch(self, req, body: bytes):
        if isinstance(req, StatusRequest):
            return self.status()
        if isinstance(req, StopRequest):
            self.stop("serve --stop")
            return Stopping(os.getpid())
        assert isinstance(req, CompileRequest)
        self.counts["requests"] += 1
        current = compute_fingerprint(self.memo_dir)
        if current.digest != self.fingerprint.digest:
            self.counts["stale"] += 1
            self.stop("its compiler or toolchain changed on disk")
            return Stale("the server's compiler or toolchain changed since it started; it is stopping")
        if req.fingerprint != current.digest:
            self.counts["stale"] += 1
            return Stale("the server runs another compiler or toolchain than this client")
        timeout = min(req.timeout_s, self.request_timeout_s)
        self.counts["in_flight"] += 1
        try:
            with trio.move_on_after(timeout) as scope:
                raw = await self.ctx.run_sync(self.job, body, current.ptxas, current.libdevice,
                                              kill_on_cancel=True, limiter=self.limiter)
        except trio_parallel.BrokenWorkerError as e:
            return self._worker_lost(f"the compile server's worker died ({_how(e)}) while compiling '{req.path}'; "
                                     f"it has been replaced")
        finally:
            self.counts["in_flight"] -= 1
        if scope.cancelled_caught:
            return self._worker_lost(f"compiling '{req.path}' took longer than {timeout:g} s on the compile server; "
                                     f"its worker was stopped and replaced")
        return Compiled(raw)

    def _worker_lost(self, what: str) -> Failed:
        """A request whose worker died or was killed: counted, logged, answered with an error line."""
        self.counts["failed"] += 1
        self.counts["workers_replaced"] += 1
        log(what)
        return Failed(f"error: {what}")

    def status(self) -> Status:
        return Status(os.getpid(), __version__, self.sock_path, time.monotonic() - self.started, self.jobs,
                      self.idle_timeout_s, self.request_timeout_s, **self.counts)


async def _read_frame(stream) -> bytes | None:
    head = await _receive_exact(stream, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        return None
    return await _receive_exact(stream, size)


async def _receive_exact(stream, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = await stream.receive_some(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _how(e: BaseException) -> str:
    proc = e.args[-1] if e.args else None
    code = getattr(proc, "exitcode", None)
    if isinstance(code, int) and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}" if code is not None else "it exited"


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} tileiras-async serve[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def serve(sock_path: str, *, jobs: int, idle_timeout_s: float, request_timeout_s: float,
          job: Callable[[bytes, str | None, str | None], bytes], warm: Callable[[], None]) -> int:
    from ..cache.store import CacheStore
    memo_dir = CacheStore(cache_config.default_dir()).memo_dir  # fingerprint digests, even with the cache off
    server = Server(sock_path, jobs=jobs, idle_timeout_s=idle_timeout_s, request_timeout_s=request_timeout_s,
                    memo_dir=memo_dir, job=job, warm=warm)
    try:
        return server.run()
    except AlreadyRunning as e:
        print(f"error: {e}", file=sys.stderr)
        return 1   # cli.EXIT_NO_SERVER (cli.py imports this module)
