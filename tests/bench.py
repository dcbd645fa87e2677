"""Side-by-side timings of bridge against NumPy and PyTorch, in one run.

Run ``python tests/bench.py`` (``make bench``); ``--json PATH`` also writes the
results. Not a pytest file: it defines no tests.

Every row is one operation done three ways (bridge, NumPy, torch); each is
timed with :mod:`timeit` (best of ``--repeat`` repeats, each long enough to
last ``--min-time`` seconds, the columns' repeats taken in turns) and reported
per call, with the ratios bridge/numpy and bridge/torch. A row may carry a
target for bridge/numpy. Copy rows also time a plain copy of the same bytes
into new memory (``np.copy``: the "plain" column, and bridge/plain).

To add a benchmark, write a function that builds its operands and returns
``Row``s, and add it to ``GROUPS``. Operands are built once, before timing,
and a row's ``check`` (if any) verifies once that the three results agree.
torch is optional: without it the torch column reads n/a. torch runs on
``--torch-threads`` threads (1 by default, like NumPy's copies).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_common import MiB64, Row, torch, tvm_ffi  # noqa: F401  (re-exported: bench_ir reads bench.GROUPS)
from bench_copy import copy_rows, overlap_rows
from bench_fixes import fix_rows
from bench_units import batch_rows, polars_rows, table_rows
from lifetimes import rss_bytes  # tests/ is this script's folder, first on sys.path

import bridge


def core_rows() -> list[Row]:
    """The everyday core operations, per call, side by side (issue 10's rows).
    Targets: bridge at most 1.0x torch on every row; the metadata-only views
    at most 3x NumPy as well, empty(16) and zeros(16) at most 1.0x NumPy
    (issue 45: C functions, cdefs/core/values.c)."""
    shape = (4, 8, 16)
    t = bridge.arange(4 * 8 * 16, dtype=bridge.float32).reshape(shape)
    a = np.arange(4 * 8 * 16, dtype=np.float32).reshape(shape)
    tt = torch.arange(4 * 8 * 16, dtype=torch.float32).reshape(shape) if torch else None
    t2, a2 = bridge.zeros(4, 8), np.zeros((4, 8), dtype=np.float32)
    tt2 = torch.zeros(4, 8) if torch else None
    t24, a24 = bridge.arange(24, dtype=bridge.float32), np.arange(24, dtype=np.float32)
    tt24 = torch.arange(24, dtype=torch.float32) if torch else None
    t0, a0 = t[1, 2, 3], a[1, 2, 3, ...]
    tt0 = tt[1, 2, 3] if tt is not None else None

    def same(b: Any, n: Any, th: Any, values: bool = True) -> Callable[[], None]:
        def check() -> None:
            got, want = b(), n()
            if isinstance(got, bridge.Tensor):
                assert got.shape == np.shape(want)
                assert values is False or np.array_equal(np.asarray(got), want)
            if th is not None and values:
                other = th()
                assert np.array_equal(other.numpy() if hasattr(other, "numpy") else other, want)

        return check

    T = torch
    view = [  # metadata only: <= 1.0x torch and <= 3x NumPy
        ("t.permute(2, 0, 1)  [a.transpose(2, 0, 1)]", lambda: t.permute(2, 0, 1),
         lambda: a.transpose(2, 0, 1), lambda: tt.permute(2, 0, 1)),
        ("t.transpose(0, 2)  [a.swapaxes(0, 2)]", lambda: t.transpose(0, 2),
         lambda: a.swapaxes(0, 2), lambda: tt.transpose(0, 2)),
        ("t.view(-1)  [a.reshape(-1)]", lambda: t.view(-1), lambda: a.reshape(-1), lambda: tt.view(-1)),
        ("t.reshape(8, 64)", lambda: t.reshape(8, 64), lambda: a.reshape(8, 64),
         lambda: tt.reshape(8, 64)),
        ("t[1:3, ::2]  (basic indexing)", lambda: t[1:3, ::2], lambda: a[1:3, ::2],
         lambda: tt[1:3, ::2]),
        ("t[1, 2, 3]  (0-d indexing)  [a[1, 2, 3, ...]]", lambda: t[1, 2, 3],
         lambda: a[1, 2, 3, ...], lambda: tt[1, 2, 3]),
        ("t.unsqueeze(1)  [a[:, None]]", lambda: t.unsqueeze(1), lambda: a[:, None],
         lambda: tt.unsqueeze(1)),
        ("t.expand(2, 4, 8, 16)  [np.broadcast_to]", lambda: t.expand(2, 4, 8, 16),
         lambda: np.broadcast_to(a, (2, 4, 8, 16)), lambda: tt.expand(2, 4, 8, 16)),
        ("t.narrow(1, 2, 4)  [a[:, 2:6]]", lambda: t.narrow(1, 2, 4), lambda: a[:, 2:6],
         lambda: tt.narrow(1, 2, 4)),
    ]  # fmt: skip
    other = [  # <= 1.0x torch
        ("t.is_contiguous()  [a.flags.c_contiguous]", t.is_contiguous,
         lambda: a.flags.c_contiguous, lambda: tt.is_contiguous()),
        ("empty(16)", lambda: bridge.empty(16), lambda: np.empty(16, np.float32), lambda: T.empty(16)),
        ("zeros(16)", lambda: bridge.zeros(16), lambda: np.zeros(16, np.float32), lambda: T.zeros(16)),
        ("clone() of 96 bytes  [a.copy()]", t24.clone, a24.copy, lambda: tt24.clone()),
        ("t[0, 0] = 1.0", lambda: t2.__setitem__((0, 0), 1.0), lambda: a2.__setitem__((0, 0), 1.0),
         lambda: tt2.__setitem__((0, 0), 1.0)),
        ("t0.item()", t0.item, a0.item, lambda: tt0.item()),
        ("t2.tolist()  (4 x 8)", t2.tolist, a2.tolist, lambda: tt2.tolist()),
    ]  # fmt: skip
    rows = []
    for group, extra in ((view, (("numpy", 3.0),)), (other, ())):
        for name, b, n, th in group:
            th = th if tt is not None else None
            more = extra + ((("numpy", 1.0),) if name in ("empty(16)", "zeros(16)") else ())
            rows.append(Row(name, b, n, th, target=1.0, target_vs="torch", more_targets=more,
                            check=same(b, n, th, "empty" not in name) if "=" not in name else None))  # fmt: skip
    return rows


def _kib_operands() -> tuple[Any, Any, Any, Any]:
    """A 1 KiB float32 vector as an ndarray, a bridge tensor, a torch and a tvm-ffi tensor."""
    a = np.arange(256, dtype=np.float32)
    b = bridge.from_numpy(a)
    tt = torch.from_numpy(a) if torch is not None else None
    tv = tvm_ffi.from_dlpack(a) if tvm_ffi is not None else None
    return a, b, tt, tv


def dlpack_rows() -> list[Row]:
    """One DLPack exchange (issue 3's targets): export, import, import from torch."""
    a, b, tt, tv = _kib_operands()

    def aliases(make: Callable[[], Any], ptr: int) -> Callable[[], None]:
        def check() -> None:
            out = make()
            got = out.data_ptr() if hasattr(out, "data_ptr") and callable(out.data_ptr) else (
                np.asarray(out).__array_interface__["data"][0]
            )
            assert got == ptr, "the exchange copied"

        return check

    ptr = a.__array_interface__["data"][0]
    return [
        Row("export: np.from_dlpack(x)  [x = bridge | ndarray | torch | tvm]",
            lambda: np.from_dlpack(b), lambda: np.from_dlpack(a),
            (lambda: np.from_dlpack(tt)) if tt is not None else None,
            target=1.0, target_vs="tvm", check=aliases(lambda: np.from_dlpack(b), ptr),
            tvm_fn=(lambda: np.from_dlpack(tv)) if tv is not None else None),
        Row("import: lib.from_dlpack(ndarray)  [bridge | numpy | torch | tvm]",
            lambda: bridge.from_dlpack(a), lambda: np.from_dlpack(a),
            (lambda: torch.from_dlpack(a)) if torch is not None else None,
            target=1.0, target_vs="tvm", check=aliases(lambda: bridge.from_dlpack(a), ptr),
            tvm_fn=(lambda: tvm_ffi.from_dlpack(a)) if tvm_ffi is not None else None),
        Row("import from torch: lib.from_dlpack(torch_tensor)  [C exchange API]",
            (lambda: bridge.from_dlpack(tt)) if tt is not None else (lambda: None),
            (lambda: np.from_dlpack(tt)) if tt is not None else None,
            (lambda: torch.from_dlpack(tt)) if tt is not None else None,
            target=1.0, target_vs="tvm", more_targets=(("numpy", 0.40),),
            check=aliases(lambda: bridge.from_dlpack(tt), ptr) if tt is not None else None,
            tvm_fn=(lambda: tvm_ffi.from_dlpack(tt)) if tv is not None and tt is not None else None),
    ]  # fmt: skip


def array_interface_rows() -> list[Row]:
    """NumPy's own protocols (issue 4's targets)."""
    a, b, tt, _ = _kib_operands()
    ptr = a.__array_interface__["data"][0]

    def check() -> None:
        assert np.asarray(b).__array_interface__["data"][0] == ptr
        assert bridge.from_numpy(a).data_ptr() == ptr

    return [
        Row("np.asarray(bridge) | np.asarray(ndarray) | torch_tensor.numpy()",
            lambda: np.asarray(b), lambda: np.asarray(a),
            tt.numpy if tt is not None else None, target=0.5, target_vs="torch", check=check),
        Row("bridge.from_numpy | np.asarray | torch.from_numpy",
            lambda: bridge.from_numpy(a), lambda: np.asarray(a),
            (lambda: torch.from_numpy(a)) if torch is not None else None,
            target=1.0, target_vs="torch"),
    ]  # fmt: skip


def arrow_rows() -> list[Row]:
    """Arrow (issue 5's targets): pa.array over a tensor, and from_arrow."""
    import pyarrow as pa

    a, b, _, _ = _kib_operands()
    arr = pa.array(a)
    ptr = a.__array_interface__["data"][0]

    def check() -> None:
        assert pa.array(b).buffers()[1].address == ptr
        assert bridge.from_arrow(arr).data_ptr() == arr.buffers()[1].address

    return [
        Row("pa.array(bridge) | pa.array(ndarray)  [Arrow C data interface]",
            lambda: pa.array(b), lambda: pa.array(a), None, target=1.0, check=check),
        Row("bridge.from_arrow(pa_array) | pa_array.to_numpy(zero_copy_only=True)",
            lambda: bridge.from_arrow(arr), lambda: arr.to_numpy(zero_copy_only=True), None,
            target=1.0),
    ]  # fmt: skip


def convert_rows() -> list[Row]:
    """``bridge.convert`` (issue 21's targets): into torch from a bridge tensor, an
    ndarray and a paddle tensor, at most 0.4x ``torch.from_dlpack`` of the same
    object; torch into bridge, at most 1.0x ``tvm_ffi.from_dlpack``. Each
    row's torch column is the destination's own import; the numpy column
    reads n/a (torch -> bridge: ``bridge.from_dlpack``, the other import)."""
    if torch is None:
        return []
    a, b, tt, tv = _kib_operands()
    ptr = a.__array_interface__["data"][0]

    def shares(make: Callable[[], Any]) -> Callable[[], None]:
        def check() -> None:
            out = make()
            assert out.data_ptr() == ptr, "convert copied"

        return check

    rows = [
        Row("convert(bridge, torch) | torch.from_dlpack(bridge)",
            lambda: bridge.convert(b, torch), None, lambda: torch.from_dlpack(b),
            target=0.40, target_vs="torch", check=shares(lambda: bridge.convert(b, torch))),
        Row("convert(ndarray, torch) | torch.from_dlpack(ndarray)",
            lambda: bridge.convert(a, torch), None, lambda: torch.from_dlpack(a),
            target=0.40, target_vs="torch", check=shares(lambda: bridge.convert(a, torch))),
    ]
    try:
        import paddle
    except ImportError:  # paddle is optional
        paddle = None
    if paddle is not None:
        pt = paddle.to_tensor(a)
        rows.append(Row("convert(paddle, torch) | torch.from_dlpack(paddle)",
                        lambda: bridge.convert(pt, torch), None, lambda: torch.from_dlpack(pt),
                        target=0.40, target_vs="torch"))
    rows.append(Row("convert(torch, bridge) | bridge.from_dlpack(torch) | tvm_ffi.from_dlpack(torch)",
                    lambda: bridge.convert(tt, bridge), lambda: bridge.from_dlpack(tt), None,
                    target=1.0, target_vs="tvm", check=shares(lambda: bridge.convert(tt, bridge)),
                    tvm_fn=(lambda: tvm_ffi.from_dlpack(tt)) if tv is not None else None))
    return rows


def convert_pair_rows() -> list[Row]:
    """``bridge.convert(x, dest)`` beside the destination's own import of the
    same ``x`` (its ``from_dlpack``; ``bridge.from_dlpack`` for bridge), for
    every source and destination that exchange zero-copy with no fix: the
    own import in the torch column, target at most 1.0x it (issue 21: never
    slower than ``to.from_dlpack(obj)``)."""
    if torch is None:
        return []
    a, b, tt, tv = _kib_operands()
    srcs: dict[str, Any] = {"bridge": b, "ndarray": a, "torch": tt}
    own: dict[str, tuple[Any, Callable[[Any], Any]]] = {"bridge": (bridge, bridge.from_dlpack),
                                                         "numpy": (np, np.from_dlpack),
                                                         "torch": (torch, torch.from_dlpack)}  # fmt: skip
    if tvm_ffi is not None:
        srcs["tvm_ffi"] = tv
        own["tvm_ffi"] = (tvm_ffi, tvm_ffi.from_dlpack)
    try:
        import paddle
    except ImportError:  # paddle is optional
        paddle = None
    if paddle is not None:
        srcs["paddle"] = paddle.to_tensor(a)
        own["paddle"] = (paddle, paddle.from_dlpack)
    rows = []
    for sname, x in srcs.items():
        for dname, (mod, imp) in own.items():
            rows.append(Row(f"convert({sname}, {dname}) | {dname}'s own import",
                            lambda x=x, mod=mod: bridge.convert(x, mod), None, lambda x=x, imp=imp: imp(x),
                            target=1.0, target_vs="torch"))  # fmt: skip
    return rows


def convert_source_rows() -> list[Row]:
    """``bridge.convert(x, numpy)`` from the sources data pipelines start with
    (pyarrow, polars, nanoarrow, jax on the host, mlx, tvm-ffi, onnxruntime)
    beside the source library's own best zero-copy route to NumPy, in the
    numpy column (issue 32: at most 1.0x it). Each route is checked to share
    the source's memory."""
    a = np.arange(256, dtype=np.float32)
    routes: list[tuple[str, Any, Callable[[Any], Any], str]] = []
    try:
        import pyarrow as pa

        routes += [("pyarrow", pa.array(a), lambda x: x.to_numpy(zero_copy_only=True), "to_numpy(zero_copy_only)"),
                   ("pyarrow ChunkedArray", pa.chunked_array([pa.array(a)]),
                    lambda x: x.chunk(0).to_numpy(zero_copy_only=True), "chunk(0).to_numpy(zero_copy_only)")]  # fmt: skip
    except ImportError:
        pa = None
    for name, make, own, how in (
        ("polars", "polars:Series", lambda x: x.to_numpy(), "to_numpy()"),
        ("nanoarrow", "nanoarrow:c_array", lambda x: np.from_dlpack(x) if hasattr(x, "__dlpack__") else None,
         "np.from_dlpack"),
        ("jax", "jax.numpy:asarray", lambda x: np.asarray(x), "np.asarray"),
        ("mlx", "mlx.core:array", lambda x: np.asarray(x), "np.asarray"),
        ("tvm_ffi", "tvm_ffi:from_dlpack", lambda x: np.from_dlpack(x), "np.from_dlpack"),
        ("onnxruntime", "onnxruntime:OrtValue.from_dlpack", lambda x: x.numpy(), ".numpy()"),
    ):  # fmt: skip
        module, attr = make.split(":")
        try:
            lib = importlib.import_module(module)
        except ImportError:
            continue
        fn: Any = lib
        for part in attr.split("."):
            fn = getattr(fn, part)
        src = fn(pa.array(a) if name == "nanoarrow" and pa is not None else a)
        if name == "nanoarrow" and own(src) is None:
            continue
        routes.append((name, src, own, how))
    rows = []
    for name, src, own, how in routes:
        rows.append(Row(f"convert({name}, numpy) | {how}", lambda x=src: bridge.convert(x, np),
                        lambda x=src, own=own: own(x), None, target=1.0, target_vs="numpy"))  # fmt: skip
    return rows


IMPORT_STATEMENTS = {"bridge": "import bridge", "numpy": "import numpy", "torch": "import torch"}


def import_rows(repeat: int) -> list[dict[str, Any]]:
    """``import bridge`` against ``import numpy`` (and ``import torch``), each in
    fresh interpreters (target: bridge at most 1.3x numpy).

    Method: wall time (``time.perf_counter``) around a subprocess
    ``python -c "import x"``, best of ``max(repeat, 10)`` runs (torch, which
    takes seconds: 3), minus the best of as many ``python -c "pass"`` runs
    (the interpreter's own start, site and .pth files included); the
    statements are interleaved so that machine load drifts alike for all. Wall
    time, not ``-X importtime``, which adds its own cost per module. bridge
    imports numpy, so its figure is the total, numpy included. Bytecode
    caching is on in the children (a warm-up run writes bridge's
    ``__pycache__``, as pip does at install): with ``PYTHONDONTWRITEBYTECODE``
    an editable checkout would be compiled from source on every import, while
    numpy's installed caches are read.
    """
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    stmts = {"pass": "pass", **IMPORT_STATEMENTS}
    if torch is None:
        del stmts["torch"]
    runs = {name: 3 if name == "torch" else max(repeat, 10) for name in stmts}
    best = dict.fromkeys(stmts, float("inf"))
    for i in range(1 + max(runs.values())):  # run 0 warms the caches, untimed
        for name, stmt in stmts.items():
            if i > runs[name]:
                continue
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", stmt], check=True, env=env)
            if i:
                best[name] = min(best[name], time.perf_counter() - t0)
    start = best.pop("pass")
    t = {k: v - start for k, v in best.items()}
    ratio = t["bridge"] / t["numpy"]
    return [{
        "name": "import bridge | import numpy | import torch  [fresh interpreters]",
        "bridge_s": t["bridge"], "numpy_s": t["numpy"], "torch_s": t.get("torch"), "tvm_s": None,
        "bridge/numpy": ratio, "bridge/torch": t["bridge"] / t["torch"] if "torch" in t else None,
        "bridge/tvm": None, "target": 1.3, "target_vs": "numpy",
        "status": f"{'ok' if ratio <= 1.3 else 'MISS'} (br/numpy <= 1.30x)",
    }]  # fmt: skip


FIRST_CALL_CHILD = """
import sys, time
import numpy as np, bridge
dest, route = sys.argv[1], sys.argv[2]
a = np.empty(256 + 16, np.float32)
a = a[(-a.ctypes.data // 4) % 16:][:256]  # 64-byte aligned: no destination needs a copy
a[:] = 1
if dest == "numpy":
    import torch
    src = torch.from_numpy(a.copy())
    fn = (lambda: bridge.convert(src, np)) if route == "bridge" else (lambda: np.from_dlpack(src))
elif dest == "torch":
    import torch
    fn = (lambda: bridge.convert(a, torch)) if route == "bridge" else (lambda: torch.from_dlpack(a))
else:
    import jax, jax.dlpack
    fn = (lambda: bridge.convert(a, jax)) if route == "bridge" else (lambda: jax.dlpack.from_dlpack(a))
t0 = time.perf_counter(); fn(); t1 = time.perf_counter(); fn(); t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def first_call_rows(repeat: int) -> list[dict[str, Any]]:
    """The first ``convert`` into a destination in a fresh interpreter, beside
    the destination's own ``from_dlpack`` called first in one (1 KiB float32,
    64-byte aligned, so that both share memory). No target: the row shows
    what a user's first call costs beside the library's own first call.

    Both pay what any first call pays (code and data brought into the caches,
    the destination's own lazy set-up); convert adds its registration of the
    destination. Best of ``max(repeat, 5)`` interpreters per column, the
    columns interleaved; the second call of the same children is shown too.
    """
    import subprocess

    pairs = [("numpy", "torch -> numpy"), ("torch", "numpy -> torch")]
    if importlib.util.find_spec("jax") is not None:
        pairs.append(("jax", "numpy -> jax"))
    rows = []
    for dest, name in pairs:
        if torch is None and "torch" in name:
            continue
        best = {("bridge", 0): float("inf"), ("bridge", 1): float("inf"), ("own", 0): float("inf"),
                ("own", 1): float("inf")}  # fmt: skip
        for _ in range(max(repeat, 5)):
            for route in ("bridge", "own"):
                out = subprocess.run([sys.executable, "-c", FIRST_CALL_CHILD, dest, route], check=True,
                                     capture_output=True, text=True).stdout.split()  # fmt: skip
                for i in (0, 1):
                    best[route, i] = min(best[route, i], float(out[i]))
        ratio = best["bridge", 0] / best["own", 0]
        rows.append({
            "name": f"first call, fresh interpreter: convert({name}) | {dest}'s from_dlpack",
            "bridge_s": best["bridge", 0], "numpy_s": best["own", 0], "torch_s": None, "tvm_s": None,
            "bridge/numpy": ratio, "bridge/torch": None, "bridge/tvm": None,
            "second_bridge_s": best["bridge", 1], "second_own_s": best["own", 1],
            "target": None, "target_vs": "numpy", "status": None,
        })  # fmt: skip
    return rows


def size_independence(repeat: int, min_time: float) -> list[dict[str, Any]]:
    """Zero-copy proof: the same exchanges at 1 KiB and 1 GiB take the same time
    (within 1.1x) and 10,000 of them at 1 GiB add no resident memory."""
    small = np.ones(256, dtype=np.float32)
    big = np.ones(1 << 28, dtype=np.float32)  # 1 GiB, touched so it is resident
    out = []
    for name, op in (("export np.from_dlpack(bridge)", lambda x: np.from_dlpack(x)),
                     ("import bridge.from_dlpack(ndarray)", None),
                     ("np.asarray(bridge)", lambda x: np.asarray(x))):  # fmt: skip
        times = {}
        for label, arr in (("1 KiB", small), ("1 GiB", big)):
            if op is None:
                fn = lambda arr=arr: bridge.from_dlpack(arr)  # noqa: E731
            else:
                src = bridge.from_numpy(arr)
                fn = lambda src=src, op=op: op(src)  # noqa: E731
            times[label] = best_per_call(fn, repeat, min_time)
            if label == "1 GiB":
                before = rss_bytes()
                for _ in range(10_000):
                    fn()
                grown = rss_bytes() - before
        ratio = times["1 GiB"] / times["1 KiB"]
        out.append({"name": name, "1KiB_s": times["1 KiB"], "1GiB_s": times["1 GiB"],
                    "ratio": ratio, "rss_growth_bytes": grown,
                    "status": "ok" if ratio <= 1.1 and grown < (1 << 20) else "MISS"})  # fmt: skip
    del big
    return out


GROUPS: list[Callable[[], list[Row]]] = [
    copy_rows,
    overlap_rows,
    core_rows,
    dlpack_rows,
    array_interface_rows,
    arrow_rows,
    convert_rows,
    convert_pair_rows,
    convert_source_rows,
    batch_rows,
    table_rows,
    polars_rows,
    fix_rows,
]


def _calibrate(timer: timeit.Timer, min_time: float) -> tuple[int, float]:
    """Calls per repeat so that one lasts ``min_time`` (like Timer.autorange), and that first time."""
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= min_time:
            return number, elapsed
        number = max(number * 2, int(number * min_time / max(elapsed, 1e-9) * 1.1))


def best_per_call(fn: Callable[[], Any], repeat: int, min_time: float) -> float:
    """Best per-call time in seconds over ``repeat`` repeats of ``min_time`` seconds each."""
    timer = timeit.Timer(fn)
    number, elapsed = _calibrate(timer, min_time)
    return min([elapsed, *timer.repeat(repeat=repeat - 1, number=number)]) / number


def best_per_call_interleaved(fns: dict[str, Callable[[], Any] | None], repeat: int,
                              min_time: float) -> dict[str, float | None]:  # fmt: skip
    """best_per_call of each function, the repeats taken in turns (one of each per
    round), so that a change in the machine's load meets every column alike."""
    timers = {k: timeit.Timer(fn) for k, fn in fns.items() if fn is not None}
    numbers, best = {}, {}
    for k, timer in timers.items():
        numbers[k], elapsed = _calibrate(timer, min_time)
        best[k] = elapsed / numbers[k]
    for _ in range(repeat - 1):
        for k, timer in timers.items():
            best[k] = min(best[k], timer.timeit(numbers[k]) / numbers[k])
    return {k: best.get(k) for k in fns}


def fmt_time(s: float | None) -> str:
    if s is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def versions(torch_threads: int | None) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "bridge": bridge.__version__,
        "numpy": np.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch_threads,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--repeat", type=int, default=5, help="timeit repeats, best taken (default 5)")
    p.add_argument("--min-time", type=float, default=0.2,
                   help="seconds each repeat lasts at least (default 0.2)")  # fmt: skip
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads (default 1, as NumPy copies)")  # fmt: skip
    p.add_argument("-k", metavar="SUBSTRING", help="run only rows whose name contains this")
    args = p.parse_args(argv)

    if torch is not None:
        torch.set_num_threads(args.torch_threads)
    meta = versions(args.torch_threads if torch is not None else None)
    print(f"bridge {meta['bridge']}  numpy {meta['numpy']}  torch {meta['torch'] or 'n/a'}"
          f"{'' if torch is None else f' ({args.torch_threads} thread(s))'}  "
          f"python {meta['python']}")  # fmt: skip
    print(f"{meta['platform']}, {meta['cpu_count']} CPUs; best of {args.repeat} x >= "
          f"{args.min_time}s per call\n")  # fmt: skip

    results = []
    for group in GROUPS:
        for row in group():
            if args.k and args.k not in row.name:
                continue
            if row.check is not None:
                row.check()
            times = best_per_call_interleaved(
                {"bridge": row.bridge_fn, "numpy": row.numpy_fn, "torch": row.torch_fn, "tvm": row.tvm_fn,
                 "plain": row.plain_fn}, args.repeat, args.min_time)  # fmt: skip
            b, n, th, tv, pl = times["bridge"], times["numpy"], times["torch"], times["tvm"], times["plain"]
            r_np = b / n if b is not None and n else None
            r_th = b / th if b is not None and th else None
            r_tv = b / tv if b is not None and tv else None
            r_pl = b / pl if b is not None and pl else None
            ratios = {"numpy": r_np, "torch": r_th, "tvm": r_tv, "plain": r_pl}
            checks = ([(row.target_vs, row.target)] if row.target is not None else []) + list(row.more_targets)
            parts = [f"{'ok' if ratios[vs] <= goal else 'MISS'} (br/{vs[:5]} <= {goal:.2f}x)"
                     for vs, goal in checks if ratios[vs] is not None]  # fmt: skip
            status = "; ".join(parts)
            results.append({
                "name": row.name, "bridge_s": b, "numpy_s": n, "torch_s": th, "tvm_s": tv, "plain_s": pl,
                "bridge/numpy": r_np, "bridge/torch": r_th, "bridge/tvm": r_tv, "bridge/plain": r_pl,
                "target": row.target, "target_vs": row.target_vs, "status": status or None,
            })  # fmt: skip
            print_row(results[-1], first=len(results) == 1)

    if not args.k or "size" in args.k:
        print("\nzero-copy: the same exchange at 1 KiB and 1 GiB (10,000 calls at 1 GiB for RSS)")
        for r in size_independence(args.repeat, args.min_time):
            print(f"  {r['name']:<36} 1 KiB {fmt_time(r['1KiB_s']):>9}  1 GiB "
                  f"{fmt_time(r['1GiB_s']):>9}  ratio {r['ratio']:.2f}x  RSS "
                  f"+{r['rss_growth_bytes'] // 1024} KiB  {r['status']} (<= 1.10x, < 1 MiB)")  # fmt: skip
            results.append({"name": "size: " + r["name"], **r})

    if not args.k or "import" in args.k:
        print("\nimport time (python -c 'import x' in fresh interpreters, start-up subtracted)")
        for r in import_rows(args.repeat):
            results.append(r)
            print_row(r, first=False)

    if not args.k or "first" in args.k:
        print("\nfirst call (fresh interpreters; the 'numpy' column is the destination's own from_dlpack)")
        for r in first_call_rows(args.repeat):
            results.append(r)
            print_row(r, first=False)
            print(f"  {'':<64}then: convert {fmt_time(r['second_bridge_s'])}, "
                  f"own {fmt_time(r['second_own_s'])}")  # fmt: skip

    if not args.k or "process" in args.k:
        from bench_processes import process_rows

        print("\nacross processes and machines (best of the trips; NumPy's and torch's own routes)")
        for r in process_rows(args.repeat):
            results.append(r)
            print_row(r, first=False)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")
    missed = [r["name"] for r in results if r.get("status") and "MISS" in r["status"]]
    if missed:
        print(f"\ntarget missed: {', '.join(missed)}")
    return 0


COLUMNS = (("benchmark", 66), ("bridge", 9), ("numpy", 9), ("torch", 9), ("tvm-ffi", 9), ("plain", 9),
           ("br/np", 6), ("br/torch", 8), ("br/tvm", 6), ("br/plain", 8), ("target", 0))  # fmt: skip


def print_row(r: dict[str, Any], first: bool) -> None:
    if first:
        print("  ".join(f"{h:<{w}}" for h, w in COLUMNS).rstrip())
        print("  ".join("-" * (w or 12) for _, w in COLUMNS))
    cells = (r["name"], fmt_time(r["bridge_s"]), fmt_time(r["numpy_s"]), fmt_time(r["torch_s"]),
             fmt_time(r["tvm_s"]), fmt_time(r.get("plain_s")), fmt_ratio(r["bridge/numpy"]),
             fmt_ratio(r["bridge/torch"]), fmt_ratio(r["bridge/tvm"]), fmt_ratio(r.get("bridge/plain")),
             r["status"] or "")  # fmt: skip
    print("  ".join(f"{c:<{w}}" for c, (_, w) in zip(cells, COLUMNS)).rstrip(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
