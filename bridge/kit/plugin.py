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
* options ``--dlpack-save-baseline FILE`` and ``--dlpack-baseline FILE``: the
  marked tests' check statuses saved, and a later run judged against them
  (:class:`BaselineSession`): a test in the baseline fails only for checks
  that got worse (passed < warning < failed, :mod:`bridge.kit.matrix_baseline`).

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

from dlpack_bridge_pytest import (
    MARKER,
    dlpack_conformance,
    pytest_addoption,
    pytest_configure,
    pytest_runtest_call,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

if TYPE_CHECKING:
    from bridge.kit.conformance_report import Report
    from bridge.kit.matrix_baseline import Baseline, Comparison, Outcome


__all__ = [
    "ConformanceCheck", "pytest_addoption", "pytest_configure", "dlpack_conformance", "conformance_failure",
    "check_marked", "pytest_runtest_call", "pytest_sessionfinish", "pytest_terminal_summary",
    "BaselineSession", "start_baseline", "finish_baseline", "baseline_summary",
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


def check_marked(marker: pytest.Mark, item: pytest.Item | None = None) -> None:
    """Run the conformance checks a ``dlpack_producer`` marker asks for and fail
    the running test (``pytest.fail``) with the failed rules; a marker with
    other than one producer or factory is a usage failure, a bad ``ignore``
    name a ValueError before any check runs. With a baseline option
    (:func:`start_baseline` ran for ``item``'s session), the statuses are
    recorded, and a test the baseline holds fails only for the checks that
    got worse than there (:meth:`BaselineSession.judge`)."""
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
    session = item.config.stash.get(BASELINE, None) if item is not None else None
    if session is not None and item is not None:
        message = session.judge(item.nodeid, report, ignore)
    else:
        message = conformance_failure(report, ignore)
    if message is not None:
        pytest.fail(message, pytrace=False)


class BaselineSession:
    """The baseline work of one pytest session (``--dlpack-save-baseline``,
    ``--dlpack-baseline``): every marked test's check statuses, keyed
    ``"<node id>::<check>"`` (:func:`bridge.kit.matrix_baseline.check_key`),
    and the baseline they are judged against (None: only saving).

    A test the baseline holds fails only for checks whose status ranks worse
    than the baseline's (passed < warning < failed; ``not applicable`` is
    not ranked), so its known failures pass; a check new to it does not
    fail. A test the baseline does not hold at all has nothing to be
    compared with and is judged as without a baseline: any failed check
    fails it. ``ignore=`` holds in both cases.
    """

    def __init__(self, baseline: Baseline | None, baseline_path: str | None, save_path: str | None,
                 options: dict[str, Any]) -> None:  # fmt: skip
        self.baseline, self.baseline_path, self.save_path, self.options = baseline, baseline_path, save_path, options
        self.entries: dict[str, Outcome] = {}
        self.subjects: set[str] = set()  # the producers' top-level packages, for their versions
        self.tests: set[str] = set()  # the tests whose checks ran
        self.saved = False
        from bridge.kit.matrix_baseline import check_test

        self._known = {check_test(k) for k in baseline.entries} if baseline is not None else set()

    def judge(self, test: str, report: Report, ignore: Iterable[str] = ()) -> str | None:
        """Record ``report`` as ``test``'s and return its failure message, or
        None when it passes (see the class): with the baseline, the checks
        not in ``ignore`` that got worse, each ``check: before -> after:
        detail [rule]``; without it, :func:`conformance_failure`'s."""
        from bridge.kit.matrix_baseline import (
            CONFORMANCE,
            Baseline,
            Outcome,
            check_key,
            check_test,
            compare,
        )

        mine = {check_key(test, e.name): Outcome(e.status) for e in report.entries}
        self.entries.update(mine)
        self.tests.add(test)
        self.subjects.add(report.subject.split(" ", 1)[0].split(".", 1)[0])
        if self.baseline is None or test not in self._known:
            return conformance_failure(report, ignore)
        theirs = {k: o for k, o in self.baseline.entries.items() if check_test(k) == test}
        result = compare(Baseline(CONFORMANCE, theirs), Baseline(CONFORMANCE, mine))
        skip = set(ignore)
        worse = [c for c in result.worse if c.key.rsplit("::", 1)[1] not in skip]
        if not worse:
            return None
        lines = [f"DLPack producer {report.subject} got worse than the baseline {self.baseline_path} "
                 f"in {len(worse)} check(s):"]  # fmt: skip
        for c in worse:
            entry = report[c.key.rsplit("::", 1)[1]]
            lines.append(f"  {entry.name}: {c.before} -> {c.after}: {entry.detail} [{entry.cite()}]")
        return "\n".join(lines)

    def current(self) -> Baseline:
        """This session's statuses as a baseline (the versions read now)."""
        from bridge.kit.matrix_baseline import CONFORMANCE, Baseline, conformance_versions

        return Baseline(CONFORMANCE, dict(sorted(self.entries.items())), conformance_versions(self.subjects),
                        dict(self.options))  # fmt: skip

    def comparison(self) -> Comparison | None:
        """The whole session against the baseline (None without one): the
        baseline's tests that did not run here lie outside it."""
        if self.baseline is None:
            return None
        from bridge.kit.matrix_baseline import check_test, compare

        return compare(self.baseline, self.current(), lambda key: check_test(key) in self.tests)


#: Where a session's :class:`BaselineSession` lives (``config.stash``).
BASELINE = pytest.StashKey[BaselineSession]()

# The baseline options and their values are left out of the options a
# baseline records: they name files, not what was run.
_BASELINE_OPTIONS = ("--dlpack-save-baseline", "--dlpack-baseline")


def _run_options(config: pytest.Config) -> dict[str, Any]:
    args, skip = [], False
    for arg in map(str, config.invocation_params.args):
        if skip:
            skip = False
        elif arg in _BASELINE_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _BASELINE_OPTIONS)):
            args.append(arg)
    return {"pytest_args": args}


def start_baseline(config: pytest.Config) -> None:
    """``pytest_configure`` with a baseline option: read ``--dlpack-baseline``
    and check that ``--dlpack-save-baseline``'s path can be written
    (:func:`~bridge.kit.matrix_baseline.output_problem`); a bad file or path
    is a ``pytest.UsageError`` naming the option and saying why, before any
    test runs. Keeps the session's :class:`BaselineSession` in ``config.stash``.
    ``--dlpack-save-baseline`` is a UsageError in a pytest-xdist worker: each
    worker sees only its own tests, and would write its own file."""
    from bridge.kit.matrix_baseline import CONFORMANCE, load, output_problem

    save_path = config.getoption("dlpack_save_baseline", None)
    baseline_path = config.getoption("dlpack_baseline", None)
    if save_path and hasattr(config, "workerinput"):
        raise pytest.UsageError("--dlpack-save-baseline does not work under pytest-xdist's workers (-n): "
                                "save the baseline in a run without -n")  # fmt: skip
    problem = output_problem(save_path, "replaced") if save_path is not None else None
    if problem is not None:  # found at the end, it would fail the session after every test ran
        raise pytest.UsageError(f"--dlpack-save-baseline {save_path}: {problem}")
    baseline = None
    if baseline_path:
        try:
            baseline = load(baseline_path, CONFORMANCE)
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
    config.stash[BASELINE] = BaselineSession(baseline, baseline_path, save_path, _run_options(config))


def finish_baseline(config: pytest.Config) -> None:
    """``pytest_sessionfinish``: write ``--dlpack-save-baseline``'s file, with
    the statuses of every marked test that ran (after the comparison was
    made from the old file, so one path can be judged and renewed in one run)."""
    session = config.stash.get(BASELINE, None)
    if session is None or not session.save_path:
        return
    from bridge.kit.matrix_baseline import save

    save(session.current(), session.save_path)
    session.saved = True


def baseline_summary(config: pytest.Config) -> list[str]:
    """The lines of the terminal summary's baseline section: the session
    against the baseline (:meth:`~bridge.kit.matrix_baseline.Comparison.lines`:
    worse checks first) and the file saved."""
    session = config.stash.get(BASELINE, None)
    if session is None:
        return []
    lines: list[str] = []
    result = session.comparison()
    if result is not None:
        lines += result.lines(f"baseline {session.baseline_path}")
    if session.saved:
        lines.append(f"baseline saved: {session.save_path} ({len(session.entries)} checks of "
                     f"{len(session.tests)} tests)")  # fmt: skip
    return lines
