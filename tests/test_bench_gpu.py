"""The GPU timing job (bench/gpu/): what build.py reads from cubins and writes, that its kernel-parameter packing
is the PTX emulator's (cuTile's calling convention v1), how run_on_device.py checks outputs, and the runner's
whole flow -- isolation, faults, crashes, hangs, the time budget, timing arithmetic -- against a stand-in
libcuda (bench/gpu/fake_libcuda.py), so that the one run on a real GPU works the first time."""
from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, nvidia_bin, requires_corpus

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "bench" / "gpu"
RUNNER = GPU / "run_on_device.py"
FAKE = GPU / "fake_libcuda.py"
sys.path.insert(0, str(GPU))
sys.path.insert(0, str(REPO / "bench"))

import build  # noqa: E402
import report  # noqa: E402
import run_on_device as rod  # noqa: E402

from tileiras_async.emu import DeviceMemory, load_program  # noqa: E402
from tileiras_async.emu.machine import _param_bytes  # noqa: E402
from tileiras_async.emu.runner import default_block, map_arguments  # noqa: E402

pytestmark = requires_corpus


def _emulator_block(ptx: str, inputs: dict) -> tuple[bytes, list, dict]:
    """The parameter block the PTX emulator builds for these arguments, its layout and the array addresses."""
    prog = load_program(ptx)
    args = list(inputs.values())
    params, arrays = map_arguments(prog, args, DeviceMemory())
    block = bytearray(prog.kparam_size)
    for kp, v in zip(prog.kparams, params):
        block[kp.offset:kp.offset + kp.size] = _param_bytes(kp, v).tobytes()
    names = list(inputs)
    return bytes(block), [[kp.offset, kp.size] for kp in prog.kparams], {names[i]: a for i, a in arrays}


def _bases(loc: dict, addresses: dict) -> list:
    """Buffer base addresses that put every array where the emulator put it."""
    bases: dict[int, int] = {}
    for name, (buf, off) in loc.items():
        base = addresses[name] - off
        assert bases.setdefault(buf, base) == base, f"{name}: arrays of one buffer at inconsistent addresses"
    return [bases[b] for b in range(len(bases))]


# ---------------------------------------------------------------- argument packing = the emulator's


@pytest.mark.parametrize("case", ["vec_add_f32_t128", "layernorm_f32_64", "gather_idx_f16_i64_t256",
                                  "rmsnorm_bf16_1024", "branch_scalar_neg_t64", "saxpy_f64_t64",
                                  "matmul_f16_f16out_128x128x64", "bmm_f32_16x32x16"])
def test_parameter_block_is_the_emulators(case):
    """NVIDIA's own sm_90 PTX fixes the entry's parameters; the runner's block for the job's values must be
    byte for byte what the emulator passes that PTX (pointers, shapes, strides, i64 indices, f32/f64/i32
    scalars, a negative scalar)."""
    refs = build.refs_for("corpus")
    inputs = refs.make_inputs(case)
    images, params, loc = build.plan_arguments(inputs)
    want, kparams, addresses = _emulator_block((PUBLIC / f"{case}.v13.4.sm_90.ptx").read_text(), inputs)
    assert build.check_layout(params, kparams) is None
    got = rod.param_block(params, kparams, _bases(loc, addresses))
    assert got == want
    # the buffer images are the arguments' bytes
    for name, (buf, off) in loc.items():
        a = inputs[name]
        assert images[buf][off:off + a.nbytes] == np.ascontiguousarray(a).tobytes()


def test_overlapping_arrays_share_a_buffer_and_views_keep_their_strides():
    base = np.arange(40, dtype=np.float32)
    inputs = {"x": base[::2], "y": base[10:20], "z": np.zeros(3, np.int64), "s": np.float32(2.5),
              "t": np.int32(-4), "flag": np.bool_(True)}
    images, params, loc = build.plan_arguments(inputs)
    assert len(images) == 2 and loc["x"][0] == loc["y"][0] == 0 and loc["z"] == (1, 0)
    assert loc["y"][1] - loc["x"][1] == 40
    assert params[:3] == [{"ptr": [0, 0]}, {"int": 20}, {"int": 2}]
    assert params[-3:] == [{"raw": np.float32(2.5).tobytes().hex()}, {"int": -4}, {"int": 1}]
    kparams = [[0, 8], [8, 4], [12, 4], [16, 8], [24, 4], [28, 4], [32, 8], [40, 4], [44, 4], [48, 4], [52, 4],
               [56, 1]]
    assert build.check_layout(params, kparams) is None
    block = rod.param_block(params, kparams, [0x1000, 0x2000])
    assert struct.unpack_from("<QiiQii", block, 0) == (0x1000, 20, 2, 0x1000 + 40, 10, 1)
    assert struct.unpack_from("<fiB", block, 48) == (2.5, -4, 1)
    assert "pointer" in build.check_layout(params, [[0, 4]] + kparams[1:])
    bad = [dict(p) for p in params]
    bad[-2] = {"int": 1 << 40}
    assert "does not fit" in build.check_layout(bad, kparams)
    assert "parameter values" in build.check_layout(params, kparams[:-1])


# ---------------------------------------------------------------- what build.py reads from cubins


@pytest.fixture(scope="module")
def vec_add_cubins(tmp_path_factory):
    """Ours and (when the wheel is installed) NVIDIA's sm_90 cubin of vec_add_f32_t128."""
    path = PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"
    ours = build.compile_side("ours", path, "sm_90", None)
    assert ours["ok"], ours
    real = None
    if nvidia_bin("tileiras") is not None:
        real = build.compile_side("nvidia", path, "sm_90", tmp_path_factory.mktemp("real-cache"))
        assert real["ok"], real
    return ours, real


def test_launch_info_is_the_ptx_entry(vec_add_cubins):
    """EIATTR_KPARAM_INFO / EIATTR_REQNTID of the cubin give the PTX entry's parameter layout and .reqntid."""
    ours, real = vec_add_cubins
    prog = load_program(ours["ptx"])
    (name, info), = build.launch_info(ours["cubin"]).items()
    assert name == prog.kernel
    assert info["kparams"] == [[kp.offset, kp.size] for kp in prog.kparams]
    assert tuple(info["block"]) == tuple(default_block(prog))
    if real is None:
        pytest.skip("NVIDIA's tileiras not installed: only our cubin checked")
    nv = load_program((PUBLIC / "vec_add_f32_t128.v13.4.sm_90.ptx").read_text())
    (nname, ninfo), = build.launch_info(real["cubin"]).items()
    assert nname == nv.kernel == name
    assert ninfo["kparams"] == [[kp.offset, kp.size] for kp in nv.kparams] == info["kparams"]
    assert ninfo["block"] == [128, 1, 1]


@requires_corpus
def test_launch_info_of_nvidias_tma_cubin_leaves_the_layout_to_the_ptx(tmp_path):
    """NVIDIA's warp-specialised TMA matmul records its parameters with EIATTR_KPARAM_INFO_V2, which leaves the
    hidden tensor maps out: launch_info gives no layout from them, cubin_entry takes it from the PTX (its maps
    the hidden ones), and the block (.reqntid 256) and static shared memory are toolchain.cubin's reading."""
    from tileiras_async.toolchain.cubin import kernel_code, launch_params
    if nvidia_bin("tileiras") is None:
        pytest.skip("NVIDIA's tileiras not installed")
    cid = "matmul_f16_f32acc_64x64x32"
    real = build.compile_side("nvidia", LAUNCH / f"{cid}.v13.4.tileirbc", "sm_90", tmp_path)
    assert real["ok"], real
    (name, info), = build.launch_info(real["cubin"]).items()
    code = kernel_code(real["cubin"])[name]
    assert launch_params(real["cubin"])[name].v2
    assert info == {"block": [256, 1, 1], "kparams": [], "static_smem": code.shared_bytes}
    assert code.block == (256, 1, 1) and code.threads == 256
    _, params, _ = build.plan_arguments(build.refs_for("corpus").make_inputs(cid))
    ptx = (LAUNCH / f"{cid}.v13.4.sm_90.ptx").read_text()
    entry = build.cubin_entry(real["cubin"], params, "cubins/x.cubin", ptx=ptx)
    assert "error" not in entry and entry["ptx_ok"] and entry["hidden"] == 3 and len(entry["kparams"]) == 15


def test_cubin_entry_rejects_a_layout_that_does_not_fit(vec_add_cubins):
    ours, _ = vec_add_cubins
    _, params, _ = build.plan_arguments(build.refs_for("corpus").make_inputs("vec_add_f32_t128"))
    entry = build.cubin_entry(ours["cubin"], params, "cubins/x.cubin")
    assert entry["block"] == [128, 1, 1] and len(entry["kparams"]) == 9 and "error" not in entry
    assert "parameter values" in build.cubin_entry(ours["cubin"], params[:-1], "x")["error"]


# ---------------------------------------------------------------- a job entry run on the PTX emulator


def _write_entry(job: Path, case: str, side: str, ptx: str) -> dict:
    entry, files = build.plan_case(build.Case(case, case, "corpus"))
    for rel, data in files.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    prog = load_program(ptx)
    entry["cubins"] = {side: {"symbol": prog.kernel, "block": list(default_block(prog)),
                              "kparams": [[kp.offset, kp.size] for kp in prog.kparams]}}
    return entry


@pytest.mark.parametrize("case", ["vec_add_f32_t128", "layernorm_f32_64", "rmsnorm_bf16_1024"])
def test_job_entry_runs_correctly_on_the_emulator(tmp_path, case):
    """NVIDIA's own PTX, fed exactly what the device gets (the job's buffer images, the runner's parameter
    bytes), computes the job's expected outputs, as the runner checks them."""
    ptx = (PUBLIC / f"{case}.v13.4.sm_90.ptx").read_text()
    entry = _write_entry(tmp_path, case, "nvidia", ptx)
    assert build.emulate_entry(tmp_path, entry, ptx, "nvidia") == []
    # a wrong expectation is caught by the same check
    out = entry["outputs"][-1]
    path = tmp_path / out["expected"]
    want = bytearray(zlib.decompress(path.read_bytes()))
    want[:out["itemsize"]] = b"\x7f" * out["itemsize"]
    path.write_bytes(zlib.compress(bytes(want)))
    problems = build.emulate_entry(tmp_path, entry, ptx, "nvidia")
    assert len(problems) == 1 and problems[0].startswith(f"{out['name']}: 1 of ")


def test_job_entry_with_our_ptx_and_a_layout_mismatch(tmp_path, vec_add_cubins):
    ours, _ = vec_add_cubins
    entry = _write_entry(tmp_path, "vec_add_f32_t128", "ours", ours["ptx"])
    assert build.emulate_entry(tmp_path, entry, ours["ptx"]) == []
    entry["cubins"]["ours"]["kparams"][1] = [8, 8]
    assert "is not the cubin's" in build.emulate_entry(tmp_path, entry, ours["ptx"])[0]


# ---------------------------------------------------------------- the case list


def test_default_cases_exist_and_large_sizes_register():
    cases = build.default_cases(large=False)
    assert len({c.name for c in cases}) == len(cases) >= 20
    for c in cases:
        assert build.bytecode_path(c).is_file(), c
        assert c.name in build.refs_for(c.source).REFS
    big = build.select_cases("matmul_f16_f16out_128x128x64.large")
    assert big == [build.Case("matmul_f16_f16out_128x128x64.large", "matmul_f16_f16out_128x128x64", "corpus",
                              "large")]
    refs = build.refs_for("corpus")
    assert refs.grid(big[0].name, {}) == (32, 32, 1)      # 4096x4096x4096 in 128x128 tiles
    assert build.select_cases("matmul_f16_f16out_128x128x64.large") == big      # registered once
    with pytest.raises(SystemExit, match="unknown kernel"):
        build.select_cases("no_such_kernel")
    with pytest.raises(SystemExit, match="no large size"):
        build.select_cases("vec_add_f32_t128.large")


# ---------------------------------------------------------------- checking outputs on the device side


def _both_paths(monkeypatch, *args):
    """compare() with numpy and with its pure-Python fallback (the device may have no numpy)."""
    with_np = rod.compare(*args)
    monkeypatch.setattr(rod, "_first_bad_numpy", lambda *a: None)
    without = rod.compare(*args)
    monkeypatch.undo()
    return with_np, without


@pytest.mark.parametrize("dtype,np_dtype", [("float32", np.float32), ("float16", np.float16),
                                            ("float64", np.float64)])
def test_compare_floats_within_tolerance(monkeypatch, dtype, np_dtype):
    want = np.array([1.0, -2.0, np.nan, np.inf, 0.0, 100.0], np_dtype)
    close = want.copy()
    close[1] = np_dtype(-2.001)
    assert _both_paths(monkeypatch, close.tobytes(), want.tobytes(), dtype, 1e-3, 1e-6, [6]) == (None, None)
    off = want.copy()
    off[5] = np_dtype(101.0)
    off[2] = np_dtype(1.0)                 # NaN expected, a number came
    a, b = _both_paths(monkeypatch, off.tobytes(), want.tobytes(), dtype, 1e-3, 1e-6, [2, 3])
    assert a == b and a.startswith("2 of 6 differ, first at (0, 2): got 1.0 expected nan")
    inf = want.copy()
    inf[3] = -np.inf
    a, b = _both_paths(monkeypatch, inf.tobytes(), want.tobytes(), dtype, 1.0, 1.0, [6])
    assert a == b and "first at (3,)" in a


def test_compare_bf16_ints_and_raw_formats(monkeypatch):
    bits = np.array([0x3F80, 0x4000, 0xC040], np.uint16)          # 1.0, 2.0, -3.0
    near = np.array([0x3F81, 0x4000, 0xC040], np.uint16)          # 1.0078125
    assert _both_paths(monkeypatch, near.tobytes(), bits.tobytes(), "bfloat16", 1e-2, 0.0, [3]) == (None, None)
    a, b = _both_paths(monkeypatch, near.tobytes(), bits.tobytes(), "bfloat16", 1e-3, 0.0, [3])
    assert a == b == "1 of 3 differ, first at (0,): got 1.0078125 expected 1.0"
    ints = np.array([1, -5, 7], np.int32)
    other = np.array([1, -5, 8], np.int32)
    a, b = _both_paths(monkeypatch, other.tobytes(), ints.tobytes(), "int32", 1.0, 1.0, [3])   # ints: exact
    assert a == b == "1 of 3 differ, first at (2,): got 8 expected 7"
    assert rod.compare(b"\x01\x02", b"\x01\x03", "float8_e4m3fn", 0, 0, [2]) == \
        "1 bytes differ (compared bit for bit)"
    assert rod.compare(b"\x01", b"\x01\x03", "uint8", 0, 0, [2]) == "1 bytes, expected 2"


def test_gather_follows_strides():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)
    raw = a.tobytes()
    view = a[1:, ::2]
    got = rod.gather(raw, 6 * 4, list(view.shape), list(view.strides), 4)
    assert got == np.ascontiguousarray(view).tobytes()
    t = a.T
    assert rod.gather(raw, 0, list(t.shape), list(t.strides), 4) == np.ascontiguousarray(t).tobytes()
    assert rod.gather(raw, 8, [3], [4], 4) == a.reshape(-1)[2:5].tobytes()


# ---------------------------------------------------------------- the runner against a stand-in libcuda


def _vec_add_entry(name: str) -> tuple[dict, dict]:
    entry, files = build.plan_case(build.Case("vec_add_f32_t128", "vec_add_f32_t128", "corpus"))
    entry["case"] = name
    return entry, files


def _fake_job(tmp_path: Path, behaviours: dict) -> Path:
    """A job of vec_add cases whose cubins are fake_libcuda directives: {case: (ours, nvidia)}."""
    job = tmp_path / "job"
    (job / "cubins").mkdir(parents=True)
    cases = []
    for name, sides in behaviours.items():
        entry, files = _vec_add_entry(name)
        for rel, data in files.items():
            (job / rel).parent.mkdir(parents=True, exist_ok=True)
            (job / rel).write_bytes(data)
        entry["cubins"] = {}
        for side, directive in zip(build.SIDES, sides):
            if directive.startswith("error:"):
                entry["cubins"][side] = {"error": directive[6:]}
                continue
            rel = f"cubins/{name}.{side}.cubin"
            (job / rel).write_bytes(b"FAKE kernel=vec_add " + directive.encode())
            entry["cubins"][side] = {"file": rel, "symbol": "vec_add_kernel", "block": [128, 1, 1],
                                     "kparams": [[0, 8], [8, 4], [12, 4], [16, 8], [24, 4], [28, 4], [32, 8],
                                                 [40, 4], [44, 4]], "static_smem": 0}
        cases.append(entry)
    (job / "job.json").write_text(json.dumps({"format": 1, "gpu_name": "sm_90", "commit": "test", "cases": cases}))
    return job


def _run(job: Path, *extra: str, timeout: float = 120) -> tuple[int, list, str, dict | None]:
    out = job.parent / "gpu.json"
    proc = subprocess.run([sys.executable, str(RUNNER), str(job), "--fake-driver", str(FAKE), "--out", str(out),
                           "--repeats", "3", "--target-ms", "0.1", *extra],
                          capture_output=True, text=True, timeout=timeout)
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    doc = json.loads(out.read_text()) if out.is_file() else None
    return proc.returncode, rows, proc.stdout + proc.stderr, doc


def test_runner_checks_and_times_both_cubins_in_process(tmp_path, capsys):
    job = _fake_job(tmp_path, {"good": ("mode=ok us=4", "mode=ok us=5"),
                               "wrong": ("mode=ok us=2", "mode=wrong us=2"),
                               "fault": ("mode=fault", "mode=ok us=3"),     # 3rd case: ours runs first
                               "later": ("mode=ok us=3", "mode=ok us=3")})
    out = tmp_path / "gpu.json"
    rc = rod.main([str(job), "--fake-driver", str(FAKE), "--no-isolate", "--repeats", "3", "--target-ms", "0.05",
                   "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    rows = {r["case"]: r for r in json.loads(out.read_text())["rows"]}
    good = rows["good"]
    assert good["ours"]["correct"] and good["nvidia"]["correct"]
    assert good["ours"]["us"] == good["ours"]["us_graph"] == good["ours"]["us_stream"] == 4.0
    assert good["nvidia"]["us"] == 5.0 and good["ratio"] == 0.8
    assert good["ours"]["launches"] == 13 and good["ours"]["repeats"] == 3      # ceil(0.05 ms / 4 us)
    assert good["ours"]["block"] == [128, 1, 1]
    wrong = rows["wrong"]
    assert wrong["nvidia"]["ok"] and not wrong["nvidia"]["correct"] and wrong["ours"]["correct"]
    assert wrong["nvidia"]["problems"][0].startswith("c: 1 of 1000 differ, first at (0,)")
    fault = rows["fault"]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in fault["ours"]["error"]
    assert "context died" in fault["nvidia"]["error"] and "use process isolation" in fault["nvidia"]["error"]
    assert fault["ratio"] is None
    # in one process a dead context stays dead: the cases after it fail (process isolation, the default, avoids it)
    assert all("CUDA_ERROR_ILLEGAL_ADDRESS" in rows["later"][s]["error"] for s in build.SIDES)
    assert "good" in text and "0.80" in text and "wrong nvidia: wrong output: c: 1 of 1000" in text
    # the results file and the README's table
    assert report.main([str(out), "--save", str(tmp_path / "results.json")]) == 0
    printed = capsys.readouterr().out
    assert "| good | 8x1x1 | 4.00 | 5.00 | 0.80 | - | - | yes, yes |" in printed
    assert "| wrong | 8x1x1 | 2.00 | 2.00 | 1.00 | - | - | yes, **no** |" in printed
    assert "from the unhinted bytecode" in printed and "cuModuleLoadData + cuLaunchKernel" in printed
    assert "corpus sizes: geometric mean ours/NVIDIA 0.89 over 2 cases (best 0.80, worst 1.00)" in printed
    assert "nvidia: 1/4 correct; failed: fault, later; wrong output: wrong" in printed
    assert "cubins for sm_90 at -O3 from the unhinted bytecode, ours at ?" in printed
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["meta"]["device"]["name"] == "Fake GPU" and len(saved["rows"]) == 4


def test_runner_times_both_cubins_in_turn(tmp_path):
    """The GPU slows down after 58 launches: the loading, checking, warm-up and probe of both sides take 32, a
    round of one timed batch each 26.  Timed in turn, both sides meet the slow rounds alike (ratio 1); timed
    one after the other, the first would have measured 4 us and the second 8."""
    same = "mode=ok us=4 slow_after=58"
    job = _fake_job(tmp_path, {"drift": (same, same)})
    out = tmp_path / "gpu.json"
    rc = rod.main([str(job), "--fake-driver", str(FAKE), "--no-isolate", "--repeats", "3", "--target-ms", "0.05",
                   "--out", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert rc == 0 and row["ours"]["launches"] == row["nvidia"]["launches"] == 13
    assert row["ours"]["us_stream"] == row["nvidia"]["us_stream"] == 8.0
    assert row["ours"]["us_stream_min"] == row["nvidia"]["us_stream_min"] == 4.0
    assert row["ratio"] == 1.0


def test_runner_isolates_faults_crashes_and_hangs(tmp_path):
    job = _fake_job(tmp_path, {"fault": ("mode=fault", "mode=ok us=3"),       # ours first
                               "crash": ("mode=crash", "mode=ok us=3"),       # NVIDIA's first
                               "hang": ("mode=ok us=2", "mode=hang"),
                               "after": ("mode=ok us=6", "mode=ok us=3"),
                               "nocubin": ("error:compile: exit 5: no", "mode=ok us=3")})
    rc, rows, text, doc = _run(job, "--kernel-timeout-s", "3")
    assert rc == 1, text
    by = {r["case"]: r for r in rows}
    assert list(by) == ["fault", "crash", "hang", "after", "nocubin"]
    # the fault killed ours's context; NVIDIA's cubin ran again in a fresh worker
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in by["fault"]["ours"]["error"]
    assert by["fault"]["nvidia"]["correct"] and by["fault"]["nvidia"]["us"] == 3.0
    assert "worker exited 3" in by["crash"]["ours"]["error"] and by["crash"]["nvidia"]["correct"]
    # the hang killed the worker; the side it had finished is kept
    assert by["hang"]["ours"]["correct"] and "worker killed after 3.0s" in by["hang"]["nvidia"]["error"]
    assert by["after"]["ratio"] == 2.0 and by["after"]["ours"]["correct"]
    assert by["nocubin"]["ours"]["error"] == "compile: exit 5: no" and by["nocubin"]["nvidia"]["correct"]
    assert doc["device"]["name"] == "Fake GPU" and doc["options"]["isolated"] and len(doc["rows"]) == 5
    assert "geometric mean of ours/NVIDIA over 1 case: 2.00" in text


def test_runner_budget_filter_and_bad_jobs(tmp_path):
    job = _fake_job(tmp_path, {"a": ("mode=ok us=1", "mode=ok us=1"), "b": ("mode=ok us=1", "mode=ok us=1")})
    rc, rows, _, _ = _run(job, "--budget-s", "0")
    assert rc == 1 and all("budget is spent" in r[s]["error"] for r in rows for s in build.SIDES)
    rc, rows, text, _ = _run(job, "--kernels", "b")
    assert rc == 0 and [r["case"] for r in rows] == ["b"], text
    proc = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "missing")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot read the job")


def test_driver_names_and_sticky_errors():
    class Lib:
        def cuInit(self, flags):
            return 3

        def cuMemAlloc_v2(self, out, size):
            return 700

    drv = rod.Driver(Lib())
    with pytest.raises(rod.CudaError) as e:
        drv.init()
    assert str(e.value) == "cuInit failed: CUDA_ERROR_NOT_INITIALIZED (3)" and not e.value.sticky
    with pytest.raises(rod.CudaError) as e:
        drv.alloc(16)
    assert e.value.sticky and e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    with pytest.raises(rod.CudaError, match="symbol not found"):
        drv.synchronize()


def test_runner_is_stdlib_only():
    """The device machine has python3 and the driver only: the runner imports nothing else (numpy optional)."""
    src = RUNNER.read_text()
    imports = {ln.split()[1].split(".")[0] for ln in src.splitlines() if ln.startswith(("import ", "from "))}
    assert imports <= {"__future__", "argparse", "array", "ctypes", "json", "math", "os", "platform", "random",
                       "statistics", "struct", "subprocess", "sys", "time", "zlib"}, imports


# ---------------------------------------------------------------- build.py end to end on one kernel


def test_build_writes_a_job_the_runner_reads(tmp_path):
    if nvidia_bin("tileiras") is None:
        pytest.skip("NVIDIA's tileiras not installed (wheel nvidia-cuda-tileiras)")
    out = tmp_path / "job"
    rc = build.main(["--kernels", "vec_add_f32_t128,flash_attention_ragged_f16", "--out", str(out),
                     "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    job = json.loads((out / "job.json").read_text())
    assert job["gpu_name"] == "sm_90" and job["nvidia_tileiras"]
    names = [c["case"] for c in job["cases"]]
    assert names == ["vec_add_f32_t128", "flash_attention_ragged_f16"]
    for case in job["cases"]:
        for side in build.SIDES:
            cub = case["cubins"][side]
            assert "error" not in cub, cub
            assert (out / cub["file"]).read_bytes()[:4] == b"\x7fELF"
            assert build.check_layout(case["params"], cub["kparams"]) is None
        for b in case["buffers"]:
            assert len(zlib.decompress((out / b["file"]).read_bytes())) == b["nbytes"]
    fa = job["cases"][1]
    assert fa["grid"] == [1, 4, 1] and fa["outputs"][0]["name"] == "Out" and fa["outputs"][0]["dtype"] == "float16"
    refs = build.refs_for("suite")
    expected = refs.reference("flash_attention_ragged_f16", refs.make_inputs("flash_attention_ragged_f16"))
    blob = zlib.decompress((out / fa["outputs"][0]["expected"]).read_bytes())
    assert blob == expected["Out"].astype(np.float16).tobytes()
    assert job["set"] == "launch" and fa["set"] == "suite (unhinted)" and job["cases"][0]["set"] == "public-launch"
    # a dry run of the real job through the stand-in driver: every cubin loads and launches; those whose PTX the
    # job carries run it in the emulator (the suite's kernel has no PTX of NVIDIA's: it does nothing, and fails)
    assert "ptx" in fa["cubins"]["ours"] and "ptx" not in fa["cubins"]["nvidia"]
    rc, rows, text, _ = _run(out, "--no-isolate")
    assert rc == 1 and len(rows) == 2, text
    assert rows[0]["ours"]["correct"] and rows[0]["nvidia"]["correct"] and rows[0]["sides_agree"]
    assert rows[1]["ours"]["correct"] and rows[1]["nvidia"]["ok"] and not rows[1]["nvidia"]["correct"]
    assert rows[1]["sides_agree"] is False and "sides' outputs differ" in text
    assert math.isclose(rows[0]["ratio"], 1.0)


def test_build_versus_a_revision_times_ours_against_ours(tmp_path):
    """`--versus REV`: the second side is our compiler at REV (a git worktree, removed afterwards); the
    runner and the report name it instead of NVIDIA."""
    head = subprocess.run(["git", "-C", str(build.REPO), "log", "-1", "--format=%h"], capture_output=True,
                          text=True).stdout
    if not head.strip():
        pytest.skip("not a git checkout")
    out = tmp_path / "job"
    listing = ["git", "-C", str(build.REPO), "worktree", "list"]
    worktrees = subprocess.run(listing, capture_output=True, text=True).stdout
    assert build.main(["--kernels", "vec_add_f32_t128", "--out", str(out), "--versus", "HEAD"]) == 0
    job = json.loads((out / "job.json").read_text())
    assert job["versus"] == f"ours@{head.strip()}"
    (case,) = job["cases"]
    ours, other = ((out / case["cubins"][s]["file"]).read_bytes() for s in build.SIDES)
    assert ours[:4] == b"\x7fELF" and ours == other      # vec_add: no change since HEAD's compiler
    assert subprocess.run(listing, capture_output=True, text=True).stdout == worktrees
    rc, rows, text, doc = _run(out, "--no-isolate")
    assert f"ours/ours@{head.strip()}" in text and doc["job"]["versus"] == job["versus"]
    report = subprocess.run([sys.executable, str(GPU / "report.py"), str(tmp_path / "gpu.json")],
                            capture_output=True, text=True)
    assert f"| ours µs | ours@{head.strip()} µs |" in report.stdout


# ---------------------------------------------------------------- the launch set, as cuTile launches


@pytest.fixture(scope="module")
def launch_job(tmp_path_factory):
    """A launch-set job: vec_add (no tensor maps), the 128x128x64 f16 matmul (NVIDIA's cubin takes three tensor
    maps from its `.nv.host` launch hook) and the same matmul at 256x128x64 with generated inputs."""
    if nvidia_bin("tileiras") is None:
        pytest.skip("NVIDIA's tileiras not installed (wheel nvidia-cuda-tileiras)")
    tmp = tmp_path_factory.mktemp("launch")
    cases = build.select_cases("vec_add_f32_t128,matmul_f16_f16out_128x128x64", large=False)
    cases.append(build.register_sized("matmul_f16_f16out_128x128x64.gen", "matmul_f16_f16out_128x128x64",
                                      "corpus", ("_matmul", ("float16", "float16", 256, 128, 64, 128, 128),
                                                 {"exact": False})))
    job = build.build_job(cases, tmp / "job", "sm_90", tmp / "cache", log=lambda *_: None, generate_over_mib=0.001)
    return tmp / "job", job


def test_launch_job_records_the_set_and_the_hidden_parameters(launch_job):
    out, job = launch_job
    assert (job["set"], job["set_label"], job["loader"]) == ("launch", "as cuTile launches", "library")
    vec, mm, gen = job["cases"]
    assert vec["set"] == mm["set"] == "public-launch" and vec["flops"] is None
    a, b = (build.refs_for("corpus").make_inputs(mm["case"])[k].shape for k in "AB")
    assert mm["flops"] == 2 * a[0] * a[1] * b[1] and gen["flops"] == 2 * 256 * 128 * 64
    nv = mm["cubins"]["nvidia"]
    # NVIDIA's TMA cubin: no EIATTR_KPARAM_INFO; the user's 15 parameters from its PTX, 3 maps the hook appends
    assert nv["host_hook"] and nv["hidden"] == 3 and nv["kparams"] == mm["cubins"]["ours"]["kparams"]
    assert len(nv["kparams"]) == 15 and nv["block"] == [256, 1, 1]
    assert vec["cubins"]["nvidia"]["hidden"] == 0 and vec["cubins"]["ours"]["hidden"] == 0
    assert (out / nv["ptx"]).read_text().count(".hidden") == 3
    # generated inputs: no stored images; seeds, zeroed outputs, a sampled reference
    assert gen["generated"] and all("generate" in b and "file" not in b for b in gen["buffers"])
    assert [b["generate"].get("zero", False) for b in gen["buffers"]] == [False, False, True]
    assert gen["outputs"][0]["reference"]["op"] == "matmul" and "expected" not in gen["outputs"][0]
    assert not (out / "data" / gen["case"]).exists()


def test_launch_job_dry_run_through_the_fake_driver(launch_job, tmp_path, capsys):
    """The runner loads every cubin with cuLibraryLoadData and launches it with cuLaunchKernelEx and the user's
    parameters; the stand-in driver runs each cubin's PTX in the emulator, NVIDIA's matmul with the tensor maps
    its `.nv.host` hook writes: both sides correct, the generated case against its sampled reference too."""
    job, _ = launch_job
    out = tmp_path / "gpu.json"
    rc = rod.main([str(job), "--fake-driver", str(FAKE), "--no-isolate", "--repeats", "2", "--target-ms", "0.01",
                   "--warmup", "0", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads(out.read_text())
    assert doc["options"]["loader"] == "library" and doc["job"]["set"] == "launch"
    rows = {r["case"]: r for r in doc["rows"]}
    for r in rows.values():
        assert r["ours"]["correct"] and r["nvidia"]["correct"] and r["sides_agree"], r
    mm = rows["matmul_f16_f16out_128x128x64"]
    assert mm["ours"]["tflops"] == pytest.approx(mm["flops"] / mm["ours"]["us"] / 1e6, rel=1e-3)
    assert "bytecode: as cuTile launches" in text and "TFLOP/s (ours, NVIDIA)" in text
    assert report.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "from the launch set (as cuTile launches)" in printed and "cuLibraryLoadData + cuLaunchKernelEx" in printed
    line = next(ln for ln in printed.splitlines() if ln.startswith("| matmul_f16_f16out_128x128x64 |"))
    assert line.split(" | ")[5] == f"{mm['flops'] / mm['ours']['us'] / 1e6:.1f}"
    assert "no peak known for this device" in printed
    # the old path cannot give NVIDIA's TMA kernel its tensor maps: refused, not run with garbage
    rc = rod.main([str(job), "--fake-driver", str(FAKE), "--no-isolate", "--loader", "module", "--repeats", "1",
                   "--target-ms", "0.01", "--warmup", "0", "--kernels", "matmul_f16_f16out_128x128x64"])
    assert rc == 1 and "only cuLibraryLoadData keeps" in capsys.readouterr().out


def test_generated_case_catches_a_wrong_output(launch_job, tmp_path):
    """The sampled float64 reference is a real check: pointed at the wrong operand, both sides fail it."""
    job, built = launch_job
    gen = dict(built["cases"][2])
    out = dict(gen["outputs"][0])
    out["reference"] = dict(out["reference"], b=dict(out["reference"]["a"], shape=[64, 128], strides=[256, 2]))
    gen["outputs"] = [out]
    images = [rod.buffer_image(str(job), b) for b in gen["buffers"]]
    ptx = (job / gen["cubins"]["ours"]["ptx"]).read_text()
    assert build.emulate_entry(job, built["cases"][2], ptx, "ours") == []
    problems = build.emulate_entry(job, gen, ptx, "ours")
    assert len(problems) == 1 and "sampled elements differ from the float64 reference" in problems[0]
    assert len(images[0]) == 256 * 64 * 2


def test_generated_buffers_are_seeded_and_rows_differ():
    spec = {"nbytes": 2 * 4096 * 8, "seed": 7, "dtype": "float16"}
    a = np.frombuffer(rod.generate(spec), np.float16).reshape(8, 4096)
    assert rod.generate(spec) == a.tobytes() and rod.generate(dict(spec, seed=8)) != a.tobytes()
    assert np.all(np.abs(a) <= 1) and len({r.tobytes() for r in a}) == 8
    assert not np.array_equal(a[:, :64], a[:, 64:128])
    assert rod.generate(dict(spec, zero=True)) == bytes(spec["nbytes"])
    bf = np.frombuffer(rod.generate(dict(spec, dtype="bfloat16")), np.uint16).astype(np.uint32) << 16
    assert np.all(np.abs(bf.view(np.float32)) <= 1)
    with pytest.raises(ValueError, match="cannot generate"):
        rod.generate(dict(spec, dtype="int32"))


def test_attention_reference_is_the_suites(tmp_path):
    """The runner's sampled attention reference (pure Python) against the suite's numpy reference, on a causal
    grouped-query case; and its FLOP count is 4 * D per unmasked pair."""
    case = build.register_sized("flash_attention_causal_gqa_f16.small", "flash_attention_causal_gqa_f16", "suite",
                                ("_attention", (), {"B": 1, "H": 4, "G": 2, "SQ": 40, "SK": 48, "D": 32,
                                                    "causal": True, "pos": 5}))
    refs = build.refs_for("suite")
    inputs = refs.make_inputs(case.name)
    buffers, params, outputs = build.plan_generated(case, refs, inputs, "attention")
    images, _, loc = build.plan_arguments(inputs)
    want = refs.reference(case.name, inputs)["Out"]
    after = list(images)
    o = outputs[0]
    img = bytearray(after[o["buffer"]])
    img[o["offset"]:o["offset"] + want.nbytes] = want.astype(np.float16).tobytes()
    after[o["buffer"]] = bytes(img)
    assert rod.sampled_check(after, o) is None
    img[o["offset"]:o["offset"] + want.nbytes] = (want * 1.1).astype(np.float16).tobytes()
    after[o["buffer"]] = bytes(img)
    assert "sampled elements differ" in rod.sampled_check(after, o)
    pairs = sum(min(48, q + 5 + 1) for q in range(40))
    assert build.flop_count(case, inputs) == 4 * 1 * 4 * 32 * pairs


def test_cross_check_without_numpy_strides_over_large_outputs(monkeypatch):
    n = 3 * rod.CROSS_CHECK_PURE_PYTHON_MAX + 5
    case = {"outputs": [{"name": "C", "itemsize": 2, "dtype": "float16", "rtol": 1e-2, "atol": 1e-2, "shape": [n]}]}
    a = np.zeros(n, np.float16)
    b = a.copy()
    b[4] = 1.0                       # every 4th element is compared: index 4 is one of them
    assert rod.cross_check(case, {"C": a.tobytes()}, {"C": b.tobytes()})[0].startswith("C: 1 of ")
    monkeypatch.setattr(rod, "_has_numpy", lambda: False)
    monkeypatch.setattr(rod, "_first_bad_numpy", lambda *a: None)
    (got,) = rod.cross_check(case, {"C": a.tobytes()}, {"C": b.tobytes()})
    assert got.startswith("C: 1 of %d differ, first at (1,)" % (-(-n // 4)))
    b[5] = 1.0
    b[4] = 0.0                       # not a compared element
    assert rod.cross_check(case, {"C": a.tobytes()}, {"C": b.tobytes()}) == []
