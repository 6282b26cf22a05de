# One-command set-up: each target creates .venv and installs what it needs on first use.
#
# torch is pinned to 2.14.1 (a local wheel on the project's machines) because torchrl
# 0.14.1's compiled extension -- the C++ segment trees behind PrioritizedSampler -- is
# built against it and fails to load under torch 2.13 ("undefined symbol").
#
# Each target installs only what it needs: `make run` the MiniGrid envs, the recipes' outputs and the
# built-in scorer's transformers (RUN_EXTRAS); `make test`, `make docs` and the rest every extra the
# tests and the docs import (EXTRAS=dev: robosuite, OGBench, Atari, Ray, Sphinx, ...).
PY ?= python3
VENV := .venv
TORCH := torch==2.14.1
EXTRAS ?= dev
RUN_EXTRAS ?= minigrid,vlm

$(VENV)/.installed-%: pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet $(TORCH)
	$(VENV)/bin/pip install --quiet -e ".[$*]"
	touch $@

.PHONY: install run test test-slow bench docs
install: $(VENV)/.installed-$(EXTRAS)

run: $(VENV)/.installed-$(RUN_EXTRAS)  ## the main job
	$(VENV)/bin/vlmrb train dqn --quick

# The default tier runs on TEST_WORKERS processes (pytest-xdist): one per core of the 2-core machines
# the project is built on. The slow tier stays serial: its tests start Ray clusters and process pools.
TEST_WORKERS ?= 2

test: install  ## fast tests + doctests (slow ones excluded)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS)

test-slow: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m slow

docs: install  ## the HTML docs and API reference in docs/_build/html; any warning is an error
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m sphinx -W --keep-going -E -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

bench: install
	$(VENV)/bin/python benchmarks/sampler_throughput.py
