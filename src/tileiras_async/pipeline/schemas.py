"""JSON Schemas of every message the pipeline moves and every event it reports, generated from
the msgspec Structs (the code is the source of truth; schemas/ is its published form).

    python -m tileiras_async.pipeline.schemas            # (re)write schemas/*.json
    python -m tileiras_async.pipeline.schemas --check    # exit 1 if schemas/ differs from the code

tests/test_pipeline_schemas.py runs the check, so a message changed without regenerating the
schemas fails the tests.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _groups() -> dict[str, tuple[str, list[type]]]:
    from .. import stages
    from ..serving import protocol
    from . import events, messages
    stage_types: list[type] = []
    for pair in messages.STAGE_TYPES.values():  # every stage's request and response, in pipeline order
        stage_types += [t for t in pair if t not in stage_types]
    stage_types.append(stages.CompileResult)
    return {
        "stages": ("Compiler stage messages (tileiras_async.stages): request -> response per stage.", stage_types),
        "ipc": ("What crosses the supervisor/worker boundary (tileiras_async.pipeline.messages): the job "
                "envelope around a msgpack-encoded stage message, and the datagrams a worker sends.",
                [messages.JobRequest, messages.JobReply, messages.WorkerNote]),
        "events": ("The pipeline's event stream (tileiras_async.pipeline.events): one JSON object per line with "
                   "--json; the tag field `event` names the type.", [events.Event]),
        "server": ("The compile server's socket protocol (tileiras_async.serving.protocol): one request and one "
                   "reply per connection, each a 4-byte big-endian length and a msgpack body; the tag field "
                   "`kind` names the type.", [protocol.Request, protocol.Reply]),
    }


def render(name: str) -> str:
    """One schema document: `oneOf` the group's top-level types, definitions under $defs."""
    description, types = _groups()[name]
    tops, components = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    doc = {
        "$schema": DIALECT,
        "$id": f"tileiras-async/{name}.schema.json",
        "title": f"tileiras-async {name}",
        "description": description,
    }
    if len(tops) == 1:
        doc.update(tops[0])   # a tagged union already is anyOf + discriminator
    else:
        doc["oneOf"] = tops
    doc["$defs"] = components
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def expected_files() -> dict[str, str]:
    return {f"{name}.schema.json": render(name) for name in _groups()}


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in expected_files().items():
        path = directory / fname
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def drift(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of schema files that are missing or differ from what the code generates."""
    out = []
    for fname, text in expected_files().items():
        path = directory / fname
        if not path.is_file() or path.read_text() != text:
            out.append(fname)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tileiras_async.pipeline.schemas", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on drift")
    p.add_argument("--dir", type=Path, default=SCHEMA_DIR)
    args = p.parse_args(argv)
    if args.check:
        stale = drift(args.dir)
        for fname in stale:
            print(f"{args.dir / fname}: out of date; run python -m tileiras_async.pipeline.schemas", file=sys.stderr)
        return 1 if stale else 0
    for path in write(args.dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
