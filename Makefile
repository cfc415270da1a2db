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

.PHONY: venv install train test test-durations format bench gpu-wheels clean

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
	$(PY) benchmarks/mode_switch.py --rounds 5

# The wheels benchmarks/gpu_check.sh installs on the GPU machine (Python 3.12, no
# network), fetched here into .wheels/ (git-ignored, about 13 MB).
GPU_WHEELS := gymnasium==1.4.0 mujoco==4.0.0 mujoco-core==4.0.0 gin-config==0.5.0 \
	stable-baselines3==2.9.2 cloudpickle==3.1.3 farama-notifications==0.0.6 absl-py==2.5.1 \
	psutil==7.2.2 glfw==2.11.0 imageio==2.38.1 packaging==26.4 pytest==9.2.0 pluggy==1.7.0 \
	iniconfig==2.3.1 pygments==2.21.0 pytest-timeout==2.4.0 pytest-xdist==3.8.0 execnet==2.1.2
gpu-wheels: $(VENV)/.installed
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .wheels $(GPU_WHEELS)

clean:
	rm -rf $(VENV) *.egg-info
