# One entry point for setup, the main job and the tests. Everything installs into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: setup bytecode test test-all run bench gpu-job examples oracle docs clean

# Pinned versions (constraints.txt) make the output reproducible: llvmlite's LLVM decides the PTX.
$(STAMP): pyproject.toml constraints.txt setup.py
	@echo "setup: creating $(VENV) and installing tileiras-async with its test tools and the [cuda,dask,docs] extras"
	@echo "setup: pinned by constraints.txt: $$(grep -c '==' constraints.txt) packages (numpy, llvmlite, textual, distributed, NVIDIA's wheels, ...)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install --progress-bar off --disable-pip-version-check -c constraints.txt -e '.[test]' \
		| grep -E '^(Successfully installed|ERROR)' || true
	$(PY) -c "import tileiras_async, tileiras_tui, distributed, llvmlite; print('setup: ok, llvmlite', llvmlite.__version__)"
	@# the dashboard's real-terminal test drives tmux; the README test runs the README's jq example
	command -v tmux >/dev/null 2>&1 || apt-get install -y tmux >/dev/null 2>&1 || \
		(apt-get update >/dev/null 2>&1 && apt-get install -y tmux >/dev/null 2>&1) || \
		echo "note: tmux could not be installed; tests/test_tui_tmux.py will skip"
	command -v jq >/dev/null 2>&1 || apt-get install -y jq >/dev/null 2>&1 || \
		(apt-get update >/dev/null 2>&1 && apt-get install -y jq >/dev/null 2>&1) || \
		echo "note: jq could not be installed; the README's jq example will skip"
	touch $(STAMP)

setup: $(STAMP) bytecode

# Byte-compiled modules, so that each `tileiras` process loads them instead of compiling the sources
# (this environment sets PYTHONDONTWRITEBYTECODE, so Python never writes them itself), the compiled
# methods of the package's dataclasses (src/tileiras_async/dataclass_code.py) and the installation's
# fingerprint for the compile cache (cache/fingerprint.py); incremental.
bytecode: $(STAMP)
	@$(PY) -m compileall -q src tui >/dev/null
	@$(PY) -m tileiras_async.dataclass_code >/dev/null
	@$(PY) -m tileiras_async.cache.fingerprint >/dev/null

# The main job: compile every bundled example for two GPUs through the batch pipeline (summary at the end).
run: setup
	$(VENV)/bin/tileiras-async compile examples --gpu-name sm_100,sm_90 --out-dir build/examples

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Every corpus file x every target, every fuzz seed: the sweeps CI samples.
test-all: setup
	$(PY) -m pytest -q --run-all $(PYTEST_ARGS)

# API reference from the docstrings (pdoc) into build/docs
docs: $(STAMP)
	$(PY) -m pdoc -o build/docs tileiras_async tileiras_async.stages tileiras_async.pipeline.events tileiras_tui
	@echo "docs: build/docs/index.html"

bench: setup
	$(PY) bench/bench_read.py
	$(PY) bench/compile.py
	$(PY) bench/bench_cache.py
	$(PY) bench/bench_scaling.py --quick
	$(PY) bench/bench_pipeline.py
	$(PY) bench/bench_dask.py
	$(PY) bench/bench_interp.py
	$(PY) bench/bench_emu.py
	$(PY) bench/bench_pipelining.py
	$(PY) bench/bench_tui.py
	$(PY) bench/codegen_quality.py
	$(PY) bench/codegen_quality.py --set suite-launch --gpu-name sm_90,sm_100
	$(PY) bench/dynamic_instructions.py
	$(PY) bench/dynamic_instructions.py --set suite-launch --all
	$(PY) bench/tensor_cores.py

# The GPU timing job (bench/gpu/): both compilers' cubins, inputs and expected outputs in build/gpu_job (checked on
# the PTX emulator first), which bench/gpu/run_on_device.py runs on a machine with a GPU (python3 and libcuda only).
gpu-job: setup
	$(PY) bench/gpu/build.py --out build/gpu_job --verify

# Re-export examples/*.py to bytecode with the real cuTile producer.
examples: $(STAMP)
	$(PY) examples/export_all.py

# What NVIDIA's tileiras does with the suite, the capability probes and the corpus (examples/suite/oracle.json).
oracle: $(STAMP)
	$(PY) examples/record_oracle.py

clean:
	rm -rf $(VENV) build *.egg-info
