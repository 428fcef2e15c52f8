# One entry point for setup, the main job and the tests. Everything installs into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: setup test test-all run bench examples clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	@# the dashboard's real-terminal test drives tmux
	command -v tmux >/dev/null 2>&1 || apt-get install -y tmux >/dev/null 2>&1 || \
		(apt-get update >/dev/null 2>&1 && apt-get install -y tmux >/dev/null 2>&1) || \
		echo "note: tmux could not be installed; tests/test_tui_tmux.py will skip"
	touch $(STAMP)

setup: $(STAMP)

# The main job: compile every bundled example for two GPUs through the batch pipeline (summary at the end).
run: $(STAMP)
	$(VENV)/bin/tileiras-async compile examples --gpu-name sm_100,sm_90 --out-dir build/examples

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Every corpus file x every target, every fuzz seed: the sweeps CI samples.
test-all: $(STAMP)
	$(PY) -m pytest -q --run-all $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/bench_read.py
	$(PY) bench/compile.py
	$(PY) bench/bench_pipeline.py
	$(PY) bench/bench_interp.py
	$(PY) bench/bench_emu.py
	$(PY) bench/bench_pipelining.py
	$(PY) bench/bench_tui.py

# Re-export examples/*.py to bytecode with the real cuTile producer.
examples: $(STAMP)
	$(PY) examples/export_all.py

clean:
	rm -rf $(VENV) build *.egg-info
