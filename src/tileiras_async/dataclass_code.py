"""A code cache for the methods `dataclasses` generates, so a fresh process does not compile them again.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`, ... as source
text and compiles it with `exec` when the class is created.  A cold `tileiras` call creates about a hundred
dataclasses (the IR's types and attributes, op definitions, the scheduler's and the passes' records): compiling
their ~500 generated functions was about a quarter of the call.  Python's own byte-code cache (`__pycache__`)
does not cover code made at run time, so this module keeps one more file there: the generated texts and
their compiled code objects (marshal, as a .pyc holds them).  While it is installed, `dataclasses` runs the
stored code object of a text it has seen before instead of compiling the text.

Correctness does not depend on the file: the lookup key is the whole generated text, the code object stored
for it is exactly what `exec` compiles from it (same file name, no inherited compiler flags: `dataclasses`
has no `from __future__` import), and it runs with the same globals and locals; a text not in the file is
compiled as before.  The file is named after the interpreter (`cache_tag` and `hexversion`, like a .pyc's
magic number), and one that cannot be read or was written by another interpreter is ignored.

`make setup` (its `bytecode` step: `python -m tileiras_async.dataclass_code`) writes the file for every
dataclass of the package.  Without it, the first process that finds none writes it on exit, unless Python
writes no byte code either (`PYTHONDONTWRITEBYTECODE`, `-B`).

Only the drop-in's compile path installs it (`install()` before importing the compiler): a hit, `--help` and
the Python API leave `dataclasses` as it is.  Imports nothing of ours.
"""
from __future__ import annotations

import marshal
import os
import sys
from types import CodeType

_FILE_NAME = f"dataclass-methods.{sys.implementation.cache_tag}-{sys.hexversion:x}.bin"
CACHE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", _FILE_NAME)


class _MethodCode:
    """The `exec` that `dataclasses` calls: a stored code object for a known text, else a compile (recorded)."""

    def __init__(self, known: dict[str, bytes]):
        self.known = known              # text -> its code object, marshalled (unmarshalled when used)
        self.new: dict[str, bytes] = {}

    def __call__(self, source, globals=None, locals=None, /):
        if isinstance(source, str):
            code = self._stored(source)
            if code is None:
                # what exec(source) compiles: file "<string>", and no flags from this module's __future__ import
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self.new[source] = marshal.dumps(code)
            source = code
        return exec(source, globals, locals)

    def _stored(self, source: str) -> CodeType | None:
        blob = self.known.get(source)
        if type(blob) is not bytes:
            return None
        try:
            code = marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            return None
        return code if type(code) is CodeType else None


_installed: _MethodCode | None = None


def _read(path: str) -> dict[str, bytes]:
    try:
        with open(path, "rb") as f:
            data = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: str, codes: dict[str, bytes]) -> None:
    """Atomically (several processes may write at once); a directory we cannot write to is no error."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(codes))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def install(path: str = CACHE_PATH) -> None:
    """Make `dataclasses` use the stored code (idempotent); call it before importing the modules that
    define the dataclasses."""
    global _installed
    if _installed is not None:
        return
    import dataclasses
    _installed = _MethodCode(_read(path))
    dataclasses.exec = _installed   # a module global named `exec` shadows the builtin for dataclasses alone
    if not _installed.known and not sys.dont_write_bytecode:
        import atexit
        atexit.register(_write_new, path, _installed)


def _write_new(path: str, recorder: _MethodCode) -> None:
    if recorder.new:
        _write(path, recorder.new)


def build(path: str = CACHE_PATH) -> int:
    """Import every module of the package with the cache installed and empty, and write what was compiled
    (a fresh file: texts of classes that no longer exist do not accumulate).  Returns the number of texts."""
    global _installed
    import importlib
    import pkgutil

    import dataclasses
    previous = dataclasses.__dict__.get("exec")
    _installed = recorder = _MethodCode({})
    dataclasses.exec = recorder
    try:
        package = importlib.import_module(__package__)
        for info in pkgutil.walk_packages(package.__path__, f"{__package__}."):
            if info.name.endswith("__main__"):
                continue   # running them is their only purpose
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass   # an optional dependency that is not installed (e.g. the dask extra)
    finally:
        if previous is None:
            del dataclasses.exec
        else:
            dataclasses.exec = previous
        _installed = None
    _write(path, recorder.new)
    return len(recorder.new)


def stale(path: str = CACHE_PATH) -> bool:
    """Whether a source file of the package is newer than the file (or there is none)."""
    try:
        built = os.stat(path).st_mtime_ns
    except OSError:
        return True
    root = os.path.dirname(os.path.abspath(__file__))
    return any(os.stat(os.path.join(d, f)).st_mtime_ns > built
               for d, _, files in os.walk(root) for f in files if f.endswith(".py"))


def main(argv: list[str]) -> int:
    """`python -m tileiras_async.dataclass_code [--force]`: (re)write the file when a source is newer."""
    if "--force" not in argv and not stale():
        return 0
    print(f"dataclass methods: {build()} stored in {CACHE_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
