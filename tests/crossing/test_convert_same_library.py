"""A same-library call returns its input: ``convert(a, numpy)`` is ``a``, as
``np.asarray(a)`` is, and ``convert(t, torch)`` is ``t``, as
``torch.as_tensor(t)`` is; on the fast path, in a batch, and on the general
path (``readonly="error"``, ``copy=False``). An ask that changes it
(``dtype=`` of another dtype, ``copy=True``) makes a new object; an object of
a subclass (a masked array) is imported as before."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import bridge
from bridge.crossing import convert as conv


def _own_objects() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [("numpy", np.arange(4.0)), ("bridge", bridge.arange(4, dtype=bridge.float32))]
    ro = np.arange(4.0)
    ro.flags.writeable = False
    out.append(("numpy", ro))
    if importlib.util.find_spec("torch"):
        import torch

        out += [("torch", torch.ones(3)), ("torch", torch.ones(3, requires_grad=True)),
                ("torch", torch.ones(4).flip(0))]  # fmt: skip
    if importlib.util.find_spec("jax"):
        import jax.numpy as jnp

        out.append(("jax", jnp.arange(3.0)))
    if importlib.util.find_spec("polars"):
        import polars as pl

        out.append(("polars", pl.Series([1.0, 2.0])))
    return out


@pytest.mark.parametrize(("to", "obj"), _own_objects(), ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_a_libraries_own_object_is_returned_as_it_is(to: str, obj: object) -> None:
    assert bridge.convert(obj, to) is obj
    assert bridge.convert(obj, to) is obj  # (registered now: the fast path)
    assert bridge.convert([obj, {"k": obj}], to)[1]["k"] is obj
    assert bridge.convert(obj, to, copy=False) is obj
    assert bridge.convert(obj, to, readonly="error") is obj
    assert not conv.plan(obj, to).fixes


def test_an_ask_or_copy_true_makes_a_new_object() -> None:
    a = np.arange(4.0)
    b = bridge.convert(a, np, copy=True)
    assert b is not a and not np.shares_memory(a, b)
    c = bridge.convert(a, np, dtype="float32")
    assert c is not a and c.dtype == np.float32
    d = bridge.convert(a, np, dtype="float64")  # the dtype it has: no fix, the library's own form
    assert np.shares_memory(a, d)


def test_an_object_of_a_subclass_is_imported_as_before() -> None:
    m = np.ma.masked_array(np.arange(3.0), mask=[False, True, False])
    out = bridge.convert(m, np)
    assert type(out) is np.ndarray and np.shares_memory(out, m.data)
