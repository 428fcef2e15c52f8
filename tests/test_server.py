"""The warm compile server with the drop-in: the same outcome as in-process, many clients at once against
one cache and one server, crashes and timeouts answered with clear errors, a killed server or a deleted
socket falling back to in-process compiles, starting on demand, --status and --stop."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import INVALID, PUBLIC, requires_corpus

pytestmark = requires_corpus

INPUTS = [PUBLIC / f"{n}.v13.4.tileirbc" for n in
          ("saxpy_f32_t128", "vec_add_f32_t128", "softmax_rows_f32_128", "matmul_f16_f32acc_64x64x32")]
SERVER = [sys.executable, "-m", "tileiras_async.server"]
DROPIN = [sys.executable, "-m", "tileiras_async.cli.tileiras"]


def _env(sock: Path, *, cache: Path | None = None, mode: str = "use", **extra) -> dict:
    env = {**os.environ, "TILEIRAS_ASYNC_SOCKET": str(sock), "TILEIRAS_ASYNC_SERVER": mode, **extra}
    if cache is None:
        env["TILEIRAS_ASYNC_NO_CACHE"] = "1"
    else:
        env.pop("TILEIRAS_ASYNC_NO_CACHE", None)
        env["TILEIRAS_ASYNC_CACHE_DIR"] = str(cache)
    return env


def _wait_for(sock: Path, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no server on {sock}")


def _start(sock: Path, *args, faults: str = "") -> subprocess.Popen:
    env = _env(sock, TILEIRAS_ASYNC_SERVER_FAULT=faults)
    proc = subprocess.Popen([*SERVER, "--socket", str(sock), "-j", "2", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(sock, proc)
    return proc


def _finish(proc: subprocess.Popen, sock: Path) -> None:
    if proc.poll() is None:
        subprocess.run([*SERVER, "--socket", str(sock), "--stop"], capture_output=True, timeout=60)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module; jobs whose input path contains "crashme" kill their worker, "hangme" hang."""
    sock = tmp_path_factory.mktemp("srv") / "s.sock"
    proc = _start(sock, "--idle-timeout", "300", faults="crash:crashme,hang:hangme")
    yield sock
    _finish(proc, sock)


@pytest.fixture(scope="module")
def reference():
    """Each input's cubin compiled in this process, without the cache (what the drop-in compiles)."""
    from tileiras_async.stages import CompileOptions, compile_in_process
    return {(path, gpu): compile_in_process(str(path), path.read_bytes(), CompileOptions(gpu)).cubin
            for gpu in ("sm_90", "sm_100") for path in INPUTS}


def _dropin(argv, env, cwd) -> tuple[int, str, str]:
    proc = subprocess.run([*DROPIN, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def _status(sock: Path):
    from tileiras_async.serving.client import status
    return status(str(sock))


def test_socket_is_private(server):
    assert stat.S_IMODE(os.stat(server).st_mode) == 0o600


def test_server_gives_the_in_process_outcome(server, reference, tmp_path):
    before = _status(server).requests
    cases = [(["--gpu-name", "sm_90"], INPUTS[0]), (["--gpu-name", "sm_100", "--remarks=all"], INPUTS[3]),
             (["--gpu-name", "sm_90"], INVALID / "gen_truncated_at_200.tileirbc"),
             (["-O2"], INPUTS[1])]  # no --gpu-name: exit 2 with the version in the message
    for i, (flags, src) in enumerate(cases):
        outcomes = []
        for mode in ("use", "off"):
            out = tmp_path / f"{i}.{mode}.cubin"
            rc, stdout, stderr = _dropin([*flags, "-o", str(out), str(src)], _env(server, mode=mode), tmp_path)
            outcomes.append((rc, stdout, stderr, out.read_bytes() if out.exists() else None))
        assert outcomes[0] == outcomes[1], flags
    assert outcomes[0][0] == 2 and outcomes[0][3] is None
    assert _status(server).requests - before == len(cases)


def test_eight_concurrent_dropins_one_cache_one_server(server, reference, tmp_path):
    cache = tmp_path / "cache"
    jobs = [(path, gpu) for path in INPUTS for gpu in ("sm_90", "sm_100")]  # 8 different compiles
    for wave in range(3):
        batch = jobs[:4] * 2 if wave == 0 else jobs   # the first wave: the same inputs twice at once
        procs = []
        for i, (path, gpu) in enumerate(batch):
            out = tmp_path / f"w{wave}.{i}.cubin"
            procs.append((subprocess.Popen([*DROPIN, "--gpu-name", gpu, "-o", str(out), str(path)],
                                           env=_env(server, cache=cache), stderr=subprocess.PIPE, text=True),
                          out, path, gpu))
        for proc, out, path, gpu in procs:
            assert proc.wait(timeout=600) == 0, proc.stderr.read()
            assert proc.stderr.read() == ""
            assert out.read_bytes() == reference[path, gpu], (wave, path.name, gpu)
    from tileiras_async.cache.store import CacheStore
    stats = CacheStore(str(cache)).stats()
    assert stats["entries"] == 8 and stats["hits"] >= 8
    assert not list(tmp_path.glob(".*.tmp")) and not list(cache.rglob(".*.tmp"))


def test_a_crashed_worker_is_replaced_and_the_request_answered(server, reference, tmp_path):
    crashing = tmp_path / "crashme.tileirbc"
    shutil.copy(INPUTS[0], crashing)
    replaced = _status(server).workers_replaced
    rc, _, err = _dropin(["--gpu-name", "sm_90", "-o", "x.cubin", str(crashing)], _env(server), tmp_path)
    assert rc == 4 and "Traceback" not in err
    assert err == (f"error: the compile server's worker died (signal SIGSEGV) while compiling '{crashing}'; "
                   f"it has been replaced\n")
    assert not (tmp_path / "x.cubin").exists()
    assert _status(server).workers_replaced == replaced + 1
    rc, _, err = _dropin(["--gpu-name", "sm_90", "-o", "y.cubin", str(INPUTS[0])], _env(server), tmp_path)
    assert rc == 0 and (tmp_path / "y.cubin").read_bytes() == reference[INPUTS[0], "sm_90"]


def test_a_request_past_its_time_limit_gets_a_clear_error(server, tmp_path):
    hanging = tmp_path / "hangme.tileirbc"
    shutil.copy(INPUTS[0], hanging)
    t0 = time.monotonic()
    rc, _, err = _dropin(["--gpu-name", "sm_90", "-o", "x.cubin", str(hanging)],
                         _env(server, TILEIRAS_ASYNC_SERVER_TIMEOUT="2"), tmp_path)
    assert rc == 4 and time.monotonic() - t0 < 60
    assert err == (f"error: compiling '{hanging}' took longer than 2 s on the compile server; its worker was "
                   f"stopped and replaced\n")
    assert not (tmp_path / "x.cubin").exists()


def test_a_client_with_another_toolchain_is_sent_away(server):
    from tileiras_async.serving.client import ServerUnavailable, compile_remote
    with pytest.raises(ServerUnavailable, match="another compiler or toolchain"):
        compile_remote(str(server), "x", INPUTS[0].read_bytes(), {"gpu-name": "sm_90"}, "0" * 64)


def test_status_and_stop_from_the_command_line(tmp_path):
    sock = tmp_path / "s.sock"
    proc = _start(sock)
    try:
        cli = [*SERVER, "--socket", str(sock)]
        status = subprocess.run([sys.executable, "-m", "tileiras_async.cli.batch", "serve", "--socket", str(sock),
                                 "--status"], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and f"compile server on {sock}: pid {proc.pid}" in status.stdout
        stop = subprocess.run([*cli, "--stop"], capture_output=True, text=True, timeout=60)
        assert stop.returncode == 0 and f"(pid {proc.pid}) is stopping" in stop.stdout
        assert proc.wait(timeout=60) == 0
        assert not sock.exists()
        again = subprocess.run([*cli, "--status"], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and again.stdout == f"no compile server on {sock}\n"
    finally:
        _finish(proc, sock)


def test_a_server_killed_mid_request_falls_back_in_process(reference, tmp_path):
    import psutil
    sock = tmp_path / "s.sock"
    proc = _start(sock, faults="hang:hangme")
    hanging = tmp_path / "hangme.tileirbc"
    shutil.copy(INPUTS[0], hanging)
    try:
        client = subprocess.Popen([*DROPIN, "--gpu-name", "sm_90", "-o", "x.cubin", str(hanging)], cwd=tmp_path,
                                  env=_env(sock), stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while _status(sock).in_flight == 0:  # the request is on the (hanging) worker
            assert time.monotonic() < deadline
            time.sleep(0.05)
        workers = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        assert client.wait(timeout=600) == 0, client.stderr.read()
        assert client.stderr.read() == ""
        assert (tmp_path / "x.cubin").read_bytes() == reference[INPUTS[0], "sm_90"]
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == []  # the workers followed their server
    finally:
        _finish(proc, sock)


def test_a_deleted_socket_falls_back_and_stops_the_server(reference, tmp_path):
    sock = tmp_path / "s.sock"
    proc = _start(sock)
    try:
        os.unlink(sock)
        rc, _, err = _dropin(["--gpu-name", "sm_90", "-o", "x.cubin", str(INPUTS[0])], _env(sock), tmp_path)
        assert (rc, err) == (0, "") and (tmp_path / "x.cubin").read_bytes() == reference[INPUTS[0], "sm_90"]
        assert proc.wait(timeout=60) == 0  # it noticed, and stopped
    finally:
        _finish(proc, sock)


def test_started_on_demand_in_a_private_runtime_directory(reference, tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    env = {**_env(tmp_path / "unused", mode="start"), "XDG_RUNTIME_DIR": str(run)}
    env.pop("TILEIRAS_ASYNC_SOCKET")
    sock = run / "tileiras-async" / "server.sock"
    try:
        rc, _, err = _dropin(["--gpu-name", "sm_100", "-o", "x.cubin", str(INPUTS[1])], env, tmp_path)
        assert (rc, err) == (0, "")
        assert (tmp_path / "x.cubin").read_bytes() == reference[INPUTS[1], "sm_100"]
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert _status(sock).requests == 1
    finally:
        if sock.exists():
            from tileiras_async.serving.client import stop
            pid = stop(str(sock)).pid
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            assert not _alive(pid)


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------- the client's msgpack


def test_the_clients_msgpack_and_msgspec_read_each_other():
    import msgspec

    from tileiras_async.serving import protocol, wire
    request = {"kind": "compile", "path": "k.tileirbc", "data": bytes(range(256)) * 300,
               "options": {"gpu-name": "sm_90", "lineinfo": True, "preview": ["a", "b"], "x" * 40: "y" * 300},
               "fingerprint": "f" * 64, "timeout_s": 2.5}
    decoded = protocol.decode_request(wire.pack(request))
    assert decoded == protocol.CompileRequest(**{k: v for k, v in request.items() if k != "kind"})
    replies = [protocol.Compiled(b"\x00" * 70000), protocol.Failed("error: x", 4), protocol.Stale("why"),
               protocol.Status(123, "0.1.0", "/s", 1.5, 2, 600.0, 600.0, requests=2**40, failed=-1),
               protocol.Stopping(7)]
    for reply in replies:
        unpacked = wire.unpack(protocol.frame(reply)[4:])
        assert unpacked == msgspec.to_builtins(reply, builtin_types=(bytes,)) | {"kind": reply.__struct_config__.tag}
    for value in [None, True, False, 0, 127, 128, -1, -32, -33, 2**63, -(2**63), 1.25, "", "é" * 40, b"",
                  [], [1, [2, [3]]], {}, {"a": {"b": None}}, list(range(20)), {str(i): i for i in range(20)}]:
        assert wire.unpack(wire.pack(value)) == value
        assert wire.unpack(msgspec.msgpack.encode(value)) == value
        assert msgspec.msgpack.decode(wire.pack(value)) == value
    for bad in (b"", b"\x92\x01", b"\xc1", b"\xa3ab", b"\x81\x90\x01", wire.pack(1) + b"\x00"):
        with pytest.raises(wire.WireError):
            wire.unpack(bad)
