"""Bad inputs and CLI misuse: exit codes (and messages, where recorded) as NVIDIA's tools give them."""
from __future__ import annotations

import json

import pytest

from tileiras_async.cli import disasm, tileiras
from tileiras_async.frontend import SUPPORTED_VERSIONS

from conftest import INVALID, requires_corpus

MANIFEST = json.loads((INVALID / "manifest.json").read_text()) if (INVALID / "manifest.json").is_file() else {}
ENTRIES = MANIFEST.get("entries", [])
CLI_CASES = MANIFEST.get("cli", [])

# The real tool reads past the end of this 8-byte file and reports whatever bytes follow in its buffer
# ("0.163"); we read missing bytes as 0.  The exit code and the message's wording still match.
READS_PAST_END = {"gen_magic_only.tileirbc"}

# Inputs the real tool compiles (rc 0): they need kernel code generation, which is a later stage.
NEEDS_CODEGEN = {e["file"] for e in ENTRIES if e["tileiras"]["rc"] == 0}


def _ours(text: str) -> str:
    """NVIDIA's 13.5 tools name 13.5 as their newest version; this build reads 13.1-13.4 (as specified)."""
    newest = SUPPORTED_VERSIONS[-1]
    return text.replace("[13.1 - 13.5]", f"[13.1 - {newest}]").replace("current version 13.5",
                                                                          f"current version {newest}")


def _run(main, argv, cwd, monkeypatch, capsys):
    monkeypatch.chdir(cwd)
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@requires_corpus
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"].rsplit("/", 1)[-1])
def test_disasm_matches_real_disassembler(entry, tmp_path, monkeypatch, capsys):
    path = INVALID.parent.parent / entry["file"]
    rc, out, err = _run(disasm.main, [str(path)], tmp_path, monkeypatch, capsys)
    expected = entry["tileirdisasm"]
    assert rc == expected["rc"], err
    if rc != 0:
        assert out == ""
        assert err.splitlines() == _ours(expected["stderr"]).splitlines()


@requires_corpus
@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["file"] not in NEEDS_CODEGEN],
                         ids=lambda e: e["file"].rsplit("/", 1)[-1])
def test_tileiras_rejects_bad_bytecode(entry, tmp_path, monkeypatch, capsys):
    path = INVALID.parent.parent / entry["file"]
    rc, out, err = _run(tileiras.main, ["--gpu-name", "sm_100", "-o", "x.cubin", str(path)],
                        tmp_path, monkeypatch, capsys)
    expected = entry["tileiras"]
    assert rc == expected["rc"], err
    assert not (tmp_path / "x.cubin").exists()
    if path.name in READS_PAST_END:
        assert err.startswith("error: unsupported Tile IR bytecode version: ")
    else:
        assert err.splitlines() == _ours(expected["stderr"]).splitlines()
    assert "Traceback" not in err


def _cli_argv(case):
    argv = list(case["argv"][1:])
    # paths in the manifest are relative to out/invalid
    return [str(INVALID / a) if a.startswith("../") else a for a in argv]


@requires_corpus
@pytest.mark.parametrize("case", [c for c in CLI_CASES if c["rc"] != 0 or not c["argv"][-1].endswith(".tileirbc")],
                         ids=lambda c: c["name"])
def test_tileiras_cli_misuse(case, tmp_path, monkeypatch, capsys):
    rc, out, err = _run(tileiras.main, _cli_argv(case), tmp_path, monkeypatch, capsys)
    assert rc == case["rc"], err
    if case["rc"] != 0:
        assert not (tmp_path / "x.cubin").exists()
        first = case["stderr"].splitlines()[:1]
        if first and not first[0].startswith("tileiras: Did you mean"):
            assert err.splitlines()[:1] == first
