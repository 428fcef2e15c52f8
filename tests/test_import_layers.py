"""The package's import structure: no import cycles, and no lower layer importing a higher one.

Every module of `tileiras_async` and of the dashboard (the `tui/` folder) is read with `ast` (nothing is
imported), so imports inside functions are seen too.  What counts as an edge A -> B:

* `import B`, `from B import x` and `from . import x` (an edge to the submodule when `x` is one, else to the
  package), anywhere in A: at module level, inside functions (local imports) or under `if TYPE_CHECKING:`.
  A local import is taken as if it were at the top of A: deferring an import hides a cycle until the
  function runs but does not remove the dependency, so a local import is reported exactly when, moved to
  module level, it would close a cycle or cross the layers downwards.  Type-checking imports state a
  dependency as well.
* The parent packages Python initialises before a module (`a` and `a.b` for `a.b.c`) are not edges of
  their own: they run first whatever the module imports.  An explicit import of a package is an edge.
* The dashboard's modules are named after their folder (`tui.app`); an absolute import of the folder's
  installed name resolves to it too.

Layers, bottom to top, derived from the imports of the code as it is (each line lists the packages or
top-level modules of `tileiras_async` in the layer; packages on one line do not import each other):

    ir                          cuda_tile IR, op definitions, printer, verifier
    bytecode                    bytecode reader and writer of that IR
    deepstack, symbols          deep-recursion guard; kernel-name checks (import nothing of ours)
    frontend                    bytes -> verified module, the real tools' diagnostics
    targets, remarks,           the GPU target table; optimization remarks and the stages' diagnostics
    diagnostics                 (messages): import nothing of ours
    toolchain                   ptxas / nvdisasm / libdevice discovery and runs; imports nothing of ours.
                                codegen calls it, so it sits below codegen (the issue's sketch puts it
                                beside emu)
    interp, schedule            the reference interpreter, the modulo scheduler;
    irdata, limits              a kernel as msgspec data (parse -> lower); tile-size limits
    tilegpu                     the tile-GPU dialect, its layouts, the cuda_tile DCE and its passes (issue 12)
    codegen                     LLVM IR, NVPTX, ptxas
    driver                      one kernel through the target checks, the passes and code generation
    emu                         the PTX emulator (runs what codegen emits)
    engines                     run_kernel: interpret / emulate / both
    failures                    notes that say why a compile failed (the stages attach them to their
                                diagnostics)
    stages                      the compiler as stages over messages
    tileiras_async              the package's __init__: __version__ and the public API (run_kernel,
                                compile_module: engines and stages, imported when called)
    cache                       the compile cache
    serving                     the warm compile server's socket, protocol, client and daemon (the drop-in,
                                the batch command and the schema generator use them; the compile its
                                workers run is handed in by cli/serve.py)
    pipeline                    supervisor, workers, batch compile
    tui                         the dashboard (a consumer of the pipeline's events; `tileiras-async tui`
                                starts it from cli/, so it sits below cli, unlike the issue's sketch)
    cli                         the command lines
    server                      `python -m tileiras_async.server`: the `serve` command alone
    fuzz                        the differential fuzzer (drives the drop-in's entry points)
    __main__                    python -m tileiras_async

A module may import any module of its own package (or top-level module) and of lower layers.  There
are no exceptions: a cycle or a downward import anywhere fails the tests below.
"""
from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tileiras_async"
PACKAGE_DIR = ROOT / "src" / PACKAGE
TUI_DIR = ROOT / "tui"
TUI_IMPORT_NAMES = ("tui", "tileiras_tui")   # the folder's name and the name it installs under

LAYERS: list[tuple[str, ...]] = [
    ("inputs",              # exit codes and input reading: os only (the drop-in's cache-hit path)
     "dataclass_code"),     # stored code of dataclass methods, installed before the compiler is imported
    ("ir",),
    ("bytecode",),
    ("deepstack", "symbols"),
    ("frontend",),
    ("targets", "remarks", "diagnostics"),
    ("toolchain",),
    ("interp", "schedule", "irdata", "limits"),
    ("tilegpu",),
    ("codegen",),
    ("driver",),
    ("emu",),
    ("engines",),
    ("failures",),
    ("stages",),
    (PACKAGE,),
    ("cache",),
    ("serving",),
    ("pipeline",),
    ("tui",),
    ("cli",),
    ("server",),            # `python -m tileiras_async.server` (cli/serve.py's command)
    ("fuzz",),
    ("__main__",),
]

# ---------------------------------------------------------------------------------------------------------
# reading the imports
# ---------------------------------------------------------------------------------------------------------

def _modules() -> dict[str, Path]:
    """Module name -> file, for the package and the dashboard folder."""
    out: dict[str, Path] = {}
    for base, prefix in ((PACKAGE_DIR, PACKAGE), (TUI_DIR, "tui")):
        for path in sorted(base.rglob("*.py")):
            parts = [prefix, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _canonical(name: str) -> str:
    head, _, rest = name.partition(".")
    if head in TUI_IMPORT_NAMES:
        return "tui" + ("." + rest if rest else "")
    return name


def _known(name: str) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [_canonical(a.name) for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base.pop()
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = _canonical(node.module or "")
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
    return [t for t in (_known(n) for n in names) if t is not None and t != module]


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        graph[module] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                         for t in _targets(module, is_package, node)}
    return graph


GRAPH = _imports()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _group(module: str) -> str:
    """The package or top-level module a module belongs to (the package __init__ is its own group)."""
    parts = module.split(".")
    if parts[0] == "tui":
        return "tui"
    return parts[1] if len(parts) > 1 else PACKAGE


def _rank(group: str) -> int:
    for i, layer in enumerate(LAYERS):
        if group in layer:
            return i
    raise KeyError(group)


# ---------------------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------------------

def test_every_module_is_in_a_layer():
    missing = sorted({_group(m) for m in MODULES if not any(_group(m) in layer for layer in LAYERS)})
    assert not missing, f"packages in no layer (add them to LAYERS in {Path(__file__).name}): {missing}"


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles (local imports counted as if top-level):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_no_lower_layer_imports_a_higher_one():
    bad = []
    for module, targets in sorted(GRAPH.items()):
        g = _group(module)
        for t in sorted(targets):
            h = _group(t)
            if g != h and _rank(h) >= _rank(g):
                bad.append(f"{module} ({g}) imports {t} ({h})")
    assert not bad, "imports against the layering (bottom to top: " + " < ".join(
        "/".join(layer) for layer in LAYERS) + "):\n" + "\n".join(bad)


def test_the_walk_sees_local_and_package_imports():
    """The reader of imports itself: local imports, `from . import x` of a submodule and of a package
    name, and the dashboard folder are all resolved."""
    assert "tileiras_async.ir.core" in GRAPH["tileiras_async.ir.printer"]               # top-level, relative
    assert "tileiras_async.ir.printer" in GRAPH["tileiras_async.frontend"]              # local import
    assert "tileiras_async.codegen.lower_atomic" in GRAPH["tileiras_async.codegen.translate"]   # from . import x
    assert PACKAGE in GRAPH["tileiras_async.cli.batch"]                                  # from .. import __version__
    assert any(t.startswith("tileiras_async.pipeline") for t in GRAPH["tui.cli"])        # the dashboard


def test_cycle_finder_on_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]
