"""What the command lines tell their user: run's summary, unwritable outputs, unknown targets, where a
batch writes by default."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import PUBLIC, nvidia_bin, nvidia_env, requires_corpus
from tileiras_async.cli import tileiras
from tileiras_async.cli.batch import main as batch_main
from tileiras_async.pipeline.config import DEFAULT_OUT_DIR

REPO = Path(__file__).resolve().parents[1]
VEC_ADD = PUBLIC / "vec_add_f32_t128.v13.4.tileirbc"
EXAMPLE = REPO / "examples" / "axpby_f32.v13.4.tileirbc"


def _vec_add_args(path: Path) -> None:
    np.savez(path, **{"0": np.arange(200, dtype=np.float32), "1": np.ones(200, np.float32),
                      "2": np.zeros((200,), np.float32)})


# ------------------------------------------------------------------------------------ run's summary

@requires_corpus
def test_run_prints_one_line_per_output(tmp_path, capsys):
    _vec_add_args(tmp_path / "in.npz")
    out = tmp_path / "out.npz"
    assert batch_main(["run", str(VEC_ADD), "--grid", "2", "--args", str(tmp_path / "in.npz"), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines() == [f"output {i}: shape (200,) float32" for i in range(3)]
    with np.load(out) as z:
        assert (z["2"] == np.arange(200, dtype=np.float32) + 1).all()


@requires_corpus
def test_run_both_says_the_engines_agree_and_by_how_much(tmp_path, capsys):
    _vec_add_args(tmp_path / "in.npz")
    argv = ["run", str(VEC_ADD), "--grid", "2", "--args", str(tmp_path / "in.npz"), "--out",
            str(tmp_path / "out.npz"), "--engine", "both", "--gpu-name", "sm_80"]
    assert batch_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"output {i}: shape (200,) float32, engines agree (largest abs difference 0)"
                     for i in range(3)]


def test_largest_difference_counts_agreeing_nans_as_equal():
    from tileiras_async.engines import _max_abs_diff
    got = np.array([1.0, np.nan, 3.0], np.float32)
    assert _max_abs_diff(got, np.array([1.0, np.nan, 2.5], np.float32)) == 0.5
    assert _max_abs_diff(got, np.array([1.0, 0.0, 3.0], np.float32)) == np.inf
    assert _max_abs_diff(np.array([7], np.int64), np.array([-2], np.int64)) == 9.0


# ------------------------------------------------------------------------------------ unwritable outputs

@requires_corpus
def test_run_into_a_missing_directory_says_so(tmp_path, capsys):
    _vec_add_args(tmp_path / "in.npz")
    out = tmp_path / "no" / "such" / "out.npz"
    # grid 3 runs past the arrays (exit 6): the output's folder is checked before the kernel runs
    rc = batch_main(["run", str(VEC_ADD), "--grid", "3", "--args", str(tmp_path / "in.npz"), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err == f"error: cannot write {out}: No such file or directory\n"
    # a folder that exists but cannot take the file: the write says so after the run
    (tmp_path / "o.npz").mkdir()
    rc = batch_main(["run", str(VEC_ADD), "--grid", "2", "--args", str(tmp_path / "in.npz"), "-o",
                     str(tmp_path / "o.npz")])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert captured.err == f"error: cannot write {tmp_path / 'o.npz'}: Is a directory\n"


def _nvidia(argv: list[str]) -> subprocess.CompletedProcess:
    tool = nvidia_bin("tileiras")
    if tool is None:
        pytest.skip("NVIDIA's tileiras (nvidia-cuda-tileiras wheel) is not installed")
    return subprocess.run([str(tool), *argv], env=nvidia_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("where,why", [("no/such/dir/k.cubin", "No such file or directory"),
                                       ("EXAMPLE/k.cubin", "Not a directory"),
                                       ("sub", "Is a directory")])
def test_dropin_unwritable_output_keeps_nvidias_status_and_names_the_path(tmp_path, monkeypatch, capsys,
                                                                          where, why):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.tileirbc").write_bytes(EXAMPLE.read_bytes())
    (tmp_path / "sub").mkdir()
    target = where.replace("EXAMPLE", "k.tileirbc")
    argv = ["--gpu-name", "sm_90", "k.tileirbc", "-o", target]
    nvidia = _nvidia(argv)
    assert tileiras.main(argv) == nvidia.returncode == 2
    assert nvidia.stderr == ""    # NVIDIA's says nothing at all: ours says what failed
    assert capsys.readouterr().err == f"error: cannot write {target}: {why}\n"


# ------------------------------------------------------------------------------------ unknown --gpu-name

def test_batch_refuses_an_unknown_target_as_an_invalid_option_value(tmp_path, capsys):
    for command in (["compile"], ["tui"]):
        rc = batch_main([*command, str(EXAMPLE), "--gpu-name", "sm_999", "--out-dir", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert rc == 2, command
        assert err.startswith("error: unsupported --gpu-name 'sm_999' (choose from: sm_80, ") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_dropin_unknown_target_is_nvidias_option_error(tmp_path, capsys):
    argv = ["--gpu-name", "sm_999", str(EXAMPLE), "-o", str(tmp_path / "k.cubin")]
    nvidia = _nvidia(argv)
    assert tileiras.main(argv) == nvidia.returncode == 1
    assert capsys.readouterr().err == nvidia.stderr == \
        "tileiras: for the --gpu-name option: Cannot find option named 'sm_999'!\n"


# ------------------------------------------------------------------------------------ the batch's output folder

def _compile(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tileiras_async", "compile", *argv, "-j", "1", "--quiet"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_batch_writes_under_build_by_default_and_only_when_it_writes(tmp_path):
    done = _compile(tmp_path, str(EXAMPLE), "--gpu-name", "sm_80")
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == \
        [f"{DEFAULT_OUT_DIR}/axpby_f32.v13.4.sm_80.cubin"]
    assert f"written to {DEFAULT_OUT_DIR}" in done.stdout

    failed = _compile(tmp_path, str(tmp_path / "missing.tileirbc"), "--gpu-name", "sm_80", "--out-dir", "lazy/out")
    assert failed.returncode == 1
    assert not (tmp_path / "lazy").exists()


def test_batch_refuses_an_output_folder_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    done = _compile(tmp_path, str(EXAMPLE), "--gpu-name", "sm_80", "--out-dir", "file/out")
    assert done.returncode == 2
    assert done.stderr == "error: cannot create output directory 'file/out': Not a directory\n"
