"""What the benchmark scripts share: a row of ``make bench`` and the
optional peers (tests/bench.py, tests/bench_copy.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from bridge.core.native import _C

try:
    import torch
except ImportError:  # torch is optional
    torch = None

try:
    import tvm_ffi
except ImportError:  # apache-tvm-ffi is optional: the fastest DLPack peer today
    tvm_ffi = None


class Row(NamedTuple):
    """One benchmark: the same operation done by bridge, NumPy and torch."""

    name: str
    bridge_fn: Callable[[], Any]
    numpy_fn: Callable[[], Any] | None
    torch_fn: Callable[[], Any] | None
    target: float | None = None  # the bridge/<target_vs> ratio to stay within
    check: Callable[[], None] | None = None  # run once before timing
    tvm_fn: Callable[[], Any] | None = None  # apache-tvm-ffi doing the same, if installed
    target_vs: str = "numpy"  # which column the target ratio is taken against
    more_targets: tuple[tuple[str, float], ...] = ()  # further (column, ratio) targets
    plain_fn: Callable[[], Any] | None = None  # a plain copy of the same bytes (np.copy): copy rows


MiB64 = 64 << 20


def _threads(n: int, fn: Callable[[], Any]) -> Callable[[], Any]:
    """fn run with the copy kernel on n threads (0: one per CPU), torch likewise."""

    def run() -> Any:
        old = _C.copy_threads(n)
        old_torch = torch.get_num_threads() if torch is not None else 0
        if torch is not None:
            torch.set_num_threads(n or os.cpu_count() or 1)
        try:
            return fn()
        finally:
            _C.copy_threads(old)
            if torch is not None:
                torch.set_num_threads(old_torch)

    return run
