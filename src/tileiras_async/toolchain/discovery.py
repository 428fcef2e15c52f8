"""Finding ptxas, nvdisasm and libdevice.

The search order follows the real tileiras: an explicit CUDA install named by $CUDA_ROOT,
$CUDA_HOME or $CUDA_PATH comes first, then the tools that ship next to us (for the real tool,
its own `bin/..`; for us, NVIDIA's pip wheels in this Python environment), then $PATH.

One deliberate difference: the real tool stops at the first *set* variable, while we skip a
variable whose directory lacks the tool and keep looking, noting it in the error message, so a
stale $CUDA_HOME does not hide a perfectly good wheel install.
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path

from .errors import ToolchainError, ToolNotFound
from .harness import run_tool

ENV_ROOT_VARS = ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")

# Directories under site-packages/nvidia/ laid out like a CUDA root (bin/, nvvm/libdevice/).
# cu13 is the CUDA 13 wheel layout; the others are CUDA 12's one-wheel-per-component layout.
WHEEL_ROOT_NAMES = ("cu13", "cuda_nvcc", "cuda_nvdisasm", "cuda_nvvm")

LIBDEVICE_NAME = "libdevice.10.bc"
LIBDEVICE_REL = Path("nvvm", "libdevice", LIBDEVICE_NAME)

_VERSION_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class _Probe:
    """The outcome of looking in one place: what was found there, and how to report the place."""

    found: Path | None
    note: str


def find_tool(
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    sys_path: Sequence[str] | None = None,
) -> Path:
    """Path of the executable `name` (e.g. "ptxas"), or raise ToolNotFound naming every place tried."""
    env = os.environ if env is None else env
    sys_path = sys.path if sys_path is None else sys_path
    rel = Path("bin", _exe_name(name))
    probes = (
        *(partial(_probe_env_root, var, env, rel, _executable_problem) for var in ENV_ROOT_VARS),
        partial(_probe_wheels, sys_path, rel, _executable_problem),
        partial(_probe_path_for_tool, _exe_name(name), env),
    )
    return _first_found(name, probes)


def find_libdevice(
    *,
    env: Mapping[str, str] | None = None,
    sys_path: Sequence[str] | None = None,
) -> Path:
    """Path of libdevice.10.bc, or raise ToolNotFound naming every place tried."""
    env = os.environ if env is None else env
    sys_path = sys.path if sys_path is None else sys_path
    probes = (
        *(partial(_probe_env_root, var, env, LIBDEVICE_REL, _file_problem) for var in ENV_ROOT_VARS),
        partial(_probe_wheels, sys_path, LIBDEVICE_REL, _file_problem),
        partial(_probe_path_for_libdevice, env),
    )
    return _first_found(LIBDEVICE_NAME, probes)


@dataclass(frozen=True, eq=False)
class Toolchain:
    """Where to look for the tools; each path is resolved on first use and then remembered.

    Lazy so that a compile that only needs ptxas does not fail for want of nvdisasm.
    `env` / `sys_path` default to the live process values and exist so tests can point the
    search at fake installs.
    """

    env: Mapping[str, str] | None = None
    sys_path: Sequence[str] | None = None

    @classmethod
    def discover(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        sys_path: Sequence[str] | None = None,
    ) -> "Toolchain":
        """Resolve all three up front, for callers that want to fail fast."""
        toolchain = cls(env=env, sys_path=sys_path)
        for name in ("ptxas", "nvdisasm", "libdevice"):
            getattr(toolchain, name)
        return toolchain

    @cached_property
    def ptxas(self) -> Path:
        return find_tool("ptxas", env=self.env, sys_path=self.sys_path)

    @cached_property
    def nvdisasm(self) -> Path:
        return find_tool("nvdisasm", env=self.env, sys_path=self.sys_path)

    @cached_property
    def libdevice(self) -> Path:
        return find_libdevice(env=self.env, sys_path=self.sys_path)


@functools.lru_cache(maxsize=1)
def default_toolchain() -> Toolchain:
    """The process-wide toolchain, so repeated compiles do not repeat the filesystem search."""
    return Toolchain()


def tool_version(path: Path | str) -> str:
    """The "Cuda compilation tools, release X.Y, VX.Y.Z" line of `path --version`."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise ToolchainError(f"cannot read version of {path}: {exc.strerror}") from None
    # Keyed on mtime and size too, so replacing a tool in place is not served a stale answer.
    return _tool_version_cached(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _tool_version_cached(path: str, _mtime_ns: int, _size: int) -> str:
    result = run_tool([path, "--version"], timeout=_VERSION_TIMEOUT_S)
    text = (result.stdout + result.stderr).decode("utf-8", "replace")
    for line in text.splitlines():
        if "release" in line:
            return line.strip()
    raise ToolchainError(f"{path} --version printed no release line (exit {result.rc})")


def _first_found(what: str, probes: Sequence[Callable[[], _Probe]]) -> Path:
    # Probes run lazily so a hit in an early place skips the filesystem work of later ones.
    notes: list[str] = []
    for probe in probes:
        outcome = probe()
        if outcome.found is not None:
            return outcome.found
        notes.append(outcome.note)
    raise ToolNotFound(what, tuple(notes))


def _probe_env_root(
    var: str, env: Mapping[str, str], rel: Path, problem: Callable[[Path], str | None]
) -> _Probe:
    value = env.get(var)
    if value is None:
        return _Probe(None, f"${var} (unset)")
    if not value:
        return _Probe(None, f"${var} (empty)")
    candidate = Path(value) / rel
    why_not = problem(candidate)
    if why_not is None:
        return _Probe(candidate, "")
    return _Probe(None, f"${var}={candidate} ({why_not})")


def _probe_wheels(
    sys_path: Sequence[str], rel: Path, problem: Callable[[Path], str | None]
) -> _Probe:
    roots = wheel_roots(sys_path)
    if not roots:
        return _Probe(None, "nvidia wheels (none on sys.path)")
    tried: list[str] = []
    for root in roots:
        candidate = root / rel
        if problem(candidate) is None:
            return _Probe(candidate, "")
        tried.append(str(candidate))
    return _Probe(None, f"nvidia wheels ({', '.join(tried)})")


def wheel_roots(sys_path: Sequence[str] | None = None) -> list[Path]:
    """Every site-packages/nvidia/<layout> directory reachable from sys.path, in search order."""
    sys_path = sys.path if sys_path is None else sys_path
    roots: list[Path] = []
    seen: set[str] = set()
    for entry in sys_path:
        base = Path(entry or ".") / "nvidia"
        for name in WHEEL_ROOT_NAMES:
            root = base / name
            if not root.is_dir():   # before realpath: resolving each missing candidate cost ~2 ms a search
                continue
            key = os.path.realpath(root)
            if key in seen:
                continue
            seen.add(key)
            roots.append(root)
    return roots


def _probe_path_for_tool(exe_name: str, env: Mapping[str, str]) -> _Probe:
    found = _which(exe_name, env)
    if found is None:
        return _Probe(None, "PATH" if env.get("PATH") is not None else "PATH (unset)")
    return _Probe(found, "")


def _probe_path_for_libdevice(env: Mapping[str, str]) -> _Probe:
    # A CUDA install keeps libdevice beside bin/, so the ptxas on PATH tells us where to look.
    ptxas = _which(_exe_name("ptxas"), env)
    if ptxas is None:
        return _Probe(None, "PATH (no ptxas to look beside)")
    tried: list[str] = []
    for candidate in _libdevice_beside(ptxas):
        if _file_problem(candidate) is None:
            return _Probe(candidate, "")
        tried.append(str(candidate))
    return _Probe(None, f"PATH ({', '.join(tried)})")


def _libdevice_beside(ptxas: Path) -> list[Path]:
    # /usr/bin/ptxas is often a symlink into the real install; follow it as a second guess.
    candidates = [ptxas.parent.parent / LIBDEVICE_REL]
    resolved = ptxas.resolve().parent.parent / LIBDEVICE_REL
    if resolved != candidates[0]:
        candidates.append(resolved)
    return candidates


def _which(exe_name: str, env: Mapping[str, str]) -> Path | None:
    search_path = env.get("PATH")
    # shutil.which falls back to the live $PATH when given None; an injected env must not leak.
    if search_path is None:
        return None
    found = shutil.which(exe_name, path=search_path)
    return Path(found).absolute() if found else None


def _executable_problem(candidate: Path) -> str | None:
    problem = _file_problem(candidate)
    if problem is None and not os.access(candidate, os.X_OK):
        return "not executable"
    return problem


def _file_problem(candidate: Path) -> str | None:
    if not candidate.exists():
        return "missing"
    if not candidate.is_file():
        return "not a file"
    return None


def _exe_name(name: str) -> str:
    return f"{name}.exe" if os.name == "nt" else name
