"""What a user's ``mypy --strict`` sees of the public API: precise types, no Any.

tests/typing/user_script.py pins the types with ``typing.assert_type``; mypy
runs on it as a user would (tests/typing/mypy.ini: strict, bridge followed as
an installed package). The negative cases check that the same run does fail
on a wrong type, so a pass is not vacuous (an Any would satisfy no
``assert_type`` but Any's own, and mypy reports every mismatch).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPING = ROOT / "tests" / "typing"


def _mypy(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(TYPING / "mypy.ini"), str(script)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )


def test_user_script_types_are_precise() -> None:
    run = _mypy(TYPING / "user_script.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


# Each line is a wrong claim mypy must reject: Any where the API is precise, or
# the wrong precise type.
WRONG = [
    "assert_type(t.size(), Any)",
    "assert_type(t.size(0), tuple[int, ...])",
    "assert_type(t.stride(), Any)",
    "assert_type(t.item(), Any)",
    "assert_type(t.tolist(), Any)",
    "assert_type(t.tolist(), list[Any])",
    "assert_type(t.__dlpack__(), Any)",
    "assert_type(bridge.from_numpy(np.zeros(3)), Any)",
    "assert_type(bridge.from_dlpack(np.zeros(3)), Any)",
    "assert_type(bridge.empty(2, 3), Any)",
    "assert_type(bridge.zeros(2), Any)",
    "assert_type(bridge.from_arrow(pa.array([1])), Any)",
    "assert_type(bridge.from_arrow(pa.array([1]), with_mask=True), bridge.Tensor)",
    "assert_type(bridge.arrow.to_array(t), Any)",
    "assert_type(check(t), Any)",
    "assert_type(bridge.convert({'x': np.zeros(3)}, bridge.Tensor), bridge.Tensor)",
    "assert_type(bridge.convert(pa.table({'a': [1.0]}), bridge.Tensor), bridge.Tensor)",
]


def test_wrong_types_fail(tmp_path: Path) -> None:
    header = [
        "from typing import Any, assert_type",
        "import numpy as np",
        "import pyarrow as pa",
        "import bridge",
        "import bridge.arrow",
        "from bridge.kit.plugin import ConformanceCheck",
        "t = bridge.arange(6)",
        "def f(check: ConformanceCheck) -> None:",
    ]
    body = [f"    {line}" for line in WRONG]
    script = tmp_path / "wrong.py"
    script.write_text("\n".join(header + body) + "\n")
    run = _mypy(script)
    assert run.returncode == 1, run.stdout + run.stderr
    failing = {int(m) for m in re.findall(r"wrong\.py:(\d+): error: Expression is of type", run.stdout)}
    expected = set(range(len(header) + 1, len(header) + len(body) + 1))
    assert failing == expected, run.stdout
