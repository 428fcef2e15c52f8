"""What the code-quality benchmarks print, on fixed rows: the issues' summary figures, the comparison with a
saved baseline (a `WORSE:` line per regression), failures shown in their row instead of a crash."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import _sass  # noqa: E402
from conftest import LAUNCH, PUBLIC, requires_corpus  # noqa: E402
import codegen_quality as cq  # noqa: E402
import dynamic_instructions as dyn  # noqa: E402
import tensor_cores as tc  # noqa: E402


def m(static=100, regs=32, shared=0, frame=0, tmem=0, main_loop=None, **classes) -> dict:
    """One side's figures, as _build.measure_cubin returns them."""
    cls = {name: 0 for name in _sass.CLASSES}
    cls.update(classes)
    tcore = {k: v for k, v in (("HMMA", cls["HMMA"]), ("HGMMA", cls["HGMMA"]), ("UTCHMMA", cls["UTCMMA"])) if v}
    return {"ok": True, "static": static, "classes": cls, "opcodes": {}, "tensor_core": tcore, "registers": regs,
            "frame": frame, "shared": shared, "tmem": tmem, "loops": [], "main_loop": main_loop,
            "mma_loop": main_loop if main_loop and tcore else None}


def fail(msg="exit 5: ptxas failed") -> dict:
    return {"ok": False, "error": msg}


def row(kernel, target, ours, real) -> dict:
    return {"kernel": kernel, "target": target, "ours": ours, "real": real}


def test_summary_states_the_issue_figures():
    rows = [
        row("softmax", "sm_90", m(300, BAR=6, STS=4), m(100, BAR=2, SHFL=10)),
        row("cumsum", "sm_90", m(120, SHFL=2), m(100, REDUX=1)),
        row("vec_add", "sm_90", m(50, shared=512), m(100)),
        row("mm", "sm_90", m(80, regs=100, HMMA=8, LOCAL=2), m(100, regs=200, HGMMA=4)),
        row("bad", "sm_90", fail(), m(10)),
    ]
    feats = {"softmax": {"reduction"}, "cumsum": {"reduction"}, "mm": {"mma"}, "vec_add": set()}
    text = "\n".join(cq.summary_lines(rows, feats))
    assert "kernels x targets: 5 (5 kernels; sm_90); both compiled: 4" in text
    assert "ours failed on 1: bad sm_90 (exit 5: ptxas failed)" in text
    # ratios 3.0, 1.2, 0.5, 0.8 -> median 1.0; one above 1.5
    assert "static instructions ours/real: median 1.00 (sm_90 1.00); above 1.5x: 1" in text
    assert "worst: softmax sm_90 3.00" in text
    assert "kernels with ours > real + 1: 1 (sm_90: 1)" in text
    assert "reduction/scan kernels without either (ours): 1 of 2" in text
    assert "HGMMA: ours on 0 of the 1 kernel x targets" in text
    assert "spills (local-memory instructions or a stack frame): ours 1, real 0: mm sm_90" in text
    assert "no reduction, scan or mma: ours 1 of 1, real 0" in text


def test_rows_show_failures_instead_of_raising():
    line = cq.row_line(row("k", "sm_80", fail("crash: KeyError: 'x'"), fail("exit 3: bad bytecode")))
    assert "ours: crash: KeyError: 'x'; real: exit 3: bad bytecode" in line
    ok = cq.row_line(row("k", "sm_80", m(150, BAR=3, HMMA=4), m(100, BAR=1, HGMMA=2)))
    assert "150/100" in ok and "1.50" in ok and "3/1" in ok and "HMMA4 | HGMMA2" in ok
    assert tc.row_line(row("k", "sm_90", fail(), m())).endswith("ours: exit 5: ptxas failed")


def test_baseline_comparison_flags_every_regression():
    before = [row("a", "sm_90", m(100, BAR=2, regs=40), m()), row("b", "sm_90", m(100), m()),
              row("c", "sm_90", m(100), m()), row("d", "sm_90", m(100), m()), row("e", "sm_90", fail(), m()),
              row("f", "sm_90", fail(), fail()), row("g", "sm_90", m(100, regs=20), m()),
              row("gone", "sm_90", m(), m())]
    after = [row("a", "sm_90", m(110, BAR=3, regs=40), m()),    # more instructions and BAR
             row("b", "sm_90", m(90, regs=33), m()),            # fewer instructions, more registers
             row("c", "sm_90", m(90), m()),                     # better
             row("d", "sm_90", fail("crash: boom"), m()),       # no longer compiles
             row("e", "sm_90", m(100, LOCAL=4, frame=16), m()),  # compiles now, but spills
             row("f", "sm_90", fail(), fail()),                # fails before and now: not a regression
             row("g", "sm_90", m(90, regs=24), m()),            # more registers, as many CTAs per SM
             row("new", "sm_90", m(), m())]
    lines = cq.compare_lines(json.loads(json.dumps(before)), after)
    worse = [ln for ln in lines if ln.startswith("WORSE:")]
    assert worse[0] == "WORSE: a sm_90: static instructions 100 -> 110 (+10); BAR 2 -> 3 (+1)"
    # 128 threads: 32 registers fit 16 CTAs on an sm_90 SM, 33 (allocated as 40) only 12
    assert worse[1] == "WORSE: b sm_90: registers 32 -> 33 (+1); CTAs per SM 16 -> 12"
    assert worse[2].startswith("WORSE: d sm_90: no longer compiles (crash: boom)")
    assert worse[3] == "WORSE: e sm_90: spills (4 local-memory instructions, 16 bytes of stack)"
    assert worse[4] == "WORSE: g sm_90: registers 20 -> 24 (+4); CTAs per SM 16 -> 16"
    assert len(worse) == 5
    assert any(ln.startswith("c ") and "100->90" in ln and "-10" in ln for ln in lines)
    assert any(ln.startswith("new ") and "not in the baseline" in ln for ln in lines)
    assert lines[-1] == ("against the baseline: 5 worse (1 in registers only, with as many CTAs per SM), 1 better, "
                         "0 unchanged, 1 new, 1 failing before and now, 1 not measured now")
    # a kernel that spills is flagged even when nothing else grew
    spill = cq.compare_lines([row("s", "sm_80", m(100), m())], [row("s", "sm_80", m(100, LOCAL=2), m())])
    assert "WORSE: s sm_80: spills (2 local-memory instructions, 0 bytes of stack)" in spill


def test_dynamic_summary_counts_only_correct_runs():
    def side(n, correct=True):
        return {"ok": True, "thread_instructions": n, "correct": correct, "problems": [] if correct else ["C differs"]}

    rows = [
        {"kernel": "r1", "target": "sm_90", "ours": side(200), "nvidia": side(100)},
        {"kernel": "r2", "target": "sm_90", "ours": side(50), "nvidia": side(100)},
        {"kernel": "r3", "target": "sm_90", "ours": side(90), "nvidia": side(100)},
        {"kernel": "w", "target": "sm_90", "ours": side(1, correct=False), "nvidia": side(100)},
        {"kernel": "mm", "target": "sm_100", "ours": side(100),
         "nvidia": {"ok": False, "error": "not emulated: tcgen05.mma", "unsupported": "tcgen05"}},
    ]
    assert dyn.row_ratio(rows[0]) == 2.0 and dyn.row_ratio(rows[3]) is None and dyn.row_ratio(rows[4]) is None
    text = "\n".join(dyn.summary_lines(rows))
    assert "compared (both ran and matched the reference): 3" in text
    assert "median 0.90, max 2.00" in text
    assert "issue 13 goal (median <= 1.0, none above 1.5): not met; above 1.5: 1: r1 sm_90 2.00" in text
    assert "issue 13" not in "\n".join(dyn.summary_lines(rows, goal=False))
    assert "cannot run yet: 1: mm sm_100 (tcgen05)" in text
    assert "ours failed or wrong: 1: w sm_90" in text
    assert "WRONG" in dyn.row_line(rows[3]) and "not emulated" in dyn.row_line(rows[4])


def test_dynamic_rows_of_kernels_a_tool_rejects_and_of_reads_past_an_array():
    """A kernel NVIDIA's tileiras and ours refuse alike is listed as such, not as a failure of either; ours
    refusing with another error is ours failing; a memcheck warning shows in its row."""
    msg = "exit 3: 'cuda_tile.divi' op rounding mode 'negative_inf' is not allowed with 'unsigned' flag"
    nv = {"ok": False, "error": f"NVIDIA's tileiras rejects it: {msg}", "rejected": msg}
    ok = {"ok": True, "thread_instructions": 10, "correct": True, "problems": []}
    warned = dict(ok, warnings=["kernel k reads up to 96 bytes past the end of 'argument 1' (4000 bytes) at PTX "
                                "line 93 (ld.global.b32 %r21, [%rd30]): ..."])
    rows = [{"kernel": "u32", "target": "sm_90", "ours": fail(f"does not compile: {msg}"), "nvidia": nv},
            {"kernel": "u32", "target": "sm_100", "ours": fail("does not compile: exit 4: crash"), "nvidia": nv},
            {"kernel": "i32", "target": "sm_90", "ours": ok, "nvidia": warned}]
    assert dyn.both_reject(rows[0]) and not dyn.both_reject(rows[1]) and not dyn.both_reject(rows[2])
    text = "\n".join(dyn.summary_lines(rows))
    assert "rejected by NVIDIA's tileiras and ours alike (same status and error; not failures): 1: u32 sm_90" in text
    assert "ours failed or wrong: 1: u32 sm_100" in text and "NVIDIA failed or wrong: 1: u32 sm_100" in text
    assert "compared (both ran and matched the reference): 1" in text
    assert "both reject it: exit 3: 'cuda_tile.divi'" in dyn.row_line(rows[0])
    assert "NVIDIA reads up to 96 bytes past the end of 'argument 1' (4000 bytes)" in dyn.row_line(rows[2])


@requires_corpus
def test_the_manifest_says_which_kernels_nvidia_rejects():
    import _build
    for folder in (PUBLIC, LAUNCH):
        assert _build.nvidia_rejection(folder, "int_ops_u32_t256", "sm_90") == (
            "exit 3: 'cuda_tile.divi' op rounding mode 'negative_inf' is not allowed with 'unsigned' flag")
        assert _build.nvidia_rejection(folder, "int_ops_i32_t128", "sm_90") is None


def test_tensor_core_summary_and_kloop():
    loop = {"header": 0, "depth": 1, "static": 400, "classes": {"HMMA": 16}}
    rloop = {"header": 0, "depth": 1, "static": 500, "classes": {"HGMMA": 4}}
    rows = [row("matmul_f16_f16out_128x128x64", "sm_90", m(HMMA=64, main_loop=loop),
                m(HGMMA=16, main_loop=rloop)),
            row("mm2", "sm_100", m(HMMA=8), m(UTCMMA=4, tmem=128))]
    assert tc.kloop(rows[0]["ours"]) == (400, 16) and tc.kloop(rows[1]["ours"]) is None
    text = "\n".join(tc.summary_lines(rows))
    assert "HGMMA on sm_90: ours on 0 of the 1 kernels" in text
    assert "UTCMMA on sm_100: ours on 0 of the 1 kernels where the real tool uses it (issue 15 goal: all); " \
           "missing: mm2" in text
    assert "K-loop: ours 400 static instructions (16 tensor-core), real 500 (4): issue 14 goal (<= real) met" in text
    assert "128" in tc.row_line(rows[1])


def test_loop_listing():
    ours = m()
    ours["loops"] = [{"header": 0x200, "depth": 2, "static": 13, "classes": {"LDS": 2, "ADDR": 1}}]
    lines = cq.loop_lines(row("k", "sm_90", ours, fail()))
    assert lines == ["    ours loop @0x0200 depth 2: 13 instructions (ADDR 1 LDS 2)"]


# ---------------------------------------------------------------- the corpus's two exports side by side


def launch(r: dict) -> dict:
    return {**r, "set": "public-launch"}


def test_launch_set_is_measured_by_default(tmp_path, monkeypatch, capsys):
    """With no --set, every benchmark measures out/public and out/public-launch and prints one table each,
    labelled; --set picks one."""
    import _build
    for folder in ("public", "public-launch"):
        (tmp_path / "out" / folder).mkdir(parents=True)
        for cid in ("mm_f16", "red_f32"):
            (tmp_path / "out" / folder / f"{cid}.v13.4.tileirbc").write_bytes(folder.encode())
    measured = []

    def fake_measure(paths, gpus, cache_dir, jobs, public):
        measured.append(public.name)
        return [row(_build.kernel_id(p), g, m(100 if public.name == "public" else 50), m(80)) for p in paths
                for g in gpus]

    def fake_dynamic(path, gpu, corpus):
        side = {"ok": True, "thread_instructions": 10, "correct": True, "problems": []}
        return {"kernel": _build.kernel_id(path), "target": gpu, "ours": side, "nvidia": side}

    monkeypatch.setattr(_build, "measure_all", fake_measure)
    monkeypatch.setattr(_build, "has_mma", lambda p: "mm" in p.name)
    monkeypatch.setattr(_build, "has_reduction", lambda p: "red" in p.name)
    monkeypatch.setattr(dyn, "dynamic_row", fake_dynamic)
    monkeypatch.setattr(_build, "real_tool", lambda: None)
    for script, kernels in ((cq, 2), (tc, 1), (dyn, 1)):
        measured.clear()
        save = tmp_path / f"{script.__name__}.json"
        assert script.main(["--corpus", str(tmp_path), "--gpu-name", "sm_90", "-j", "1", "--save", str(save)]) == 0
        text = capsys.readouterr().out
        first, second = text.index("== unhinted bytecode (out/public): "), text.index("== as cuTile launches "
                                                                                      "(out/public-launch): ")
        assert first < second and f"out/public-launch): {kernels} kernels ==" in text
        saved = json.loads(save.read_text())["rows"]
        assert sorted({r["set"] for r in saved}) == ["public", "public-launch"] and len(saved) == 2 * kernels
        if script is not dyn:
            assert measured == ["public", "public-launch"]
        assert script.main(["--corpus", str(tmp_path), "--gpu-name", "sm_90", "-j", "1", "--set", "public-launch"]) == 0
        text = capsys.readouterr().out
        assert "as cuTile launches" in text and "unhinted bytecode (out/public)" not in text
    # the side-by-side line of codegen_quality: ours/real 100/80 unhinted, 50/80 launched
    cq.main(["--corpus", str(tmp_path), "--gpu-name", "sm_90", "-j", "1"])
    text = capsys.readouterr().out
    assert "static instructions ours/real median: unhinted bytecode 1.25, as cuTile launches 0.62" in text


def test_sets_in_the_corpus():
    import _build
    from conftest import CORPUS
    sets = _build.corpus_sets(CORPUS, "both")
    if len(sets) < 2:
        pytest.skip("the corpus has no launch set")
    assert [name for name, _ in sets] == ["public", "public-launch"]
    ids = [[_build.kernel_id(p) for p in _build.corpus_kernels(folder)] for _, folder in sets]
    assert ids[0] == ids[1] and len(ids[0]) >= 50
    assert [name for name, _ in _build.corpus_sets(CORPUS, "public-launch")] == ["public-launch"]


def test_baseline_rows_are_matched_within_their_set():
    """A saved run from before the launch set (rows without "set") is the unhinted set; launch rows are
    new there, and a regression in the launch set says so."""
    before = [row("a", "sm_90", m(100), m()), launch(row("b", "sm_90", m(100), m()))]
    after = [row("a", "sm_90", m(100), m()), launch(row("a", "sm_90", m(90), m())),
             launch(row("b", "sm_90", m(120), m()))]
    lines = cq.compare_lines(json.loads(json.dumps(before)), after)
    assert "-- unhinted bytecode (out/public)" in lines and "-- as cuTile launches (out/public-launch)" in lines
    assert [ln for ln in lines if ln.startswith("WORSE:")] == \
        ["WORSE: b sm_90 (as cuTile launches): static instructions 100 -> 120 (+20)"]
    assert lines[-1].startswith("against the baseline: 1 worse (0 in registers only, with as many CTAs per SM), "
                                "0 better, 1 unchanged, 1 new")


def test_sets_side_by_side():
    rows = [row("a", "sm_90", m(300, regs=40), m(100, regs=40)), launch(row("a", "sm_90", m(300), m(50))),
            row("b", "sm_90", m(100), m(100)), launch(row("b", "sm_90", fail(), m(50))),
            row("c", "sm_90", m(100), m(100))]
    lines = cq.sets_lines(rows)
    assert lines[0].startswith("unhinted vs launched, on the 1 kernel x targets")
    assert "static instructions ours/real median: unhinted bytecode 3.00, as cuTile launches 6.00" in lines[1]
    assert "real tool's static instructions in total: unhinted bytecode 100, as cuTile launches 50" in lines[3]
    assert cq.sets_lines(rows[:1]) == []
