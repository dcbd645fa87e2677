# dlpack-bridge: `make run` and `make test` work on a fresh machine (they create .venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: run test test-gpu bench lint gen gen-check install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=74.1" wheel

# --no-build-isolation: the build needs only setuptools (already in .venv) and a
# C compiler, so no isolated build environment has to be downloaded.
$(STAMP): $(BIN)/python pyproject.toml cdefs/_native.c cdefs/bridge.c cdefs/bridge.h cdefs/dlpack.h cdefs/arrow_c_data.h
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test,dev]"
	touch $@

install: $(STAMP)

# The main job: a short checked tour, then the interop matrix over every
# framework installed in .venv (a few minutes; `python -m bridge matrix --help`).
run: $(STAMP)
	$(BIN)/python -m bridge tour
	$(BIN)/python -m bridge matrix

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# On a GPU machine, in the environment ../shared/GPU.md sets up (no .venv, no
# network there): the CUDA tests, which skip cleanly without CUDA.
test-gpu:
	$(PY) -m pytest tests/gpu -v -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python tests/bench.py

lint: $(STAMP)
	$(BIN)/python -m ruff check bridge tests cdefs/build.py
	$(BIN)/python -m mypy

gen: $(BIN)/python
	$(BIN)/python cdefs/build.py

gen-check: gen
	git diff --exit-code -- cdefs/_native.c

clean:
	rm -rf $(VENV) build *.egg-info bridge/*.so
