"""The command line: `python -m bridge` runs the checked tour; every command
ends quietly when the reader of its output goes away early."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from bridge.kit.cli import EXIT_BROKEN_PIPE, main


def test_tour_passes(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "offset 4, strides (3, 1)" in out


def test_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "bridge", "tour"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _run_with_reader_gone(args: list[str], first_line: bool) -> tuple[int, bytes, str]:
    """``python -m bridge ARGS`` with stdout a real pipe whose reader closes
    it early: at once, or after the first line (the pipe shrunk to one page so
    that the rest cannot fit in it). Returns the exit status, what was read
    and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "bridge", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    read = b""
    if first_line:
        fd = proc.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 4096)
        while not read.endswith(b"\n"):  # byte by byte: nothing more leaves the pipe
            chunk = os.read(fd, 1)
            if not chunk:
                break
            read += chunk
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), read, err


# numpy -> numpy through the buffer protocol: a few seconds, ~16 KB of JSON.
_MATRIX_JSON = ["matrix", "--producer", "numpy", "--consumer", "numpy", "--protocol", "buffer",
                "--dtype", "float32,int64,uint8,bool", "--json", "--no-progress"]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [["tour"], ["check", "numpy:lambda: numpy.arange(6.0)"], _MATRIX_JSON],
    ids=["tour", "check", "matrix"],
)
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    code, _, err = _run_with_reader_gone(args, first_line=False)
    assert code == EXIT_BROKEN_PIPE == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_matrix_json_into_head_ends_quietly() -> None:
    """``python -m bridge matrix --json | head -1``."""
    code, read, err = _run_with_reader_gone(_MATRIX_JSON, first_line=True)
    assert read == b"[\n"
    assert code == EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
