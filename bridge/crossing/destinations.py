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
    """The object a dotted path names: the longest importable module prefix
    (``onnxruntime`` of ``onnxruntime.OrtValue.from_dlpack``), then attributes.
    ImportError or AttributeError when it names nothing here."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        obj: object = sys.modules.get(name)
        if obj is None:
            try:
                obj = importlib.import_module(name)
            except ImportError:
                if cut == 1:
                    raise
                continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(f"no module in {path!r}")


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
    """``h`` as its library is configured now: a destination with a
    ``wide_setting`` that is off holds no 64-bit dtype (jax without
    ``jax_enable_x64`` would narrow int64 to int32)."""
    if h.wide_setting is not None:
        module, path = h.wide_setting
        value: object = sys.modules.get(module) or importlib.import_module(module)
        for part in path.split("."):
            value = getattr(value, part)
        if not value:
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


def _taker(h: Holds) -> Callable[[Tensor], object]:
    """The destination's import, from its record: ``h.route`` says how a
    tensor is handed over, ``h.importer`` (or ``h.result``) names what takes it."""
    if h.route == "self":
        return lambda t: t
    if h.route == "arrow":
        return _arrow_column
    if h.route == "arrow-column":
        make = _resolved(h.result)

        def column_of(t: Tensor) -> object:
            column: Any = arrow.to_array(t) if t.ndim == 1 else arrow.to_fixed_shape_tensor(t).storage
            return make(column)

        return column_of
    importer = _resolved(h.importer)
    if h.route == "capsule":  # it takes a capsule, not an object
        legacy = h.capsule == "legacy"
        return lambda t: importer(t.__dlpack__() if legacy else t.__dlpack__(max_version=(1, 3)))
    views = h.dtype_views
    if views:  # the dtypes its DLPack import refuses, as NumPy's view of the same bytes
        return lambda t: t.numpy() if t.dtype.name in views else importer(t)
    if h.host_importer is not None:
        host = _resolved(h.host_importer)
        return lambda t: host(t) if t.device.type == "cpu" else importer(t)
    return importer


_JAX_HOST: tuple[Any, Any, Any] | None = None  # (to_buffer, cpu device, fallback): one assignment, thread-safe


def jax_host_import(t: Tensor) -> object:
    """A jax Array over bridge tensor ``t``'s host memory (64-byte aligned,
    compact: the judgement saw to both), by the call ``jax.dlpack.from_dlpack``
    makes after asking the device for a stream, which on the CPU throws and
    catches a C++ exception each time (about 100k instructions):
    ``dlpack_managed_tensor_to_buffer(capsule, device, stream=None)`` of
    jaxlib with a legacy capsule (the only kind it takes), whose deleter jax
    calls when the array dies. A jaxlib without it, or a CPU device that is
    gone (backends cleared), takes ``jax.dlpack.from_dlpack``."""
    global _JAX_HOST
    state = _JAX_HOST
    if state is None:  # (threads may all get here first: each makes the same state, and one assignment keeps it)
        import jax
        import jaxlib._jax as _jax  # type: ignore[import-not-found,import-untyped,unused-ignore]

        state = _JAX_HOST = (getattr(_jax, "dlpack_managed_tensor_to_buffer", None), jax.devices("cpu")[0],
                             jax.dlpack.from_dlpack)  # fmt: skip
    to_buffer, cpu, fallback = state
    if to_buffer is None:
        return fallback(t)
    try:
        return to_buffer(t.__dlpack__(), cpu, None)
    except RuntimeError:  # (a stale device): jax's own route, and the device asked again next time
        _JAX_HOST = None
        return fallback(t)


def _arrow_column(t: Tensor) -> object:
    """bridge's Arrow export: a primitive array for 1-d, a FixedShapeTensorArray for N-d."""
    return arrow.to_array(t) if t.ndim == 1 else arrow.to_fixed_shape_tensor(t)


def _resolved(path: str) -> Callable[[Any], object]:
    """The callable a record names by its dotted path (importing its library)."""
    fn: Callable[[Any], object] = _dotted(path)  # type: ignore[assignment]
    if not callable(fn):
        raise ValueError(f"convert(): {path} is not callable")
    return fn
