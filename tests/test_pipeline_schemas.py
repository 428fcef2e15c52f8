"""schemas/*.json are generated from the msgspec Structs; this fails when they drift apart.

Regenerate with `python -m tileiras_async.pipeline.schemas` after changing a message or event.
"""
from __future__ import annotations

import json
import subprocess
import sys

import msgspec

from tileiras_async.pipeline import events, schemas
from tileiras_async.pipeline.messages import JobReply, JobRequest, WorkerHello, WorkerNote
from tileiras_async.stages import STAGES


def test_schemas_match_the_code():
    stale = schemas.drift()
    assert stale == [], f"{stale} out of date: run `python -m tileiras_async.pipeline.schemas`"


def test_check_command_detects_drift(tmp_path):
    schemas.write(tmp_path)
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0
    path = tmp_path / "events.schema.json"
    doc = json.loads(path.read_text())
    del doc["$defs"]["Diagnostic"]["properties"]["location"]
    path.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-m", "tileiras_async.pipeline.schemas", "--check", "--dir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "events.schema.json: out of date" in r.stderr


def test_every_event_and_stage_message_is_in_a_schema():
    docs = {name: json.loads(text) for name, text in schemas.expected_files().items()}
    event_defs = docs["events.schema.json"]["$defs"]
    assert {t.__name__ for t in events.EVENT_TYPES} <= set(event_defs)
    tags = docs["events.schema.json"]["discriminator"]["mapping"]
    assert len(tags) == len(events.EVENT_TYPES)
    stage_defs = docs["stages.schema.json"]["$defs"]
    from tileiras_async.pipeline.messages import STAGE_TYPES
    assert set(STAGE_TYPES) == set(STAGES)
    for req, resp in STAGE_TYPES.values():
        assert req.__name__ in stage_defs and resp.__name__ in stage_defs
    assert {"JobRequest", "JobReply", "WorkerHello", "JobBegun"} <= set(docs["ipc.schema.json"]["$defs"])


def test_ipc_round_trip():
    enc = msgspec.msgpack.Encoder()
    req = JobRequest(1, "lower", b"payload", "m.tileirbc", "k")
    assert msgspec.msgpack.decode(enc.encode(req), type=JobRequest) == req
    reply = JobReply(1, 42, True, b"x", elapsed_s=0.5, rss_bytes=7)
    assert msgspec.msgpack.decode(enc.encode(reply), type=JobReply) == reply
    note = WorkerHello(42, startup_s=0.3)
    assert msgspec.msgpack.decode(enc.encode(note), type=WorkerNote) == note
