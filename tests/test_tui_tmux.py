"""The dashboard in a real terminal: tmux runs `tileiras-async tui` over the public corpus (plus one
broken input), sends keys and reads the screen the way a person would.

Needs tmux (skipped, with the reason, when it is not installed).  The default run compiles the
corpus's 13.4 modules; `--run-all` compiles every public module.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PUBLIC, corpus_files

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TMUX = shutil.which("tmux")

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install -y tmux)"),
    pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"public corpus not found at {PUBLIC}"),
]


class Terminal:
    """One tmux session on a private server socket."""

    def __init__(self, name: str, width: int = 200, height: int = 50):
        self.socket = f"tileiras-tui-test-{os.getpid()}-{name}"
        self.name = name
        self.width, self.height = width, height

    def tmux(self, *args: str, check: bool = True) -> str:
        r = subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr}")
        return r.stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # COLUMNS / LINES inherited from the test runner would override the terminal's real size
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(self.width), "-y", str(self.height),
                  f"unset COLUMNS LINES; export {exports}; {command}")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name, check=False)

    def keys(self, *keys: str) -> None:
        for k in keys:
            self.tmux("send-keys", "-t", self.name, k)
            time.sleep(0.15)

    def wait_for(self, pattern: str, timeout: float, gone: Path | None = None) -> str:
        """The screen once `pattern` shows on it (fails early if the program ended: `gone` exists)."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            if gone is not None and gone.exists():
                break
            time.sleep(0.25)
        raise AssertionError(f"'{pattern}' never appeared on the screen:\n{screen}")

    def close(self) -> None:
        self.tmux("kill-server", check=False)


@pytest.fixture
def terminal():
    term = Terminal("dash")
    yield term
    term.close()


def _open_next_error(terminal) -> str:
    """The screen once `e` Enter has opened the next error's IR view; under load a key pressed while the
    table redraws can be lost, so it is pressed again (each press moves on to the next error)."""
    for _ in range(3):
        terminal.keys("e", "Enter")
        try:
            return terminal.wait_for(r"IR around the op", 10)
        except AssertionError:
            continue
    raise AssertionError(f"the IR view never opened:\n{terminal.screen()}")


def test_dashboard_in_a_real_terminal(terminal, tmp_path, request):
    files = corpus_files("*.tileirbc") if request.config.getoption("--run-all") else corpus_files("*.v13.4.tileirbc")
    # the inputs go in one directory (a command line naming all 224 files is too long for tmux)
    in_dir = tmp_path / "inputs"
    in_dir.mkdir()
    for p in files:
        (in_dir / p.name).symlink_to(p)
    broken = in_dir / "broken_input.tileirbc"
    broken.write_bytes(files[0].read_bytes()[:100])       # a truncated module: fails to parse
    inputs = [str(p) for p in files] + [str(broken)]
    exit_file = tmp_path / "exit"
    command = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(str(BIN / 'tileiras-async'))} tui "
               + shlex.quote(str(in_dir))
               + f" --out-dir {shlex.quote(str(tmp_path / 'out'))} -j 2 --gpu-name sm_100;"
               f" echo TUI-EXIT=$? > {shlex.quote(str(exit_file))}; sleep 30")
    terminal.start(command, {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)})
    n = len(inputs)
    timeout = 600 if request.config.getoption("--run-all") else 240
    screen = terminal.wait_for(r"done: exit \d+", timeout, gone=exit_file)
    # all modules finished, the broken one failed with its diagnostic on screen
    assert f"modules {n}/{n}" in screen and "running 0  queued 0" in screen, screen
    code = int(re.search(r"done: exit (\d+)", screen).group(1))
    ok = int(re.search(r"modules \d+/\d+  ok (\d+)", screen).group(1))
    assert code != 0 and ok >= 1
    terminal.keys("f")                                     # failed rows only
    screen = terminal.wait_for(r"broken_input", 10)
    rows = [line for line in screen.splitlines() if "FAIL(" in line]
    assert any("broken_input" in line for line in rows), screen
    assert not any(" ok " in line for line in rows)
    diag = [line for line in screen.splitlines() if "broken_input" in line and "error" in line]
    assert diag, f"the broken input's diagnostic is not on the screen:\n{screen}"
    # open the diagnostic, look, come back, quit: the exit status is the batch's
    for _ in range(12):                                    # `e`: the next error in the diagnostics pane
        screen = _open_next_error(terminal)
        terminal.keys("Escape")
        if "broken_input.tileirbc" in screen:
            break
    assert "error:" in screen and "broken_input.tileirbc" in screen, screen
    # a `q` that follows Escape too closely reads as Alt+q: quit once the IR view has closed
    deadline = time.monotonic() + 10
    while "IR around the op" in terminal.screen() and time.monotonic() < deadline:
        time.sleep(0.2)
    terminal.keys("q")
    deadline = time.monotonic() + 60
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exit_file.read_text().strip() == f"TUI-EXIT={code}"
    # what it wrote is what `compile` writes: one cubin per module that compiled
    assert len(list((tmp_path / "out").glob("*.cubin"))) == ok
