"""dlpack-bridge's pytest plugin as pytest loads it (entry point ``pytest11: bridge``).

pytest imports every installed ``pytest11`` entry point at the start of every
run, in every project of the environment. A module inside the ``bridge``
package would first run ``bridge/__init__.py``, which imports NumPy and
bridge's C core; so the entry point is this top-level module, which imports
only pytest. It registers the ``dlpack_producer`` marker and the baseline
options (``--dlpack-save-baseline FILE``, ``--dlpack-baseline FILE``), and
defines the ``dlpack_conformance`` fixture and the hook that runs a marked
test's checks; bridge is imported when a test uses one of them, or a
baseline option is given. The implementation, and the
public path of these names, is :mod:`bridge.pytest_plugin` (docs/conformance.md).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bridge.kit.plugin import ConformanceCheck

__all__ = ["MARKER", "pytest_addoption", "pytest_configure", "dlpack_conformance", "pytest_runtest_call",
           "pytest_sessionfinish", "pytest_terminal_summary"]

#: The marker's name: ``@pytest.mark.dlpack_producer(factory, consumer=None, ignore=())``.
MARKER = "dlpack_producer"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The baseline options: the marked tests' check statuses saved to a file,
    and a later run failing only for checks that got worse (docs/conformance.md)."""
    group = parser.getgroup("dlpack-bridge", "dlpack-bridge conformance baselines")
    group.addoption("--dlpack-save-baseline", metavar="FILE", default=None,
                    help="write the status of every check of the dlpack_producer tests to FILE (JSON)")  # fmt: skip
    group.addoption("--dlpack-baseline", metavar="FILE", default=None,
                    help="judge the dlpack_producer tests against FILE: fail only checks that got worse")  # fmt: skip


def _baseline_asked(config: pytest.Config) -> bool:
    # getoption's default: a run where this module's pytest_addoption did not run.
    return bool(config.getoption("dlpack_save_baseline", None) or config.getoption("dlpack_baseline", None))


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``dlpack_producer`` marker (so ``--strict-markers`` accepts it);
    with a baseline option, read the baseline now, so a bad file stops the run
    before any test (:func:`bridge.kit.plugin.start_baseline`)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(factory, consumer=None, ignore=()): after the test body, check that the "
        "DLPack producer made by factory passes every conformance rule (bridge.check)",
    )
    if _baseline_asked(config):
        from bridge.kit.plugin import start_baseline

        start_baseline(config)


@pytest.fixture
def dlpack_conformance() -> ConformanceCheck:
    """:func:`bridge.check`: ``check(obj_or_factory, *, consumer=None, ...)`` -> Report."""
    from bridge.kit.conformance import check

    return check


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Run a test's body; for a test marked ``dlpack_producer``, then run the
    conformance checks of its marker (:func:`bridge.kit.plugin.check_marked`)
    and fail the test with the failed rules."""
    result = yield
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        from bridge.kit.plugin import check_marked

        check_marked(marker, item)
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``--dlpack-save-baseline``, write the file (:func:`bridge.kit.plugin.finish_baseline`)."""
    if _baseline_asked(session.config):
        from bridge.kit.plugin import finish_baseline

        finish_baseline(session.config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """With a baseline option, a section on the run against the baseline:
    worse checks first, then the better, new and missing ones, and the saved file."""
    if _baseline_asked(config):
        from bridge.kit.plugin import baseline_summary

        lines = baseline_summary(config)
        if lines:
            terminalreporter.section("dlpack-bridge baseline")
            for line in lines:
                terminalreporter.write_line(line)
