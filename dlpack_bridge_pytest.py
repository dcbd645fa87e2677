"""dlpack-bridge's pytest plugin as pytest loads it (entry point ``pytest11: bridge``).

pytest imports every installed ``pytest11`` entry point at the start of every
run, in every project of the environment. A module inside the ``bridge``
package would first run ``bridge/__init__.py``, which imports NumPy and
bridge's C core; so the entry point is this top-level module, which imports
only pytest. It registers the ``dlpack_producer`` marker and defines the
``dlpack_conformance`` fixture and the hook that runs a marked test's checks;
bridge is imported when a test uses one of them. The implementation, and the
public path of these names, is :mod:`bridge.pytest_plugin` (docs/conformance.md).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from bridge.kit.plugin import ConformanceCheck

__all__ = ["MARKER", "pytest_configure", "dlpack_conformance", "pytest_runtest_call"]

#: The marker's name: ``@pytest.mark.dlpack_producer(factory, consumer=None, ignore=())``.
MARKER = "dlpack_producer"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``dlpack_producer`` marker (so ``--strict-markers`` accepts it)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(factory, consumer=None, ignore=()): after the test body, check that the "
        "DLPack producer made by factory passes every conformance rule (bridge.check)",
    )


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

        check_marked(marker)
    return result
