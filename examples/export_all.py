"""Export every kernel of examples/kernels.py and examples/suite/kernels.py to Tile IR bytecode with
the real cuTile frontend.

    python examples/export_all.py            # (re)write examples/<name>.v<ver>.tileirbc and
                                             # examples/suite/<name>.v<ver>.tileirbc
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

# (source file relative to examples/, module name, output folder relative to examples/): the bundled
# examples and the workload suite
SETS = {
    "examples": ("kernels.py", "tileiras_async_examples_kernels", "."),
    "suite": ("suite/kernels.py", "tileiras_async_examples_suite", "suite"),
}


class _SourceLoader:
    def __init__(self, src: str):
        self._src = src

    def get_source(self, _name: str) -> str:
        return self._src


def load_kernels(which: str = "examples") -> types.ModuleType:
    """examples/kernels.py (or suite/kernels.py) as a module whose code objects carry the
    file name relative to examples/.

    The frontend writes the kernel's source file (directory and name) into the bytecode's
    debug info; loading the source under the relative name "kernels.py" keeps the checkout's
    absolute path out of it, so the bytes do not depend on where the repository lives.
    """
    rel, module_name, _ = SETS[which]
    mod = sys.modules.get(module_name)
    if mod is not None:
        return mod
    if str(HERE) not in sys.path:  # both kernel files import example_signatures.py from here
        sys.path.insert(0, str(HERE))
    src = (HERE / rel).read_text()
    # inspect.findsource (used by the frontend) finds the text here; mtime None = never stale.
    linecache.cache[rel] = (len(src), None, src.splitlines(True), rel)
    mod = types.ModuleType(module_name)
    mod.__file__ = rel
    mod.__loader__ = _SourceLoader(src)  # lets linecache reload the text if its cache is cleared
    sys.modules[module_name] = mod  # dataclasses look the module up while it executes
    try:
        exec(compile(src, rel, "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    return mod


def out_dir_of(which: str, root: Path = HERE) -> Path:
    """Where a set's bytecode goes under `root` (examples/ or an --out folder)."""
    return root / SETS[which][2]


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE,
                    help="output directory (default: examples/; the suite goes to its suite/ folder)")
    ap.add_argument("--set", choices=sorted(SETS), action="append", dest="sets",
                    help="export only this set (repeatable; default: all)")
    ap.add_argument("--versions", nargs="+", default=list(VERSIONS), metavar="VER")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export only these examples")
    ap.add_argument("--check", action="store_true",
                    help="do not write; compare fresh exports with the existing files")
    args = ap.parse_args(argv)

    work = [(which, ex) for which in (args.sets or sorted(SETS)) for ex in load_kernels(which).EXAMPLES]
    if args.only:
        unknown = set(args.only) - {ex.name for _, ex in work}
        if unknown:
            ap.error(f"unknown example(s): {', '.join(sorted(unknown))}")
        work = [(which, ex) for which, ex in work if ex.name in args.only]

    failed = 0
    for which, ex in work:
        out = out_dir_of(which, args.out)
        out.mkdir(parents=True, exist_ok=True)
        for ver in args.versions:
            path = out_path(out, ex.name, ver)
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
