"""The stored code of the dataclasses' generated methods (tileiras_async/dataclass_code.py): what it stores is
exactly what `exec` compiles, a cold compile finds every method it needs there, a bad file is ignored, and
the drop-in's output is the same with it."""
from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from conftest import PUBLIC, requires_corpus

SAXPY = PUBLIC / "saxpy_f32_t128.v13.4.tileirbc"


def _python(code: str, *args: str, flags: tuple[str, ...] = ()) -> dict:
    """Run `code` in a fresh interpreter (this one has imported the compiler already); its last stderr line
    is JSON."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, *flags, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.strip().splitlines()[-1])


_BUILD = """
import json, sys
from tileiras_async.dataclass_code import build
print(json.dumps({"n": build(sys.argv[1])}), file=sys.stderr)
"""

# what a cold drop-in compile imports, with the stored code installed; how many texts were compiled anyway
_COLD_IMPORTS = """
import json, sys
from tileiras_async import dataclass_code
dataclass_code.install(sys.argv[1])
import tileiras_async.cli.tileiras_compile, tileiras_async.driver, tileiras_async.irdata
from tileiras_async.ir.types import IntType, TileType
t = TileType((4, 8), IntType(32))
ok = (t == TileType((4, 8), IntType(32)) and hash(t) == hash(TileType((4, 8), IntType(32)))
      and repr(t) == "TileType(shape=(4, 8), elem=IntType(width=32))")
print(json.dumps({"known": len(dataclass_code._installed.known), "compiled": len(dataclass_code._installed.new),
                  "ok": ok}), file=sys.stderr)
"""


def test_stored_code_is_what_exec_compiles(tmp_path):
    path = tmp_path / "methods.bin"
    n = _python(_BUILD, str(path))["n"]
    stored = marshal.loads(path.read_bytes())
    assert n == len(stored) > 300
    assert any("def __init__(self,width:_type_width)" in text for text in stored)   # ir.types.IntType
    for text, blob in stored.items():
        assert marshal.loads(blob) == compile(text, "<string>", "exec", dont_inherit=True), text


def test_a_cold_compile_finds_every_method(tmp_path):
    path = tmp_path / "methods.bin"
    _python(_BUILD, str(path))
    out = _python(_COLD_IMPORTS, str(path))
    assert out["ok"] and out["known"] > 300 and out["compiled"] == 0


def test_a_bad_or_missing_file_is_ignored_and_written_once(tmp_path):
    path = tmp_path / "methods.bin"
    path.write_bytes(b"\xff not marshal data")
    out = _python(_COLD_IMPORTS, str(path))
    assert out["ok"] and out["known"] == 0 and out["compiled"] > 300
    written = marshal.loads(path.read_bytes())        # replaced on exit, as Python writes a missing .pyc
    assert len(written) == out["compiled"]
    again = _python(_COLD_IMPORTS, str(path))
    assert again["compiled"] == 0 and path.read_bytes() == marshal.dumps(written)
    # nothing is written where Python writes no byte code either
    path.unlink()
    out = _python(_COLD_IMPORTS, str(path), flags=("-B",))
    assert out["ok"] and out["compiled"] > 300 and not path.exists()


@requires_corpus
def test_the_drop_in_compiles_the_same_with_it(tmp_path):
    """A cold drop-in (which installs the stored code) writes the cubin this process compiles without it."""
    from tileiras_async import compile_module
    out = tmp_path / "x.cubin"
    env = {**os.environ, "TILEIRAS_ASYNC_SERVER": "off", "TILEIRAS_ASYNC_NO_CACHE": "1"}
    tool = Path(sys.executable).parent / "tileiras"
    argv = [str(tool)] if tool.exists() else [sys.executable, "-m", "tileiras_async.cli.tileiras"]
    proc = subprocess.run([*argv, "--gpu-name", "sm_90", "-o", str(out), str(SAXPY)], capture_output=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == compile_module(str(SAXPY), "sm_90").cubin
