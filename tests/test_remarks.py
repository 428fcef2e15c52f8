"""--remarks* options: LLVM-style remark YAML or command-line lines that report real decisions."""
from __future__ import annotations

from tileiras_async.cli import tileiras
from tileiras_async.remarks import Remark, RemarkFilter, to_command_line, to_yaml

from conftest import PUBLIC, requires_corpus


def test_filters():
    mma = Remark("passed", "tensorcore", "MmaInstruction", "k", "m")
    spill = Remark("missed", "resources", "RegisterSpills", "k", "s")
    assert RemarkFilter.from_options("all").wants(spill)
    only_tc = RemarkFilter.from_options("tensorcore")
    assert only_tc.wants(mma) and not only_tc.wants(spill)
    assert not RemarkFilter.from_options("none")
    missed = RemarkFilter.from_options(None, missed="resources")
    assert missed.wants(spill) and not missed.wants(mma)


def test_formats():
    r = Remark("passed", "tensorcore", "MmaInstruction", "k", "it's mma.sync", "k.py", 3, 7)
    y = to_yaml([r])
    assert y.splitlines()[0] == "--- !Passed" and "DebugLoc:        { File: 'k.py', Line: 3, Column: 7 }" in y
    assert "'it''s mma.sync'" in y and y.rstrip().endswith("...")
    assert to_command_line([r]) == "k.py:3:7: remark: k: it's mma.sync [-Rpass=tensorcore]\n"


@requires_corpus
def test_drop_in_writes_remarks_file(tmp_path, monkeypatch):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    rc = tileiras.main(["--gpu-name", "sm_100", "-o", "x.cubin", "--remark-format=yaml", "--remarks=all",
                        "--remarks-output-file=r.yaml", str(src)])
    assert rc == 0
    text = (tmp_path / "r.yaml").read_text()
    assert "Name:            ResourceUsage" in text and "registers" in text and "tensor cores: tcgen05" in text
    assert (tmp_path / "x.cubin").read_bytes()[:4] == b"\x7fELF"


@requires_corpus
def test_drop_in_without_remarks_writes_none(tmp_path, monkeypatch, capsys):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    assert tileiras.main(["--gpu-name", "sm_100", "-o", "x.cubin", "--remarks=none", str(src)]) == 0
    assert capsys.readouterr().err == ""


@requires_corpus
def test_remarks_report_real_decisions(tmp_path, monkeypatch, capsys):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    assert tileiras.main(["--gpu-name", "sm_80", "-o", "x.cubin", "--remarks=all", str(src)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any("lowered to mma.sync m16n8k16" in ln and ln.endswith("[-Rpass=tensorcore]") for ln in lines)
    assert any("software-pipelined" in ln and "[-Rpass=pipelining]" in ln for ln in lines)
    assert any("store_view_tko" in ln and "[-Rpass-analysis=memory]" in ln for ln in lines)
    assert any("registers" in ln and "[-Rpass-analysis=resources]" in ln for ln in lines)
    assert len(lines) == len(set(lines))  # each decision once
    assert lines[0].startswith("kernels_public.py:")  # with the op's source location


@requires_corpus
def test_remarks_do_not_change_the_cubin(tmp_path, monkeypatch):
    src = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"
    monkeypatch.chdir(tmp_path)
    base = ["--gpu-name", "sm_100", "-O3", "--lineinfo"]
    assert tileiras.main(base + ["-o", "plain.cubin", str(src)]) == 0
    assert tileiras.main(base + ["--remarks=all", "--remarks-output-file=r.yaml", "-o", "r.cubin", str(src)]) == 0
    assert (tmp_path / "plain.cubin").read_bytes() == (tmp_path / "r.cubin").read_bytes()
