"""Prepare a self-contained GPU timing job: ours and NVIDIA's cubins for a set of kernels, their argument
buffers, launch configurations and expected outputs, in one folder that `bench/gpu/run_on_device.py` runs on a
machine with a GPU and nothing but python3 and the CUDA driver (no numpy, no venv, no network).

    python bench/gpu/build.py [--out build/gpu_job] [--gpu-name sm_90] [--kernels ID,ID...|all] [--no-large]
                              [--set launch|unhinted] [--max-mib 40] [--generate-over-mib 8] [--corpus DIR]
                              [--cache-dir DIR] [--verify] [--register-caps] [--versus REV]

Kernels: the corpus's (shared/corpus, inputs from its refs.py) and the workload suite's (examples/suite, its
refs.py), each at the size its refs.py gives ("corpus": small, launch-bound) and, for a few, a large size
registered through the same refs.py builders (`<id>.large`: shapes are runtime values, so the same bytecode
runs them) so that the timings measure the generated code: among them a 4096x4096x4096 f16 matmul and causal
attention at 4096 tokens, as cuTile users run them.

--set launch (the default) compiles the corpus's launch export (out/public-launch: the bytecode as cuTile
specialises it at launch); --set unhinted its plain export (out/public).  The suite has one export, unhinted.
The job says which (`set`, `set_label`, per case `set`) and that the runner loads it as cuTile does
(`loader`: "library", cuLibraryLoadData + cuLaunchKernelEx with the user's parameters; NVIDIA's TMA cubins
carry hidden tensor-map parameters that the launch hook in their `.nv.host` section fills).

Inputs over --generate-over-mib of the large matmul and attention are not stored: the runner generates them
from a seed and checks the outputs against a float64 reference at sampled coordinates and ours against
NVIDIA's (run_on_device.generate, sampled_check).

Ours is compiled in this process through the drop-in's path (`tileiras_async.stages.compile_in_process`, the
same cubin as `.venv/bin/tileiras`); NVIDIA's with the real `tileiras` of the nvidia-cuda-tileiras wheel
(`bench/_build.compile_real`, cached).  Both at -O3 for `--gpu-name`.

The job folder:

    job.json              what to run: per case the grid, the FLOP count (matmuls, attention), per cubin the
                          block, the user's kernel-parameter layout (the cubin's EIATTR_KPARAM_INFO, else its
                          PTX's without the tensor maps), how many hidden tensor maps its hook appends, static
                          shared memory; the buffers (stored, or `generate`: a seed); the parameter values
                          (`{"ptr": [buffer, byte offset]}` or `{"int": n}` / `{"raw": hex}`), the outputs to check
                          (buffer, byte offset, shape, byte strides, dtype, rtol/atol) -- cuTile's calling
                          convention v1 (`cutile_python_v1`), as the PTX emulator applies it
                          (tileiras_async.emu.runner.map_arguments)
    cubins/<id>.{ours,nvidia}.cubin
    cubins/<id>.{ours,nvidia}.ptx   the PTX behind the cubin where known (ours; NVIDIA's from the corpus), for
                          --verify and the CPU dry run (fake_libcuda.py)
    data/<case>/b<k>.bin.z, out_<name>.bin.z      zlib-compressed buffer images and expected outputs

--verify runs every corpus-size case of the job on the CPU as the device will: the PTX the job carries in the
PTX emulator, fed from the job's own buffer images and parameter bytes (run_on_device.param_values) for that
cubin's layout, NVIDIA's tensor maps filled by the cubin's own launch hook, checked with the runner's own output
check -- the job's plumbing end to end, short of the GPU.

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
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: _build, _common
sys.path.insert(0, str(Path(__file__).resolve().parent))          # bench/gpu/: run_on_device

import _build  # noqa: E402
from _common import DEFAULT_CORPUS, REPO  # noqa: E402
from tileiras_async.toolchain import cubin as elf  # noqa: E402

import numpy as np  # noqa: E402

FORMAT = 1
SIDES = ("ours", "nvidia")
SUITE = REPO / "examples" / "suite"
DEFAULT_OUT = REPO / "build" / "gpu_job"


@dataclass(frozen=True)
class Case:
    """One timed kernel launch: a case id of a refs.py, the bytecode it runs (`base`), where both live."""
    name: str
    base: str
    source: str                 # "corpus" or "suite"
    size: str = "corpus"        # "corpus": the refs.py size; "large": a bigger registration of the same kernel
    recipe: tuple | None = field(default=None, compare=False)   # (refs builder, args, kwargs) of a large size


# The corpus export a job compiles (--set): the launch set is the bytecode as cuTile specialises it at launch
# (shared/corpus/README.md, "The launch set"), which is what cuTile users get; the unhinted export has plain
# signatures.  The suite has one export, unhinted.
SETS = {"launch": "public-launch", "unhinted": "public"}
DEFAULT_SET = "launch"
# Inputs over this size are generated on the device from a seed instead of stored, where the runner has a
# float64 reference to sample (GEN_OPS); smaller ones, and kernels without such a reference, are stored.
DEFAULT_GENERATE_OVER_MIB = 8.0
GEN_OPS = {"_matmul": "matmul", "_attention": "attention"}
# Generated inputs are uniform in [-1, 1) (not refs.py's values): both compilers accumulate in float32 in
# their own order, so outputs are held to at least this (rtol, atol) against the float64 reference and
# against each other.
GEN_TOLERANCE = (1e-2, 1e-2)


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
    # 4096x4096x4096 f16, as cuTile users run a matmul: 137 GFLOP, inputs generated on the device
    "matmul_f16_f16out_128x128x64": ("corpus", "_matmul", ("float16", "float16", 4096, 4096, 4096, 128, 128),
                                     {"exact": False}),
    "matmul_f16_f32acc_64x64x32": ("corpus", "_matmul", ("float16", "float32", 1024, 1024, 1024, 64, 64),
                                   {"exact": False}),
    "reduce2d_rows_f16_16x128": ("corpus", "_reduce2d", ("float16", 2048, 1000, 16, 128), {}),
    "softmax_rows_f16_512": ("corpus", "_softmax", ("float16", 4096, 300, 512), {}),
    "layernorm_f16_128": ("corpus", "_layernorm", ("float16", 4096, 333, 128), {}),
    # 4k tokens (causal, grouped heads): inputs generated on the device
    "flash_attention_causal_gqa_f16": ("suite", "_attention", (),
                                       {"B": 16, "H": 4, "G": 2, "SQ": 4096, "SK": 4096, "D": 32, "causal": True,
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
    return register_sized(large_name(base), base, source, (builder, args, kwargs), corpus)


def register_sized(name: str, base: str, source: str, recipe: tuple, corpus: Path = DEFAULT_CORPUS) -> Case:
    """Register case `name`: kernel `base` at the size `recipe` (refs.py builder, args, kwargs) gives."""
    builder, args, kwargs = recipe
    refs = refs_for(source, corpus)
    if name not in refs.REFS:
        getattr(refs, builder)(name, *args, **kwargs)
    return Case(name, base, source, "large", recipe)


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


def bytecode_path(case: Case, corpus: Path = DEFAULT_CORPUS, bytecode_set: str = DEFAULT_SET) -> Path:
    d = corpus / "out" / SETS[bytecode_set] if case.source == "corpus" else SUITE
    return d / f"{case.base}.v13.4.tileirbc"


def set_of_case(case: Case, bytecode_set: str) -> str:
    """The export a case's bytecode comes from (the suite has only its unhinted one)."""
    return SETS[bytecode_set] if case.source == "corpus" else "suite (unhinted)"


def flop_count(case: Case, inputs: dict) -> int | None:
    """Floating-point operations of one launch, for the TFLOP/s figure: 2 per multiply-add of a matmul (batched
    too); 4 * D per (query, key) pair an attention computes (QK^T and PV), only the unmasked pairs when causal.
    None for kernels that are not matmuls or attention."""
    if case.base.startswith(("matmul", "bmm", "persistent_matmul")) and {"A", "B"} <= set(inputs):
        a, b = inputs["A"].shape, inputs["B"].shape
        batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
        return 2 * batch * a[-2] * a[-1] * b[-1]
    if "attention" in case.base and {"Q", "K"} <= set(inputs):
        nb, nh, sq, d = inputs["Q"].shape
        sk = inputs["K"].shape[2]
        pos = int(inputs.get("input_pos", 0))
        pairs = sum(min(sk, q + pos + 1) for q in range(sq)) if "causal" in case.base else sq * sk
        return 4 * nb * nh * d * pairs
    return None


# ---------------------------------------------------------------- the cubin's launch facts


def launch_info(cubin: bytes) -> dict[str, dict]:
    """Per kernel of a cubin (`toolchain.cubin`'s reading of it): `block` (EIATTR_REQNTID, None when absent),
    `kparams` ([offset, size] in ordinal order, from EIATTR_KPARAM_INFO; none from _V2's records, which leave
    the hidden tensor maps out) and `static_smem` (the .nv.shared section, driver reserve excluded)."""
    code = elf.kernel_code(cubin)
    out: dict[str, dict] = {}
    for kname, records in elf.launch_params(cubin).items():
        params = () if records.v2 else records.params
        ordinals = [ordinal for ordinal, _offset, _size in params]
        if ordinals != list(range(len(params))):
            raise ValueError(f"{kname}: kernel parameter ordinals {ordinals} are not 0..n-1")
        k = code.get(kname)
        out[kname] = {"block": list(k.block) if k is not None and k.block else None,
                      "kparams": [[offset, size] for _ordinal, offset, size in params],
                      "static_smem": k.shared_bytes if k is not None else 0}
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


def _array_spec(refs, case: str, name: str, arr: np.ndarray, where: tuple[int, int]) -> dict:
    """Where an array lives in the job's buffers and how to read its elements."""
    return {"buffer": where[0], "offset": where[1], "shape": list(arr.shape), "strides": [int(s) for s in arr.strides],
            "itemsize": arr.itemsize, "dtype": output_dtype(refs, case, name, arr)}


def generated_op(case: Case) -> str | None:
    """The runner's float64 reference (run_on_device.REFERENCE_OPS) for a case, when it has one: plain 2-D
    matmuls and attention."""
    if case.recipe is None:
        return None
    builder, _args, kwargs = case.recipe
    if builder == "_matmul" and not kwargs.get("batch") and not kwargs.get("round_tk"):
        return GEN_OPS[builder]
    return GEN_OPS.get(builder) if builder == "_attention" else None


def plan_generated(case: Case, refs, inputs: dict, op: str) -> tuple[list[dict], list[dict], list[dict]]:
    """(buffers, parameter values, outputs) of a case whose inputs the runner generates from seeds: the
    buffers that hold an output start zeroed, the others take seeded values; each output is checked against
    the runner's float64 reference of `op` at sampled coordinates."""
    images, params, loc = plan_arguments(inputs)
    out_names = {"matmul": ["C"], "attention": ["Out"]}[op]
    spec = {name: _array_spec(refs, case.name, name, inputs[name], loc[name]) for name in loc}
    buffers = []
    for k, img in enumerate(images):
        names = sorted(n for n, (b, _) in loc.items() if b == k)
        gen = {"nbytes": len(img), "seed": zlib.crc32(f"{case.name}/{k}".encode()), "dtype": spec[names[0]]["dtype"]}
        if any(n in out_names for n in names):
            gen["zero"] = True
        buffers.append({"generate": gen, "nbytes": len(img)})
    if op == "matmul":
        reference = {"op": op, "a": spec["A"], "b": spec["B"]}
    else:
        kwargs = case.recipe[2]
        reference = {"op": op, "q": spec["Q"], "k": spec["K"], "v": spec["V"], "scale": float(inputs["qk_scale"]),
                     "causal": bool(kwargs["causal"]), "pos": int(kwargs["pos"])}
    outputs = []
    for name in out_names:
        rtol, atol = (max(t, g) for t, g in zip(refs.tolerance(case.name, name), GEN_TOLERANCE))
        outputs.append(dict(spec[name], name=name, rtol=float(rtol), atol=float(atol), reference=reference))
    return buffers, params, outputs


def plan_case(case: Case, corpus: Path = DEFAULT_CORPUS, generate_over: float = DEFAULT_GENERATE_OVER_MIB * 2**20
              ) -> tuple[dict, dict[str, bytes]]:
    """The job entry of one case (everything but the cubins) and its data files (relative path -> bytes).
    Inputs of more than `generate_over` bytes are generated on the device where the case has a sampled
    reference (generated_op)."""
    refs = refs_for(case.source, corpus)
    if getattr(refs.REFS[case.name], "canon", None):
        raise ValueError(f"{case.name}: outputs compared after a canonicalisation cannot be checked on the GPU")
    inputs = refs.make_inputs(case.name)
    grid = list(refs.grid(case.name, inputs))
    flops = flop_count(case, inputs)
    op = generated_op(case)
    if op is not None and sum(v.nbytes for v in inputs.values() if _is_array(v)) > generate_over:
        buffers, params, outputs = plan_generated(case, refs, inputs, op)
        entry = {"case": case.name, "bytecode": case.base, "source": case.source, "size": case.size, "grid": grid,
                 "buffers": buffers, "params": params, "outputs": outputs, "flops": flops, "generated": True}
        return entry, {}
    untouched = refs.make_inputs(case.name)
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
        outputs.append(dict(_array_spec(refs, case.name, name, arr, loc[name]), name=name, rtol=float(rtol),
                            atol=float(atol), expected=path))
    entry = {"case": case.name, "bytecode": case.base, "source": case.source, "size": case.size, "grid": grid,
             "buffers": buffers, "params": params, "outputs": outputs, "flops": flops}
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


def ptx_layout(ptx: str, symbol: str) -> tuple[list[list[int]], int]:
    """(the whole parameter layout, how many trailing parameters are tensor maps) of entry `symbol` of `ptx`."""
    from tileiras_async.emu import load_program
    from tileiras_async.emu.runner import _ptx_entry, tensor_map_params
    layout = [[kp.offset, kp.size] for kp in load_program(ptx, symbol).kparams]
    return layout, len(tensor_map_params(_ptx_entry(ptx, symbol)[1]))


def host_section(cubin: bytes) -> bytes | None:
    """The cubin's `.nv.host` section: the x86-64 object with the launch hooks (ptxas --nv-host)."""
    return elf.host_object(cubin)


def cubin_entry(cubin: bytes, params: list[dict], file: str, ptx: str | None = None,
                fallback: list[list[int]] | None = None) -> dict:
    """What the runner needs to launch one cubin: its kernel, block, the layout of the user's parameters,
    how many hidden ones (tensor maps) its launch hook appends, static shared memory; or an error when the
    cubin does not hold exactly one kernel or its parameters do not fit the values.  A cubin without
    EIATTR_KPARAM_INFO (NVIDIA's TMA kernels) takes its layout from its `ptx`, else from `fallback` (the
    other compiler's cubin of the same bytecode: the user's parameters are the signature's).  `ptx` is kept
    (as `"ptx_ok"`) only when its entry is this cubin's."""
    info = launch_info(cubin)
    if len(info) != 1:
        return {"error": f"the cubin holds {len(info)} kernels ({', '.join(sorted(info))})"}
    (symbol, k), = info.items()
    if k["block"] is None:
        return {"error": f"{symbol}: no required block size (.reqntid) in the cubin"}
    layout, hidden, ptx_ok = k["kparams"], 0, False
    if ptx is not None:
        try:
            whole, maps = ptx_layout(ptx, symbol)
            ptx_ok = not layout or layout == whole
        except Exception:  # noqa: BLE001 - PTX of another kernel or tool version is only not carried
            whole, maps = None, 0
        if ptx_ok:
            layout, hidden = whole[:len(whole) - maps], maps
        elif whole is not None and maps and len(whole) == len(layout) and \
                all(size == 128 for _off, size in layout[len(layout) - maps:]):
            # the older parameter records (PTX ISA 8.x, our tensor-map kernels) list the hidden maps too, at
            # offsets aligned in the constant bank rather than from 0: the cubin's offsets, the maps left out
            layout, hidden, ptx_ok = layout[:len(layout) - maps], maps, True
    if not layout and params and fallback:
        layout = fallback
    bad = check_layout(params, layout)
    if bad:
        return {"error": f"{symbol}: {bad}"}
    return {"file": file, "symbol": symbol, "block": k["block"], "kparams": layout, "hidden": hidden,
            "host_hook": host_section(cubin) is not None, "ptx_ok": ptx_ok,
            "static_smem": k["static_smem"], "sha256": hashlib.sha256(cubin).hexdigest()[:16]}


def emulate_entry(job_dir: Path, entry: dict, ptx: str, side: str = "ours") -> list[str]:
    """Run a job entry on the PTX emulator exactly as run_on_device.py runs it on a GPU (the job's buffer images,
    the runner's parameter bytes for `side`'s layout, the tensor maps of the cubin's launch hook appended as the
    driver appends them, the runner's output check); returns the problems."""
    import run_on_device as rod
    from tileiras_async.emu import DeviceMemory, emulate_ptx, load_program
    from tileiras_async.emu.host_object import parse_host_object, with_tensor_maps
    cub = entry["cubins"][side]
    if "error" in cub:
        return [f"{side}: {cub['error']}"]
    prog = load_program(ptx, cub["symbol"])
    hidden = cub.get("hidden", 0)
    layout = [[kp.offset, kp.size] for kp in prog.kparams][:len(prog.kparams) - hidden]
    if layout != cub["kparams"]:
        return [f"the PTX's parameter layout {layout} is not the cubin's {cub['kparams']}"]
    mem = DeviceMemory()
    images = [rod.buffer_image(str(job_dir), b) for b in entry["buffers"]]
    bases = [mem.alloc(len(img), f"buffer {k}", init=img) for k, img in enumerate(images)]
    values = rod.param_values(entry["params"], cub["kparams"], bases)
    if hidden:
        from tileiras_async.emu.runner import _ptx_entry
        target, parsed = _ptx_entry(ptx, cub["symbol"])
        host = parse_host_object(host_section((job_dir / cub["file"]).read_bytes()) or b"", cub["file"])
        values = with_tensor_maps(host, cub["symbol"], target, parsed.params, values)
    emulate_ptx(ptx, cub["symbol"], tuple(entry["grid"]), tuple(cub["block"]), values, mem)
    after = [mem.read(base, len(img)).tobytes() for base, img in zip(bases, images)]
    return rod.check_outputs(str(job_dir), entry, after)


def verify_entry(job_dir: Path, entry: dict) -> str:
    """emulate_entry with the PTX the job carries beside each cubin: a short verdict per side."""
    verdicts = []
    for side in SIDES:
        rel = entry["cubins"][side].get("ptx")
        if rel is None:
            continue
        try:
            problems = emulate_entry(job_dir, entry, (job_dir / rel).read_text(), side)
        except Exception as e:  # noqa: BLE001 - the emulator's verdict is information, not the job
            problems = [f"{type(e).__name__}: {str(e)[:120]}"]
        verdicts.append(f"{side} " + ("correct" if not problems else "; ".join(problems)[:120]))
    return ", ".join(verdicts) or "no PTX"


def side_ptx(side: str, res: dict, case: Case, corpus: Path, bytecode_set: str, gpu: str) -> str | None:
    """The PTX behind a side's cubin, carried in the job for dry runs and --verify: ours from the compile;
    NVIDIA's as its tool wrote it for the corpus (same kernels, same tool; kept only if its entry matches)."""
    if side == "ours" or case.source != "corpus":
        return res.get("ptx")
    nv = _build.nvidia_ptx(corpus / "out" / SETS[bytecode_set], case.base, gpu)
    return nv.read_text() if nv else None


def add_cubin(out: Path, entry: dict, case: Case, side: str, res: dict, ptx: str | None) -> None:
    """entry["cubins"][side] for a compile result; the cubin's PTX written beside it when it is the cubin's."""
    if not res.get("ok"):
        entry["cubins"][side] = {"error": f"compile: {res.get('error', 'failed')}"}
        return
    fallback = entry["cubins"].get("ours", {}).get("kparams") if side != "ours" else None
    try:
        cub = cubin_entry(res["cubin"], entry["params"], f"cubins/{case.base}.{side}.cubin", ptx, fallback)
    except Exception as e:  # noqa: BLE001 - an unreadable cubin fails its side only
        cub = {"error": f"cubin: {type(e).__name__}: {str(e)[:160]}"}
    if cub.pop("ptx_ok", False):
        cub["ptx"] = f"cubins/{case.base}.{side}.ptx"
        if not (out / cub["ptx"]).exists():
            (out / cub["ptx"]).write_text(ptx)
    entry["cubins"][side] = cub


def build_job(cases: list[Case], out: Path, gpu: str, cache_dir: Path | None, corpus: Path = DEFAULT_CORPUS,
              log=print, verify: bool = False, register_caps: bool = False, versus: "_build.Checkout | None" = None,
              bytecode_set: str = DEFAULT_SET, generate_over_mib: float = DEFAULT_GENERATE_OVER_MIB) -> dict:
    """Write the job folder; returns its job.json content.  `bytecode_set`: the corpus export compiled
    (SETS).  `verify`: run each corpus-size case's entry on the PTX emulator
    (verify_entry) and say what it found.  `versus`: the second side is our compiler at that checkout
    (job["versus"] names it) instead of NVIDIA's."""
    if out.exists():
        shutil.rmtree(out)
    (out / "cubins").mkdir(parents=True)
    compiled: dict[tuple[str, str], dict] = {}
    entries = []
    for case in cases:
        t0 = time.perf_counter()
        try:
            entry, files = plan_case(case, corpus, generate_over_mib * 2**20)
        except Exception as e:  # noqa: BLE001 - one broken case is reported and left out
            log(f"{case.name:<44} skipped: {type(e).__name__}: {str(e)[:160]}")
            continue
        for rel, data in files.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        entry["set"] = set_of_case(case, bytecode_set)
        entry["cubins"] = {}
        for side in SIDES:
            key = (case.base, side)
            if key not in compiled:
                compiled[key] = compile_side(side, bytecode_path(case, corpus, bytecode_set), gpu, cache_dir,
                                             register_caps, versus.dir if versus is not None else None)
                if compiled[key].get("ok"):
                    (out / "cubins" / f"{case.base}.{side}.cubin").write_bytes(compiled[key]["cubin"])
            res = compiled[key]
            add_cubin(out, entry, case, side, res, side_ptx(side, res, case, corpus, bytecode_set, gpu))
        entries.append(entry)
        state = "  ".join(f"{s}: {'ok' if 'error' not in entry['cubins'][s] else entry['cubins'][s]['error'][:60]}"
                          for s in SIDES)
        if verify and case.size == "corpus":
            state += "  emulated: " + verify_entry(out, entry)
        log(f"{case.name:<44} grid {entry['grid']}  {state}  ({time.perf_counter() - t0:.1f} s)")
    tool = _build.real_tool()
    job = {"format": FORMAT, "gpu_name": gpu, "opt_level": _build.OPT_LEVEL,
           "commit": _build.git_head(), "src_commit": _build.git_head("src"),
           "nvidia_tileiras": tool[2] if tool else None, "register_caps": register_caps,
           "set": bytecode_set, "set_label": _build.SETS[SETS[bytecode_set]], "loader": "library",
           "cases": entries}
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
    ap.add_argument("--set", dest="bytecode_set", choices=sorted(SETS), default=DEFAULT_SET,
                    help="the corpus export: launch (as cuTile launches: specialised on the arrays, the default) "
                         "or unhinted (plain signatures)")
    ap.add_argument("--generate-over-mib", type=float, default=DEFAULT_GENERATE_OVER_MIB,
                    help="a large matmul's or attention's inputs over this size are generated on the device from "
                         "a seed and checked against a sampled float64 reference, instead of stored")
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
                        register_caps=args.register_caps, versus=versus, bytecode_set=args.bytecode_set,
                        generate_over_mib=args.generate_over_mib)
    size = folder_bytes(args.out)
    runnable = sum(1 for e in job["cases"] if all("error" not in e["cubins"][s] for s in SIDES))
    print(f"\n{len(job['cases'])} cases ({runnable} with both cubins) for {args.gpu_name}, {job['set_label']}, "
          f"in {args.out}: {size / 2**20:.1f} MiB")
    if size > args.max_mib * 2**20:
        print(f"error: the job is {size / 2**20:.1f} MiB, over --max-mib {args.max_mib}", file=sys.stderr)
        return 1
    return 0 if job["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
