"""The pytest plugin: DLPack conformance in tests (public path :mod:`bridge.pytest_plugin`).

* fixture ``dlpack_conformance``: returns :func:`bridge.check`, so a test can
  run ``report = dlpack_conformance(lambda: mylib.arange(6))`` and assert on
  entries (``report["copy-true"].status``).
* marker ``@pytest.mark.dlpack_producer(factory, consumer=None, ignore=())``:
  after the marked test's own body passes, the plugin runs
  ``bridge.check(factory, consumer=consumer)`` and fails the test with the
  failed checks unless every check not listed in ``ignore`` passed (warnings
  and not-applicable entries do not fail it). The body may be just ``pass``.
  A name in ``ignore`` that is no check's (``stream_cpu`` for
  ``stream-cpu``) is a ValueError listing the valid names; a renamed check's
  old name is a ValueError naming the new one.
  pytest treats a marker called with one class or named function and nothing
  else as a decorator, so write ``dlpack_producer(factory=MyArray)`` (or a
  lambda) for those.

pytest loads the plugin through the top-level module ``dlpack_bridge_pytest``
(entry point ``pytest11: bridge``), which imports only pytest and defines the
marker, the fixture and the hook; they import this module, and with it bridge
and NumPy, only when a test uses them, so the plugin costs nothing in test runs
that do not (docs/conformance.md, "pytest"). They are re-exported here, so that
``-p bridge.pytest_plugin`` is the whole plugin too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from dlpack_bridge_pytest import MARKER, dlpack_conformance, pytest_configure, pytest_runtest_call

if TYPE_CHECKING:
    from bridge.kit.conformance_report import Report


__all__ = [
    "ConformanceCheck", "pytest_configure", "dlpack_conformance", "conformance_failure",
    "check_marked", "pytest_runtest_call",
]


class ConformanceCheck(Protocol):
    """The type of the ``dlpack_conformance`` fixture (:func:`bridge.check`), for
    annotating a test's parameter: ``def test_x(dlpack_conformance: ConformanceCheck)``."""

    def __call__(
        self,
        obj_or_factory: Any,
        *,
        consumer: Callable[[Any], Any] | str | None = None,
        isolate: bool = True,
        timeout: float = 120.0,
    ) -> Report:
        """Run the conformance rules on a DLPack producer (or a factory of them)."""
        ...


def conformance_failure(report: Report, ignore: Iterable[str] = ()) -> str | None:
    """The failure message for ``report`` (a :class:`bridge.kit.conformance.Report`),
    or None when every failed check is in ``ignore``. ValueError when
    ``ignore`` names a check that does not exist (listing the valid names)
    or was renamed (naming the new one): see :func:`bridge.kit.conformance.check_names`."""
    from bridge.kit.conformance import check_names

    skip = check_names(ignore)
    failed = [e for e in report.failed if e.name not in skip]
    if not failed:
        return None
    lines = [f"DLPack producer {report.subject} failed {len(failed)} rule(s):"]
    lines += [f"  {e.name}: {e.detail} [{e.cite()}]" for e in failed]
    return "\n".join(lines)


def check_marked(marker: pytest.Mark) -> None:
    """Run the conformance checks a ``dlpack_producer`` marker asks for and fail
    the running test (``pytest.fail``) with the failed rules; a marker with
    other than one producer or factory is a usage failure, a bad ``ignore``
    name a ValueError before any check runs."""
    kwargs = dict(marker.kwargs)
    subjects = [*marker.args, *([kwargs.pop("factory")] if "factory" in kwargs else [])]
    if len(subjects) != 1:
        pytest.fail(
            f"@pytest.mark.{MARKER} takes one producer or factory (positional or factory=), "
            f"got {len(subjects)}",
            pytrace=False,
        )
    from bridge.kit.conformance import check, check_names

    ignore = check_names(kwargs.pop("ignore", ()))  # a typo is an error before the checks run
    report = check(subjects[0], **kwargs)
    message = conformance_failure(report, ignore)
    if message is not None:
        pytest.fail(message, pytrace=False)
