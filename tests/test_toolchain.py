"""Toolchain discovery, the subprocess harness, atomic writes and ptxas assembly."""
from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
import trio

from tileiras_async.toolchain import (
    EXTENDED_SMEM_FLAG,
    OutputWriteError,
    PtxasError,
    PtxasOptions,
    Toolchain,
    ToolchainError,
    ToolNotFound,
    ToolRunError,
    UnsupportedTarget,
    arch_for_target,
    assemble,
    assemble_async,
    atomic_output,
    find_libdevice,
    find_tool,
    ptxas_argv,
    run_tool,
    run_tool_async,
    tool_version,
    wheel_roots,
    write_atomic,
)

TINY_PTX = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry k()
{
    ret;
}
"""

BROKEN_PTX = TINY_PTX.replace("ret;", "bogus_instruction;")

LIBDEVICE_REL = Path("nvvm", "libdevice", "libdevice.10.bc")


# ---------------------------------------------------------------- fake installs


def make_fake_tool(bin_dir: Path, name: str, label: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\necho {label}\n")
    tool.chmod(0o755)
    return tool


def make_cuda_root(root: Path, label: str, *, tools=("ptxas", "nvdisasm"), libdevice=True) -> Path:
    for name in tools:
        make_fake_tool(root / "bin", name, label)
    if libdevice:
        (root / LIBDEVICE_REL).parent.mkdir(parents=True, exist_ok=True)
        (root / LIBDEVICE_REL).write_bytes(b"BC" + label.encode())
    return root


@pytest.fixture
def installs(tmp_path: Path) -> dict:
    """One fake install per search place, each labelled so the winner is identifiable."""
    site = tmp_path / "site-packages"
    make_cuda_root(site / "nvidia" / "cu13", "wheel")
    path_root = make_cuda_root(tmp_path / "path-cuda", "path")
    return {
        "env": {
            "CUDA_ROOT": str(make_cuda_root(tmp_path / "root", "root")),
            "CUDA_HOME": str(make_cuda_root(tmp_path / "home", "home")),
            "CUDA_PATH": str(make_cuda_root(tmp_path / "cpath", "cpath")),
            "PATH": str(path_root / "bin"),
        },
        "sys_path": [str(tmp_path / "not-a-dir"), str(site)],
        "tmp": tmp_path,
    }


def label_of(tool: Path) -> str:
    return run_tool([tool], timeout=10).stdout.decode().strip()


# ---------------------------------------------------------------- discovery order

ORDER = [
    ("CUDA_ROOT", "root"),
    ("CUDA_HOME", "home"),
    ("CUDA_PATH", "cpath"),
    ("wheel", "wheel"),
    ("PATH", "path"),
]


def _without_winners(installs, drop: int) -> tuple[dict, list]:
    """The fake environment and sys.path with the first `drop` places of ORDER removed."""
    env, sys_path = dict(installs["env"]), list(installs["sys_path"])
    for place, _ in ORDER[:drop]:
        if place == "wheel":
            sys_path = []
        else:
            del env[place]
    return env, sys_path


@pytest.mark.parametrize("drop", range(len(ORDER)))
def test_tool_search_order(installs, drop):
    """Removing the winners one by one reveals the next place in the documented order."""
    env, sys_path = _without_winners(installs, drop)
    found = find_tool("ptxas", env=env, sys_path=sys_path)
    assert label_of(found) == ORDER[drop][1]


@pytest.mark.parametrize("drop", range(len(ORDER)))
def test_libdevice_search_order(installs, drop):
    env, sys_path = _without_winners(installs, drop)
    found = find_libdevice(env=env, sys_path=sys_path)
    assert found.read_bytes() == b"BC" + ORDER[drop][1].encode()


def test_set_but_wrong_env_var_is_skipped(installs):
    empty = installs["tmp"] / "empty-cuda"
    empty.mkdir()
    env = dict(installs["env"], CUDA_ROOT=str(empty))
    assert label_of(find_tool("ptxas", env=env, sys_path=[])) == "home"
    assert find_libdevice(env=env, sys_path=[]).read_bytes() == b"BChome"


def test_not_executable_is_skipped_and_reported(tmp_path):
    root = make_cuda_root(tmp_path / "root", "root")
    (root / "bin" / "ptxas").chmod(0o644)
    with pytest.raises(ToolNotFound) as info:
        find_tool("ptxas", env={"CUDA_ROOT": str(root)}, sys_path=[])
    if os.access(root / "bin" / "ptxas", os.X_OK):
        pytest.skip("running as a user that can execute any file")
    assert f"$CUDA_ROOT={root}/bin/ptxas (not executable)" in str(info.value)


def test_not_found_message_is_one_line_naming_every_place(tmp_path):
    empty = tmp_path / "x"
    empty.mkdir()
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "bin").mkdir(parents=True)
    env = {"CUDA_HOME": str(empty), "CUDA_PATH": "", "PATH": str(tmp_path / "nowhere")}
    with pytest.raises(ToolNotFound) as info:
        find_tool("ptxas", env=env, sys_path=[str(site)])
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "error: cannot find ptxas (NVIDIA's nvidia-cuda-nvcc wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: $CUDA_ROOT (unset), "
        f"$CUDA_HOME={empty}/bin/ptxas (missing), $CUDA_PATH (empty), "
        f"nvidia wheels ({site}/nvidia/cu13/bin/ptxas), PATH"
    )
    assert isinstance(info.value, ToolchainError)
    assert info.value.name == "ptxas"
    assert len(info.value.searched) == 5


def test_not_found_without_wheels_or_path(tmp_path):
    with pytest.raises(ToolNotFound) as info:
        find_tool("nvdisasm", env={}, sys_path=[str(tmp_path)])
    assert str(info.value) == (
        "error: cannot find nvdisasm (NVIDIA's nvidia-cuda-nvdisasm wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: $CUDA_ROOT (unset), $CUDA_HOME (unset), "
        "$CUDA_PATH (unset), nvidia wheels (none on sys.path), PATH (unset)"
    )


def test_libdevice_not_found_message(tmp_path):
    path_bin = tmp_path / "bin"
    make_fake_tool(path_bin, "ptxas", "path")
    with pytest.raises(ToolNotFound) as info:
        find_libdevice(env={"PATH": str(path_bin)}, sys_path=[])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("error: cannot find libdevice.10.bc (NVIDIA's nvidia-nvvm wheel: pip install 'tileiras-async[cuda]', or set CUDA_HOME to a CUDA 13 toolkit); searched: $CUDA_ROOT (unset), ")
    assert f"PATH ({tmp_path / LIBDEVICE_REL})" in message


def test_libdevice_found_through_symlinked_path_ptxas(tmp_path):
    real = make_cuda_root(tmp_path / "opt" / "cuda", "real")
    usr_bin = tmp_path / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    (usr_bin / "ptxas").symlink_to(real / "bin" / "ptxas")
    found = find_libdevice(env={"PATH": str(usr_bin)}, sys_path=[])
    assert found.read_bytes() == b"BCreal"


def test_older_per_component_wheel_layout(tmp_path):
    site = tmp_path / "site"
    make_cuda_root(site / "nvidia" / "cuda_nvcc", "nvcc-wheel", tools=("ptxas",))
    make_fake_tool(site / "nvidia" / "cuda_nvdisasm" / "bin", "nvdisasm", "nvdisasm-wheel")
    assert label_of(find_tool("ptxas", env={}, sys_path=[str(site)])) == "nvcc-wheel"
    assert label_of(find_tool("nvdisasm", env={}, sys_path=[str(site)])) == "nvdisasm-wheel"
    assert find_libdevice(env={}, sys_path=[str(site)]).read_bytes() == b"BCnvcc-wheel"


def test_toolchain_resolves_lazily(tmp_path):
    root = make_cuda_root(tmp_path / "root", "root", tools=("ptxas",), libdevice=False)
    toolchain = Toolchain(env={"CUDA_ROOT": str(root)}, sys_path=[])
    assert label_of(toolchain.ptxas) == "root"
    with pytest.raises(ToolNotFound, match="cannot find nvdisasm"):
        toolchain.nvdisasm
    with pytest.raises(ToolNotFound, match="cannot find nvdisasm"):
        Toolchain.discover(env={"CUDA_ROOT": str(root)}, sys_path=[])


# ---------------------------------------------------------------- the real wheel tools


@pytest.fixture(scope="module")
def real_toolchain() -> Toolchain:
    """The wheel-installed tools, with any CUDA_* variables of the machine ignored."""
    if not wheel_roots():
        pytest.skip("no NVIDIA CUDA wheels (nvidia-cuda-nvcc etc.) installed in this environment")
    try:
        return Toolchain.discover(env={}, sys_path=sys.path)
    except ToolNotFound as exc:
        pytest.skip(f"NVIDIA wheels incomplete: {exc}")


def test_real_wheel_tools_are_found(real_toolchain):
    for path in (real_toolchain.ptxas, real_toolchain.nvdisasm, real_toolchain.libdevice):
        assert "nvidia" in path.parts
        assert path.is_file()
    assert real_toolchain.libdevice.read_bytes()[:4] == b"BC\xc0\xde"


def test_real_tool_versions(real_toolchain):
    for tool in (real_toolchain.ptxas, real_toolchain.nvdisasm):
        version = tool_version(tool)
        assert "release" in version and "\n" not in version
        assert tool_version(tool) == version


def test_tool_version_of_missing_file(tmp_path):
    with pytest.raises(ToolchainError, match="cannot read version"):
        tool_version(tmp_path / "ptxas")


# ---------------------------------------------------------------- harness


def test_run_tool_captures_output_and_status():
    result = run_tool(["sh", "-c", "cat; echo oops >&2; exit 3"], timeout=10, input_bytes=b"hi")
    assert (result.rc, result.stdout, result.stderr, result.timed_out) == (3, b"hi", b"oops\n", False)
    assert not result.ok


def test_run_tool_cwd(tmp_path):
    assert run_tool(["pwd"], timeout=10, cwd=tmp_path).stdout.decode().strip() == str(tmp_path)


def test_run_tool_missing_program(tmp_path):
    with pytest.raises(ToolRunError, match="cannot run"):
        run_tool([tmp_path / "nope"], timeout=10)


def pid_is_gone(pid: int) -> bool:
    """True once the process no longer runs: absent, or a zombie left for PID 1 to reap."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_run_tool_timeout_kills_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = f"echo $$ > {pids}; sleep 30 & echo $! >> {pids}; echo started; wait"
    result = run_tool(["sh", "-c", script], timeout=0.5)
    assert result.timed_out and not result.ok
    assert result.elapsed_s < 10
    assert result.stdout == b"started\n"
    child, grandchild = (int(line) for line in pids.read_text().split())
    # The direct child must be reaped by us, not left as a zombie.
    assert not Path(f"/proc/{child}").exists()
    deadline = time.monotonic() + 5
    while not pid_is_gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_is_gone(grandchild)


@pytest.mark.trio
async def test_run_tool_async_captures_output_and_status():
    result = await run_tool_async(["sh", "-c", "cat; echo oops >&2; exit 3"], timeout=10, input_bytes=b"hi")
    assert (result.rc, result.stdout, result.stderr, result.timed_out) == (3, b"hi", b"oops\n", False)


@pytest.mark.trio
async def test_run_tool_async_timeout_kills_process_group(tmp_path):
    pids = tmp_path / "pids"
    script = f"echo $$ > {pids}; sleep 30 & echo $! >> {pids}; echo started; wait"
    start = trio.current_time()
    result = await run_tool_async(["sh", "-c", script], timeout=0.5)
    assert trio.current_time() - start < 10
    assert result.timed_out and result.elapsed_s < 10
    assert result.stdout == b"started\n"
    child, grandchild = (int(line) for line in pids.read_text().split())
    assert not Path(f"/proc/{child}").exists()
    with trio.move_on_after(5):
        while not pid_is_gone(grandchild):
            await trio.sleep(0.05)
    assert pid_is_gone(grandchild)


@pytest.mark.trio
async def test_run_tool_async_missing_program(tmp_path):
    with pytest.raises(ToolRunError, match="cannot run"):
        await run_tool_async([tmp_path / "nope"], timeout=10)


# ---------------------------------------------------------------- atomic writes


def test_write_atomic_writes_and_replaces(tmp_path):
    out = tmp_path / "out.cubin"
    out.write_bytes(b"old")
    write_atomic(out, b"new contents")
    assert out.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["out.cubin"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_write_atomic_leaves_nothing_when_the_write_fails(tmp_path, monkeypatch):
    def refuse(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputWriteError, match="No space left on device"):
        write_atomic(tmp_path / "out.cubin", b"data")
    assert os.listdir(tmp_path) == []


def test_atomic_output_leaves_old_file_when_the_writer_raises(tmp_path):
    out = tmp_path / "out.cubin"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="writer failed"):
        with atomic_output(out) as handle:
            handle.write(b"partial")
            raise RuntimeError("writer failed")
    assert out.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.cubin"]


def test_write_atomic_into_missing_directory(tmp_path):
    with pytest.raises(OutputWriteError, match="cannot write"):
        write_atomic(tmp_path / "no" / "such" / "out.cubin", b"data")


# ---------------------------------------------------------------- ptxas


def test_ptxas_argv_matches_real_tool():
    argv = ptxas_argv("/cuda/bin/ptxas", "/t/k.ptx", "/t/k.bin", PtxasOptions("sm_90a"))
    assert argv == ["/cuda/bin/ptxas", "-arch", "sm_90a", "/t/k.ptx", "-o", "/t/k.bin", "--opt-level", "3",
                    EXTENDED_SMEM_FLAG]
    argv = ptxas_argv("ptxas", "k.ptx", "k.bin", PtxasOptions("sm_80", 1, ("-v",), extended_smem=False))
    assert argv[-3:] == ["--opt-level", "1", "-v"]
    # with a host object: the real tool's invocation exactly (module docstring)
    argv = ptxas_argv("ptxas", "x.ptx", "x.bin", PtxasOptions("sm_90a", host_object=b"\x7fELF"), "x.o")
    assert argv == ["ptxas", "-arch", "sm_90a", "x.ptx", "-o", "x.bin", "--opt-level", "3",
                    "--enable-extended-smem=true", "--nv-host=x.o", "-uumn"]


@pytest.mark.parametrize(
    ("target", "arch"),
    [
        ("sm_80", "sm_80"),
        ("sm_86", "sm_86"),
        ("sm_89", "sm_89"),
        ("sm_90", "sm_90a"),
        ("sm_100", "sm_100a"),
        ("sm_103", "sm_103a"),
        ("sm_110", "sm_110a"),
        ("sm_120", "sm_120a"),
        ("sm_121", "sm_121a"),
        ("sm_90a", "sm_90a"),
    ],
)
def test_arch_for_target(target, arch):
    assert arch_for_target(target) == arch


def test_arch_for_unknown_target():
    with pytest.raises(UnsupportedTarget, match="unsupported target 'sm_75'"):
        arch_for_target("sm_75")


def test_assemble_tiny_kernel(real_toolchain):
    cubin = assemble(TINY_PTX, PtxasOptions(arch_for_target("sm_80")), toolchain=real_toolchain)
    assert cubin[:4] == b"\x7fELF"


def test_assemble_broken_ptx(real_toolchain):
    with pytest.raises(PtxasError) as info:
        assemble(BROKEN_PTX, PtxasOptions("sm_80"), toolchain=real_toolchain)
    error = info.value
    assert error.rc == 5
    assert error.ptxas_rc not in (0, None)
    assert "bogus_instruction" in error.stderr
    assert "ptxas fatal" in error.stderr
    assert str(error).startswith("error: ptxas failed") and "\n" not in str(error)


@pytest.mark.trio
async def test_assemble_async_tiny_kernel(real_toolchain):
    cubin = await assemble_async(TINY_PTX, PtxasOptions("sm_90a"), toolchain=real_toolchain)
    assert cubin[:4] == b"\x7fELF"


def test_assemble_timeout(tmp_path):
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    slow = root / "bin" / "ptxas"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    toolchain = Toolchain(env={"CUDA_ROOT": str(root)}, sys_path=[])
    with pytest.raises(PtxasError, match="timed out") as info:
        assemble(TINY_PTX, PtxasOptions("sm_80"), timeout=0.5, toolchain=toolchain)
    assert info.value.rc == 5


def test_assemble_without_output(tmp_path):
    root = make_cuda_root(tmp_path / "cuda", "silent", tools=("ptxas",), libdevice=False)
    toolchain = Toolchain(env={"CUDA_ROOT": str(root)}, sys_path=[])
    with pytest.raises(PtxasError, match="wrote no cubin"):
        assemble(TINY_PTX, PtxasOptions("sm_80"), toolchain=toolchain)
