"""The kit's paths are checked before its work (issue 44): ``python -m bridge
matrix`` refuses an output path it could not write (``--repro``, ``--html``,
``--save-baseline``) and a malformed ``--baseline`` with a usage error (exit
status 2, the option and the problem named, no traceback) before any cell
runs, leaving nothing behind; the pytest plugin's options are refused at
configure time with a ``pytest.UsageError``; a save that fails at the end
leaves no ``.tmp`` file.

"Before the run" is shown by the matrix's runner replaced with one that
fails the test when called (the in-process tests), and by an empty stdout,
where the table would be (the subprocess tests).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.kit import matrix
from bridge.kit import matrix_baseline as mb

pytest_plugins = ["pytester"]

# The smallest grid: numpy into bridge, one protocol, one dtype.
TINY = ["--producer", "numpy", "--consumer", "bridge", "--protocol", "dlpack", "--dtype", "float32", "--no-progress"]


class Ran(Exception):
    """The matrix's runner was called."""


def _ran(*args: object, **kwargs: object) -> None:
    raise Ran("the matrix ran before the paths were checked")


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder to run in, holding a file ``afile`` and a folder ``adir``;
    the matrix's runner fails when called."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "adir").mkdir()
    monkeypatch.setattr(matrix, "run_matrix", _ran)
    return tmp_path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``matrix.main(TINY + args)``'s error line, after checking that it is
    argparse's usage error (exit 2, usage on stderr, nothing on stdout) and
    that the matrix did not run (its runner raises :class:`Ran`)."""
    with pytest.raises(SystemExit) as stop:
        matrix.main([*TINY, *args])
    out, err = capsys.readouterr()
    assert stop.value.code == 2, err
    assert out == "" and err.startswith("usage: ") and "Traceback" not in err
    return err.rstrip().splitlines()[-1]


# ------------------------------------------------------------ output paths

@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repro", "afile"], "--repro afile: afile is a file, not a folder"),
        (["--repro", "afile/sub"], "--repro afile/sub: afile is a file, not a folder"),
        (["--repro", "afile/../sub"], "--repro afile/../sub: afile is a file, not a folder"),  # the system walks through afile
        (["--repro", ""], "--repro : the path is empty"),
        (["--save-baseline", "adir"], "--save-baseline adir: it is a folder, not a file"),
        (["--save-baseline", "nodir/b.json"], "--save-baseline nodir/b.json: no folder nodir"),
        (["--save-baseline", "afile/b.json"], "--save-baseline afile/b.json: afile is a file, not a folder"),
        (["--save-baseline", ""], "--save-baseline : the path is empty"),
        (["--html", "adir"], "--html adir: it is a folder, not a file"),
        (["--html", "afile/new/r.html"], "--html afile/new/r.html: afile is a file, not a folder"),
        (["--html", "r.html", "--save-baseline", "./r.html"],
         "--html and --save-baseline both name ./r.html: give each its own path"),
        (["--repro", "new", "--html", "./new"], "--html and --repro both name new: give each its own path"),
    ],
    ids=["repro-is-a-file", "repro-under-a-file", "repro-through-a-file", "repro-empty", "save-is-a-folder",
         "save-no-folder", "save-under-a-file", "save-empty", "html-is-a-folder", "html-under-a-file",
         "html-is-the-saved-baseline", "html-is-the-repro-folder"],
)  # fmt: skip
def test_a_bad_output_path_is_a_usage_error_before_the_run(place: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], message: str) -> None:  # fmt: skip
    before = _listing(place)
    assert usage_error(capsys, *args) == f"python -m bridge matrix: error: {message}"
    assert _listing(place) == before  # no .tmp, no folder made


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes in a read-only folder: test_a_folder_the_system_refuses covers root")  # fmt: skip
def test_an_unwritable_folder_is_a_usage_error(place: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = place / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for flag, path in (("--repro", "locked/repro"), ("--save-baseline", "locked/b.json"),
                           ("--html", "locked/sub/r.html")):  # fmt: skip
            line = usage_error(capsys, flag, path)
            assert line == f"python -m bridge matrix: error: {flag} {path}: the folder locked is not writable"
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_folder_the_system_refuses_is_a_usage_error(place: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """/proc takes no new files, even from root, whom access() lets through."""
    for flag, path in (("--repro", "/proc/bridge-kit-repro"), ("--save-baseline", "/proc/bridge-kit.json"),
                       ("--html", "/proc/bridge-kit/r.html")):  # fmt: skip
        line = usage_error(capsys, flag, path)
        assert line.startswith(f"python -m bridge matrix: error: {flag} {path}: ")
        assert ("the folder /proc is not writable" in line or "cannot write in the folder /proc (" in line), line


def test_good_paths_pass_the_check_and_nothing_is_made_before_the_run(place: Path) -> None:
    """The other side of the checks: missing folders of --repro and --html
    are made later (as before), a --save-baseline file may be replaced; the
    checks create nothing (the runner is called, and raises, with the
    folder as it was)."""
    (place / "b.json").write_text("{}")  # replaced by the save: not read
    before = _listing(place)
    with pytest.raises(Ran):
        matrix.main([*TINY, "--repro", "new/deep/repro", "--html", "out/r.html", "--save-baseline", "b.json"])
    assert _listing(place) == before


# ------------------------------------------------------------ malformed baselines

def _doc(**change: object) -> str:
    doc = {"format": mb.FORMAT, "format_version": mb.FORMAT_VERSION, "kind": "matrix", "versions": {},
           "options": {}, "entries": {"numpy -> bridge via dlpack: float32/contiguous": {"verdict": "zero-copy"}}}  # fmt: skip
    doc.update(change)
    return json.dumps(doc)


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (DEEP, "not a dlpack-bridge baseline: JSON nested too deeply to read (a baseline nests 3 levels)"),
        (_doc(options={"producers": _nested(500)}),
         "not a dlpack-bridge baseline: JSON nested more than 16 levels deep (a baseline nests 3)"),
        (_doc(format_version=True), "format version True, this dlpack-bridge reads version 1"),
        (_doc(format_version=1.0), "format version 1.0, this dlpack-bridge reads version 1"),
        pytest.param('{"format": ' + "1" * 5000 + "}", "not JSON (Exceeds the limit",
                     marks=pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"),
                                              reason="int() takes any number of digits before 3.10.7")),
    ],
    ids=["100000-deep", "options-500-deep", "version-true", "version-float", "huge-integer"],
)  # fmt: skip
def test_a_malformed_baseline_is_a_usage_error_before_the_run(place: Path, capsys: pytest.CaptureFixture[str],
                                                              text: str, why: str) -> None:  # fmt: skip
    (place / "bad.json").write_text(text)
    line = usage_error(capsys, "--baseline", "bad.json")
    assert line.startswith(f"python -m bridge matrix: error: baseline bad.json: {why}"), line


def _matrix(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge", "matrix", *TINY, *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repro", "afile"], "--repro afile: afile is a file, not a folder"),
        (["--baseline", "deep.json"], "baseline deep.json: not a dlpack-bridge baseline: JSON nested too deeply"),
    ],
    ids=["repro-is-a-file", "baseline-100000-deep"],
)
def test_the_command_stops_with_status_2_and_no_traceback(tmp_path: Path, args: list[str], message: str) -> None:
    """End to end, in a process of its own: exit 2, the usage and the error
    on stderr, and nothing on stdout (the run would print its table there)."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "deep.json").write_text(DEEP)
    proc = _matrix(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: ") and f"error: {message}" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["afile", "deep.json"]


# ------------------------------------------------------------ a save that fails at the end

def test_a_failed_save_leaves_no_tmp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = mb.Baseline(mb.MATRIX, {"numpy -> bridge via dlpack: float32/contiguous": mb.Outcome("zero-copy")})
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError):  # the rename onto a folder
        mb.save(baseline, tmp_path / "adir")
    assert sorted(os.listdir(tmp_path)) == ["adir"]

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mb.os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        mb.save(baseline, tmp_path / "b.json")
    assert sorted(os.listdir(tmp_path)) == ["adir"]


# ------------------------------------------------------------ the pytest plugin

PLUGIN_TESTS = """
import pathlib


def test_runs():
    pathlib.Path(__file__).with_name("ran").write_text("")
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dlpack-save-baseline", "adir"], "--dlpack-save-baseline adir: it is a folder, not a file"),
        (["--dlpack-save-baseline", "afile/b.json"], "--dlpack-save-baseline afile/b.json: afile is a file, not a folder"),
        (["--dlpack-save-baseline", "nodir/b.json"], "--dlpack-save-baseline nodir/b.json: no folder nodir"),
        (["--dlpack-baseline", "deep.json"], "baseline deep.json: not a dlpack-bridge baseline: JSON nested too deeply"),
        (["--dlpack-baseline", "true.json"], "baseline true.json: format version True, this dlpack-bridge reads"),
    ],
    ids=["save-is-a-folder", "save-under-a-file", "save-no-folder", "baseline-100000-deep", "baseline-version-true"],
)  # fmt: skip
def test_the_plugin_refuses_bad_paths_at_configure_time(pytester: pytest.Pytester, args: list[str],
                                                        message: str) -> None:  # fmt: skip
    pytester.makepyfile(test_paths=PLUGIN_TESTS)
    (pytester.path / "afile").write_text("")
    (pytester.path / "adir").mkdir()
    (pytester.path / "deep.json").write_text(DEEP)
    (pytester.path / "true.json").write_text(_doc(kind="conformance", format_version=True, entries={}))
    before = _listing(pytester.path)
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert "Traceback" not in result.stderr.str()
    assert _listing(pytester.path) == before  # no test ran ("ran"), no .tmp
