"""What identifies the compiler, for cache keys and for checking that a compile server runs the same one.

Everything that can change an output without changing the input or the options:

    tileiras-async   our version and a digest of every file of the installed package
    python           the interpreter's version
    llvmlite         its version and its LLVM library (the LLVM version shapes the PTX)
    numpy            its version (constant folding and conversions use it)
    ptxas            the binary the compile will run (path, size, modification time: not run)
    libdevice        a digest of the bitcode linked for math functions

Cheap by construction: the files are only stat()ed (about a hundred stat calls), and the
content digests are memoized in the cache directory under a digest of those stat results, so
they are computed once per install (and again only after a file changes).  The digest of this
process's own environment is also kept with the installation (`__pycache__/fingerprint/`, written
like byte code: by `make setup`, and by a call that computes it unless Python writes no byte code),
so a call with an empty or new cache directory does not read every source file again either.

ptxas and libdevice are found in the order of `toolchain.discovery` ($CUDA_ROOT, $CUDA_HOME,
$CUDA_PATH, NVIDIA's wheels on sys.path, then $PATH), re-implemented here with `os.path` alone
because importing the toolchain package costs more than a whole cache hit; a test checks that both
find the same files, and the drop-in stores a fresh compile only when the compile ran the ptxas
named here.
"""
from __future__ import annotations

import os
import sys

from .. import __version__
from .files import listdir as _listdir
from .files import scandir as _scandir
from .files import write_atomic
from .key import blake2b, canonical

# toolchain.discovery's search order (tests/test_cache.py checks these against it)
ENV_ROOT_VARS = ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")
WHEEL_ROOT_NAMES = ("cu13", "cuda_nvcc", "cuda_nvdisasm", "cuda_nvvm")
LIBDEVICE_REL = os.path.join("nvvm", "libdevice", "libdevice.10.bc")

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Fingerprint:
    """`digest` names the compiler and toolchain; `ptxas` / `libdevice` are the files it stands for."""

    __slots__ = ("digest", "ptxas", "libdevice")

    def __init__(self, digest: str, ptxas: str | None, libdevice: str | None):
        self.digest = digest
        self.ptxas = ptxas
        self.libdevice = libdevice


def install_memo_dir() -> str:
    return os.path.join(PACKAGE_DIR, "__pycache__", "fingerprint")


def compute(memo_dir: str | None = None, *, env=None, sys_path=None, write_install_memo: bool | None = None
            ) -> Fingerprint:
    """The fingerprint of this installation as seen with `env` / `sys_path` (default: this process's).

    `memo_dir`: where content digests are memoized (None: computed every time, unless the installation
    keeps the digest of this process's own environment).  `write_install_memo`: whether a digest computed
    here is kept with the installation (default: when Python writes byte code)."""
    own = env is None and sys_path is None
    env = os.environ if env is None else env
    sys_path = sys.path if sys_path is None else sys_path
    roots = _roots(env, sys_path)
    ptxas = resolve_tool("ptxas", env, sys_path, roots)
    libdevice = resolve_libdevice(env, sys_path, roots)
    llvmlite_dir = _package_dir("llvmlite", sys_path)
    numpy_dir = _package_dir("numpy", sys_path)
    # (label, path, stat): digested by content, so a reinstall of the same files keeps the keys
    hashed = [("src/" + rel, path, st) for rel, path, st in _package_files(PACKAGE_DIR)]
    # (label, path, stat): large binaries, identified by size and modification time
    stat_only = [("ptxas", ptxas, _stat(ptxas))] if ptxas else []
    if llvmlite_dir:
        hashed.append(_labelled("llvmlite-version", os.path.join(llvmlite_dir, "_version.py")))
        binding = os.path.join(llvmlite_dir, "binding")
        stat_only += [_labelled("llvmlite-lib/" + n, os.path.join(binding, n))
                      for n in sorted(_listdir(binding)) if _is_native_library(n)]
    if numpy_dir:
        hashed.append(_labelled("numpy-version", os.path.join(numpy_dir, "version.py")))
    if libdevice:
        hashed.append(_labelled("libdevice", libdevice))
    # NUL cannot occur in a path, so joining on it is unambiguous (and much cheaper than canonical())
    identity = "\0".join(["fingerprint/1", __version__, sys.version]
                         + [f"{label}\0{st}" for label, _path, st in stat_only])
    signature = "\0".join([identity] + [f"{path}\0{st}" for _label, path, st in hashed])
    name = blake2b(signature.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()
    memo = os.path.join(memo_dir, name) if memo_dir else None
    installed = os.path.join(install_memo_dir(), name) if own else None
    memoized = _read_memo(memo) if memo else None
    digest = memoized or (_read_memo(installed) if installed else None)
    if digest is None:
        h = blake2b(identity.encode("utf-8", "surrogateescape"), digest_size=32)
        for label, path, _st in hashed:
            h.update(canonical([label, _read(path)]))
        digest = h.hexdigest()
        if installed and (not sys.dont_write_bytecode if write_install_memo is None else write_install_memo):
            _write_memo(installed, digest)
    if memo and memoized is None:
        _write_memo(memo, digest)
    return Fingerprint(digest, ptxas, libdevice)


def compiled_with(expected: Fingerprint) -> bool:
    """Whether this process compiles with the ptxas and libdevice `expected` names (checked after a
    compile, before its outcome is stored: then the toolchain package is loaded anyway)."""
    from ..toolchain import ToolchainError, default_toolchain, find_libdevice
    for find, named in ((lambda: default_toolchain().ptxas, expected.ptxas), (find_libdevice, expected.libdevice)):
        try:
            used = str(find())
        except ToolchainError:
            used = None
        if (used is None) != (named is None) or (used is not None and not _same_file(used, named)):
            return False
    return True


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# ---------------------------------------------------------------------------- finding the toolchain

def resolve_tool(name: str, env, sys_path, roots: list[str] | None = None) -> str | None:
    """The executable `name` that toolchain.discovery.find_tool would return (None: none found)."""
    rel = os.path.join("bin", name)
    for candidate in _candidates(rel, env, sys_path, roots):
        if _is_file(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return _which(name, env)


def resolve_libdevice(env, sys_path, roots: list[str] | None = None) -> str | None:
    """The libdevice.10.bc that toolchain.discovery.find_libdevice would return (None: none found)."""
    for candidate in _candidates(LIBDEVICE_REL, env, sys_path, roots):
        if _is_file(candidate):
            return candidate
    ptxas = _which("ptxas", env)
    if ptxas is None:
        return None
    beside = os.path.join(os.path.dirname(os.path.dirname(ptxas)), LIBDEVICE_REL)
    resolved = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(ptxas))), LIBDEVICE_REL)
    for candidate in (beside, resolved):
        if _is_file(candidate):
            return candidate
    return None


def _roots(env, sys_path) -> list[str]:
    """The CUDA roots to look in, in order: the environment's, then NVIDIA's wheels on sys.path."""
    roots = [env[var] for var in ENV_ROOT_VARS if env.get(var)]
    for entry in sys_path:
        base = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(base):
            roots += [r for r in (os.path.join(base, name) for name in WHEEL_ROOT_NAMES) if os.path.isdir(r)]
    return roots


def _candidates(rel: str, env, sys_path, roots: list[str] | None):
    for root in _roots(env, sys_path) if roots is None else roots:
        yield os.path.join(root, rel)


def _which(name: str, env) -> str | None:
    search = env.get("PATH")
    if search is None:
        return None
    for d in search.split(os.pathsep):
        candidate = os.path.join(d, name)
        if _is_file(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def _is_file(path: str) -> bool:
    try:
        return (os.stat(path).st_mode & 0o170000) == 0o100000
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------- files

def _package_files(root: str) -> list[tuple[str, str, str]]:
    """(relative path, path, stat signature) of every file of the package, sorted; no byte code,
    no hidden or temporary files."""
    out: list[tuple[str, str, str]] = []
    stack = [("", root)]
    while stack:
        rel, path = stack.pop()
        for entry in _scandir(path):
            name = entry.name
            if name[0] == "." or name == "__pycache__" or name.endswith((".pyc", ".pyo")):
                continue
            sub = rel + "/" + name if rel else name
            try:
                if entry.is_dir():
                    stack.append((sub, entry.path))
                else:
                    st = entry.stat()
                    out.append((sub, entry.path, f"{st.st_size}:{st.st_mtime_ns}"))
            except OSError:
                continue
    out.sort()
    return out


def _labelled(label: str, path: str) -> tuple[str, str, str]:
    return label, path, _stat(path)


def _package_dir(name: str, sys_path) -> str | None:
    for entry in sys_path:
        d = os.path.join(entry or ".", name)
        if os.path.isfile(os.path.join(d, "__init__.py")):
            return d
    return None


def _is_native_library(name: str) -> bool:
    return name.endswith((".so", ".dylib", ".dll", ".pyd"))




def _stat(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _read_memo(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            text = f.read(65).decode("ascii", "replace")
    except OSError:
        return None
    return text if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else None


def _write_memo(path: str, digest: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, digest.encode())
    except OSError:
        pass  # read-only cache directory: the digest is recomputed next time


def main() -> int:
    """`python -m tileiras_async.cache.fingerprint` (`make setup`): keep this environment's digest with the
    installation, and only it (each edit of a source file makes a new one)."""
    fp = compute(write_install_memo=True)
    memo = install_memo_dir()
    for name in _listdir(memo):
        if _read_memo(os.path.join(memo, name)) != fp.digest:
            try:
                os.unlink(os.path.join(memo, name))
            except OSError:
                pass
    print(f"fingerprint {fp.digest} kept in {memo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
