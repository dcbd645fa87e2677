"""DLPack conformance checks for other libraries' producers and consumers.

:func:`check` runs one check per rule of the DLPack protocol (dlpack.h v1.3
and the Python array API's ``__dlpack__`` signature) against a third party's
*producer* (an object with ``__dlpack__``), and optionally against its
*consumer* (a ``from_dlpack``-like function), and returns a :class:`Report`
with one :class:`RuleResult` per check: passed, failed (with what was
observed), warning (the rule's intent is met in a form the rules do not
recommend) or not applicable (with why). Each result names the rule it
judges (``rule``, a key of :data:`bridge.kit.rules.RULES`, the table the
interop matrix cites too) and cites its spec and section; each field of an
exported tensor (shape, strides, dtype) has its own check, so a wrong field
fails that check and no other.

Producer checks run in this process: they call ``__dlpack__`` and read the
returned capsules through ``bridge._drivers.capsule_info`` and cffi, trusting the
capsule's *name* to say which struct it holds (never its bytes). Consumer
checks feed hand-made capsules (:class:`Handmade`), good and malformed, to the
consumer in a subprocess when the consumer can be named as ``module:expr``, so
that a crash is reported instead of killing the caller.

``python -m bridge check module:expr`` is the command line for the same
checks, and ``bridge.pytest_plugin`` the pytest face (docs/conformance.md).

This module is the public face; the parts live beside it:
:mod:`~bridge.kit.conformance_report` (statuses, results, reports),
:mod:`~bridge.kit.capsules` (reading, swapping deleters, hand-made structs),
:mod:`~bridge.kit.conformance_subject` (the producer under test, rule
registry), :mod:`~bridge.kit.conformance_protocol`,
:mod:`~bridge.kit.conformance_lifetime` and :mod:`~bridge.kit.conformance_v13`
(the producer rules: the protocol, lifetimes, DLPack v1.3's later rules and
the protocols next to DLPack), :mod:`~bridge.kit.conformance_exchange` (the
dtype and device exchange rules),
:mod:`~bridge.kit.conformance_consumer` (the consumer cases) and
:mod:`~bridge.kit.isolation` (child processes, ``module:expr`` specs).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from typing import Any

from bridge.kit import (
    conformance_exchange,
    conformance_lifetime,
    conformance_protocol,
    conformance_v13,
)
from bridge.kit.capsules import DEVICE_TYPES as DEVICE_TYPES
from bridge.kit.capsules import DTYPE_BITS as DTYPE_BITS
from bridge.kit.capsules import FLAG_IS_COPIED as FLAG_IS_COPIED
from bridge.kit.capsules import FLAG_READ_ONLY as FLAG_READ_ONLY
from bridge.kit.capsules import LEGACY as LEGACY
from bridge.kit.capsules import VERSIONED as VERSIONED
from bridge.kit.capsules import CapsuleView, Handmade, inspect_capsule, young_gc
from bridge.kit.capsules import counting_deleter as counting_deleter
from bridge.kit.conformance_consumer import CONSUMER_CASES, ISOLATION, check_consumer
from bridge.kit.conformance_report import (
    FAILED,
    NOT_APPLICABLE,
    PASSED,
    RENAMED,
    WARNING,
    Report,
    RuleResult,
    exc_text,
)
from bridge.kit.conformance_subject import Rule, Subject
from bridge.kit.isolation import load

# Names imported `as` themselves are kept importable from here (as before the
# kit was split into modules) without joining __all__.
__all__ = [
    "PASSED",
    "FAILED",
    "WARNING",
    "NOT_APPLICABLE",
    "RuleResult",
    "Report",
    "CapsuleView",
    "Handmade",
    "PRODUCER_RULES",
    "CONSUMER_CASES",
    "CHECK_NAMES",
    "RENAMED",
    "check",
    "check_names",
    "inspect_capsule",
    "load",
]

_PRODUCER_CHECKS: list[Rule] = [
    *conformance_protocol.RULES,
    *conformance_exchange.RULES,
    *conformance_lifetime.RULES,
    *conformance_v13.RULES,
]

#: check name -> what it checks (producer side), in the order they run.
PRODUCER_RULES: dict[str, str] = {r.name: r.doc for r in _PRODUCER_CHECKS}

#: Every check name a report can hold, in report order: the producer checks,
#: ``consumer-isolation`` and the consumer cases.
CHECK_NAMES: tuple[str, ...] = (*PRODUCER_RULES, ISOLATION, *CONSUMER_CASES)


def check_names(names: Iterable[str]) -> frozenset[str]:
    """``names`` (e.g. the pytest marker's ``ignore=``) as a set, once each is
    in :data:`CHECK_NAMES`. TypeError for a single string (a list of names is
    meant); ValueError for a renamed check (naming its new name) or an
    unknown one (listing the valid names), so a typo such as ``stream_cpu``
    cannot silently ignore nothing."""
    if isinstance(names, (str, bytes)):
        raise TypeError(f"expected a list of check names, got the string {names!r}; write [{names!r}]")
    out = frozenset(names)
    for name in sorted(out, key=str):
        if name in RENAMED:
            raise ValueError(f"check {name!r} was renamed {RENAMED[name]!r}: use that name")
        if name not in CHECK_NAMES:
            raise ValueError(f"unknown check name {name!r}; valid names: {', '.join(CHECK_NAMES)}")
    return out


def check(
    obj_or_factory: Any,
    *,
    consumer: Callable[[Any], Any] | str | None = None,
    isolate: bool = True,
    timeout: float = 120.0,
) -> Report:
    """Check a DLPack producer (and optionally a consumer) against the rules.

    ``obj_or_factory`` is an object with ``__dlpack__`` (used as is for every
    rule), or a zero-argument callable returning a fresh one per rule (needed
    for ``producer-kept-alive`` and to see a deleter call when the producer
    dies). :data:`PRODUCER_RULES` lists the rules. The producer checks run in
    this process: they call ``__dlpack__``, read the capsules' structs by
    their names, import some with :func:`bridge.from_dlpack`, and temporarily
    swap a capsule's deleter for a counting one (restored and run exactly
    once afterwards), so a producer that corrupts memory can crash the caller.

    ``consumer`` is a ``from_dlpack``-like function (or a ``"module:expr"``
    naming one); it receives objects whose ``__dlpack__`` returns hand-made
    capsules, good and malformed (:data:`CONSUMER_CASES`). With ``isolate``
    (the default) and a consumer that can be named, it runs in a subprocess
    (``timeout`` seconds per run) so a crash is reported as a failed rule;
    otherwise in this process, with a ``consumer-isolation`` warning.

    Returns a :class:`Report`; never raises for a non-conforming producer
    (a check that raises unexpectedly is reported as failed). Raises
    TypeError when ``obj_or_factory`` is neither a producer nor a callable,
    or the factory's result has no ``__dlpack__``.
    """
    with young_gc():
        subject = Subject(obj_or_factory)
        report = Report(subject.label)
        _run_producer_checks(subject, report)
        del subject
        gc.collect()
        if consumer is not None:
            report.entries.extend(check_consumer(consumer, isolate, timeout))
    return report


def _run_producer_checks(subject: Subject, report: Report) -> None:
    for rule in _PRODUCER_CHECKS:
        if subject.unexportable and rule.name not in conformance_protocol.WITHOUT_EXPORT:
            report.entries.append(RuleResult(rule.name, NOT_APPLICABLE, subject.unexportable, rule.rule))
            continue
        try:
            status, detail = rule.check(subject)
        except Exception as e:
            status, detail = FAILED, f"the check stopped on {exc_text(e)}"
        report.entries.append(RuleResult(rule.name, status, detail, rule.rule))
