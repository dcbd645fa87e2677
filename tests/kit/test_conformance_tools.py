"""bridge.check: the consumer cases, the report and its helpers, the pytest plugin,
the CLI, and the rule table every result cites. The producer rules are in
test_conformance.py."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bridge
from bridge.core.native import _C
from bridge.kit import conformance
from bridge.kit.conformance import (
    FAILED,
    PASSED,
    WARNING,
    Handmade,
    Report,
    RuleResult,
    check,
    inspect_capsule,
    load,
)

pytest_plugins = ["pytester"]


# ------------------------------------------------------------- consumers

CONSUMERS = '''
import os, signal
import numpy as np
import bridge
from bridge.kit.conformance import inspect_capsule


def _capsule(x):
    try:
        return x.__dlpack__(max_version=(1, 3))
    except TypeError:
        return x.__dlpack__()


def crashes_on_negative_ndim(x):
    cap = _capsule(x)
    view = inspect_capsule(cap)
    if view is not None and view.ndim < 0:
        os.kill(os.getpid(), signal.SIGSEGV)  # what a consumer trusting ndim may do
    return bridge.from_dlpack(cap)


def accepts_anything(x):
    cap = _capsule(x)
    try:
        return bridge.from_dlpack(cap)
    except Exception:
        return np.zeros((2, 3), np.float32)
'''


@pytest.fixture
def consumers(tmp_path, monkeypatch):
    (tmp_path / "conformance_consumers.py").write_text(CONSUMERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import conformance_consumers

    yield conformance_consumers
    sys.modules.pop("conformance_consumers", None)


def consumer_entries(report: Report) -> dict[str, RuleResult]:
    return {e.name: e for e in report.entries if e.name.startswith("consumer-")}


def test_bridge_consumer_passes_in_a_subprocess():
    report = check(lambda: np.arange(3.0), consumer=bridge.from_dlpack)
    entries = consumer_entries(report)
    assert set(entries) == {"consumer-isolation", *conformance.CONSUMER_CASES}
    assert all(e.status == PASSED for e in entries.values()), str(report)
    assert "subprocess" in entries["consumer-isolation"].detail


def test_numpy_consumer_crash_is_reported_not_fatal():
    report = check(lambda: np.arange(3.0), consumer=np.from_dlpack)
    entries = consumer_entries(report)
    failed = {n for n, e in entries.items() if e.status == FAILED}
    # What NumPy 2.4 really does with malformed capsules (see docs/conformance.md).
    assert failed == {"consumer-rejects-null-shape", "consumer-rejects-null-strides",
                      "consumer-rejects-null-data"}, str(report)  # fmt: skip
    assert "crashed the process (signal SIGSEGV" in entries["consumer-rejects-null-shape"].detail
    assert entries["consumer-rejects-null-data"].detail.startswith("accepted")


def test_crashing_consumer_named(consumers):
    report = check(lambda: np.arange(3.0), consumer=consumers.crashes_on_negative_ndim)
    entries = consumer_entries(report)
    bad = entries["consumer-rejects-ndim-negative"]
    assert bad.status == FAILED and "crashed the process (signal SIGSEGV" in bad.detail
    # The cases after the crash ran in a fresh subprocess.
    assert entries["consumer-rejects-lanes-4"].status == PASSED
    assert [e.name for e in report.failed] == ["consumer-rejects-ndim-negative"]


def test_lenient_consumer_in_process(consumers):
    report = check(lambda: np.arange(3.0), consumer=consumers.accepts_anything, isolate=False)
    entries = consumer_entries(report)
    assert entries["consumer-isolation"].status == WARNING
    assert entries["consumer-accepts-versioned"].status == PASSED
    for name in conformance.CONSUMER_CASES:
        if name.startswith("consumer-rejects-"):
            assert entries[name].status == FAILED and entries[name].detail.startswith("accepted")


def test_unnamed_consumer_runs_in_process_with_a_warning():
    report = check(np.arange(2.0), consumer=lambda x: bridge.from_dlpack(x))
    entries = consumer_entries(report)
    assert entries["consumer-isolation"].status == WARNING
    assert "cannot be imported by name" in entries["consumer-isolation"].detail
    assert all(e.status == PASSED for n, e in entries.items() if n != "consumer-isolation")


def test_consumer_by_spec_string():
    report = check(np.arange(2.0), consumer="bridge:from_dlpack")
    assert report and "'bridge:from_dlpack'" in report["consumer-isolation"].detail


# ----------------------------------------------------- report and helpers


def test_report_api():
    report = check(lambda: np.arange(6.0))
    assert bool(report) and not report.failed and len(report.passed) >= 10
    assert report.warnings == [report["stream-cpu"]]
    assert "stream-cpu" in report and "nope" not in report
    with pytest.raises(KeyError):
        report["nope"]
    d = json.loads(json.dumps(report.to_dict()))
    assert d["ok"] is True and d["counts"][WARNING] == 1
    assert [e["name"] for e in d["entries"]] == list(conformance.PRODUCER_RULES)
    plain = report.format(use_rich=False)
    assert plain.splitlines()[0].startswith("DLPack conformance: numpy.ndarray")
    assert "stream-cpu" in plain and "conforms" in plain.splitlines()[-1]
    fancy = str(report)
    assert "copy-false" in fancy and "\x1b[" not in fancy
    broken = Report("x", [RuleResult("a", FAILED, "boom"), RuleResult("b", PASSED, "")])
    assert not broken and broken.failed[0].detail == "boom"
    assert "DOES NOT CONFORM" in broken.summary()


def test_load():
    f = load("numpy:lambda: numpy.arange(6.0)")
    assert f().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert load("numpy.linalg:linalg.norm") is np.linalg.norm
    assert load("os.path:{1: 'a:b'}[1]") == "a:b"  # split at the first colon only
    assert load("bridge:check") is check is bridge.check
    with pytest.raises(ValueError, match="module:expr"):
        load("numpy")
    with pytest.raises(ModuleNotFoundError):
        load("no_such_module_here:x")


def test_handmade_and_inspect_capsule():
    h = Handmade(np.arange(8, dtype=np.float32)[2:].reshape(2, 3), byte_offset=8, minor=2)
    cap = h.capsule()
    view = inspect_capsule(cap)
    assert view is not None and view.versioned and view.version == (1, 2)
    assert view.byte_offset == 8 and view.start == h.buffer.ctypes.data
    assert view.shape == (2, 3) and view.strides == (3, 1) and view.dtype == (2, 32, 1)
    assert view.span() == (view.start, view.start + 24)
    gc.collect()
    before = _C.stats()["test_deleters"]
    t = bridge.from_dlpack(cap)
    assert t.tolist() == h.expected() == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]
    assert inspect_capsule(cap) is None  # consumed: used_dltensor_versioned
    del t
    gc.collect()
    assert _C.stats()["test_deleters"] == before + 1
    legacy = Handmade(versioned=False)
    lview = inspect_capsule(legacy.capsule())
    assert lview is not None and not lview.versioned and lview.flags is None
    assert inspect_capsule(legacy.capsule("oops")) is None


# ------------------------------------------------------------ pytest plugin

PLUGIN_TESTS = """
import numpy as np
import pytest
from pycapsule import capsule_new


class TakesAnything:
    def __init__(self):
        self.a = np.arange(4.0)

    def __dlpack__(self, **kwargs):
        kwargs.pop("bogus", None)
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.dlpack_producer(lambda: np.arange(6.0))
def test_numpy_producer():
    pass


@pytest.mark.dlpack_producer(factory=TakesAnything)
def test_broken_producer():
    pass


@pytest.mark.dlpack_producer(TakesAnything, ignore=["unknown-keyword"])
def test_broken_but_ignored():
    pass


def test_fixture(dlpack_conformance):
    report = dlpack_conformance(lambda: np.arange(3))
    assert report and report["copy-true"].status == "passed"


@pytest.mark.dlpack_producer(np.arange(3), TakesAnything)
def test_two_producers_is_a_usage_error():
    pass
"""


# The plugin as the installed entry point loads it, and its module named
# explicitly (the checkout's dlpack_bridge_pytest.py, whatever .venv's entry
# point still names), and through its public path bridge.pytest_plugin.
PLUGIN_ROUTES = {
    "entry-point": (),
    "entry-module": ("-p", "no:bridge", "-p", "dlpack_bridge_pytest"),
    "public-path": ("-p", "no:bridge", "-p", "bridge.pytest_plugin"),
}


@pytest.mark.parametrize("route", list(PLUGIN_ROUTES))
def test_pytest_plugin(pytester, route):
    plugin = PLUGIN_ROUTES[route]
    pytester.makepyfile(test_plugin_use=PLUGIN_TESTS)
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider", *plugin, "-k", "not usage")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_broken_producer*", "*failed 1 rule(s)*", "*unknown-keyword: *"])
    result = pytester.runpytest("-p", "no:cacheprovider", *plugin, "-k", "usage")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*takes one producer or factory*got 2*"])


def _imported_modules(importtime_stderr: str) -> set[str]:
    """The modules a ``python -X importtime`` run imported, from its report."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and "|" in line} - {"package"}


def test_pytest_plugin_imports_neither_bridge_nor_numpy_until_used(tmp_path):
    """pytest imports the entry point's module in every run of the environment:
    in an empty folder (``pytest --co``) it imports no bridge and no NumPy
    module; a test that uses the fixture gets them."""
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}  # the checkout's dlpack_bridge_pytest.py
    plugin = PLUGIN_ROUTES["entry-module"]
    empty = tmp_path / "empty"
    empty.mkdir()
    # --co: collect nothing (exit 5); --markers: the plugin is loaded (its marker is listed).
    # pytest imports plugins with importlib.import_module, which -X importtime does not
    # list, but every module they import is listed. Other plugins of the environment are
    # not bridge's to measure: pytest-run-parallel imports NumPy itself.
    for args, rc in ((["--co"], 5), (["--markers"], 0)):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "pytest", *args, "-q", "-p", "no:cacheprovider",
             "-p", "no:run-parallel", *plugin],
            cwd=empty, env=env, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == rc, proc.stdout + proc.stderr[-2000:]
        modules = _imported_modules(proc.stderr)
        assert "_pytest.main" in modules
        heavy = sorted(m for m in modules if m.split(".")[0] in ("bridge", "numpy"))
        assert heavy == [], args
    assert "@pytest.mark.dlpack_producer(factory, consumer=None, ignore=())" in proc.stdout
    # used, it imports bridge (and through it NumPy)
    used = tmp_path / "used"
    used.mkdir()
    (used / "test_uses_fixture.py").write_text(textwrap.dedent("""
        import sys

        def test_fixture(dlpack_conformance):
            report = dlpack_conformance(lambda: __import__("numpy").arange(3.0))
            assert report and "bridge" in sys.modules
    """))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin],
        cwd=used, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# --------------------------------------------------------------- the CLI


def run_cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "bridge", "check", *args], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip


def test_cli_numpy_passes():
    proc = run_cli("numpy:lambda: numpy.arange(6.0)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "capsule-name-versioned" in proc.stdout and "conforms" in proc.stdout


def test_cli_broken_producer_fails_and_json(tmp_path):
    (tmp_path / "broken_producer.py").write_text(textwrap.dedent("""
        import numpy as np

        class AlwaysLegacy:
            def __init__(self):
                self.a = np.arange(6.0)

            def __dlpack__(self, **kwargs):
                kwargs.pop("max_version", None)
                return self.a.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return (1, 0)
        """))  # fmt: skip
    proc = run_cli("broken_producer:AlwaysLegacy", path=str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "capsule-name-versioned" in proc.stdout and "DOES NOT CONFORM" in proc.stdout
    proc = run_cli("--json", "broken_producer:AlwaysLegacy", path=str(tmp_path))
    assert proc.returncode == 1
    d = json.loads(proc.stdout)
    failed = {e["name"] for e in d["entries"] if e["status"] == FAILED}
    assert d["ok"] is False and "capsule-name-versioned" in failed


def test_cli_cannot_load():
    proc = run_cli("no_such_module_here:thing")
    assert proc.returncode == 2 and "cannot check" in proc.stderr
    proc = run_cli("builtins:[1, 2]")
    assert proc.returncode == 2 and "TypeError" in proc.stderr


# ------------------------------------- the rule table and the check names


def test_every_result_cites_a_rule_of_the_one_table():
    from bridge.kit.conformance_consumer import _CASES
    from bridge.kit.conformance_subject import registrar
    from bridge.kit.rules import RULES

    report = check(lambda: np.arange(3.0), consumer=consumers_in_process, isolate=False)
    assert {e.name for e in report.entries} == set(conformance.CHECK_NAMES)
    for e in report.entries:
        assert e.rule in RULES, e
        d = e.to_dict()
        assert d["rule"] == e.rule and d["spec"] == RULES[e.rule].cite() and d["url"] == RULES[e.rule].url
        assert e.cite() == f"{e.rule}: {RULES[e.rule].cite()}"
    assert all(c.rule in RULES for c in conformance._PRODUCER_CHECKS)
    assert all(c.rule in RULES for c in _CASES.values())
    assert RULES["strides"].cite() in report.format(use_rich=False)
    # A check citing a rule the table does not hold is refused when it is defined.
    with pytest.raises(KeyError, match="unknown rule 'strides-non-null'"):
        registrar([])("x", "a check", "strides-non-null")


def consumers_in_process(x):
    return bridge.from_dlpack(x)


def test_renamed_checks_name_their_new_names():
    report = check(np.arange(3.0))
    with pytest.raises(KeyError, match="'strides-non-null' was renamed 'strides'"):
        report["strides-non-null"]
    with pytest.raises(ValueError, match="'dtype-native-known' was renamed 'dtype'"):
        conformance.check_names(["dtype-native-known"])


def test_unknown_check_names_are_an_error():
    assert conformance.check_names(["stream-cpu", "consumer-isolation"]) == {"stream-cpu", "consumer-isolation"}
    with pytest.raises(ValueError, match=r"unknown check name 'stream_cpu'; valid names: .*stream-cpu"):
        conformance.check_names(["stream_cpu"])
    with pytest.raises(TypeError, match=r"a list of check names, got the string 'stream-cpu'"):
        conformance.check_names("stream-cpu")
    from bridge.pytest_plugin import conformance_failure

    with pytest.raises(ValueError, match="unknown check name 'stream_cpu'"):
        conformance_failure(Report("x", [RuleResult("stream-cpu", FAILED, "boom", "stream")]), ["stream_cpu"])


PLUGIN_TYPO = """
import numpy as np
import pytest
from pycapsule import capsule_new


@pytest.mark.dlpack_producer(lambda: np.arange(6.0), ignore=["stream_cpu"])
def test_typo():
    pass
"""


def test_pytest_plugin_refuses_an_unknown_name_in_ignore(pytester):
    pytester.makepyfile(test_plugin_typo=PLUGIN_TYPO)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ValueError: unknown check name 'stream_cpu'; valid names: *stream-cpu*"])
