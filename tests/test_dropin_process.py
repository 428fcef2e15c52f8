"""The installed `tileiras` command runs `console_main`, which ends its process without interpreter
finalization: whatever was printed still arrives, exit codes are main()'s, and the atexit cleanups (the
per-process temporary directory) still run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileiras_async.cli import tileiras

from conftest import INVALID, PUBLIC, requires_corpus

SAXPY = PUBLIC / "saxpy_f32_t128.v13.4.tileirbc"


def _tool(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "tileiras"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "tileiras_async.cli.tileiras"]
    base = {**os.environ, "TILEIRAS_ASYNC_SERVER": "off", "TILEIRAS_ASYNC_NO_CACHE": "1"}
    return subprocess.run([*cmd, *argv], capture_output=True, env={**base, **(env or {})}, timeout=300)


def test_printed_text_arrives_whole():
    proc = _tool("--help")
    assert proc.returncode == 0 and proc.stdout.decode() == tileiras.PARSER.help_text()
    proc = _tool("--bogus")
    assert proc.returncode == 1 and proc.stderr.startswith(b"tileiras: Unknown command line argument '--bogus'")


@requires_corpus
def test_a_compile_leaves_no_temporary_directory(tmp_path):
    """ptxas works in the process's own temporary directory, which its atexit hook removes."""
    out = tmp_path / "x.cubin"
    proc = _tool("--gpu-name", "sm_90", "-o", str(out), str(SAXPY), env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
    per_user = tmp_path / f"tileiras-async-{os.getuid()}"
    assert per_user.is_dir() and list(per_user.iterdir()) == []


@requires_corpus
def test_a_rejected_input_exits_with_its_code(tmp_path):
    bad = sorted(INVALID.glob("*.tileirbc"))[0]
    in_process = subprocess.run([sys.executable, "-c", "import sys; from tileiras_async.cli.tileiras import main; "
                                 "sys.exit(main())", "--gpu-name", "sm_90", "-o", str(tmp_path / "a.cubin"),
                                 str(bad)], capture_output=True, timeout=300,
                                env={**os.environ, "TILEIRAS_ASYNC_SERVER": "off", "TILEIRAS_ASYNC_NO_CACHE": "1"})
    proc = _tool("--gpu-name", "sm_90", "-o", str(tmp_path / "b.cubin"), str(bad))
    assert proc.returncode == in_process.returncode != 0
    assert proc.stderr == in_process.stderr and proc.stderr.startswith(b"error: ")
    assert not (tmp_path / "b.cubin").exists()


def test_llvm_help_options(capsys):
    """-h and --help-list print --help's listing, the -hidden forms NVIDIA's hidden options too; the
    disassembler takes the same ones."""
    from tileiras_async.cli import disasm
    for main, hidden_name in ((tileiras.main, "--Werr-hints"), (disasm.main, "-h ")):
        assert main(["--help"]) == 0
        shown = capsys.readouterr().out
        assert hidden_name not in shown and "--help-list " in shown
        for flag in ("-h", "--help-list"):
            assert main([flag]) == 0 and capsys.readouterr().out == shown
        for flag in ("--help-hidden", "--help-list-hidden"):
            assert main([flag]) == 0
            listing = capsys.readouterr().out
            assert hidden_name in listing and set(shown.splitlines()) <= set(listing.splitlines())


@requires_corpus
def test_print_options_are_taken_and_change_nothing(tmp_path, capsys):
    """NVIDIA's tools accept LLVM's --print-options / --print-all-options and print nothing for them."""
    from tileiras_async.cli import disasm
    plain, printed = tmp_path / "a.cubin", tmp_path / "b.cubin"
    assert tileiras.main(["--no-cache", "--gpu-name", "sm_90", "-o", str(plain), str(SAXPY)]) == 0
    assert tileiras.main(["--print-options", "--print-all-options", "--no-cache", "--gpu-name", "sm_90", "-o",
                          str(printed), str(SAXPY)]) == 0
    assert capsys.readouterr().err == "" and plain.read_bytes() == printed.read_bytes()
    assert disasm.main([str(SAXPY)]) == 0
    text = capsys.readouterr().out
    assert disasm.main(["--print-all-options", str(SAXPY)]) == 0 and capsys.readouterr().out == text


@requires_corpus
def test_apply_controls_is_refused_as_nvidia_refuses_it(tmp_path, capsys):
    """NVIDIA's --apply-controls is 'not supported on this platform' (exit 2), checked after the target and
    the magic, before the bytecode is parsed; an empty path is no control file at all."""
    acf = tmp_path / "c.acf"
    acf.write_text("x\n")
    cut = tmp_path / "cut.tileirbc"
    cut.write_bytes(SAXPY.read_bytes()[:100])
    out = tmp_path / "o.cubin"
    refused = "error: --apply-controls is not supported on this platform\n"
    for argv, rc, err in [([f"--apply-controls={acf}", "--gpu-name", "sm_90", str(SAXPY)], 2, refused),
                          ([f"--apply-controls={acf}", "--gpu-name", "sm_90", str(cut)], 2, refused),
                          (["--apply-controls=", "--gpu-name", "sm_90", str(SAXPY)], 0, "")]:
        assert tileiras.main([*argv, "--no-cache", "-o", str(out)]) == rc
        assert capsys.readouterr().err == err and out.exists() == (rc == 0)
        out.unlink(missing_ok=True)


# (extra arguments, exit code, stderr) as NVIDIA's tileiras 13.5 prints them (recorded; compared again when it
# is installed): LLVM's integer reading of -O, prefix options, every bad argument reported, --preview checked
# as it is parsed, -l refused after the module is read
OPTION_CASES = [
    (["-Oabc"], 1, "tileiras: for the --opt-level option: 'abc' value invalid for integer argument!\n"),
    (["--opt-level=99999999999"], 1,
     "tileiras: for the --opt-level option: '99999999999' value invalid for integer argument!\n"),
    (["-O010"], 2, "error: invalid optimization level: 8\n"),
    (["-O0x2"], 0, ""),
    (["-O", "2"], 1, "tileiras: for the -O option: requires a value!\ntileiras: Too many positional arguments "
                     "specified!\nCan specify at most 1 positional arguments: See: tileiras --help\n"),
    (["--preview=simt,foo"], 1,
     "tileiras: for the --preview option: unknown preview feature 'foo'; supported features: simt\n"),
    (["--preview=simt"], 0, ""),
    (["-l=foo"], 5, "error: libraries require the 'simt' preview feature\n"),
    (["-l=/nonexistent/lib", "--preview=simt"], 5, "error: failed to open tile library: No such file or directory\n"),
]


@requires_corpus
@pytest.mark.parametrize("extra,rc,err", OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_option_parsing_as_nvidia(extra, rc, err, tmp_path, capsys):
    from conftest import nvidia_bin, nvidia_env
    argv = ["--gpu-name", "sm_90", "-o", str(tmp_path / "o.cubin"), str(SAXPY), *extra]
    assert tileiras.main([*argv, "--no-cache"]) == rc
    assert capsys.readouterr().err == err
    tool = nvidia_bin("tileiras")
    if tool is not None:
        real = subprocess.run([str(tool), *argv], capture_output=True, text=True, env=nvidia_env(), timeout=120)
        assert (real.returncode, real.stderr.replace(str(tool), "tileiras")) == (rc, err)
