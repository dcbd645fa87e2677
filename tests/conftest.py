"""Shared fixtures for the bridge test suite.

The layout: ``tests/core``, ``tests/interop``, ``tests/crossing`` and ``tests/kit``
test the layers of the same names in ``bridge/`` (``tests/interop`` in a folder per
protocol: ``dlpack``, ``arrow``, ``numpy``, ``cuda``, ``processes``); the files at the top of ``tests/`` are the
whole-project checks (layers and imports, the architecture page, the docs'
examples and site, packaging, typing, introspection, the command line) and the
helpers every test imports (``lifetimes``, ``layers_graph``, ``browser``, ``pycapsule``,
``wheels``, which is also ``make wheels``' script:
``pythonpath`` in pyproject.toml puts this folder on the path); ``tests/gpu``
runs on a CUDA machine (``make test-gpu``).
"""

from __future__ import annotations

import importlib.util

import pytest

# The helper modules' asserts get pytest's detailed failure messages, as the
# tests' own do (registered before any test module imports them).
pytest.register_assert_rewrite("lifetimes", "numpy_twin", "arrow_helpers", "dlpack_peek", "handmade")


def have(module: str) -> bool:
    """Whether an optional module is importable."""
    return importlib.util.find_spec(module) is not None


@pytest.fixture
def torch():
    """The torch module; the test is skipped where torch is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture
def pl():
    """The polars module; the test is skipped where polars is not installed."""
    return pytest.importorskip("polars")


@pytest.fixture
def na():
    """The nanoarrow module; the test is skipped where nanoarrow is not installed."""
    return pytest.importorskip("nanoarrow")


@pytest.fixture
def duckdb():
    """The duckdb module; the test is skipped where DuckDB is not installed."""
    return pytest.importorskip("duckdb")
