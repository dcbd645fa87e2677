"""Shared fixtures for the bridge test suite."""

from __future__ import annotations

import importlib.util

import pytest


def have(module: str) -> bool:
    """Whether an optional module is importable."""
    return importlib.util.find_spec(module) is not None


@pytest.fixture
def torch():
    """The torch module; the test is skipped where torch is not installed."""
    return pytest.importorskip("torch")
