"""The destinations of :func:`bridge.convert`: naming one (:func:`resolve`),
the installed ones (:func:`installed`), and building the destination's own
object from a bridge tensor (:func:`take`).

A destination library is imported only when it is named or taken into.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bridge.core.tensor import Tensor
from bridge.crossing.capabilities import DESTINATIONS, WIDE, Holds
from bridge.interop import arrow

__all__ = ["resolve", "installed", "take", "taker", "resolve_type", "current"]

# Module roots that also name a destination (a type's __module__ may be a
# private package of the library).
_ROOTS = {"jaxlib": "jax", "mlx": "mlx"}


def _importable(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is not installed
        return False


def installed() -> list[str]:
    """The names of the destinations importable here, in table order."""
    return [name for name, h in DESTINATIONS.items() if _importable(h.module)]


def _unknown(what: str) -> ValueError:
    return ValueError(f"convert(): no destination {what}; installed destinations: {', '.join(installed())}")


def _by_name(name: str) -> Holds:
    h = DESTINATIONS.get(name)
    if h is None:
        h = next((d for d in DESTINATIONS.values() if d.module == name), None)
    if h is None:
        root = name.split(".")[0]
        h = DESTINATIONS.get(_ROOTS.get(root, root))
    if h is None:
        raise _unknown(repr(name))
    if not _importable(h.module):
        raise ValueError(f"convert(): destination {h.name!r} is not installed (no module {h.module!r}); "
                         f"installed destinations: {', '.join(installed())}")  # fmt: skip
    return h


def _dotted(path: str) -> object:
    module, _, attr = path.rpartition(".")
    obj: object = sys.modules.get(module) or importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _by_type(to: type) -> Holds:
    root = to.__module__.split(".")[0]
    h = DESTINATIONS.get(_ROOTS.get(root, root))
    if h is not None and _importable(h.module):
        known: list[tuple[str, type]] = []
        for path in h.types:
            try:
                k = _dotted(path)
            except (ImportError, AttributeError):
                continue
            if isinstance(k, type):
                known.append((path, k))
        if any(issubclass(k, to) for _, k in known):  # one of its types, or a base of one (jax.Array)
            return h
        for path, k in known:
            if issubclass(to, k):  # convert() returns the destination's own type, not a subclass of it
                raise ValueError(f"convert(): to={to.__module__}.{to.__qualname__} is a subclass of {path}, and "
                                 f"convert returns {h.result} objects, not the subclass: pass {path} (or "
                                 f"{h.module}) and make the subclass from the result")  # fmt: skip
    raise _unknown(f"for type {to.__module__}.{to.__qualname__}")


def resolve(to: object) -> Holds:
    """The :class:`Holds` record of destination ``to``: a module (``torch``,
    ``jax.numpy``), its name (``"torch"``, ``"mlx.core"``), or a type the
    destination returns (``torch.Tensor``, ``numpy.ndarray``,
    ``bridge.Tensor``). The record is :func:`current`: it reflects the
    library's settings now. ValueError for an unknown or uninstalled
    destination, listing the installed ones; TypeError for anything else."""
    if isinstance(to, ModuleType):
        h = _by_name(to.__name__)
    elif isinstance(to, str):
        h = _by_name(to)
    elif isinstance(to, type):
        h = _by_type(to)
    else:
        raise TypeError(f"convert(): 'to' is a module, its name or a type, got {type(to).__name__}")
    return current(h)


def current(h: Holds) -> Holds:
    """``h`` as its library is configured now: jax without
    ``jax_enable_x64`` holds no 64-bit dtype (it would narrow int64 to int32)."""
    if h.name == "jax":
        import jax

        if not jax.config.jax_enable_x64:
            return narrowed(h)
    return h


_NARROWED: dict[str, Holds] = {}


def narrowed(h: Holds) -> Holds:
    """``h`` without the 64-bit dtypes (jax without ``jax_enable_x64``), made once."""
    out = _NARROWED.get(h.name)
    if out is None or out.dtypes != h.dtypes - WIDE:
        out = _NARROWED[h.name] = dataclasses.replace(h, dtypes=h.dtypes - WIDE)
    return out


def take(h: Holds, t: Tensor) -> object:
    """The destination's own object over ``t`` (bridge's tensor, already fixed
    to what ``h`` holds), through the destination's import: shares ``t``'s
    memory unless the destination always copies. ``t`` must be one the
    destination holds (:func:`bridge.crossing.convert.plan` makes it so)."""
    return taker(h)(t)


def taker(h: Holds) -> Callable[[Tensor], object]:
    """The destination's import of a bridge tensor ``h`` holds as it is (made
    once per destination, importing the library then)."""
    found = _TAKERS.get(h.name)
    if found is None:
        found = _TAKERS[h.name] = _taker(h)
    return found


def resolve_type(h: Holds) -> object:
    """The type ``convert`` returns for destination ``h`` (``h.result``), or
    None when this version of the library lacks it."""
    try:
        return _dotted(h.result)
    except (ImportError, AttributeError):
        return None


# The import function of each destination, made on first use (importing the library then).
_TAKERS: dict[str, Callable[[Tensor], object]] = {}


def _typed(fn: Any) -> Callable[[Tensor], object]:
    """A library's import function, typed as what it is here."""
    out: Callable[[Tensor], object] = fn
    return out


def _taker(h: Holds) -> Callable[[Tensor], object]:
    name = h.name
    if name == "bridge":
        return lambda t: t
    if name == "numpy":
        import numpy as np

        views = h.dtype_views
        # the ml_dtypes dtype over the same bytes where NumPy's DLPack refuses the type
        return lambda t: t.numpy() if t.dtype.name in views else np.from_dlpack(t)
    if name == "torch":
        import torch

        return _typed(torch.from_dlpack)
    if name == "jax":
        import jax.dlpack

        return _typed(jax.dlpack.from_dlpack)
    if name == "paddle":
        import paddle

        return _typed(paddle.from_dlpack)
    if name == "tvm_ffi":
        import tvm_ffi

        return _typed(tvm_ffi.from_dlpack)
    if name == "mlx":
        import mlx.core as mx

        return _typed(mx.from_dlpack)
    if name == "onnxruntime":
        import onnxruntime as ort

        return _typed(ort.OrtValue.from_dlpack)
    if name == "pyarrow":
        return lambda t: arrow.to_array(t) if t.ndim == 1 else arrow.to_fixed_shape_tensor(t)
    if name == "polars":
        import polars as pl

        def to_polars(t: Tensor) -> object:
            column: Any = arrow.to_array(t) if t.ndim == 1 else arrow.to_fixed_shape_tensor(t).storage
            return pl.Series(column)

        return to_polars
    if name == "tensorflow":
        import tensorflow as tf

        return lambda t: tf.experimental.dlpack.from_dlpack(t.__dlpack__())  # it takes only a legacy capsule
    if name == "cupy":
        import cupy

        return _typed(cupy.from_dlpack)
    raise ValueError(f"convert(): no import for destination {name!r}")  # a record without a route
