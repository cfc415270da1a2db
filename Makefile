# Every target creates .venv and installs what it needs; nothing else is assumed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GIN ?= examples/ddpg_pendulum.gin
ROOT_DIR ?= runs/$(basename $(notdir $(GIN)))
# Two cores: one torch thread per process keeps parallel tests from oversubscribing.
export OMP_NUM_THREADS ?= 1
# pytest processes; each takes whole test files, so a file's shared fixtures are built once.
TEST_WORKERS ?= 2
# Where torch comes from when .venv is created. Empty: pip's configured indexes and
# find-links, and on Linux x86-64 PyPI's torch is the CUDA build (several GB of nvidia-*
# packages). For the CPU build: make clean install TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=

.PHONY: venv install train test test-durations format bench clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned; the index, not the pin, decides between the CPU and CUDA builds.
	$(PY) -m pip install torch==2.13.0 $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	# bench (Stable-Baselines3) too: the tests run benchmarks/learning.py's SB3 path.
	$(PY) -m pip install -e '.[test,ray,bench]'
	touch $@

venv install: $(VENV)/.installed

train: $(VENV)/.installed
	$(PY) -m alf_lite.bin.train --gin_file $(GIN) --root_dir $(ROOT_DIR)

test: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# The test files' seconds on this machine (tests/durations.json), which make test's
# workers take longest first; rerun it on an idle machine when files grow or come.
test-durations: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --store-durations tests

format: $(VENV)/.installed
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# About 30 minutes on 2 cores; run it on an otherwise idle machine.
BENCH_STEPS ?= 5000
BENCH_PAIRS ?= 3
bench: $(VENV)/.installed
	$(PY) -m pip install -e '.[bench]'
	$(PY) benchmarks/memory.py --env Humanoid-v5 --buffer 100000
	# Equal resources (each library at its best thread count), then alf_lite 2 / SB3 1.
	$(PY) benchmarks/throughput.py --algo sac --env HalfCheetah-v5 --steps $(BENCH_STEPS) --pairs $(BENCH_PAIRS) --threads 2 --sb3_threads 2
	$(PY) benchmarks/throughput.py --algo sac --env HalfCheetah-v5 --steps $(BENCH_STEPS) --pairs $(BENCH_PAIRS) --threads 2 --sb3_threads 1
	$(PY) benchmarks/throughput.py --algo td3 --env HalfCheetah-v5 --steps $(BENCH_STEPS) --pairs $(BENCH_PAIRS) --threads 2 --sb3_threads 1
	$(PY) benchmarks/throughput.py --algo ddpg --env HalfCheetah-v5 --steps $(BENCH_STEPS) --pairs $(BENCH_PAIRS) --threads 2 --sb3_threads 1
	$(PY) benchmarks/throughput.py --algo sac --env Humanoid-v5 --steps $(BENCH_STEPS) --pairs $(BENCH_PAIRS) --threads 2 --sb3_threads 1
	$(PY) benchmarks/time_to_solve.py --seeds 0 1 2 --threads 2 --sb3_threads 1
	$(PY) benchmarks/mode_switch.py

clean:
	rm -rf $(VENV) *.egg-info
