"""Producer rules on lifetimes: who runs a capsule's deleter, how often, and
whether an imported tensor outlives its producer object.

Each check swaps the struct's deleter for bridge's counting one
(:class:`bridge.kit.capsules.CountingDeleter`), so a second call is counted
instead of freeing twice. The producer's own deleter is restored and run
exactly once afterwards, only when the counts show that is safe; otherwise
the struct is leaked on purpose rather than risk a double free.
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from bridge.core.native import _drivers
from bridge.interop.dlpack import from_dlpack as _bridge_from_dlpack
from bridge.kit.capsules import CountingDeleter, inspect_capsule, same_values
from bridge.kit.conformance_report import FAILED, NOT_APPLICABLE, PASSED, WARNING, exc_text, short
from bridge.kit.conformance_subject import (
    MAX_VERSION,
    Outcome,
    Rule,
    Subject,
    call_dlpack,
    kwargs_text,
    registrar,
)

__all__ = ["RULES"]

#: The lifetime rules, in the order they run (after the protocol rules).
RULES: list[Rule] = []
_rule = registrar(RULES)


def _kinds(s: Subject) -> Iterator[tuple[str, dict[str, Any]]]:
    if s.speaks_versioned:
        yield "versioned", {"max_version": MAX_VERSION}
    if not s.readonly:
        yield "legacy", {}


def _worst(outcomes: list[Outcome]) -> Outcome:
    for status in (FAILED, WARNING, PASSED, NOT_APPLICABLE):
        hits = [d for st, d in outcomes if st == status]
        if hits:
            return status, "; ".join(hits)
    return NOT_APPLICABLE, "nothing to check"


def _refcount(obj: Any) -> int:
    return sys.getrefcount(obj) - 1


def _deleter_consumed(s: Subject, kind: str, kwargs: dict[str, Any]) -> Outcome:
    p = s.fresh()
    # Values are judged by the values check (against tolist()); here the
    # import must read what the producer's export read, and keep reading it.
    # (No second export of a fresh producer: it would add deleter calls.)
    want = s.snapshot if s.factory is None else None
    gc.collect()
    base_rc = _refcount(p)
    cap, err = call_dlpack(p, **kwargs)
    if err is not None:
        return FAILED, f"{kind}: {kwargs_text(kwargs)} raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"{kind}: capsule named {_drivers.capsule_info(cap)[0]!r}"
    kind = view.name
    held_rc = _refcount(p)
    swap = CountingDeleter(view)
    notes: list[str] = []
    values_ok = True
    t = _bridge_from_dlpack(cap)  # renames the capsule used_*, adopts the struct
    first = t.tolist()
    del cap  # the consumed capsule's destructor must leave the struct alone
    gc.collect()
    by_capsule = swap.calls
    second = t.tolist()
    if not same_values(first, second):
        values_ok = False
        notes.append(
            f"values changed from {short(first)} to {short(second)} once the capsule died"
        )
    elif want is not None and not same_values(first, want):
        values_ok = False
        notes.append(f"values while imported {short(first)} != {short(want)}")
    else:
        notes.append("values stayed readable while imported")
    del t
    gc.collect()
    by_consumer = swap.calls - by_capsule
    ref = None
    if s.factory is not None:
        try:
            ref = weakref.ref(p)
        except TypeError:
            ref = None
        del p
        gc.collect()
    total = swap.calls
    late = total - by_consumer - by_capsule
    if not swap.has_deleter:
        notes.append("deleter is NULL")
    if total != 1 or by_consumer != 1:
        notes.append(
            f"deleter ran {total} times: {by_consumer} by the consumer, {by_capsule} by the "
            f"consumed capsule's destructor, {late} later"
            + (" (struct leaked on purpose to avoid a double free)" if total > 1 else "")
        )
        return FAILED, f"{kind}: " + ", ".join(notes)
    swap.release()
    gc.collect()
    notes.append("deleter ran once (by the consumer)")
    if ref is not None:
        alive = "still referenced elsewhere" if ref() is not None else "released"
        notes.append(f"producer object {alive} after it")
    elif s.factory is None:
        after_rc = _refcount(p)
        notes.append(f"producer refcount {base_rc} -> {held_rc} -> {after_rc}")
        if after_rc != base_rc:
            return FAILED, f"{kind}: " + ", ".join(notes)
    return (PASSED if values_ok else FAILED), f"{kind}: " + ", ".join(notes)


def _deleter_unconsumed(s: Subject, kind: str, kwargs: dict[str, Any]) -> Outcome:
    p = s.fresh()
    gc.collect()
    base_rc = _refcount(p)
    cap, err = call_dlpack(p, **kwargs)
    if err is not None:
        return FAILED, f"{kind}: {kwargs_text(kwargs)} raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"{kind}: capsule named {_drivers.capsule_info(cap)[0]!r}"
    label = view.name
    held_rc = _refcount(p)
    swap = CountingDeleter(view)
    del cap
    gc.collect()
    calls = swap.calls
    after_drop = _refcount(p)
    rc_note = f"producer refcount {base_rc} -> {held_rc} while the capsule lived"
    if calls == 1:
        swap.release()
        gc.collect()
        after = _refcount(p)
        rc_note += f" -> {after} after"
        if after != base_rc:
            return FAILED, f"{label}: deleter ran once but {rc_note}"
        return PASSED, f"{label}: the destructor ran the deleter once; {rc_note}"
    if calls > 1:
        return FAILED, f"{label}: dropping the unconsumed capsule called the deleter {calls} times"
    # Not called through the struct's pointer. Releasing now could double free
    # unless the producer's refcount proves the capsule still holds it.
    if held_rc > base_rc and after_drop == held_rc:
        swap.release()
        gc.collect()
        return FAILED, (
            f"{label}: dropping the unconsumed capsule never called the deleter and the producer "
            f"stayed referenced (a leak); {rc_note} -> {after_drop} after the drop"
        )
    if held_rc > base_rc:
        return WARNING, (
            f"{label}: the destructor released the producer ({rc_note} -> {after_drop}) without "
            "calling the struct's deleter pointer (it frees the struct itself)"
        )
    return WARNING, (
        f"{label}: the destructor did not call the struct's deleter pointer; the capsule holds "
        "no reference to the producer object, so a leak cannot be told from a destructor that "
        "frees the struct itself (left alone to avoid a double free)"
    )


@_rule(
    "deleter-consumed", "a consumed capsule's deleter runs exactly once, by the consumer, after use",
    "deleter",
)
def _r_deleter_consumed(s: Subject) -> Outcome:
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    outcomes = [_deleter_consumed(s, kind, kw) for kind, kw in _kinds(s)]
    status, detail = _worst(outcomes)
    if s.factory is None and status == PASSED:
        detail += " (an object, not a factory: a late call when it dies cannot be seen)"
    return status, detail


@_rule(
    "deleter-unconsumed", "dropping an unconsumed capsule runs the deleter exactly once, no crash",
    "deleter",
)
def _r_deleter_unconsumed(s: Subject) -> Outcome:
    return _worst([_deleter_unconsumed(s, kind, kw) for kind, kw in _kinds(s)])


@_rule("producer-kept-alive", "an imported tensor stays valid after the producer object is deleted",
       "deleter")  # fmt: skip
def _r_kept_alive(s: Subject) -> Outcome:
    if s.factory is None:
        return NOT_APPLICABLE, "pass a factory: the caller's reference keeps the object alive"
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    p = s.fresh()
    want = s.values_of(p)
    if want is None:
        return NOT_APPLICABLE, s.snapshot_error
    cap, err = s.export(p)
    if err is not None:
        return FAILED, f"export raised {exc_text(err)}"
    t = _bridge_from_dlpack(cap)
    del cap, p
    gc.collect()
    nbytes = max(t.untyped_storage().nbytes(), 1)
    scribble = [np.full(nbytes, 0xA5, dtype=np.uint8) for _ in range(8)]  # reuse freed memory
    got = t.tolist()
    del scribble, t
    if not same_values(got, want):
        return (
            FAILED,
            f"after deleting the producer the tensor reads {short(got)}, not {short(want)}",
        )
    return PASSED, f"after deleting the producer the tensor still reads {short(want, 40)}"


