"""Export every kernel of examples/kernels.py and examples/suite/kernels.py to Tile IR bytecode with
the real cuTile frontend.

    python examples/export_all.py            # (re)write examples/<name>.v<ver>.tileirbc and
                                             # examples/suite/<name>.v<ver>.tileirbc
    python examples/export_all.py --check    # export in memory, compare with the files on disk
    python examples/export_all.py --only axpby_f32 --versions 13.4 --out DIR
    python examples/export_all.py --form launch   # only the launch forms: <set>/launch/<name>.v13.4.tileirbc

Two forms of every kernel that has a numpy reference (a refs.py with make_inputs): "plain", the signature
as written in kernels.py, exported at every bytecode version; and "launch", the signature cuTile's launch
gives it for the arrays the reference makes (unit strides, divisibility, alignment: see
`launch_constraint`), exported at 13.4 under the set's launch/ folder.

No GPU is needed: ``cuda.tile.compilation.export_kernel`` with an explicit signature and
bytecode version.  Output is deterministic; a version the frontend refuses for a kernel is
skipped with the frontend's reason.  Exit status: 0 on success, 1 if --check found a
difference or an export failed for a reason other than a refusal.
"""
from __future__ import annotations

import argparse
import contextlib
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
# the numpy references (make_inputs/grid/reference/check) whose arrays the launch forms are specialised on
REFS = {"examples": "refs.py", "suite": "suite/refs.py"}
FORMS = ("plain", "launch")
LAUNCH_VERSION = "13.4"
LAUNCH_DIR = "launch"
# cudaMalloc hands out 256-byte aligned blocks; a view's base is its allocation's plus its byte offset
ALLOCATION_ALIGN = 256
# the byte granule behind every fact cuTile's launch derives (stride, extent and base divisibility)
LAUNCH_GRANULE = 16


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


def out_dir_of(which: str, root: Path = HERE, form: str = "plain") -> Path:
    """Where a set's bytecode goes under `root` (examples/ or an --out folder)."""
    base = root / SETS[which][2]
    return base / LAUNCH_DIR if form == "launch" else base


def load_refs(which: str) -> types.ModuleType | None:
    """The set's refs.py as a module (None when the set has none: no launch forms then)."""
    path = HERE / REFS[which]
    if not path.is_file():
        return None
    name = f"tileiras_async_examples_refs_{which}"
    mod = sys.modules.get(name)
    if mod is None:
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look the module up while it executes
        spec.loader.exec_module(mod)
    return mod


def device_addresses(arrays: list) -> list[int]:
    """Where each array would start on the device: every distinct allocation (numpy base) gets its own
    ALLOCATION_ALIGN-aligned block, in order of first use; a view starts at its byte offset into it."""
    import numpy as np

    blocks: dict[int, int] = {}
    out = []
    for a in arrays:
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        # (only an address's residues matter: the blocks need not be apart by their sizes)
        start = blocks.setdefault(id(root), ALLOCATION_ALIGN * (1 + len(blocks)))
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        out.append(start + offset)
    return out


def launch_facts(a, address: int) -> dict:
    """What cuTile's launch (cext/tile_kernel.cpp, compute_array_specialization_bits) knows about one
    array, per axis: a unit stride becomes a constant, a stride of a multiple of 16 bytes and an extent of
    a multiple of 16 become divisibility, a 16-byte aligned base becomes base divisibility."""
    itemsize = a.dtype.itemsize
    unit = tuple(1 if s == itemsize else None for s in a.strides)
    stride_div = tuple(LAUNCH_GRANULE // itemsize if u is None and s % LAUNCH_GRANULE == 0 else 1
                       for u, s in zip(unit, a.strides))
    return {"stride_constant": unit if any(u is not None for u in unit) else None,
            "stride_divisible_by": stride_div,
            "shape_divisible_by": tuple(LAUNCH_GRANULE if n % LAUNCH_GRANULE == 0 else 1 for n in a.shape),
            "base_addr_divisible_by": LAUNCH_GRANULE if address % LAUNCH_GRANULE == 0 else 1}


def launch_constraint(declared, a, address: int):
    """The declared ArrayConstraint with the launch facts of array `a` (dtype, rank, index type, aliasing
    and stride bounds stay as declared)."""
    import dataclasses
    from cuda.tile.compilation import ArrayConstraint

    if a.ndim != declared.ndim:
        raise ValueError(f"array of rank {a.ndim} for a rank-{declared.ndim} parameter")
    fields = {f.name: getattr(declared, f.name) for f in dataclasses.fields(ArrayConstraint)}
    return ArrayConstraint(**{**fields, **launch_facts(a, address)})


def launch_case(example, inputs: dict):
    """`example` with every array parameter specialised on the array `inputs` gives it (the runtime
    parameters of `inputs` come in the kernel's order: arrays and scalars, constants left out)."""
    import dataclasses
    import numpy as np
    from cuda.tile.compilation import ArrayConstraint, ScalarConstraint

    runtime = [p for p in example.params if isinstance(p, (ArrayConstraint, ScalarConstraint))]
    values = list(inputs.values())
    if len(values) != len(runtime):
        raise ValueError(f"{example.name}: {len(values)} inputs for {len(runtime)} runtime parameters")
    arrays = [np.asarray(v) for p, v in zip(runtime, values) if isinstance(p, ArrayConstraint)]
    special = iter(launch_constraint(p, a, addr) for p, a, addr in
                   zip([p for p in runtime if isinstance(p, ArrayConstraint)], arrays, device_addresses(arrays)))
    params = tuple(next(special) if isinstance(p, ArrayConstraint) else p for p in example.params)
    return dataclasses.replace(example, params=params)


# where the frontend's own Python-bodied helpers (Tile methods such as reshape, in cuda/tile/_stub.py) are
# said to live in the debug info: a name relative to site-packages, not this machine's virtual environment
FRONTEND_STUB = "cuda/tile/_stub.py"


def _stub_functions(stub) -> list:
    """The functions of the frontend's _stub module (module level and class members) defined in its file."""
    found = []
    for obj in vars(stub).values():
        members = vars(obj).values() if isinstance(obj, type) else [obj]
        for m in members:
            fn = getattr(m, "__func__", None) or getattr(m, "fget", None) or m
            if isinstance(fn, types.FunctionType) and fn.__code__.co_filename == stub.__file__:
                found.append(fn)
    return found


@contextlib.contextmanager
def frontend_paths_relative():
    """While exporting, the frontend's helpers carry the file name FRONTEND_STUB (the frontend writes a
    helper's file into the debug info when it inlines one), so the bytes do not depend on where the
    frontend is installed.  Restored afterwards; the frontend's per-function cache is cleared both ways."""
    from cuda.tile import _stub
    from cuda.tile._passes import ast2hir

    src = Path(_stub.__file__).read_text()
    linecache.cache[FRONTEND_STUB] = (len(src), None, src.splitlines(True), FRONTEND_STUB)
    originals = {fn: fn.__code__ for fn in _stub_functions(_stub)}
    for fn, code in originals.items():
        fn.__code__ = code.replace(co_filename=FRONTEND_STUB)
    ast2hir.get_function_hir.cache_clear()
    try:
        yield
    finally:
        for fn, code in originals.items():
            fn.__code__ = code
        ast2hir.get_function_hir.cache_clear()


def export_bytes(example, version: str) -> bytes:
    """The bytecode of one example at one version (raises what the frontend raises)."""
    from cuda.tile.compilation import export_kernel

    buf = io.BytesIO()
    with frontend_paths_relative():
        export_kernel(example.kernel, [example.signature()], buf, gpu_code=example.gpu_code,
                      output_format="tileir_bytecode", bytecode_version=version)
    return buf.getvalue()


def out_path(out_dir: Path, name: str, version: str) -> Path:
    return out_dir / f"{name}.v{version}.tileirbc"


def _refusal(exc: BaseException) -> bool:
    """True when the frontend declined the kernel/version combination (as opposed to a crash)."""
    import cuda.tile as ct

    return isinstance(exc, (ct.TileError, ValueError))


def launch_examples(which: str, examples: list) -> list:
    """The set's examples in their launch form (none when the set has no references)."""
    refs = load_refs(which)
    return [] if refs is None else [launch_case(ex, refs.make_inputs(ex.name)) for ex in examples]


def jobs(which: str, examples: list, forms, versions) -> list[tuple[Path, object, str]]:
    """(output folder relative to the root, example, version) for every file to export."""
    out = []
    if "plain" in forms:
        out += [(out_dir_of(which, Path()), ex, ver) for ex in examples for ver in versions]
    if "launch" in forms and LAUNCH_VERSION in versions:
        out += [(out_dir_of(which, Path(), "launch"), ex, LAUNCH_VERSION)
                for ex in launch_examples(which, examples)]
    return out


def export_one(path: Path, example, version: str, check: bool) -> int:
    """Export (or --check) one file and print its status line; 1 when it counts as a failure."""
    try:
        data = export_bytes(example, version)
    except Exception as exc:  # noqa: BLE001 - report and keep going
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if _refusal(exc):
            print(f"skip    {path.name}: frontend refuses: {reason}")
            return 0
        print(f"FAILED  {path.name}: {type(exc).__name__}: {reason}")
        return 1
    old = path.read_bytes() if path.exists() else None
    if check:
        status = "same" if old == data else ("MISSING" if old is None else "DIFFERS")
    else:
        status = "same" if old == data else ("new" if old is None else "updated")
        if old != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    print(f"{status:<7} {path.parent.name}/{path.name} ({len(data)} bytes)")
    return int(check and status != "same")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE,
                    help="output directory (default: examples/; the suite goes to its suite/ folder)")
    ap.add_argument("--set", choices=sorted(SETS), action="append", dest="sets",
                    help="export only this set (repeatable; default: all)")
    ap.add_argument("--form", choices=FORMS, action="append", dest="forms",
                    help="plain (as written, every version) or launch (as cuTile launches it on the "
                         "references' arrays, 13.4, under launch/); repeatable; default: both")
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
    for which in dict.fromkeys(which for which, _ in work):
        examples = [ex for w, ex in work if w == which]
        for folder, ex, ver in jobs(which, examples, args.forms or FORMS, args.versions):
            failed += export_one(out_path(args.out / folder, ex.name, ver), ex, ver, args.check)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
