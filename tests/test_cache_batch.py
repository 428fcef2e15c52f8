"""Batch compiles through the cache: per module x target lookups in the event stream, hits that run no
stage and write the same files, the summary's and the dashboard's markers, and entries shared with the
Python API."""
from __future__ import annotations

from pathlib import Path

from tileiras_async.cache.store import CacheStore
from tileiras_async.pipeline import events as ev
from tileiras_async.pipeline.summary import Summary

from test_pipeline_batch import SAMPLE, run_batch

MODULES = SAMPLE[:3]
TARGETS = ("sm_90", "sm_100")


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def test_a_second_batch_is_served_by_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    first, ev1 = run_batch(MODULES, tmp_path / "a", targets=TARGETS, cache_dir=cache, keep_ptx=True)
    second, ev2 = run_batch(MODULES, tmp_path / "b", targets=TARGETS, cache_dir=cache, keep_ptx=True)
    assert first.ok and second.ok and first.kernels == second.kernels == len(MODULES) * len(TARGETS)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert [e.hit for e in _of(ev1, ev.CacheLookup)] == [False] * 6
    assert [e.hit for e in _of(ev2, ev.CacheLookup)] == [True] * 6
    stages = {e.stage for e in _of(ev2, ev.StageStarted)}
    assert stages == {"parse"}  # no lower, codegen or assemble ran
    assert len(_of(ev2, ev.KernelFinished)) == len(_of(ev1, ev.KernelFinished))
    summary = Summary()
    for e in ev2:
        summary(e)
    text = summary.render()
    assert "cache 6 hits, 0 misses" in text and text.count("cached") >= 6
    stats = CacheStore(cache).stats()
    assert (stats["hits"], stats["misses"], stats["entries"]) == (6, 6, 6)


def test_schedules_missing_from_an_entry_are_recompiled_then_served(tmp_path):
    cache = str(tmp_path / "cache")
    run_batch(MODULES[:1], tmp_path / "a", cache_dir=cache)
    _, with_sched = run_batch(MODULES[:1], tmp_path / "b", cache_dir=cache, schedules=True)
    _, served = run_batch(MODULES[:1], tmp_path / "c", cache_dir=cache, schedules=True)
    assert [e.hit for e in _of(with_sched, ev.CacheLookup)] == [False]
    assert [e.hit for e in _of(served, ev.CacheLookup)] == [True]
    assert _files(tmp_path / "b") == _files(tmp_path / "c")
    strip = [(e.kernel, e.reports) for e in _of(with_sched, ev.KernelScheduled)]
    assert [(e.kernel, e.reports) for e in _of(served, ev.KernelScheduled)] == strip


def test_batch_and_api_share_entries(tmp_path):
    from tileiras_async.cache.api import compile_cached
    from tileiras_async.stages import CompileOptions
    cache = str(tmp_path / "cache")
    run_batch(MODULES[:1], tmp_path / "a", cache_dir=cache)
    result, hit = compile_cached(str(MODULES[0]), None, CompileOptions("sm_100"), cache=CacheStore(cache))
    assert hit and result.cubin == (tmp_path / "a" / f"{MODULES[0].name[:-9]}.sm_100.cubin").read_bytes()


def test_the_dashboard_marks_cached_targets(tmp_path):
    from tileiras_tui.model import RunModel
    cache = str(tmp_path / "cache")
    run_batch(MODULES[:1], tmp_path / "a", cache_dir=cache)
    _, events = run_batch(MODULES[:1], tmp_path / "b", cache_dir=cache)
    model = RunModel()
    model.apply_many(events)
    [row] = model.rows.values()
    assert row.target.cached and row.status == "ok"
    assert {name: (row.stage(name).status, row.stage(name).detail) for name in ("lower", "codegen", "ptxas")} == \
        {name: ("ok", "cached") for name in ("lower", "codegen", "ptxas")}


def test_no_cache_without_a_directory(tmp_path):
    _, events = run_batch(MODULES[:1], tmp_path / "a")
    assert _of(events, ev.CacheLookup) == []


def test_cache_commands(tmp_path, monkeypatch, capsys):
    import json

    from tileiras_async.cli.batch import main
    monkeypatch.delenv("TILEIRAS_ASYNC_NO_CACHE")
    cache = str(tmp_path / "cache")
    argv = ["compile", str(MODULES[0]), "--gpu-name", "sm_100", "--out-dir", str(tmp_path / "o"), "-j", "1",
            "--cache-dir", cache]
    assert main(argv) == 0 and main(argv) == 0
    assert "cache 1 hits, 0 misses" in capsys.readouterr().out
    assert main(argv + ["--no-cache"]) == 0
    assert "| cache " not in capsys.readouterr().out.splitlines()[-1]   # no cache figures in the summary
    assert main(["cache", "--cache-dir", cache, "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["entries"], stats["hits"], stats["misses"]) == (1, 1, 1)
    assert main(["cache", "--cache-dir", cache, "stats"]) == 0
    assert "hit rate         50.0 %" in capsys.readouterr().out
    assert main(["cache", "--cache-dir", cache, "prune", "--max-size", "lots"]) == 2
    assert "error: invalid size 'lots'" in capsys.readouterr().err
    assert main(["cache", "--cache-dir", cache, "prune", "--max-size", "0"]) == 0
    assert capsys.readouterr().out.startswith("evicted 1 entries")
    assert main(argv) == 0
    assert main(["cache", "--cache-dir", cache, "clear"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("removed 1 entries")
    assert CacheStore(cache).stats()["entries"] == 0


def test_the_dashboard_shows_a_cached_targets_schedules(tmp_path):
    """A cache hit carries its entry's schedules: the dashboard's kernel view shows the ones --schedules wrote
    on the compile that filed the entry, and its schedule cell says where they came from."""
    from tileiras_tui.model import RunModel
    cache = str(tmp_path / "cache")
    matmul = Path(__file__).resolve().parents[1] / "examples" / "matmul_bias_relu_f16.v13.4.tileirbc"
    _, fresh = run_batch([matmul], tmp_path / "a", targets=("sm_90",), cache_dir=cache, schedules=True)
    _, cached = run_batch([matmul], tmp_path / "b", targets=("sm_90",), cache_dir=cache, schedules=True)
    assert [e.hit for e in _of(cached, ev.CacheLookup)] == [True]
    assert _files(tmp_path / "a") == _files(tmp_path / "b")    # the .schedule.json included
    rows = []
    for events in (fresh, cached):
        model = RunModel()
        model.apply_many(events)
        [row] = model.rows.values()
        rows.append(row)
    assert rows[0].scheduled and rows[1].scheduled and rows[1].schedules == rows[0].schedules != []
    assert (rows[1].stage("schedule").status, rows[1].stage("schedule").detail) == ("ok", "cached")
    assert rows[0].stage("schedule").detail != "cached"
