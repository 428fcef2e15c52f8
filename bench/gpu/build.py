"""Prepare a self-contained GPU timing job: ours and NVIDIA's cubins for a set of kernels, their argument
buffers, launch configurations and expected outputs, in one folder that `bench/gpu/run_on_device.py` runs on a
machine with a GPU and nothing but python3 and the CUDA driver (no numpy, no venv, no network).

    python bench/gpu/build.py [--out build/gpu_job] [--gpu-name sm_90] [--kernels ID,ID...|all] [--no-large]
                              [--max-mib 40] [--corpus DIR] [--cache-dir DIR] [--verify] [--register-caps]
                              [--versus REV]

Kernels: the corpus's (shared/corpus, inputs from its refs.py) and the workload suite's (examples/suite, its
refs.py), each at the size its refs.py gives ("corpus": small, launch-bound) and, for a few, a large size
registered through the same refs.py builders (`<id>.large`: shapes are runtime values, so the same bytecode
runs them) so that the timings measure the generated code.

Ours is compiled in this process through the drop-in's path (`tileiras_async.stages.compile_in_process`, the
same cubin as `.venv/bin/tileiras`); NVIDIA's with the real `tileiras` of the nvidia-cuda-tileiras wheel
(`bench/_build.compile_real`, cached).  Both at -O3 for `--gpu-name`.

The job folder:

    job.json              what to run: per case the grid, per cubin the block, kernel-parameter layout (from the
                          cubin's EIATTR_KPARAM_INFO) and static shared memory; the buffers; the parameter values
                          (`{"ptr": [buffer, byte offset]}` or `{"int": n}` / `{"raw": hex}`), the outputs to check
                          (buffer, byte offset, shape, byte strides, dtype, rtol/atol) -- cuTile's calling
                          convention v1 (`cutile_python_v1`), as the PTX emulator applies it
                          (tileiras_async.emu.runner.map_arguments)
    cubins/<id>.{ours,nvidia}.cubin
    data/<case>/b<k>.bin.z, out_<name>.bin.z      zlib-compressed buffer images and expected outputs

--verify runs every corpus-size case of the job on the CPU as the device will: our PTX (and NVIDIA's, where the
corpus kept its sm_90 PTX) in the PTX emulator, fed from the job's own buffer images and parameter bytes
(run_on_device.param_values) for that cubin's layout, checked with the runner's own output check -- the job's
plumbing end to end, short of the GPU.

Exit status 0 when the job was written (a kernel that one compiler rejects is kept with that side's error), 1
when nothing could be written or the job exceeds --max-mib.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib.util
import json
import shutil
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: _build, _sass, _common
sys.path.insert(0, str(Path(__file__).resolve().parent))          # bench/gpu/: run_on_device

import _build  # noqa: E402
import _sass  # noqa: E402
from _common import DEFAULT_CORPUS, REPO  # noqa: E402
from tileiras_async.toolchain import cubin as elf  # noqa: E402

import numpy as np  # noqa: E402

FORMAT = 1
SIDES = ("ours", "nvidia")
SUITE = REPO / "examples" / "suite"
DEFAULT_OUT = REPO / "build" / "gpu_job"
EIATTR_REQNTID = elf.EIATTR_REQNTID
EIATTR_KPARAM_INFO = 0x17


@dataclass(frozen=True)
class Case:
    """One timed kernel launch: a case id of a refs.py, the bytecode it runs (`base`), where both live."""
    name: str
    base: str
    source: str                 # "corpus" or "suite"
    size: str = "corpus"        # "corpus": the refs.py size; "large": a bigger registration of the same kernel


# The kernels timed by default: every matmul family (128x128x64 f16 included), batched matmuls, reductions,
# scans, softmax, norms, attention, plus a few memory-bound ones (the launch-bound floor).
CORPUS_CASES = (
    "matmul_f16_f16out_128x128x64", "matmul_f16_f32acc_64x64x32", "matmul_bf16_64x64x64",
    "matmul_bf16_f32out_32x64x32", "matmul_tf32_64x64x32", "matmul_ragged_f16_32x32x32",
    "bmm_f16_32x32x32", "bmm_f32_16x32x16",
    "reduce1d_f32_t256", "reduce2d_rows_f16_16x128", "argmax_rows_f32_128",
    "cumsum_rows_f32_128", "cumsum_carry_f32_t512",
    "softmax_rows_f32_128", "softmax_rows_f16_512", "layernorm_f32_64", "layernorm_f16_128", "rmsnorm_bf16_1024",
    "vec_add_f32_t128", "transpose2d_f16_64x32",
)
SUITE_CASES = (
    "flash_attention_causal_gqa_f16", "flash_attention_ragged_f16", "persistent_matmul_f16", "layernorm_fwd_f32",
    "scan_rows_f32",
)

# Large sizes, registered with the refs.py builders under `<id>.large`: (source, builder, arguments after the id).
# The tile sizes (and attention's D and H) are the kernels' constants and must stay as the bytecode has them.
LARGE = {
    "matmul_f16_f16out_128x128x64": ("corpus", "_matmul", ("float16", "float16", 2048, 2048, 1024, 128, 128),
                                     {"exact": True}),
    "matmul_f16_f32acc_64x64x32": ("corpus", "_matmul", ("float16", "float32", 1024, 1024, 1024, 64, 64),
                                   {"exact": False}),
    "reduce2d_rows_f16_16x128": ("corpus", "_reduce2d", ("float16", 2048, 1000, 16, 128), {}),
    "softmax_rows_f16_512": ("corpus", "_softmax", ("float16", 4096, 300, 512), {}),
    "layernorm_f16_128": ("corpus", "_layernorm", ("float16", 4096, 333, 128), {}),
    "flash_attention_causal_gqa_f16": ("suite", "_attention", (),
                                       {"B": 4, "H": 4, "G": 2, "SQ": 1024, "SK": 1024, "D": 32, "causal": True,
                                        "pos": 0}),
}
DEFAULT_LARGE = tuple(LARGE)
# Kernels whose registers toolchain/occupancy.py caps on sm_90, at sizes where occupancy can matter
# (`--kernels all` or by name only: they take the job past 40 MiB).
LARGE.update({
    "layernorm_f32_64": ("corpus", "_layernorm", ("float32", 4096, 200, 64), {}),
    "rmsnorm_bf16_1024": ("corpus", "_rmsnorm", ("bfloat16", 2048, 1000, 1024), {}),
    "math_chain_f16_t512": ("corpus", "_math_chain", ("float16", 1 << 20, 512), {}),
})


# ---------------------------------------------------------------- the references


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_REFS: dict = {}


def refs_for(source: str, corpus: Path = DEFAULT_CORPUS):
    """The refs.py module of the corpus or of the suite (loaded once, under distinct names)."""
    key = (source, str(corpus))
    if key not in _REFS:
        if source == "corpus":
            _REFS[key] = _load_module("tileiras_gpu_corpus_refs", corpus / "refs.py")
        elif source == "suite":
            _REFS[key] = _load_module("tileiras_gpu_suite_refs", SUITE / "refs.py")
        else:
            raise ValueError(f"unknown source {source!r}")
    return _REFS[key]


def large_name(base: str) -> str:
    return f"{base}.large"


def register_large(base: str, corpus: Path = DEFAULT_CORPUS) -> Case:
    """Register `<base>.large` with its refs.py (once) and return its case."""
    source, builder, args, kwargs = LARGE[base]
    refs = refs_for(source, corpus)
    name = large_name(base)
    if name not in refs.REFS:
        getattr(refs, builder)(name, *args, **kwargs)
    return Case(name, base, source, "large")


def default_cases(large: bool = True, corpus: Path = DEFAULT_CORPUS) -> list[Case]:
    cases = [Case(c, c, "corpus") for c in CORPUS_CASES] + [Case(c, c, "suite") for c in SUITE_CASES]
    if large:
        cases += [register_large(b, corpus) for b in DEFAULT_LARGE]
    return cases


def all_cases(large: bool = True, corpus: Path = DEFAULT_CORPUS) -> list[Case]:
    """Every corpus and suite kernel with a reference (suite ids that the corpus also has run once), in id order;
    the large sizes after them."""
    corpus_ids = sorted(refs_for("corpus", corpus).REFS)
    suite_ids = sorted(set(refs_for("suite", corpus).REFS) - set(corpus_ids))
    cases = [Case(c, c, "corpus") for c in corpus_ids] + [Case(c, c, "suite") for c in suite_ids]
    if large:
        cases += [register_large(b, corpus) for b in LARGE]
    return cases


def select_cases(select: str, large: bool = True, corpus: Path = DEFAULT_CORPUS) -> list[Case]:
    """Cases by comma-separated ids (`<id>` or `<id>.large`; any corpus or suite id) or `all` (all_cases)."""
    if not select:
        return default_cases(large, corpus)
    if select == "all":
        return all_cases(large, corpus)
    out = []
    for want in (w.strip() for w in select.split(",")):
        if not want:
            continue
        base = want[:-len(".large")] if want.endswith(".large") else want
        if want.endswith(".large"):
            if base not in LARGE:
                raise SystemExit(f"error: no large size defined for '{base}' (have: {', '.join(LARGE)})")
            out.append(register_large(base, corpus))
        elif base in refs_for("corpus", corpus).REFS:
            out.append(Case(base, base, "corpus"))
        elif base in refs_for("suite", corpus).REFS:
            out.append(Case(base, base, "suite"))
        else:
            raise SystemExit(f"error: unknown kernel '{want}' (not in the corpus's or the suite's refs.py)")
    return out


def bytecode_path(case: Case, corpus: Path = DEFAULT_CORPUS) -> Path:
    d = corpus / "out" / "public" if case.source == "corpus" else SUITE
    return d / f"{case.base}.v13.4.tileirbc"


# ---------------------------------------------------------------- the cubin's launch facts


def launch_info(cubin: bytes) -> dict[str, dict]:
    """Per kernel of a cubin: `block` (EIATTR_REQNTID, None when absent), `kparams` ([offset, size] in ordinal
    order, from EIATTR_KPARAM_INFO) and `static_smem` (the .nv.shared section, driver reserve excluded)."""
    out: dict[str, dict] = {}
    for sec in elf.sections(cubin):
        if not sec.name.startswith(".nv.info."):
            continue
        kname = sec.name[len(".nv.info."):]
        block = None
        params: dict[int, tuple[int, int]] = {}
        for attr, payload in elf.nv_info(cubin, sec):
            if attr == EIATTR_REQNTID and len(payload) >= 4:
                dims = struct.unpack_from(f"<{len(payload) // 4}I", payload)
                block = (list(dims) + [1, 1])[:3]
            elif attr == EIATTR_KPARAM_INFO and len(payload) == 12:
                _index, ordinal, offset, flags = struct.unpack("<IHHI", payload)
                params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
        if sorted(params) != list(range(len(params))):
            raise ValueError(f"{kname}: kernel parameter ordinals {sorted(params)} are not 0..n-1")
        out[kname] = {"block": block, "kparams": [list(params[k]) for k in range(len(params))]}
    shared = _sass.cubin_resources(cubin)
    for kname, info in out.items():
        res = shared.get(kname)
        info["static_smem"] = res.shared_bytes if res else 0
    return out


# ---------------------------------------------------------------- arguments -> buffers and parameter values


def _span(a: np.ndarray) -> tuple[int, int, int]:
    """(lowest byte address, one past the highest, address of element 0) of an array's elements."""
    from tileiras_async.emu.memory import _byte_span
    p0 = a.__array_interface__["data"][0]
    lo, hi = _byte_span(a)
    return p0 + lo, p0 + max(hi, lo + a.itemsize), p0


def plan_buffers(arrays: list[np.ndarray]) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Device buffer images for the array arguments and, per array, (buffer index, byte offset of element 0).
    Arrays whose memory overlaps share one buffer, as on a GPU (and as the emulator allocates them)."""
    spans = [_span(a) for a in arrays]
    groups: list[list] = []          # [lo, hi, [array indices]] in address order
    for k in sorted(range(len(arrays)), key=lambda k: spans[k][0]):
        lo, hi, _ = spans[k]
        if groups and lo < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], hi)
            groups[-1][2].append(k)
        else:
            groups.append([lo, hi, [k]])
    groups.sort(key=lambda g: min(g[2]))   # buffers in argument order, whatever the host addresses were
    images: list[bytes] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(arrays)
    for b, (lo, hi, members) in enumerate(groups):
        images.append(ctypes.string_at(lo, hi - lo))
        for k in members:
            where[k] = (b, spans[k][2] - lo)
    return images, where


def _scalar_param(v) -> dict:
    """A scalar argument as a parameter value: integers (and bools, bf16/fp8 bit patterns) by value, floats by
    their bytes in their own width (the kernel's parameter has the argument's dtype)."""
    if isinstance(v, (bool, np.bool_)):
        return {"int": int(v)}
    if isinstance(v, (int, np.integer)):
        return {"int": int(v)}
    if isinstance(v, np.floating):
        return {"raw": np.asarray(v).tobytes().hex()}
    if isinstance(v, float):
        return {"raw": np.float64(v).tobytes().hex()}
    raise ValueError(f"unsupported scalar argument {v!r}")


def _is_array(v) -> bool:
    return isinstance(v, np.ndarray) and v.ndim > 0


def plan_arguments(inputs: dict) -> tuple[list[bytes], list[dict], dict[str, tuple[int, int]]]:
    """(buffer images, parameter values in entry order, name -> (buffer, offset)) for a refs.py input dict in
    cuTile parameter order: an array is its base pointer, its shape, then its strides in elements; a scalar is
    one parameter."""
    names = [n for n, v in inputs.items() if _is_array(v)]
    images, where = plan_buffers([inputs[n] for n in names])
    loc = dict(zip(names, where))
    params: list[dict] = []
    for name, v in inputs.items():
        if name in loc:
            params.append({"ptr": list(loc[name])})
            params += [{"int": int(n)} for n in v.shape]
            params += [{"int": int(s) // v.itemsize} for s in v.strides]
        else:
            params.append(_scalar_param(v.reshape(())[()] if isinstance(v, np.ndarray) else v))
    return images, params, loc


def check_layout(params: list[dict], kparams: list[list[int]]) -> str | None:
    """Why `params` cannot be passed to a kernel with this parameter layout, or None."""
    if len(params) != len(kparams):
        return f"{len(params)} parameter values for a kernel of {len(kparams)} parameters"
    for i, (p, (_off, size)) in enumerate(zip(params, kparams)):
        if "ptr" in p and size != 8:
            return f"parameter {i} is a pointer but {size} bytes in the cubin"
        if "raw" in p and len(bytes.fromhex(p["raw"])) != size:
            return f"parameter {i}: {len(p['raw']) // 2}-byte value for a {size}-byte parameter"
        if "int" in p and not -(1 << (8 * size - 1)) <= p["int"] < (1 << (8 * size)):
            return f"parameter {i}: {p['int']} does not fit in {size} bytes"
    return None


def output_dtype(refs, case: str, name: str, arr: np.ndarray) -> str:
    """The element format the runner decodes an output with: refs.py's cuTile dtype for formats numpy lacks
    (bfloat16, fp8: stored as unsigned bits), numpy's name otherwise."""
    declared = refs.REFS[case].dtypes.get(name)
    if declared == "bfloat16" or (declared or "").startswith("float8"):
        return declared
    return arr.dtype.name


def plan_case(case: Case, corpus: Path = DEFAULT_CORPUS) -> tuple[dict, dict[str, bytes]]:
    """The job entry of one case (everything but the cubins) and its data files (relative path -> bytes)."""
    refs = refs_for(case.source, corpus)
    if getattr(refs.REFS[case.name], "canon", None):
        raise ValueError(f"{case.name}: outputs compared after a canonicalisation cannot be checked on the GPU")
    inputs = refs.make_inputs(case.name)
    untouched = refs.make_inputs(case.name)
    grid = list(refs.grid(case.name, untouched))
    expected = refs.reference(case.name, untouched)
    images, params, loc = plan_arguments(inputs)
    folder = f"data/{case.name}"
    files = {f"{folder}/b{k}.bin.z": zlib.compress(img, 6) for k, img in enumerate(images)}
    buffers = [{"file": f"{folder}/b{k}.bin.z", "nbytes": len(img)} for k, img in enumerate(images)]
    outputs = []
    for name in sorted(expected):
        arr = inputs[name]
        want = np.ascontiguousarray(np.asarray(expected[name]).astype(arr.dtype, copy=False))
        if want.shape != arr.shape:
            raise ValueError(f"{case.name}: reference {name} has shape {want.shape}, the argument {arr.shape}")
        rtol, atol = refs.tolerance(case.name, name)
        path = f"{folder}/out_{name}.bin.z"
        files[path] = zlib.compress(want.tobytes(), 6)
        buf, off = loc[name]
        outputs.append({"name": name, "buffer": buf, "offset": off, "shape": list(arr.shape),
                        "strides": [int(s) for s in arr.strides], "itemsize": arr.itemsize,
                        "dtype": output_dtype(refs, case.name, name, arr), "rtol": float(rtol), "atol": float(atol),
                        "expected": path})
    entry = {"case": case.name, "bytecode": case.base, "source": case.source, "size": case.size, "grid": grid,
             "buffers": buffers, "params": params, "outputs": outputs}
    return entry, files


# ---------------------------------------------------------------- compiling


def compile_side(side: str, path: Path, gpu: str, cache_dir: Path | None, register_caps: bool = False,
                 versus: Path | None = None) -> dict:
    """{"ok", "cubin"} or {"ok": False, "error"} for ours or NVIDIA's tileiras; ours with `--register-caps` when
    `register_caps` (an A/B of toolchain/occupancy.py).  `versus`: the other side is our compiler from that
    checkout's src/ instead of NVIDIA's."""
    if side == "ours":
        return _build.compile_ours(path, gpu, register_caps)
    if versus is not None:
        return _build.compile_ours_from(versus / "src", path, gpu)
    return _build.compile_real(path, gpu, cache_dir)


def cubin_entry(cubin: bytes, params: list[dict], file: str) -> dict:
    """What the runner needs to launch one cubin: its kernel, block, parameter layout, static shared memory; or
    an error when the cubin does not hold exactly one kernel or its parameters do not fit the values."""
    info = launch_info(cubin)
    if len(info) != 1:
        return {"error": f"the cubin holds {len(info)} kernels ({', '.join(sorted(info))})"}
    (symbol, k), = info.items()
    if k["block"] is None:
        return {"error": f"{symbol}: no required block size (.reqntid) in the cubin"}
    bad = check_layout(params, k["kparams"])
    if bad:
        return {"error": f"{symbol}: {bad}"}
    return {"file": file, "symbol": symbol, "block": k["block"], "kparams": k["kparams"],
            "static_smem": k["static_smem"], "sha256": hashlib.sha256(cubin).hexdigest()[:16]}


def emulate_entry(job_dir: Path, entry: dict, ptx: str, side: str = "ours") -> list[str]:
    """Run a job entry on the PTX emulator exactly as run_on_device.py runs it on a GPU (the job's buffer images,
    the runner's parameter bytes for `side`'s layout, the runner's output check); returns the problems."""
    import run_on_device as rod
    from tileiras_async.emu import DeviceMemory, emulate_ptx, load_program
    cub = entry["cubins"][side]
    if "error" in cub:
        return [f"{side}: {cub['error']}"]
    prog = load_program(ptx, cub["symbol"])
    layout = [[kp.offset, kp.size] for kp in prog.kparams]
    if layout != cub["kparams"]:
        return [f"the PTX's parameter layout {layout} is not the cubin's {cub['kparams']}"]
    mem = DeviceMemory()
    images = [rod.read_blob(str(job_dir), b["file"]) for b in entry["buffers"]]
    bases = [mem.alloc(len(img), f"buffer {k}", init=img) for k, img in enumerate(images)]
    values = rod.param_values(entry["params"], cub["kparams"], bases)
    emulate_ptx(ptx, cub["symbol"], tuple(entry["grid"]), tuple(cub["block"]), values, mem)
    after = [mem.read(base, len(img)).tobytes() for base, img in zip(bases, images)]
    return rod.check_outputs(str(job_dir), entry, after)


def verify_entry(job_dir: Path, entry: dict, case: Case, gpu: str, ours: dict, corpus: Path) -> str:
    """emulate_entry with our PTX and, where the corpus kept it, NVIDIA's PTX: a short verdict per side."""
    ptx = {"ours": ours.get("ptx")}
    if case.source == "corpus":
        nv = _build.nvidia_ptx(corpus / "out" / "public", case.base, gpu)
        ptx["nvidia"] = nv.read_text() if nv else None
    verdicts = []
    for side, text in ptx.items():
        if text is None:
            continue
        try:
            problems = emulate_entry(job_dir, entry, text, side)
        except Exception as e:  # noqa: BLE001 - the emulator's verdict is information, not the job
            problems = [f"{type(e).__name__}: {str(e)[:120]}"]
        verdicts.append(f"{side} " + ("correct" if not problems else "; ".join(problems)[:120]))
    return ", ".join(verdicts) or "no PTX"


def build_job(cases: list[Case], out: Path, gpu: str, cache_dir: Path | None, corpus: Path = DEFAULT_CORPUS,
              log=print, verify: bool = False, register_caps: bool = False, versus: "_build.Checkout | None" = None
              ) -> dict:
    """Write the job folder; returns its job.json content.  `verify`: run each corpus-size case's entry on
    the PTX emulator (verify_entry) and say what it found.  `versus`: the second side is our compiler at that
    checkout (job["versus"] names it) instead of NVIDIA's."""
    if out.exists():
        shutil.rmtree(out)
    (out / "cubins").mkdir(parents=True)
    compiled: dict[tuple[str, str], dict] = {}
    entries = []
    for case in cases:
        t0 = time.perf_counter()
        try:
            entry, files = plan_case(case, corpus)
        except Exception as e:  # noqa: BLE001 - one broken case is reported and left out
            log(f"{case.name:<44} skipped: {type(e).__name__}: {str(e)[:160]}")
            continue
        for rel, data in files.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        entry["cubins"] = {}
        for side in SIDES:
            key = (case.base, side)
            if key not in compiled:
                compiled[key] = compile_side(side, bytecode_path(case, corpus), gpu, cache_dir, register_caps,
                                             versus.dir if versus is not None else None)
                if compiled[key].get("ok"):
                    (out / "cubins" / f"{case.base}.{side}.cubin").write_bytes(compiled[key]["cubin"])
            res = compiled[key]
            if not res.get("ok"):
                entry["cubins"][side] = {"error": f"compile: {res.get('error', 'failed')}"}
                continue
            try:
                entry["cubins"][side] = cubin_entry(res["cubin"], entry["params"], f"cubins/{case.base}.{side}.cubin")
            except Exception as e:  # noqa: BLE001 - an unreadable cubin fails its side only
                entry["cubins"][side] = {"error": f"cubin: {type(e).__name__}: {str(e)[:160]}"}
        entries.append(entry)
        state = "  ".join(f"{s}: {'ok' if 'error' not in entry['cubins'][s] else entry['cubins'][s]['error'][:60]}"
                          for s in SIDES)
        if verify and case.size == "corpus":
            state += "  emulated: " + verify_entry(out, entry, case, gpu, compiled[(case.base, "ours")], corpus)
        log(f"{case.name:<44} grid {entry['grid']}  {state}  ({time.perf_counter() - t0:.1f} s)")
    tool = _build.real_tool()
    job = {"format": FORMAT, "gpu_name": gpu, "opt_level": _build.OPT_LEVEL,
           "commit": _build.git_head(), "src_commit": _build.git_head("src"),
           "nvidia_tileiras": tool[2] if tool else None, "register_caps": register_caps, "cases": entries}
    if versus is not None:
        job["versus"] = f"ours@{versus.commit}"
    (out / "job.json").write_text(json.dumps(job, indent=1, sort_keys=True) + "\n")
    return job


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--gpu-name", default="sm_90")
    ap.add_argument("--kernels", default="",
                    help="comma-separated ids (<id> or <id>.large), or all; default: the set above")
    ap.add_argument("--no-large", action="store_true", help="leave out the large sizes")
    ap.add_argument("--max-mib", type=float, default=40.0)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--cache-dir", type=Path, default=_build.DEFAULT_CACHE,
                    help="cache of NVIDIA's cubins (bench/_build.py)")
    ap.add_argument("--verify", action="store_true",
                    help="run the corpus-size cases of the job on the PTX emulator (our PTX) first")
    ap.add_argument("--register-caps", action="store_true",
                    help="our cubins with --register-caps (toolchain/occupancy.py), for an A/B")
    ap.add_argument("--versus", metavar="REV",
                    help="time ours against our compiler at git revision REV instead of NVIDIA's (a regression "
                         "hunt: the runner times both sides in turn)")
    args = ap.parse_args(argv)
    if not (args.corpus / "refs.py").is_file():
        print(f"error: no corpus at {args.corpus} (refs.py missing)", file=sys.stderr)
        return 1
    cases = select_cases(args.kernels, not args.no_large, args.corpus)
    with _build.Checkout(args.versus) if args.versus else contextlib.nullcontext() as versus:
        job = build_job(cases, args.out, args.gpu_name, args.cache_dir, args.corpus, verify=args.verify,
                        register_caps=args.register_caps, versus=versus)
    size = folder_bytes(args.out)
    runnable = sum(1 for e in job["cases"] if all("error" not in e["cubins"][s] for s in SIDES))
    print(f"\n{len(job['cases'])} cases ({runnable} with both cubins) for {args.gpu_name} in {args.out}: "
          f"{size / 2**20:.1f} MiB")
    if size > args.max_mib * 2**20:
        print(f"error: the job is {size / 2**20:.1f} MiB, over --max-mib {args.max_mib}", file=sys.stderr)
        return 1
    return 0 if job["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
