"""Bad inputs and CLI misuse: exit codes (and messages, where recorded) as NVIDIA's tools give them."""
from __future__ import annotations

import pytest

from tileiras_async.cli import disasm, tileiras
from tileiras_async.frontend import SUPPORTED_VERSIONS

from conftest import INVALID, manifest, requires_corpus

MANIFEST = manifest(INVALID)
ENTRIES = MANIFEST.get("entries", [])
CLI_CASES = MANIFEST.get("cli", [])

# The real tool reads past the end of this 8-byte file and reports whatever bytes follow in its buffer
# ("0.163"); we read missing bytes as 0.  The exit code and the message's wording still match.
READS_PAST_END = {"gen_magic_only.tileirbc"}



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
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"].rsplit("/", 1)[-1])
def test_tileiras_matches_real_compiler(entry, tmp_path, monkeypatch, capsys):
    path = INVALID.parent.parent / entry["file"]
    rc, out, err = _run(tileiras.main, ["--gpu-name", "sm_100", "-o", "x.cubin", str(path)],
                        tmp_path, monkeypatch, capsys)
    expected = entry["tileiras"]
    assert rc == expected["rc"], err
    assert (tmp_path / "x.cubin").exists() == expected["output_produced"]
    if rc == 0:
        assert (tmp_path / "x.cubin").read_bytes()[:4] == b"\x7fELF"
        return
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
@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c["name"])
def test_tileiras_cli(case, tmp_path, monkeypatch, capsys):
    rc, out, err = _run(tileiras.main, _cli_argv(case), tmp_path, monkeypatch, capsys)
    assert rc == case["rc"], err
    outputs = [p for p in tmp_path.rglob("*") if p.is_file()]
    if case["rc"] != 0:
        assert outputs == []
    elif case["argv"][-1].endswith(".tileirbc"):
        expected = "x.cubin" if "-o" in case["argv"] else "elf.o"  # no -o writes elf.o, like the real tool
        assert [p.name for p in outputs] == [expected]
        first = case["stderr"].splitlines()[:1]
        if first and not first[0].startswith("tileiras: Did you mean"):
            assert err.splitlines()[:1] == first
