"""The producer under test, and what every producer rule is made of.

:class:`Subject` wraps the object (or factory of objects) handed to
:func:`bridge.check` and learns once what the rules keep asking: its device,
read-only state, byte order, whether ``__dlpack__`` takes ``max_version``,
and its values. A rule is a function ``Subject -> (status, detail)``
registered with a name and a one-line statement (:class:`Rule`,
:func:`registrar`); the rule modules (:mod:`bridge.kit.conformance_protocol`,
:mod:`bridge.kit.conformance_lifetime`) each keep their list, in order.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.kit import rules as spec_rules
from bridge.kit.capsules import HOST_DEVICES, read_values
from bridge.kit.conformance_report import exc_text

__all__ = ["MAX_VERSION", "Outcome", "Check", "Rule", "registrar", "Subject", "call_dlpack", "kwargs_text"]

#: The DLPack version the checks ask producers for.
MAX_VERSION = (1, 3)

#: A rule's verdict: ``(status, detail)``.
Outcome = tuple[str, str]


def call_dlpack(obj: Any, **kwargs: Any) -> tuple[Any, Exception | None]:
    """``obj.__dlpack__(**kwargs)`` -> (capsule, None) or (None, exception)."""
    try:
        return obj.__dlpack__(**kwargs), None
    except Exception as e:
        e.__traceback__ = None  # no frame cycles keeping the producer alive
        return None, e


def kwargs_text(kwargs: dict[str, Any]) -> str:
    """How a call with ``kwargs`` reads in a detail: ``__dlpack__(copy=True)``."""
    return "__dlpack__(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def _source_readonly(obj: Any) -> bool | None:
    """True/False when ``obj`` reports read-only state, None when it does not."""
    try:
        writeable = getattr(getattr(obj, "flags", None), "writeable", None)
        if isinstance(writeable, bool):
            return not writeable
        ro = getattr(obj, "is_readonly", None)
        if isinstance(ro, bool):
            return ro
    except Exception:
        return None
    return None


def _native_order(obj: Any) -> bool | None:
    """False for a NumPy-like dtype in non-native byte order, True for native, None unknown."""
    try:
        order = getattr(getattr(obj, "dtype", None), "byteorder", None)
    except Exception:
        return None
    if not isinstance(order, str):
        return None
    native = "<" if sys.byteorder == "little" else ">"
    return order in ("=", "|", native)


def _describe(x: Any) -> str:
    """The public path of ``x``'s type: the shortest module prefix of its
    ``__module__`` that exposes the same class (``bridge.Tensor``, not
    ``bridge.core.tensor.Tensor``), else the full path."""
    tp = type(x)
    parts = tp.__module__.split(".")
    for end in range(1, len(parts) + 1):
        # Only modules already imported: naming a type must not import anything.
        mod: object = sys.modules.get(".".join(parts[:end]))
        for attr in tp.__qualname__.split("."):
            mod = getattr(mod, attr, None)
        if mod is tp:
            return f"{'.'.join(parts[:end])}.{tp.__qualname__}"
    return f"{tp.__module__}.{tp.__qualname__}"


class Subject:
    """The producer under test: a fixed object, or a factory of fresh ones.

    Probes it once, on creation: ``device`` (None when
    ``__dlpack_device__`` fails), ``host``, ``readonly`` and ``native`` (None
    when the object does not say), ``speaks_versioned`` (``__dlpack__``
    takes ``max_version``), ``unexportable`` (why it cannot be exported at
    all, or empty) and ``snapshot`` (its values, or None with
    ``snapshot_error``). Raises TypeError for something that is neither a
    producer nor callable, or a factory whose result has no ``__dlpack__``.
    """

    def __init__(self, obj_or_factory: Any) -> None:
        if hasattr(obj_or_factory, "__dlpack__") and not isinstance(obj_or_factory, type):
            self.factory: Callable[[], Any] | None = None
            self.obj = obj_or_factory
            first = obj_or_factory
            self.label = _describe(first)
        elif callable(obj_or_factory):
            self.factory = obj_or_factory
            first = self.fresh()
            name = getattr(obj_or_factory, "__qualname__", repr(obj_or_factory))
            self.label = f"{_describe(first)} from factory {name}"
        else:
            raise TypeError(
                f"check() needs an object with __dlpack__ or a zero-argument factory of them, "
                f"got {type(obj_or_factory).__name__}"
            )
        self.readonly = _source_readonly(first)
        self.native = _native_order(first)
        try:
            dev = first.__dlpack_device__()
            self.device: tuple[int, int] | None = (int(dev[0]), int(dev[1]))
        except Exception:
            self.device = None
        cap, err = call_dlpack(first, max_version=MAX_VERSION)
        self.speaks_versioned = not isinstance(err, TypeError)
        del cap
        self.host = self.device is not None and self.device[0] in HOST_DEVICES
        self.unexportable = ""
        if self.native is False:
            cap, err = self.export(first)
            if isinstance(err, BufferError):
                self.unexportable = (
                    f"the source is in non-native byte order and cannot be exported ({exc_text(err)})"
                )
            del cap
        self.snapshot_error = ""
        self.snapshot = self.values_of(first)

    def fresh(self) -> Any:
        """A producer for one rule: a new one from the factory, or the object."""
        if self.factory is None:
            return self.obj
        obj = self.factory()
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"the factory returned a {_describe(obj)}, which has no __dlpack__")
        return obj

    def export(self, obj: Any, **kwargs: Any) -> tuple[Any, Exception | None]:
        """``__dlpack__`` asking for a versioned capsule when the producer takes max_version."""
        if self.speaks_versioned:
            kwargs.setdefault("max_version", MAX_VERSION)
        return call_dlpack(obj, **kwargs)

    def values_of(self, obj: Any) -> list[Any] | None:
        """``obj``'s values read through DLPack by bridge, or None (reason kept)."""
        if not self.host:
            self.snapshot_error = f"values not read: device {self.device} is not host memory"
            return None
        cap, err = self.export(obj)
        if err is not None:
            self.snapshot_error = f"values not read: {kwargs_text({})} raised {exc_text(err)}"
            return None
        try:
            return read_values(cap)
        except Exception as e:
            self.snapshot_error = f"values not read: bridge cannot import it: {exc_text(e)}"
            return None


#: A rule's check: judges a :class:`Subject`.
Check = Callable[[Subject], Outcome]


@dataclass(frozen=True, slots=True)
class Rule:
    """A producer check: its ``name``, the one-line ``doc`` of what it checks,
    the ``check`` that judges a :class:`Subject`, and ``rule``, the key of
    :data:`bridge.kit.rules.RULES` it judges (its results cite it)."""

    name: str
    doc: str
    check: Check
    rule: str


def registrar(rules: list[Rule]) -> Callable[[str, str, str], Callable[[Check], Check]]:
    """A decorator factory: ``@rule(name, doc, spec_rule)`` on a check
    function appends ``Rule(name, doc, fn, spec_rule)`` to ``rules`` (so they
    run in definition order) and leaves the function as it is. KeyError
    (at import) for a ``spec_rule`` that :data:`~bridge.kit.rules.RULES`
    does not hold."""

    def rule(name: str, doc: str, spec_rule: str) -> Callable[[Check], Check]:
        spec_rules.rule(spec_rule)  # a check cites only a rule of the one table

        def register(fn: Check) -> Check:
            rules.append(Rule(name, doc, fn, spec_rule))
            return fn

        return register

    return rule
