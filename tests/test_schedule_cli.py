"""--schedule-trace-file on the drop-in: a Chrome trace of every loop, and the same cubin as without it."""
from __future__ import annotations

import json

from tileiras_async.cli import tileiras

from conftest import PUBLIC, requires_corpus


@requires_corpus
def test_schedule_trace_file(tmp_path, monkeypatch):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    assert tileiras.main(["--gpu-name", "sm_90", "-o", "plain.cubin", str(src)]) == 0
    assert tileiras.main(["--gpu-name", "sm_90", "-o", "traced.cubin", "--schedule-trace-file", "t.json",
                          str(src)]) == 0
    assert (tmp_path / "plain.cubin").read_bytes() == (tmp_path / "traced.cubin").read_bytes()
    trace = json.loads((tmp_path / "t.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    loops = [e for e in events if "ii" in e.get("args", {})]
    assert loops and all(e["args"]["ii"] >= 1 and e["args"]["stage_count"] >= 1 for e in loops)
    assert all({"ph", "ts", "name"} <= set(e) for e in events)


@requires_corpus
def test_schedule_trace_unwritable(tmp_path, monkeypatch, capsys):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    rc = tileiras.main(["--gpu-name", "sm_90", "-o", "x.cubin", "--schedule-trace-file", "no/such/dir/t.json",
                        str(src)])
    assert rc == 2 and capsys.readouterr().err.startswith("error: cannot write schedule trace")


def test_batch_schedule_trace_is_deterministic(tmp_path):
    from tileiras_async.cli import batch
    from conftest import REPO
    examples = [REPO / "examples" / f"{n}.v13.4.tileirbc" for n in ("matmul_bias_relu_f16", "online_softmax_f16", "collatz_steps_i32")]
    traces = []
    for jobs in ("1", "2"):
        out = tmp_path / f"t{jobs}.json"
        rc = batch.main(["compile", *map(str, examples), "--gpu-name", "sm_80", "-j", jobs,
                         "--out-dir", str(tmp_path / jobs), "--schedule-trace-file", str(out)])
        assert rc == 0
        traces.append(out.read_bytes())
    assert traces[0] == traces[1]
    events = json.loads(traces[0])
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any("ii" in e.get("args", {}) for e in events)
