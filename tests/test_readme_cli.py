"""README.md and the command line agree: every command line the README shows is run.

The README's command lines are found by parsing it: the synopsis block under "## Commands",
indented shell lines (`$ ` prompts and `\\` continuations included) and inline code that starts with
one of our programs.  Each is made concrete -- placeholders become real values (FILES|DIRS ->
a small `examples` folder, G -> a GPU name, ...), every optional `[...]` group is included -- and
run in a scratch folder with this environment's programs first on PATH; it must exit 0 and print
no `error:`.  Dashboard lines run in a pseudo-terminal (`script`) and get --exit-when-done; `dask`
lines start real scheduler/worker processes in the background (on a free port) for the lines after
them.  The default run leaves the Dask and dashboard lines to the tests named in ELSEWHERE (which run
those options by default); --run-all runs every line.  The drop-in's options, spelled in prose, are each run in-process.  Then every option spelled
anywhere in the README must have been passed by at least one of those runs.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BIN = Path(sys.executable).parent
PROGRAMS = ("tileiras-async", "tileiras", "tileirdisasm-async", "python -m tileiras_async", "dask", "python3 -c")
EXAMPLES = ("axpby_f32.v13.4.tileirbc",)    # `examples` in the README's lines: one module keeps it cheap
KERNEL = "axpby_f32.v13.4.tileirbc"

# placeholder -> value, longest first (a regex on whole tokens)
PLACEHOLDERS = [
    ("tcp://HOST:PORT|local:N", "local:1"),
    ("FILES|DIRS...", "examples"), ("FILE|DIR...", "examples"), ("FILES|DIRS", "examples"),
    ("<tile bytecode file>", "kernel.tileirbc"), ("interpret|emulate|both", "both"),
    ("G[,G...]", "sm_100,sm_90"), ("X[,Y[,Z]]", "4"), ("MODULE", "kernel.tileirbc"), ("FILE", "kernel.tilegpu"),
    ("P1,P2,...", "remove-layout-conversions,dce"),
    ("K.ptx", "kernel.ptx"), ("MIB", "4096"), ("G", "sm_90"), ("N", "2"), ("D", "out"), ("S", "600"),
    ("F", "trace.json"), ("K", "@kernel"),
]
# lines the default run leaves to other default tests (all run with --run-all): option -> the test that runs it
ELSEWHERE = {"--cluster": "test_pipeline_dask.py", "--tui": "test_tui_app.py::test_live_batch_fail_retry_cancel_quit",
             "--exit-when-done": "test_tui_tmux.py", "--replay": "test_tui_app.py / test_tui_tmux.py",
             "--no-ir": "test_tui_model.py::test_tui_command_takes_ir_snapshots_unless_told_not_to"}
# shorthand in prose, not options of ours
NOT_OPTIONS = {"-j1", "-j2", "-jN"}


# ------------------------------------------------------------------------------------------ parsing

def _is_command(text: str) -> bool:
    return any(text == p or text.startswith(p + " ") for p in PROGRAMS)


def readme_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command line as written) for every command line of the README."""
    lines = text.splitlines()
    out: list[tuple[int, str]] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            if _is_command(line):
                start, command = i, re.split(r"\s{2,}", line.strip())[0]
                while i + 1 < len(lines) and re.match(r"^ {8}[\[-]", lines[i + 1]):
                    i += 1
                    command += " " + lines[i].strip()
                out.append((start + 1, command))
        elif line.startswith("    "):
            body = re.sub(r"\s+# .*$", "", line[4:].removeprefix("$ "))   # a trailing shell comment
            if _is_command(body):
                start = i
                while body.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    body = body[:-1].rstrip() + " " + lines[i].strip()
                out.append((start + 1, body))
        else:
            out += [(i + 1, m) for m in re.findall(r"`([^`]+)`", line) if _is_command(m) and " " in m]
        i += 1
    return out


def readme_options(text: str) -> set[str]:
    """Every option of ours the README spells: in command lines and in inline code."""
    found: set[str] = set()
    ours = [c for _, c in readme_commands(text) if not c.startswith("dask ")]   # Dask's own options are not ours
    # a span that runs another program (`ptxas -v`, `bench/codegen_quality.py --save F`) names its options
    spans = [s for s in re.findall(r"`([^`\n]+)`", text) if not re.match(r"(\S+\.py|ptxas|nvdisasm)\b", s)]
    for span in spans + ours:
        for token in re.findall(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)", span):
            found.add(token)
    expanded = set()
    for option in found:   # `--remarks-{passed,missed,failed,analysis}` is four options
        m = re.match(r"(--[\w-]+?)-$", option)
        expanded.add(option)
    for m in re.finditer(r"`(--[\w-]+)-\{([\w,]+)\}", text):
        expanded |= {f"{m.group(1)}-{s}" for s in m.group(2).split(",")}
    return {o for o in expanded if o not in NOT_OPTIONS and not o.endswith("-")}


def concrete(command: str, kernel_symbol: str) -> str:
    """The README line made runnable: placeholders filled, optional groups included."""
    command = command.replace("[options]", "--gpu-name G")   # the drop-in needs a target, as NVIDIA's does
    if command.startswith("python -m tileiras_async ..."):
        command = "python -m tileiras_async list-versions"
    command = command.replace("compile ... --json", "compile examples --gpu-name sm_100 --json")
    for name, value in PLACEHOLDERS:
        value = kernel_symbol if value == "@kernel" else value
        command = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", value, command)
    command = re.sub(r"\[([^\[\]]*)\]", r"\1", command)      # include every optional group
    if "--exit-when-done" not in command:   # a dashboard would stay open until `q`
        parts = [p + " --exit-when-done" if re.search(r"--tui\b|^\s*tileiras-async tui\b", p) else p
                 for p in command.split(";")]
        command = ";".join(parts)
    return re.sub(r"\s+", " ", command).strip()


def variants(command: str) -> list[str]:
    """--json and --tui exclude each other (the synopsis lists both): run one line with each."""
    tokens = command.split()
    if "--json" in tokens and "--tui" in tokens:
        return [" ".join(t for t in tokens if t not in ("--tui", "--exit-when-done")),
                " ".join(t for t in tokens if t != "--json")]
    return [command]


# ------------------------------------------------------------------------------------------ running

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _our_ptx(module: Path, gpu: str) -> str:
    from tileiras_async import stages
    res = stages.compile_in_process(str(module), module.read_bytes(), stages.CompileOptions(gpu, 3))
    assert res.ok, res.diagnostics
    return res.ptx


def _ir_before(module: Path, gpu: str, pass_name: str) -> str:
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.driver import kernel_llvm_ir
    from tileiras_async.tilegpu.options import CodegenOptions
    from tileiras_async.tilegpu.passes import IRPrinting
    m = read_module(module.read_bytes())
    snapshots = []
    kernel_llvm_ir(m, m.functions[0], CodegenOptions(target=gpu), printing=IRPrinting(before=frozenset({pass_name})),
                   snapshots=snapshots)
    return snapshots[0].text


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "examples").mkdir()
    for name in EXAMPLES:
        shutil.copy(REPO / "examples" / name, tmp_path / "examples" / name)
    shutil.copy(REPO / "examples" / KERNEL, tmp_path / "kernel.tileirbc")
    (tmp_path / "kernel.ptx").write_text(_our_ptx(tmp_path / "kernel.tileirbc", "sm_90"))   # for `run --ptx`
    (tmp_path / "kernel.tilegpu").write_text(_ir_before(tmp_path / "kernel.tileirbc", "sm_90", "dce"))   # for `opt`
    np.savez(tmp_path / "IN.npz", **{"0": np.float32(2), "1": np.float32(3), "2": np.ones(1024, np.float32),
                                     "3": np.ones(1024, np.float32), "4": np.zeros(1024, np.float32)})
    return tmp_path


def run_line(line_no: int, command: str, cwd: Path, env: dict) -> None:
    shell = command
    if "--exit-when-done" in command:   # the dashboard needs a terminal
        shell = f"script -qec {shlex.quote('stty cols 160 rows 50; ' + command)} /dev/null"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", f"exec timeout -s KILL 240 bash -o pipefail -c {shlex.quote(shell)}"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    stderr = r.stderr + (r.stdout if shell != command else "")
    assert r.returncode == 0, f"README line {line_no}: {command}\n{stderr[-3000:]}"
    assert not re.search(r"(^|\n)(\S+: )*error:", r.stderr), f"README line {line_no}: {command}\n{r.stderr}"


def drop_in_option_runs(text: str) -> list[list[str]]:
    """The drop-in's options as the README's prose spells them (its section, inline code starting
    with `-`), each made into one invocation of the drop-in on a small kernel."""
    section = text.split("### The drop-in", 1)[1].split("\n#", 1)[0]
    base = ["--gpu-name", "sm_90", "kernel.tileirbc", "-o", "k.cubin"]
    runs = []
    for span in re.findall(r"`(-[^`]+)`", section):
        span = span.split("|")[0]                       # --remarks=all|memory|... -> --remarks=all
        if "{" in span:                                 # --remarks-{passed,...}=CATEGORIES
            head, rest = span.split("{", 1)
            names, value = rest.split("}", 1)
            runs += [[f"{head}{n}{value.replace('CATEGORIES', 'memory')}"] for n in names.split(",")]
            continue
        argv = span.replace("=F", "=remarks.out").split()
        if argv == ["--gpu-name"]:                      # every run passes it
            continue
        if argv == ["--arch"]:
            argv = ["--arch", "sm_90"]
        if argv[0] == "--schedule-trace-file":
            argv = [argv[0], "trace.json"]
        if argv == ["-g"]:
            argv = ["-g", "-O0"]                          # "-g (at -O0)"
        runs.append(argv)
    return [argv + base for argv in runs]


def test_readme_parses_into_commands():
    commands = [c for _, c in readme_commands(README.read_text())]
    assert any(c.startswith("tileiras-async compile FILES|DIRS...") and "--cluster" in c for c in commands)
    assert any(c.startswith("tileiras --gpu-name sm_100") for c in commands)
    assert any("| jq -c" in c for c in commands)
    assert concrete("tileiras-async run MODULE --grid X[,Y[,Z]] [--kernel K]", "k") == \
        "tileiras-async run kernel.tileirbc --grid 4 --kernel k"


def test_every_drop_in_option_of_the_readme(workdir, monkeypatch, capsys):
    from tileiras_async.cli.tileiras import main
    monkeypatch.chdir(workdir)
    runs = drop_in_option_runs(README.read_text())
    assert len(runs) >= 12
    for argv in runs:
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 0 and "error:" not in err, (argv, err)
        if "--list-versions" in argv or "-h" in argv:   # prints the versions / the help and exits, like NVIDIA's
            continue
        assert Path("k.cubin").read_bytes().startswith(b"\x7fELF"), argv
        Path("k.cubin").unlink()


def test_every_readme_command_line_runs(workdir, request):
    from tileiras_async.bytecode.reader import read_module
    everything = request.config.getoption("--run-all")
    text = README.read_text()
    symbol = read_module((workdir / "kernel.tileirbc").read_bytes()).functions[0].name.decode()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "TERM": "xterm",
           "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "30s"}
    env.pop("COLUMNS", None), env.pop("LINES", None)
    port = str(free_port())
    jq = shutil.which("jq")
    background: list[subprocess.Popen] = []
    ran: list[str] = []
    try:
        for line_no, written in readme_commands(text):
            command = concrete(written, symbol).replace("8786", port).replace("python -m", f"{sys.executable} -m")
            if not everything:   # Dask clusters: tests/test_pipeline_dask.py runs those by default
                if command.startswith("dask ") or re.search(r"--cluster (tcp://\d|local:\d)", written):
                    continue
                command = re.sub(r" --cluster \S+", "", command)   # the synopsis line: the rest still runs
            if "| jq" in command and jq is None:
                continue   # the Makefile installs jq; a machine without it cannot run this one line
            if command.startswith("dask "):
                # `dask scheduler ... &  dask worker ... &`: servers for the lines that follow
                for part in [p.strip() for p in command.split("&") if p.strip()]:
                    background.append(subprocess.Popen(shlex.split(part), cwd=workdir, env=env, start_new_session=True,
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    time.sleep(2.0 if "scheduler" in part else 0)
                ran.append(command)
                continue
            for variant in variants(command):
                if not everything and "--exit-when-done" in variant:
                    continue   # a dashboard in a pseudo-terminal: see ELSEWHERE
                run_line(line_no, variant, workdir, env)
                ran.append(variant)
    finally:
        for proc in background:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    passed = {t for c in ran for t in shlex.split(c) if t.startswith("-")}
    passed |= {a for argv in drop_in_option_runs(text) for a in argv if a.startswith("-")}
    passed |= {t.split("=", 1)[0] for t in passed}
    passed |= {t[:2] for t in passed if re.match(r"^-[A-Za-z]\w", t)}   # -O3 is -O
    missing = sorted(o for o in readme_options(text) if o not in passed and (everything or o not in ELSEWHERE))
    assert missing == [], f"options the README names but no README command line runs: {missing}"
