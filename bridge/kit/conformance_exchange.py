"""Producer rules on the dtype and device exchange protocols next to DLPack
(data-apis/array-api#972): the producer's ``dtype`` object, where it has
``__dlpack_data_type__()``, and its device object (``device``, or paddle's
``place``), where it has ``__dlpack_device__()``, say what the producer's DLPack
export says of the tensor. Objects without the methods are not judged (the
protocol is a draft: NumPy and torch do not speak it yet).
"""

from __future__ import annotations

from typing import Any

from bridge.core.native import _drivers
from bridge.kit.capsules import CapsuleView, inspect_capsule
from bridge.kit.conformance_report import FAILED, NOT_APPLICABLE, PASSED, exc_text
from bridge.kit.conformance_subject import Outcome, Rule, Subject, registrar

__all__ = ["RULES"]

#: The exchange rules, in the order they run.
RULES: list[Rule] = []
_rule = registrar(RULES)

#: Where a producer keeps its device object: ``device`` (torch, bridge, the
#: array API), ``place`` (paddle's older name).
_DEVICE_ATTRS = ("device", "place")


def _ints(value: Any, n: int) -> tuple[int, ...] | None:
    """``value`` as a tuple of ``n`` ints (IntEnum allowed, bool not), or None."""
    if not isinstance(value, tuple) or len(value) != n:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return tuple(int(v) for v in value)


def _protocol_object(obj: Any, attrs: tuple[str, ...], method: str) -> tuple[str, Any] | None:
    """The first of ``obj``'s attributes ``attrs`` whose type has ``method``, as (attr, value)."""
    for attr in attrs:
        try:
            value = getattr(obj, attr, None)
        except Exception:
            continue
        if value is not None and hasattr(type(value), method):
            return attr, value
    return None


def _export_view(s: Subject, obj: Any) -> CapsuleView | Outcome:
    cap, err = s.export(obj)
    if err is not None:
        return FAILED, f"export raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"capsule named {_drivers.capsule_info(cap)[0]!r}"
    return view


@_rule(
    "dtype-exchange",
    "obj.dtype.__dlpack_data_type__() is (code, bits, lanes) of ints, equal to the capsule's DLDataType",
    "dtype-device-exchange",
)
def _r_dtype_exchange(s: Subject) -> Outcome:
    obj = s.fresh()
    found = _protocol_object(obj, ("dtype",), "__dlpack_data_type__")
    if found is None:
        kind = type(getattr(obj, "dtype", None)).__name__
        return NOT_APPLICABLE, f"the producer's dtype ({kind}) has no __dlpack_data_type__"
    dt = found[1]
    try:
        answer = type(dt).__dlpack_data_type__(dt)
    except Exception as e:
        return FAILED, f"dtype {dt!r}: __dlpack_data_type__() raised {exc_text(e)}"
    triple = _ints(answer, 3)
    if triple is None:
        return FAILED, f"dtype {dt!r}: __dlpack_data_type__() returned {answer!r}, not a tuple of three ints"
    view = _export_view(s, obj)
    if not isinstance(view, CapsuleView):
        return view
    if triple != view.dtype:
        return FAILED, (f"dtype {dt!r}: __dlpack_data_type__() says {triple}, the capsule's DLDataType "
                        f"is {view.dtype}")  # fmt: skip
    return PASSED, f"dtype {dt!r}: __dlpack_data_type__() = {triple} = the capsule's DLDataType"


@_rule(
    "device-exchange",
    "obj.device (or .place).__dlpack_device__() is (device_type, device_id), the capsule's DLDevice",
    "dtype-device-exchange",
)
def _r_device_exchange(s: Subject) -> Outcome:
    obj = s.fresh()
    found = _protocol_object(obj, _DEVICE_ATTRS, "__dlpack_device__")
    if found is None:
        kinds = ", ".join(f"{a}: {type(getattr(obj, a, None)).__name__}" for a in _DEVICE_ATTRS)
        return NOT_APPLICABLE, f"the producer's device object has no __dlpack_device__ ({kinds})"
    attr, dev = found
    try:
        answer = type(dev).__dlpack_device__(dev)
    except Exception as e:
        return FAILED, f"{attr} {dev!r}: __dlpack_device__() raised {exc_text(e)}"
    pair = _ints(answer, 2)
    if pair is None:
        return FAILED, f"{attr} {dev!r}: __dlpack_device__() returned {answer!r}, not a tuple of two ints"
    view = _export_view(s, obj)
    if not isinstance(view, CapsuleView):
        return view
    if pair != view.device:
        return FAILED, f"{attr} {dev!r}: __dlpack_device__() says {pair}, the capsule's DLDevice is {view.device}"
    # The tensor's own __dlpack_device__ is judged by dlpack-device; compared here only when well-formed.
    try:
        own = _ints(obj.__dlpack_device__(), 2)
    except Exception:
        own = None
    if own is not None and own != pair:
        return FAILED, f"{attr} {dev!r}: __dlpack_device__() says {pair}, the tensor's __dlpack_device__() {own}"
    also = " and the tensor's __dlpack_device__()" if own is not None else ""
    return PASSED, f"{attr} {dev!r}: __dlpack_device__() = {pair} = the capsule's DLDevice{also}"
