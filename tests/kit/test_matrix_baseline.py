"""Baselines of the interop matrix and of the pytest plugin's checks
(bridge.kit.matrix_baseline): saved from a real run, a planted regression
fails and is named first, a planted improvement passes and is listed, new,
missing and n/a cells are reported without failing, bad files are refused
with the reason; the CLI end to end; the plugin's options through pytester."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from bridge.kit import matrix_baseline as mb
from bridge.kit.conformance_report import STATUSES
from bridge.kit.matrix_grid import VERDICTS
from bridge.kit.matrix_peers import consumer_entries
from bridge.kit.matrix_run import plan, run_matrix

pytest_plugins = ["pytester"]

# A small real run (about a second): NumPy into bridge through two protocols,
# a dtype NumPy exports and one it refuses (float8), so the grid holds
# zero-copy, copy (dlpack-copy: requested), empty, refused and n/a cells.
PRODUCERS, CONSUMERS, PROTOCOLS, DTYPES = ["numpy"], ["bridge"], ["dlpack", "dlpack-copy"], ["float32", "float8_e4m3fn"]
OPTIONS = mb.matrix_options(PRODUCERS, CONSUMERS, PROTOCOLS, DTYPES)
VERSIONS = {"python": "3.11.0", "bridge": "0.1.0", "numpy": "2.4.6"}  # fixed: the tests compare cells


@pytest.fixture(scope="module")
def cells():
    return run_matrix(plan(PRODUCERS, consumer_entries(set(CONSUMERS)), DTYPES, PROTOCOLS))


def by_verdict(cells, verdict):
    return [c for c in cells if c.verdict == verdict]


def run_against(cells, baseline):
    """finish() as the CLI calls it: (exit code, printed lines)."""
    out = io.StringIO()
    code = mb.finish(cells, OPTIONS, baseline, "planted.json", None, out, default=0)
    return code, out.getvalue().splitlines()


def test_every_verdict_and_status_has_its_place_in_the_order():
    """Each verdict the matrix gives is ranked or explicitly unranked, once; so is each check status."""
    for kind, names in ((mb.MATRIX, VERDICTS), (mb.CONFORMANCE, STATUSES)):
        ranked = [v for tier in {mb.MATRIX: mb.MATRIX_ORDER, mb.CONFORMANCE: mb.CONFORMANCE_ORDER}[kind] for v in tier]
        placed = ranked + list(mb.UNRANKED[kind])
        assert sorted(placed) == sorted(names), kind
    assert mb.rank(mb.MATRIX, "zero-copy") == mb.rank(mb.MATRIX, "empty") == 0
    assert [mb.rank(mb.MATRIX, v) for v in ("copy", "unverified", "refused", "violation", "crash")] == [1, 2, 3, 4, 5]
    assert mb.rank(mb.MATRIX, "n/a") is None
    with pytest.raises(ValueError, match="unknown matrix verdict 'ok'; known: zero-copy, empty, copy"):
        mb.rank(mb.MATRIX, "ok")


def test_cell_keys_round_trip(cells):
    for c in cells:
        assert mb.parse_cell_key(mb.cell_key(c)) == c.key()
    assert mb.cell_key(cells[0]).startswith("numpy -> bridge via dlpack: float32/")
    with pytest.raises(ValueError, match="not a matrix cell key"):
        mb.parse_cell_key("numpy bridge dlpack float32 contiguous")


def test_save_load_round_trip_is_stable(cells, tmp_path):
    path = tmp_path / "matrix-baseline.json"
    baseline = mb.from_cells(cells, OPTIONS, VERSIONS)
    mb.save(baseline, path)
    text = path.read_text()
    doc = json.loads(text)
    assert (doc["format"], doc["format_version"], doc["kind"]) == (mb.FORMAT, mb.FORMAT_VERSION, "matrix")
    assert doc["versions"] == VERSIONS and doc["options"] == OPTIONS
    assert len(doc["entries"]) == len(cells) and list(doc["entries"]) == sorted(doc["entries"])
    copied = next(k for k, v in doc["entries"].items() if v["verdict"] == "copy")
    assert doc["entries"][copied] == {"verdict": "copy", "reason": "requested"}  # dlpack-copy asked for it
    again = mb.load(path, mb.MATRIX)
    assert again.entries == baseline.entries and mb.dumps(again) == text  # the same bytes: a clean diff
    code, lines = run_against(cells, again)
    assert code == 0 and lines[-1].endswith("passed (nothing got worse)")
    assert f"compared with baseline planted.json: {len(cells)} cell(s), 0 worse, 0 better" in lines[-1]


def test_a_planted_regression_fails_and_is_named_first(cells):
    """The baseline says a cell that copies now (and one that is refused now)
    was zero-copy: the run got worse there, exit 1, those cells listed first."""
    baseline = mb.from_cells(cells, OPTIONS, VERSIONS)
    copy_now = mb.cell_key(by_verdict(cells, "copy")[0])
    refused_now = mb.cell_key(by_verdict(cells, "refused")[0])
    better_now = mb.cell_key(by_verdict(cells, "zero-copy")[0])
    baseline.entries[copy_now] = mb.Outcome("zero-copy")
    baseline.entries[refused_now] = mb.Outcome("zero-copy")
    baseline.entries[better_now] = mb.Outcome("crash")  # an improvement beside them fails nothing
    code, lines = run_against(cells, baseline)
    assert code == 1
    assert lines[0] == "WORSE than baseline planted.json (these fail): 2 cell(s)"
    assert {lines[1], lines[2]} == {f"  {refused_now}: zero-copy -> refused",
                                    f"  {copy_now}: zero-copy -> copy (requested)"}  # fmt: skip
    assert lines[3].startswith("better than baseline planted.json") and lines[4] == f"  {better_now}: crash -> zero-copy"
    assert lines[-1].endswith("FAILED (something got worse)") and " 2 worse, 1 better," in lines[-1]


def test_a_planted_improvement_passes_and_is_listed(cells):
    baseline = mb.from_cells(cells, OPTIONS, VERSIONS)
    zero = mb.cell_key(by_verdict(cells, "zero-copy")[0])
    refused = mb.cell_key(by_verdict(cells, "refused")[0])
    baseline.entries[zero] = mb.Outcome("copy", reason="layout")
    baseline.entries[refused] = mb.Outcome("violation", rule="exceptions")
    code, lines = run_against(cells, baseline)
    assert code == 0
    assert lines[0].startswith("better than baseline planted.json (not a failure")
    assert set(lines[1:3]) == {f"  {zero}: copy (layout) -> zero-copy", f"  {refused}: violation (exceptions) -> refused"}
    assert not any(ln.startswith("WORSE") for ln in lines)


def test_new_missing_na_and_outside_cells_are_reported_but_do_not_fail(cells):
    baseline = mb.from_cells(cells, OPTIONS, VERSIONS)
    zero = [mb.cell_key(c) for c in by_verdict(cells, "zero-copy")]
    na = mb.cell_key(by_verdict(cells, "n/a")[0])
    del baseline.entries[zero[0]]  # new in this run
    baseline.entries["numpy -> bridge via dlpack: float32/no-such-layout"] = mb.Outcome("zero-copy")  # missing
    baseline.entries["torch -> bridge via dlpack: float32/contiguous"] = mb.Outcome("zero-copy")  # outside the filters
    baseline.entries[zero[1]] = mb.Outcome("n/a")  # was not exchanged: not compared
    baseline.entries[na] = mb.Outcome("zero-copy")  # is not exchanged now: not compared, not worse
    baseline.entries[zero[2]] = mb.Outcome("empty")  # the same rank: changed
    baseline.versions = {**VERSIONS, "numpy": "1.26.0", "torch": "2.0"}
    baseline.options = {**OPTIONS, "producers": ["numpy", "torch"]}
    result = mb.compare(baseline, mb.from_cells(cells, OPTIONS, VERSIONS), mb.matrix_selection(OPTIONS))
    assert not result.failed and not result.worse and not result.better
    assert [c.key for c in result.new] == [zero[0]]
    assert [c.key for c in result.missing] == ["numpy -> bridge via dlpack: float32/no-such-layout"]
    assert {c.key for c in result.not_compared} == {zero[1], na}
    assert [c.key for c in result.changed] == [zero[2]]
    assert result.outside == 1
    assert result.versions == [("numpy", "1.26.0", "2.4.6"), ("torch", "2.0", "")]
    assert result.options == [("producers", ["numpy", "torch"], ["numpy"])]
    text = "\n".join(result.lines("b.json"))
    for words in ("new in this run, not in b.json (not a failure): 1 cell(s)",
                  "in b.json but missing from this run (not a failure): 1 cell(s)",
                  "not compared: n/a on one side (not a failure): 2 cell(s)",
                  "changed within the same rank (not a failure): 1 cell(s)",
                  "1 cell(s) of b.json lie outside this run's selection: not compared",
                  "versions that differ from b.json's: numpy 1.26.0 -> 2.4.6; torch 2.0 -> (not here)",
                  'options that differ from b.json\'s: producers ["numpy", "torch"] -> ["numpy"]'):  # fmt: skip
        assert words in text


def _doc(**change):
    doc = {"format": mb.FORMAT, "format_version": mb.FORMAT_VERSION, "kind": "matrix", "versions": {},
           "options": {}, "entries": {"numpy -> bridge via dlpack: float32/contiguous": {"verdict": "zero-copy"}}}  # fmt: skip
    doc.update(change)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", r"baseline x\.json: not JSON \(Expecting property name"),
        ("[1, 2]", r"not a dlpack-bridge baseline \(no \"format\": \"dlpack-bridge-baseline\" field\)"),
        (_doc(format_version=2), r"format version 2, this dlpack-bridge reads version 1"),
        (_doc(kind="conformance"), r"a baseline of kind 'conformance', not 'matrix'"),
        (_doc(entries=[]), r'"entries" is not an object'),
        (_doc(versions={"numpy": 2}), r'"versions" is not an object of strings'),
        (_doc(entries={"numpy -> bridge via dlpack: float32/contiguous": {"verdict": "ok"}}),
         r"entry 'numpy -> bridge via dlpack: float32/contiguous': unknown matrix verdict 'ok'; known: zero-copy"),
        (_doc(entries={"numpy -> bridge via dlpack: float32/contiguous": "zero-copy"}), r"has no \"verdict\""),
        (_doc(entries={"numpy/bridge/dlpack": {"verdict": "copy"}}), r"not a matrix cell key: 'numpy/bridge/dlpack'"),
    ],
)  # fmt: skip
def test_bad_files_are_refused_with_the_reason(text, why):
    with pytest.raises(ValueError, match=why):
        mb.loads(text, mb.MATRIX, "baseline x.json")


def test_an_unreadable_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"baseline .*nope\.json: cannot read it"):
        mb.load(tmp_path / "nope.json", mb.MATRIX)


def _matrix(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "bridge", "matrix", "--producer", "numpy", "--consumer", "bridge",
         "--protocol", "dlpack,dlpack-copy", "--dtype", "float32", "--no-progress", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )  # fmt: skip


def test_cli_end_to_end(tmp_path):
    """Save, plant a regression in the file, compare (exit 1, the cell named
    first, with --json the comparison on stderr), and a bad file (exit 2)."""
    saved = _matrix("--save-baseline", "b.json", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    doc = json.loads((tmp_path / "b.json").read_text())
    assert saved.stdout.rstrip().endswith(f"baseline saved: b.json ({len(doc['entries'])} cells)")
    assert doc["options"] == mb.matrix_options(["numpy"], ["bridge"], ["dlpack", "dlpack-copy"], ["float32"])
    assert {"python", "bridge", "numpy"} <= set(doc["versions"])
    planted = "numpy -> bridge via dlpack-copy: float32/stepped"
    assert doc["entries"][planted]["verdict"] == "copy"
    doc["entries"][planted] = {"verdict": "zero-copy"}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    judged = _matrix("--baseline", "b.json", "--json", cwd=tmp_path)
    assert judged.returncode == 1, judged.stderr
    assert len(json.loads(judged.stdout)) == len(doc["entries"])  # stdout stays JSON
    report = judged.stderr[judged.stderr.index("WORSE"):].splitlines()
    assert report[:2] == ["WORSE than baseline b.json (these fail): 1 cell(s)",
                          f"  {planted}: zero-copy -> copy (requested)"]  # fmt: skip
    (tmp_path / "bad.json").write_text('{"format": "dlpack-bridge-baseline", "format_version": 0}')
    bad = _matrix("--baseline", "bad.json", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert "error: baseline bad.json: format version 0, this dlpack-bridge reads version 1" in bad.stderr


# ------------------------------------------------------------ the pytest plugin

PLUGIN_TESTS = """
import numpy as np
import pytest


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
"""


def test_pytest_plugin_baseline(pytester):
    """Saved, a known failure (unknown-keyword of the broken producer) passes
    against the baseline; a planted regression fails its test naming the
    check; a planted improvement is listed; a bad file stops the run."""
    pytester.makepyfile(test_producers=PLUGIN_TESTS)
    saved = pytester.runpytest("-p", "no:cacheprovider", "--dlpack-save-baseline", "base.json")
    saved.assert_outcomes(passed=1, failed=1)  # saving judges as usual
    saved.stdout.fnmatch_lines(["*dlpack-bridge baseline*", "baseline saved: base.json (*checks of 2 tests)"])
    doc = json.loads((pytester.path / "base.json").read_text())
    # the options of the run, less the baseline options (pytester adds --basetemp)
    assert doc["kind"] == "conformance" and doc["options"]["pytest_args"][:2] == ["-p", "no:cacheprovider"]
    assert not any("baseline" in arg for arg in doc["options"]["pytest_args"])
    assert {"python", "bridge", "pytest", "numpy"} <= set(doc["versions"])
    numpy_test, broken_test = "test_producers.py::test_numpy_producer", "test_producers.py::test_broken_producer"
    assert doc["entries"][f"{broken_test}::unknown-keyword"] == {"verdict": "failed"}
    assert doc["entries"][f"{numpy_test}::stream-cpu"] == {"verdict": "warning"}

    same = pytester.runpytest("-p", "no:cacheprovider", "--dlpack-baseline", "base.json")
    same.assert_outcomes(passed=2)  # the broken producer fails as it did: nothing got worse
    same.stdout.fnmatch_lines(["*compared with baseline base.json: * 0 worse, * passed (nothing got worse)"])

    doc["entries"][f"{numpy_test}::copy-true"] = {"verdict": "failed"}  # improvement: failed -> passed
    doc["entries"][f"{numpy_test}::stream-cpu"] = {"verdict": "passed"}  # regression: passed -> warning
    del doc["entries"][f"{broken_test}::dtype"]  # a check new to the test: reported, not failing
    (pytester.path / "planted.json").write_text(json.dumps(doc))
    planted = pytester.runpytest("-p", "no:cacheprovider", "--dlpack-baseline", "planted.json")
    planted.assert_outcomes(passed=1, failed=1)
    planted.stdout.fnmatch_lines([
        "*got worse than the baseline planted.json in 1 check(s):",
        "*stream-cpu: passed -> warning: *",
    ])  # fmt: skip
    planted.stdout.fnmatch_lines([
        "WORSE than baseline planted.json (these fail): 1 check(s)",
        f"  {numpy_test}::stream-cpu: passed -> warning",
        "better than baseline planted.json *: 1 check(s)",
        f"  {numpy_test}::copy-true: failed -> passed",
        "new in this run, not in baseline planted.json (not a failure): 1 check(s)",
        f"  {broken_test}::dtype: (not in the baseline) -> *",
    ])  # fmt: skip

    (pytester.path / "bad.json").write_text("not json")
    bad = pytester.runpytest("-p", "no:cacheprovider", "--dlpack-baseline", "bad.json")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*baseline bad.json: not JSON*"])
