"""What the code-quality benchmarks share: compile a corpus kernel with ours and with NVIDIA's tileiras,
measure each cubin (nvdisasm + ELF, see _sass.py), run PTX in the emulator against the references.

Ours compiles in-process through `tileiras_async.stages` (the drop-in's path).  The real tool's cubins never
change for a given input, target and tool version, so they are cached on disk under that key
(default build/bench-cache/real; `make clean` removes it).  Every function here returns a plain dict that
says what failed instead of raising, so one bad kernel shows as such in a table and never ends a run.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _sass
from tileiras_async.toolchain.cubin import kernel_code
from _common import DEFAULT_CORPUS, REPO, nvidia_bin, nvidia_env

PUBLIC = DEFAULT_CORPUS / "out" / "public"
DEFAULT_CACHE = REPO / "build" / "bench-cache" / "real"
OPT_LEVEL = 3


# ---------------------------------------------------------------- the corpus


def kernel_id(path: Path) -> str:
    """`softmax_rows_f32_128` for `.../softmax_rows_f32_128.v13.4.tileirbc`."""
    return path.name.split(".v13.")[0]


def corpus_kernels(public: Path, select: str = "", sample: int = 0) -> list[Path]:
    """The 13.4 bytecode files of the corpus; `select` = comma-separated ids or substrings; `sample` = every
    n-th file when n > 0 (a deterministic sample)."""
    files = sorted(public.glob("*.v13.4.tileirbc"))
    if select:
        want = [w.strip() for w in select.split(",") if w.strip()]
        files = [f for f in files if any(w == kernel_id(f) or w in kernel_id(f) for w in want)]
    if sample > 1:
        files = files[::sample]
    return files


@functools.lru_cache(maxsize=None)
def ir_ops(path: Path) -> frozenset[str]:
    """The cuda_tile op names a module uses (which kernels reduce, scan or multiply matrices)."""
    from tileiras_async.bytecode.reader import read_module
    try:
        mod = read_module(path.read_bytes())
    except Exception:  # noqa: BLE001 - an unreadable file simply has no known ops
        return frozenset()
    return frozenset(op.name for fn in mod.functions for op in fn.walk())


def has_reduction(path: Path) -> bool:
    return bool(ir_ops(path) & {"reduce", "scan"})


def has_mma(path: Path) -> bool:
    return any(name.startswith("mma") for name in ir_ops(path))


def nvidia_ptx(public: Path, cid: str, gpu: str) -> Path | None:
    """The PTX NVIDIA's tileiras handed to ptxas for this kernel (the corpus kept sm_90 and sm_100)."""
    p = public / f"{cid}.v13.4.{gpu}.ptx"
    return p if p.is_file() else None


@functools.lru_cache(maxsize=4)
def _manifest_runs(folder: Path) -> dict:
    """(kernel id, target) -> NVIDIA's tileiras run on the 13.4 file, as the folder's manifest.json records it."""
    try:
        entries = json.loads((folder / "manifest.json").read_text()).get("entries", [])
    except (OSError, ValueError):
        return {}
    return {(e["id"], gpu): run for e in entries if e.get("bytecode_version") == "13.4"
            for gpu, run in (e.get("tileiras") or {}).items()}


def nvidia_rejection(folder: Path, cid: str, gpu: str) -> str | None:
    """"exit N: <first error>" when NVIDIA's tileiras refused this kernel for `gpu` (so the corpus has no PTX for
    it), in the form `compile_ours` reports ours; None when it compiled or the manifest does not say."""
    run = _manifest_runs(folder).get((cid, gpu))
    if not run or not run.get("rc"):
        return None
    first = next((ln for ln in run.get("stderr", "").splitlines() if ln.strip()), "")
    return f"exit {run['rc']}: {first.removeprefix('error: ')}"


# ---------------------------------------------------------------- the input sets

# The corpus's two exports: out/public, plain signatures; out/public-launch, the same kernels with the facts
# cuTile adds at launch (unit strides, divisibility, alignment: corpus README, "The launch set"), which
# NVIDIA's tool turns into vector loads, TMA and warp specialisation.  Then this project's own kernels
# (examples/export_all.py), unhinted and as cuTile launches them on their references' arrays.
CORPUS_SETS = {"public": "unhinted bytecode", "public-launch": "as cuTile launches"}
OWN_SETS = {"suite": "suite, unhinted", "suite-launch": "suite as cuTile launches",
            "examples": "examples, unhinted", "examples-launch": "examples as cuTile launches"}
SETS = {**CORPUS_SETS, **OWN_SETS}
# where an own set's bytecode lies, and the export set (examples/export_all.py) whose refs.py checks it
OWN_FOLDERS = {"suite": ("examples/suite", "suite"), "suite-launch": ("examples/suite/launch", "suite"),
               "examples": ("examples", "examples"), "examples-launch": ("examples/launch", "examples")}


def add_set_option(ap) -> None:
    ap.add_argument("--set", dest="corpus_set", default="both", choices=[*SETS, "both"],
                    help="the input set: public (the corpus, unhinted bytecode), public-launch (the corpus as "
                         "cuTile launches it), both (those two, one table each: default), or this project's "
                         "suite / suite-launch / examples / examples-launch (examples/, examples/suite/)")


def set_folder(corpus: Path, name: str) -> Path:
    return REPO / OWN_FOLDERS[name][0] if name in OWN_SETS else corpus / "out" / name


def set_place(name: str) -> str:
    """Where a set's files are, as the reports name it."""
    return OWN_FOLDERS[name][0] if name in OWN_SETS else f"out/{name}"


def own_set_of(path: Path) -> str | None:
    """The own set whose folder holds the bytecode `path` (None for the corpus and anything else)."""
    folder = path.resolve().parent
    return next((name for name, (rel, _) in OWN_FOLDERS.items() if (REPO / rel).resolve() == folder), None)


def corpus_sets(corpus: Path, choice: str) -> list[tuple[str, Path]]:
    """(set name, folder) of the sets --set names that exist, the unhinted export first ("both": the
    corpus's two)."""
    names = list(CORPUS_SETS) if choice == "both" else [choice]
    return [(name, set_folder(corpus, name)) for name in names if set_folder(corpus, name).is_dir()]


def set_of(row: dict) -> str:
    """A row's corpus set (saved runs from before the launch set measured out/public only)."""
    return row.get("set", "public")


def row_key(row: dict) -> tuple[str, str, str]:
    return set_of(row), row["kernel"], row["target"]


def measure_sets(sets: list[tuple[str, Path]], files_of, measure) -> list[dict]:
    """The rows of every set, each tagged with its set: `files_of(folder)` picks the kernels,
    `measure(files, folder)` returns their rows."""
    return [{"set": name, **row} for name, folder in sets for row in measure(files_of(folder), folder)]


# ---------------------------------------------------------------- compiling


def compile_ours(path: Path, gpu: str, register_caps: bool = False) -> dict:
    """{"ok", "cubin", "ptx"} or {"ok": False, "error"}: all stages in this process, ptxas included.
    `register_caps`: as `--register-caps` (toolchain/occupancy.py), for an A/B."""
    from tileiras_async import stages
    try:
        res = stages.compile_in_process(str(path), path.read_bytes(),
                                        stages.CompileOptions(gpu, OPT_LEVEL, register_caps=register_caps))
    except Exception as e:  # noqa: BLE001 - a compiler crash is a result here, not the end of the run
        return {"ok": False, "error": f"crash: {type(e).__name__}: {str(e)[:160]}"}
    if not res.ok:
        first = res.diagnostics[0].message if res.diagnostics else res.tool_stderr.strip()[:160]
        return {"ok": False, "error": f"exit {res.exit_code}: {first}"}
    return {"ok": True, "cubin": res.cubin, "ptx": res.ptx}


def _run_compiler(argv: list[str], path: Path, gpu: str, env: dict | None) -> dict:
    """{"ok", "cubin"} or {"ok": False, "error"} (and "timeout" when it ran out of time): a tileiras-like
    command (`argv`, then --gpu-name, -O, -o and the input) run on `path` in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.cubin"
        try:
            proc = subprocess.run([*argv, "--gpu-name", gpu, f"-O{OPT_LEVEL}", "-o", str(out), str(path)],
                                  capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "timed out after 600 s", "timeout": True}
        if proc.returncode != 0 or not out.is_file():
            return {"ok": False, "error": f"exit {proc.returncode}: "
                                          f"{(proc.stderr.strip().splitlines() or [''])[-1][:160]}"}
        return {"ok": True, "cubin": out.read_bytes()}


def compile_ours_from(src: Path, path: Path, gpu: str) -> dict:
    """{"ok", "cubin"} or {"ok": False, "error"}: our drop-in as another checkout's `src/` has it (an older
    revision, for A/B timings), in a subprocess."""
    res = _run_compiler([sys.executable, "-m", "tileiras_async.cli.tileiras"], path, gpu,
                        dict(os.environ, PYTHONPATH=str(src)))
    res.pop("timeout", None)
    return res


class Checkout:
    """This repository at another revision, in a temporary git worktree (removed on exit)."""

    def __init__(self, rev: str):
        self.rev, self.dir = rev, Path(tempfile.mkdtemp(prefix="tileiras-rev-"))

    def __enter__(self) -> "Checkout":
        proc = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(self.dir), self.rev],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"error: cannot check out '{self.rev}': {proc.stderr.strip()[:200]}")
        self.commit = subprocess.run(["git", "-C", str(self.dir), "log", "-1", "--format=%h"],
                                     capture_output=True, text=True, timeout=30).stdout.strip()
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.dir)],
                       capture_output=True, timeout=300)


@functools.lru_cache(maxsize=1)
def real_tool() -> tuple[str, dict, str] | None:
    """(path, environment, version line) of NVIDIA's tileiras, or None when the wheel is absent."""
    tool = nvidia_bin("tileiras")
    if tool is None:
        return None
    env = nvidia_env(tool)
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, env=env, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = next((ln.strip() for ln in out.splitlines() if "V1" in ln), out.strip() or "?")
    return str(tool), env, version


def real_cache_key(data: bytes, gpu: str, version: str) -> str:
    h = hashlib.sha256()
    for part in (data, gpu.encode(), version.encode(), str(OPT_LEVEL).encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:32]


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# ptxas as the real tileiras finds it ($CUDA_HOME/bin/ptxas), in front of the real one: it keeps a copy of
# the PTX and host object the tool hands it (the corpus kept NVIDIA's PTX the same way; the tool keeps none)
_KEEPING_PTXAS = """#!/bin/sh
for a in "$@"; do
  case "$a" in
    *.ptx) cp "$a" "$TILEIRAS_BENCH_KEEP/nvidia.ptx" ;;
    --nv-host=*) cp "${a#--nv-host=}" "$TILEIRAS_BENCH_KEEP/nvidia.host.o" ;;
  esac
done
exec "$TILEIRAS_BENCH_PTXAS" "$@"
"""


def _keeping_home(home: Path, real_home: Path) -> None:
    """A CUDA_HOME at `home` that is the wheel's (`real_home`) but for bin/ptxas, which keeps its inputs."""
    (home / "bin").mkdir(parents=True)
    for entry in real_home.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real_home / "bin").iterdir():
        if tool.name != "ptxas":
            (home / "bin" / tool.name).symlink_to(tool)
    wrapper = home / "bin" / "ptxas"
    wrapper.write_text(_KEEPING_PTXAS)
    wrapper.chmod(0o755)


def _compile_real_keeping(exe: str, env: dict, path: Path, gpu: str) -> dict:
    """The real tool on `path`: {"ok", "cubin", "ptx", "host"} (host: bytes or None) or {"ok": False, ...}."""
    real_home = Path(env["CUDA_HOME"])
    with tempfile.TemporaryDirectory() as tmp:
        home, keep = Path(tmp) / "cuda", Path(tmp) / "keep"
        keep.mkdir()
        _keeping_home(home, real_home)
        keeping = dict(env, CUDA_HOME=str(home), TILEIRAS_BENCH_KEEP=str(keep),
                       TILEIRAS_BENCH_PTXAS=str(real_home / "bin" / "ptxas"))
        res = _run_compiler([exe], path, gpu, keeping)
        if res["ok"]:
            ptx, host = keep / "nvidia.ptx", keep / "nvidia.host.o"
            res["ptx"] = ptx.read_text() if ptx.is_file() else None
            res["host"] = host.read_bytes() if host.is_file() else None
    return res


def compile_real(path: Path, gpu: str, cache_dir: Path | None = DEFAULT_CACHE) -> dict:
    """{"ok", "cubin", "cached"} or {"ok": False, "error"}; failures are cached too (they never change).
    The PTX the tool handed ptxas (and its host object, for TMA) is cached beside the cubin: real_ptx."""
    tool = real_tool()
    if tool is None:
        return {"ok": False, "error": "NVIDIA's tileiras not installed (wheel nvidia-cuda-tileiras)"}
    exe, env, version = tool
    data = path.read_bytes()
    key = real_cache_key(data, gpu, version)
    if cache_dir is not None:
        hit, err = cache_dir / f"{key}.cubin", cache_dir / f"{key}.err"
        if hit.is_file():
            return {"ok": True, "cubin": hit.read_bytes(), "cached": True}
        if err.is_file():
            return {"ok": False, "error": err.read_text(), "cached": True}
    res = _compile_real_keeping(exe, env, path, gpu)
    if res.pop("timeout", False):
        return res
    if not res["ok"]:
        if cache_dir is not None:
            _write_atomic(cache_dir / f"{key}.err", res["error"].encode())
        return dict(res, cached=False)
    cubin = res["cubin"]
    if cache_dir is not None:
        if res["ptx"] is not None:
            _write_atomic(cache_dir / f"{key}.ptx", res["ptx"].encode())
        if res["host"] is not None:
            _write_atomic(cache_dir / f"{key}.host.o", res["host"])
        _write_atomic(cache_dir / f"{key}.cubin", cubin)
    return {"ok": True, "cubin": cubin, "cached": False}


def real_ptx(path: Path, gpu: str, cache_dir: Path | None = DEFAULT_CACHE) -> Path | None:
    """NVIDIA's PTX for this kernel and target: the corpus's beside the bytecode, else what the real tool
    handed ptxas for this project's sets (compiled once, cached under `cache_dir`); its host object, when it
    has one, is the file beside it with the suffix .host.o.  None without the tool, or when it fails."""
    kept = nvidia_ptx(path.parent, kernel_id(path), gpu)
    tool = real_tool()
    if kept is not None or tool is None or cache_dir is None or own_set_of(path) is None:
        return kept
    key = real_cache_key(path.read_bytes(), gpu, tool[2])
    ptx = cache_dir / f"{key}.ptx"
    if not ptx.is_file():
        (cache_dir / f"{key}.cubin").unlink(missing_ok=True)   # a cubin cached before PTX was kept
        compile_real(path, gpu, cache_dir)
    return ptx if ptx.is_file() else None


# ---------------------------------------------------------------- measuring a cubin


def disassemble(cubin: bytes) -> str:
    tool = nvidia_bin("nvdisasm")
    if tool is None:
        raise RuntimeError("nvdisasm not installed (wheel nvidia-cuda-nvdisasm)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([str(tool), "-c", f.name], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm failed: {proc.stderr.strip()[:160]}")
    return proc.stdout


_TMEM_ALLOC = re.compile(r"tcgen05\.alloc[.\w:]*\s+\[[^\]]*\]\s*,\s*(%?\w+)\s*;")


def tmem_columns(ptx: str | None) -> int | None:
    """Tensor-memory columns a kernel allocates (`tcgen05.alloc ..., N` or a register moved from a literal);
    0 when it allocates none, None when there is no PTX to look at."""
    if ptx is None:
        return None
    total = 0
    for m in _TMEM_ALLOC.finditer(ptx):
        arg = m.group(1)
        if not arg.startswith("%"):
            total = max(total, int(arg, 0))
            continue
        lit = re.findall(rf"mov\.[bu]32\s+{re.escape(arg)}\s*,\s*(\w+)\s*;", ptx)
        if lit:
            total = max(total, int(lit[-1], 0))
    return total


def loop_summary(lp: _sass.Loop) -> dict:
    counts = _sass.class_counts(_sass.opcode_counts(lp.instrs))
    return {"header": lp.header, "depth": lp.depth, "static": lp.static,
            "classes": {k: v for k, v in counts.items() if v}}


def measure_cubin(cubin: bytes, ptx: str | None = None) -> dict:
    """The static figures of one cubin (all kernels of the module summed; resources: the largest)."""
    funcs = _sass.parse_sass(disassemble(cubin))
    opcodes: dict[str, int] = {}
    loops: list[_sass.Loop] = []
    static = 0
    for fn in funcs:
        static += _sass.static_count(fn)
        for base, n in _sass.opcode_counts(fn.instrs, fn).items():
            opcodes[base] = opcodes.get(base, 0) + n
        loops.extend(_sass.natural_loops(fn))
    res = _sass.cubin_resources(cubin).values()
    main = _sass.main_loop(loops)
    return {
        "ok": True,
        "static": static,
        "classes": _sass.class_counts(opcodes),
        "opcodes": dict(sorted(opcodes.items())),
        "tensor_core": _sass.tensor_core_ops(opcodes),
        "registers": max((r.registers for r in res), default=0),
        "frame": max((r.frame_bytes for r in res), default=0),
        "shared": max((r.shared_bytes for r in res), default=0),
        "threads": max((k.threads or 0 for k in kernel_code(cubin).values()), default=0) or None,
        "tmem": tmem_columns(ptx),
        "loops": [loop_summary(lp) for lp in _sass.innermost(loops)],
        "main_loop": loop_summary(main) if main else None,
        "mma_loop": loop_summary(main) if main and any(_sass.TENSOR_CORE.match(i.base) for i in main.instrs)
        else None,
    }


def measure_safely(build: dict, ptx: str | None = None) -> dict:
    """measure_cubin of a build result, or its failure carried on."""
    if not build.get("ok"):
        return {"ok": False, "error": build.get("error", "failed")}
    try:
        return measure_cubin(build["cubin"], ptx)
    except Exception as e:  # noqa: BLE001 - a tool failure on one kernel is shown in its row
        return {"ok": False, "error": f"measure: {type(e).__name__}: {str(e)[:160]}"}


@functools.lru_cache(maxsize=1)
def _measure_code_hash() -> str:
    """A digest of the code that turns a cubin into figures: cached figures of the real tool's cubins are
    valid only for the code that computed them."""
    h = hashlib.sha256()
    for f in (Path(_sass.__file__), Path(__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def measure_real(path: Path, gpu: str, cache_dir: Path | None, public: Path = PUBLIC) -> dict:
    """The real tool's figures for one kernel and target (cached with its cubin: disassembling a big cubin
    costs seconds).  Tensor memory comes from NVIDIA's PTX (the corpus's, or what the tool handed ptxas for
    this project's sets: real_ptx)."""
    nv = nvidia_ptx(public, kernel_id(path), gpu) or real_ptx(path, gpu, cache_dir)
    figures = None
    tool = real_tool()
    if cache_dir is not None and tool is not None:
        key = real_cache_key(path.read_bytes(), gpu, tool[2])
        figures = cache_dir / f"{key}.{_measure_code_hash()}.json"
        if figures.is_file():
            return json.loads(figures.read_text())
    real = measure_safely(compile_real(path, gpu, cache_dir), nv.read_text() if nv else None)
    if figures is not None and real.get("ok"):
        _write_atomic(figures, json.dumps(real, sort_keys=True).encode())
    return real


def measure_pair(path: Path, gpu: str, cache_dir: Path | None, public: Path = PUBLIC) -> dict:
    """One row: ours and the real tool's cubin for one kernel and target, measured the same way."""
    ours_build = compile_ours(path, gpu)
    ours = measure_safely(ours_build, ours_build.get("ptx"))
    return {"kernel": kernel_id(path), "target": gpu, "ours": ours, "real": measure_real(path, gpu, cache_dir, public)}


def run_pool(fn, work: list[tuple], jobs: int, identify) -> list[dict]:
    """fn(*args) for every args of `work` on `jobs` worker processes, results in `work` order.  A worker
    that dies takes only its own row: `identify(*args)` plus an error for each side."""
    if jobs <= 1 or len(work) <= 1:
        return [fn(*args) for args in work]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    ctx = multiprocessing.get_context("spawn")  # no fork of a parent holding threads or LLVM state
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futs = [pool.submit(fn, *args) for args in work]
        rows = []
        for args, f in zip(work, futs):
            try:
                rows.append(f.result())
            except Exception as e:  # noqa: BLE001
                err = {"ok": False, "error": f"worker: {type(e).__name__}: {str(e)[:160]}"}
                rows.append({**identify(*args), **{side: dict(err) for side in SIDES}})
    return rows


SIDES = ("ours", "real", "nvidia")


def measure_all(paths: list[Path], gpus: list[str], cache_dir: Path | None, jobs: int,
                public: Path = PUBLIC) -> list[dict]:
    """measure_pair over kernels x targets; rows in (kernel, target) order."""
    return run_pool(measure_pair, [(p, g, cache_dir, public) for p in paths for g in gpus], jobs,
                    lambda p, g, *_: {"kernel": kernel_id(p), "target": g})


# ---------------------------------------------------------------- the PTX emulator on corpus inputs


@functools.lru_cache(maxsize=1)
def load_refs(corpus: Path = DEFAULT_CORPUS):
    """The corpus's numpy references (refs.py)."""
    sys.path.insert(0, str(corpus))
    try:
        import refs
    finally:
        sys.path.remove(str(corpus))
    return refs


def refs_for(module: Path, corpus: Path = DEFAULT_CORPUS):
    """The numpy references of the set the bytecode `module` belongs to: its export set's refs.py for this
    project's sets (examples/export_all.py), else the corpus's."""
    own = own_set_of(module)
    if own is None:
        return load_refs(corpus)
    return _export_all().load_refs(OWN_FOLDERS[own][1])


@functools.lru_cache(maxsize=1)
def _export_all():
    """examples/export_all.py, which knows where each set's refs.py is (it exports from their arrays)."""
    folder = str(REPO / "examples")
    if folder not in sys.path:
        sys.path.append(folder)
    import export_all
    return export_all


def emulate_on_corpus(ptx: str, cid: str, module: Path, corpus: Path = DEFAULT_CORPUS,
                      host_object: Path | None = None, memcheck: str = "strict") -> dict:
    """Run PTX on the kernel's corpus inputs, with the parameters of the bytecode `module` and the tensor maps
    `host_object` fills (emu.runner.run_ptx, in memory-check mode `memcheck`): {"ok", "thread_instructions",
    "classes", "correct", "problems", "warnings"} or {"ok": False, "error", "unsupported"} (unsupported: the
    instruction family the emulator lacks, or "tensor maps" for a TMA launch it cannot set up)."""
    from tileiras_async.emu import EmuError, UnsupportedInstruction
    from tileiras_async.emu.errors import UnsupportedLaunch
    from tileiras_async.emu.runner import run_ptx
    refs = refs_for(module, corpus)
    try:
        inputs, orig = refs.make_inputs(cid), refs.make_inputs(cid)
        rep = run_ptx(module, ptx, refs.grid(cid, inputs), list(inputs.values()),
                      host_object=str(host_object) if host_object else None, memcheck=memcheck).report
    except UnsupportedLaunch as e:
        return {"ok": False, "error": f"not emulated: {str(e)[:120]}", "unsupported": "tensor maps"}
    except UnsupportedInstruction as e:
        family = next((f for f in ("wgmma", "tcgen05", "mbarrier", "cp.async.bulk", "setmaxnreg") if f in str(e)),
                      "")
        return {"ok": False, "error": f"not emulated: {str(e)[:120]}", "unsupported": family or "other"}
    except EmuError as e:
        return {"ok": False, "error": f"{type(e).__name__}: {str(e)[:140]}"}
    except Exception as e:  # noqa: BLE001 - an emulator crash is a result here
        return {"ok": False, "error": f"crash: {type(e).__name__}: {str(e)[:140]}"}
    problems = refs.check(cid, orig, inputs)
    return {"ok": True, "thread_instructions": rep.thread_instructions, "classes": rep.instruction_classes,
            "correct": not problems, "problems": problems[:3], "warnings": list(rep.warnings)}


# ---------------------------------------------------------------- small shared printing helpers


def ratio(ours: float | None, real: float | None) -> float | None:
    if ours is None or real is None:
        return None
    if real == 0:
        return None if ours == 0 else float("inf")
    return ours / real


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else ("inf" if r == float("inf") else f"{r:.2f}")


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None and x != float("inf")]
    return statistics.median(xs) if xs else None


def git_head(*path: str) -> str:
    """The checkout's commit; with a path, the last commit that changed it (`src`: the compiler measured)."""
    argv = ["git", "-C", str(REPO), "log", "-1", "--format=%h", "HEAD", "--", *path]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def save_json(path: Path, payload: dict) -> None:
    """{"meta": ..., "rows": [...]} with one row per line: compact, and a diff shows which kernels changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = ",\n".join(json.dumps(r, sort_keys=True, separators=(",", ":")) for r in payload["rows"])
    meta = json.dumps(payload["meta"], sort_keys=True)
    path.write_text(f'{{"meta": {meta},\n"rows": [\n{rows}\n]}}\n')


def row_head(row: dict) -> str:
    return f"{row['kernel'][:30]:<30} {row['target']:<6}"


def failed_row(row: dict) -> str | None:
    """A compiled-both-ways row whose side(s) failed, as `<kernel> <target> ours: <error>; real: <error>`;
    None when both compiled."""
    errors = [f"{side}: {row[side]['error']}" for side in ("ours", "real") if not row[side].get("ok")]
    return f"{row_head(row)} {'; '.join(errors)}" if errors else None


def print_report(header: str, rows: list[dict], row_line, summary_of, save: Path | None, meta: dict,
                 after: list[str] = ()) -> None:
    """Per corpus set present in `rows` ("unhinted bytecode", then "as cuTile launches"): a title, the table
    and `summary_of(rows of the set)`; then the `after` lines, and every row saved as JSON when asked."""
    for name, label in SETS.items():
        part = [r for r in rows if set_of(r) == name]
        if not part:
            continue
        print(f"== {label} ({set_place(name)}): {len({r['kernel'] for r in part})} kernels ==")
        print(header)
        for row in part:
            print(row_line(row))
        print()
        for line in summary_of(part):
            print(line)
        print()
    for line in after:
        print(line)
    if save:
        save_json(save, {"meta": {"commit": git_head(), "src_commit": git_head("src"), **meta}, "rows": rows})
        print(f"\nsaved {len(rows)} rows to {save}")
