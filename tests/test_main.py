"""The command line: `python -m bridge` runs the checked tour."""

from __future__ import annotations

import subprocess
import sys

from bridge.kit.cli import main


def test_tour_passes(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "offset 4, strides (3, 1)" in out


def test_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "bridge", "tour"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
