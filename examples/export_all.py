"""Export every kernel of examples/kernels.py to Tile IR bytecode with the real cuTile frontend.

    python examples/export_all.py            # (re)write examples/<name>.v<ver>.tileirbc
    python examples/export_all.py --check    # export in memory, compare with the files on disk
    python examples/export_all.py --only axpby_f32 --versions 13.4 --out DIR

No GPU is needed: ``cuda.tile.compilation.export_kernel`` with an explicit signature and
bytecode version.  Output is deterministic; a version the frontend refuses for a kernel is
skipped with the frontend's reason.  Exit status: 0 on success, 1 if --check found a
difference or an export failed for a reason other than a refusal.
"""
from __future__ import annotations

import argparse
import io
import linecache
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = ("13.1", "13.2", "13.3", "13.4")

KERNELS_FILE = "kernels.py"
_MODULE_NAME = "tileiras_async_examples_kernels"


class _SourceLoader:
    def __init__(self, src: str):
        self._src = src

    def get_source(self, _name: str) -> str:
        return self._src


def load_kernels() -> types.ModuleType:
    """examples/kernels.py as a module whose code objects carry the bare file name.

    The frontend writes the kernel's source file (directory and name) into the bytecode's
    debug info; loading the source under the relative name "kernels.py" keeps the checkout's
    absolute path out of it, so the bytes do not depend on where the repository lives.
    """
    mod = sys.modules.get(_MODULE_NAME)
    if mod is not None:
        return mod
    src = (HERE / KERNELS_FILE).read_text()
    # inspect.findsource (used by the frontend) finds the text here; mtime None = never stale.
    linecache.cache[KERNELS_FILE] = (len(src), None, src.splitlines(True), KERNELS_FILE)
    mod = types.ModuleType(_MODULE_NAME)
    mod.__file__ = KERNELS_FILE
    mod.__loader__ = _SourceLoader(src)  # lets linecache reload the text if its cache is cleared
    sys.modules[_MODULE_NAME] = mod  # dataclasses look the module up while it executes
    try:
        exec(compile(src, KERNELS_FILE, "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[_MODULE_NAME]
        raise
    return mod


def export_bytes(example, version: str) -> bytes:
    """The bytecode of one example at one version (raises what the frontend raises)."""
    from cuda.tile.compilation import export_kernel

    buf = io.BytesIO()
    export_kernel(example.kernel, [example.signature()], buf, gpu_code=example.gpu_code,
                  output_format="tileir_bytecode", bytecode_version=version)
    return buf.getvalue()


def out_path(out_dir: Path, name: str, version: str) -> Path:
    return out_dir / f"{name}.v{version}.tileirbc"


def _refusal(exc: BaseException) -> bool:
    """True when the frontend declined the kernel/version combination (as opposed to a crash)."""
    import cuda.tile as ct

    return isinstance(exc, (ct.TileError, ValueError))


def main(argv: list[str] | None = None) -> int:
    EXAMPLES = load_kernels().EXAMPLES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="output directory (default: examples/)")
    ap.add_argument("--versions", nargs="+", default=list(VERSIONS), metavar="VER")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export only these examples")
    ap.add_argument("--check", action="store_true",
                    help="do not write; compare fresh exports with the existing files")
    args = ap.parse_args(argv)

    examples = EXAMPLES
    if args.only:
        unknown = set(args.only) - {e.name for e in EXAMPLES}
        if unknown:
            ap.error(f"unknown example(s): {', '.join(sorted(unknown))}")
        examples = [e for e in EXAMPLES if e.name in args.only]

    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for ex in examples:
        for ver in args.versions:
            path = out_path(args.out, ex.name, ver)
            try:
                data = export_bytes(ex, ver)
            except Exception as exc:  # noqa: BLE001 - report and keep going
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if _refusal(exc):
                    print(f"skip    {path.name}: frontend refuses: {reason}")
                else:
                    print(f"FAILED  {path.name}: {type(exc).__name__}: {reason}")
                    failed += 1
                continue
            old = path.read_bytes() if path.exists() else None
            if args.check:
                status = "same" if old == data else ("MISSING" if old is None else "DIFFERS")
                failed += status != "same"
            else:
                status = "same" if old == data else ("new" if old is None else "updated")
                if old != data:
                    path.write_bytes(data)
            print(f"{status:<7} {path.name} ({len(data)} bytes)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
