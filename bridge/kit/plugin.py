"""pytest plugin (entry point ``pytest11: bridge``): DLPack conformance in tests.

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

The plugin imports bridge only when a fixture or marker is used, so it costs
nothing in test runs that do not use it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from bridge.kit.conformance_report import Report

_MARKER = "dlpack_producer"


__all__ = [
    "ConformanceCheck", "pytest_configure", "dlpack_conformance", "conformance_failure",
    "pytest_runtest_call",
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


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``dlpack_producer`` marker (for ``--strict-markers``)."""
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(factory, consumer=None, ignore=()): after the test body, check that the "
        "DLPack producer made by factory passes every conformance rule (bridge.check)",
    )


@pytest.fixture
def dlpack_conformance() -> ConformanceCheck:
    """:func:`bridge.check`: ``check(obj_or_factory, *, consumer=None, ...)`` -> Report."""
    from bridge.kit.conformance import check

    return check


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Run the marked test's body, then the conformance checks of its marker."""
    result = yield
    marker = item.get_closest_marker(_MARKER)
    if marker is None:
        return result
    kwargs = dict(marker.kwargs)
    subjects = [*marker.args, *([kwargs.pop("factory")] if "factory" in kwargs else [])]
    if len(subjects) != 1:
        pytest.fail(
            f"@pytest.mark.{_MARKER} takes one producer or factory (positional or factory=), "
            f"got {len(subjects)}",
            pytrace=False,
        )
    from bridge.kit.conformance import check, check_names

    ignore = check_names(kwargs.pop("ignore", ()))  # a typo is an error before the checks run
    report = check(subjects[0], **kwargs)
    message = conformance_failure(report, ignore)
    if message is not None:
        pytest.fail(message, pytrace=False)
    return result
