# Every target creates .venv and installs what it needs; nothing else is assumed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GIN ?= examples/ddpg_pendulum.gin
ROOT_DIR ?= runs/$(basename $(notdir $(GIN)))
# Two cores: one torch thread per process keeps parallel tests from oversubscribing.
export OMP_NUM_THREADS ?= 1

.PHONY: venv install train test bench clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# Explicit pin first: a looser range would pull a multi-GB CUDA build.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[test,ray]'
	touch $@

venv install: $(VENV)/.installed

train: $(VENV)/.installed
	$(PY) -m alf_lite.bin.train --gin_file $(GIN) --root_dir $(ROOT_DIR)

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed
	$(PY) -m pip install -e '.[bench]'
	$(PY) benchmarks/memory.py --env Humanoid-v5 --buffer 100000

clean:
	rm -rf $(VENV) *.egg-info
