"""The interop matrix: every installed producer x consumer x protocol, checked.

``python -m bridge matrix`` (and the ``bridge`` console script) finds the peers
installed (numpy, torch, jax, pyarrow, polars, nanoarrow, tvm-ffi, pydlpack,
cupy, and bridge itself), and for each producer hands tensors of a grid of
cases (dtypes x layouts x read-only) to each consumer through each protocol it
speaks. Every cell is checked, not assumed:

* values equal (bit for bit, NaNs included);
* zero-copy proven by address (the consumer's first element is the producer's)
  and, where both sides are writable, by a write seen on the other side;
* read-only not lost (a read-only source must not come back writable);
* for cells with bridge on either side, the DLPack/Arrow deleters balance
  (bridge's C counters) once the consumer's object dies;
* a refusal is an exception of a type the protocols allow.

Verdicts: ``zero-copy``, ``copy``, ``unverified`` (the exchange worked but the
checker cannot observe the result's address or values), ``refused``,
``violation`` (with the rule),
``crash`` (each producer runs in its own subprocess, so a crash ends only the
cell it happened in; the run resumes after it), and ``n/a`` when a producer
cannot make a case (torch has no negative strides, Arrow has no 2-d arrays).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes

__all__ = ["Cell", "run_matrix", "plan", "consumers", "bridge_at_fault", "main", "PEERS",
           "LAYOUTS", "DTYPES", "DEFAULT_DTYPES", "PROTOCOLS"]  # fmt: skip

LAYOUTS = (
    "contiguous", "transposed", "stepped", "negative", "broadcast", "size1-odd", "0-d", "zero-size",
)  # fmt: skip
# Every bridge dtype can be asked for with --dtype.
DTYPES = tuple(d.name for d in _dtypes.all_dtypes())
# The default grid: one dtype of each kind the protocols treat differently.
DEFAULT_DTYPES = ("bool", "uint8", "int64", "float16", "bfloat16", "float32", "complex64")
PROTOCOLS = ("dlpack", "array-interface", "buffer", "arrow", "cuda-array-interface")
PEERS = ("bridge", "numpy", "torch", "jax", "pyarrow", "polars", "nanoarrow", "tvm_ffi",
         "pydlpack", "cupy")  # fmt: skip
_MODULE = {"pydlpack": "dlpack", "tvm_ffi": "tvm_ffi"}
# Exceptions a consumer may raise to refuse an exchange (BufferError, TypeError,
# ValueError, NotImplementedError and RuntimeError are the DLPack / array API /
# Arrow choices; jax raises its own runtime error).
_REFUSALS = (BufferError, TypeError, ValueError, NotImplementedError, RuntimeError)


@dataclasses.dataclass
class Cell:
    """One exchange: ``producer`` makes ``case`` and ``consumer`` takes it via ``protocol``."""

    producer: str
    consumer: str
    protocol: str
    dtype: str
    layout: str
    readonly: bool
    verdict: str = ""
    detail: str = ""

    @property
    def case(self) -> str:
        """The case label, e.g. ``float32/transposed/ro``."""
        return f"{self.dtype}/{self.layout}{'/ro' if self.readonly else ''}"

    def key(self) -> tuple[str, str, str, str, str, bool]:
        """A stable identity for the cell."""
        return (self.producer, self.consumer, self.protocol, self.dtype, self.layout, self.readonly)


def available(peer: str) -> bool:
    """Whether ``peer`` is importable here (cupy also needs a CUDA device)."""
    mod = _MODULE.get(peer, peer)
    if importlib.util.find_spec(mod) is None:
        return False
    if peer == "cupy":
        try:
            import cupy

            return bool(cupy.cuda.runtime.getDeviceCount())
        except Exception:  # no driver or no device
            return False
    return True


# ------------------------------------------------------------ the cases


def _np_dtype(name: str) -> Any:
    return _dtypes.get_dtype(name).numpy_dtype  # bfloat16/float8/6/4 through ml_dtypes


def reference(dtype: str, layout: str) -> np.ndarray[Any, Any]:
    """The NumPy view that defines a case's values and layout (writable)."""
    base = np.arange(48).reshape(4, 12)
    base = (base % 2).astype(bool) if dtype == "bool" else base.astype(_np_dtype(dtype))
    view: np.ndarray[Any, Any] = _apply_layout(base, layout, np)
    return view


def _apply_layout(x: Any, layout: str, lib: Any) -> Any:
    """``layout`` applied to the 4x12 base ``x`` of a library with NumPy-like views."""
    if layout == "contiguous":
        return x
    if layout == "transposed":
        return x.T
    if layout == "stepped":
        return x[::2, 1::3]
    if layout == "negative":
        return x[::-1, ::-2]
    if layout == "broadcast":
        row = x[0]
        return np.broadcast_to(row, (3, 12)) if lib is np else row.expand(3, 12)
    if layout == "size1-odd":
        isz = x.itemsize if lib is np else 1
        if lib is np:
            return np.lib.stride_tricks.as_strided(x, (4, 1), (12 * isz, 7 * isz))
        return x.as_strided((4, 1), (12, 7))
    if layout == "0-d":
        return x[1, 1] if lib is not np else x[1:2, 1:2].reshape(())
    if layout == "zero-size":
        return x[:, 5:5]
    raise ValueError(f"unknown layout {layout!r}")


class NotMade(Exception):
    """A producer cannot make this case (the cell is n/a)."""


# ------------------------------------------------------------ producers


def produce(peer: str, dtype: str, layout: str, readonly: bool) -> tuple[Any, np.ndarray[Any, Any]]:
    """``(object, expected values)`` for a case from ``peer``; NotMade if it cannot."""
    ref = reference(dtype, layout)
    if peer == "numpy":
        if readonly:
            ref = ref.view()
            ref.flags.writeable = False
        return ref, ref.copy()
    if peer == "bridge":
        import bridge

        if readonly:  # bridge tensors are read-only when their memory was lent read-only
            frozen = ref.view()
            frozen.flags.writeable = False
            return bridge.from_numpy(frozen), ref.copy()
        base = bridge.tensor(reference(dtype, "contiguous"))  # memory bridge allocated
        return _apply_layout(base, layout, bridge), ref.copy()
    if readonly:
        raise NotMade(f"{peer} has no read-only tensors")
    if peer == "torch":
        import torch

        if dtype in ("uint64",) and not hasattr(torch, "uint64"):
            raise NotMade("no uint64")
        if layout == "negative":
            raise NotMade("torch has no negative strides")
        if dtype == "bfloat16":
            base = torch.from_numpy(reference("float32", "contiguous").copy()).to(torch.bfloat16)
        else:
            base = torch.from_numpy(reference(dtype, "contiguous").copy())
        return _apply_layout(base, layout, torch), ref.copy()
    if peer == "jax":
        import jax.numpy as jnp

        if layout not in ("contiguous", "0-d", "zero-size"):
            raise NotMade("jax arrays are always compact")
        return jnp.asarray(np.array(ref, copy=True)), ref.copy()  # (ascontiguousarray makes 0-d 1-d)
    if peer in ("pyarrow", "polars", "nanoarrow"):
        if layout != "contiguous" or dtype in ("bfloat16", "complex64"):
            raise NotMade("Arrow arrays are 1-d, of Arrow's types")
        flat = np.ascontiguousarray(ref).reshape(-1)
        import pyarrow as pa

        arr = pa.array(flat)
        if peer == "polars":
            import polars as pl

            return pl.Series(flat), flat.copy()
        if peer == "nanoarrow":
            import nanoarrow as na

            return na.c_array(arr), flat.copy()
        return arr, flat.copy()
    if peer == "tvm_ffi":
        import tvm_ffi

        if dtype == "bfloat16":
            raise NotMade("tvm-ffi takes bfloat16 only from DLPack producers that have it")
        return tvm_ffi.from_dlpack(ref), ref.copy()
    if peer == "pydlpack":
        import dlpack

        return dlpack.asdlpack(ref), ref.copy()
    if peer == "cupy":
        import cupy

        return cupy.asarray(ref), ref.copy()
    raise NotMade(f"unknown producer {peer}")


# ------------------------------------------------------------ consumers


@dataclasses.dataclass
class Consumer:
    """How one library takes an object through one protocol, and how to inspect the result."""

    peer: str
    protocol: str
    take: Callable[[Any], Any]
    values: Callable[[Any], np.ndarray[Any, Any]]
    address: Callable[[Any], int | None]
    writable: Callable[[Any], bool]


def _np_address(a: Any) -> int:
    return int(np.asarray(a).__array_interface__["data"][0])


def _arrow_address(a: Any) -> int | None:
    buf = a.buffers()[1]
    return None if buf is None else buf.address + a.offset * a.type.bit_width // 8


def consumers(only: set[str] | None = None) -> list[Consumer]:
    """Every (library, protocol) entry point installed here (of the ``only``
    libraries, when given: the others are not even imported)."""
    out: list[Consumer] = []

    def want(peer: str) -> bool:
        return (only is None or peer in only) and available(peer)

    if want("bridge"):
        import bridge

        def b_vals(t: Any) -> np.ndarray[Any, Any]:
            return np.array(t.numpy(), copy=True)

        out += [
            Consumer("bridge", "dlpack", bridge.from_dlpack, b_vals, lambda t: t.data_ptr(),
                     lambda t: not t.is_readonly),
            Consumer("bridge", "array-interface", bridge.asarray, b_vals, lambda t: t.data_ptr(),
                     lambda t: not t.is_readonly),
            Consumer("bridge", "arrow", bridge.from_arrow, b_vals, lambda t: t.data_ptr(),
                     lambda t: not t.is_readonly),
        ]  # fmt: skip
    out += [] if not want("numpy") else [
        Consumer("numpy", "dlpack", np.from_dlpack, lambda a: np.array(a, copy=True), _np_address,
                 lambda a: bool(a.flags.writeable)),
        Consumer("numpy", "array-interface", np.asarray, lambda a: np.array(a, copy=True),
                 _np_address, lambda a: bool(a.flags.writeable)),
        Consumer("numpy", "buffer", lambda o: np.asarray(memoryview(o)),
                 lambda a: np.array(a, copy=True), _np_address, lambda a: bool(a.flags.writeable)),
    ]  # fmt: skip
    if want("torch"):
        import torch

        def t_vals(x: Any) -> np.ndarray[Any, Any]:
            if x.dtype == torch.bfloat16:
                import ml_dtypes

                return np.array(x.float().numpy().astype(ml_dtypes.bfloat16), copy=True)
            return np.array(x.detach().cpu().numpy(), copy=True)

        out += [
            Consumer("torch", "dlpack", torch.from_dlpack, t_vals, lambda x: x.data_ptr(),
                     lambda x: True),
            Consumer("torch", "array-interface", torch.as_tensor, t_vals, lambda x: x.data_ptr(),
                     lambda x: True),
        ]  # fmt: skip
    if want("jax"):
        import jax

        out.append(Consumer("jax", "dlpack", jax.dlpack.from_dlpack, lambda x: np.array(x, copy=True),
                            lambda x: x.unsafe_buffer_pointer(), lambda x: False))  # fmt: skip
    if want("pyarrow"):
        import pyarrow as pa

        def pa_vals(a: Any) -> np.ndarray[Any, Any]:
            if hasattr(a, "to_numpy_ndarray"):  # FixedShapeTensorArray: N-d
                return np.array(a.to_numpy_ndarray(), copy=True)
            if isinstance(a, pa.ExtensionArray):  # arrow.bool8: its int8 storage
                return np.array(a.storage.to_numpy(zero_copy_only=False), copy=True)
            return np.array(a.to_numpy(zero_copy_only=False), copy=True)

        def pa_addr(a: Any) -> int | None:
            storage = getattr(a, "storage", None)
            if storage is not None:  # extension array: the values of its FixedSizeList
                values = storage.values
                return _arrow_address(values)
            return _arrow_address(a)

        out.append(Consumer("pyarrow", "arrow", pa.array, pa_vals, pa_addr, lambda a: False))
    if want("polars"):
        import polars as pl

        out.append(Consumer("polars", "arrow", pl.Series, lambda s: np.array(s.to_numpy(), copy=True),
                            lambda s: None, lambda s: False))  # fmt: skip
    if want("nanoarrow"):
        import nanoarrow as na

        def na_vals(c: Any) -> np.ndarray[Any, Any]:
            import pyarrow as pa

            a = pa.array(c)
            if hasattr(a, "to_numpy_ndarray"):
                return np.array(a.to_numpy_ndarray(), copy=True)
            if isinstance(a, pa.ExtensionArray):
                return np.array(a.storage.to_numpy(zero_copy_only=False), copy=True)
            return np.array(a.to_numpy(zero_copy_only=False), copy=True)

        def na_addr(c: Any) -> int | None:
            view = c.view()
            width: int = view.layout.element_size_bits[1] // 8
            return int(view.buffer(1).address) + int(c.offset) * width

        out.append(Consumer("nanoarrow", "arrow", na.c_array, na_vals, na_addr, lambda c: False))
    if want("tvm_ffi"):
        import tvm_ffi

        out.append(Consumer("tvm_ffi", "dlpack", tvm_ffi.from_dlpack,
                            lambda x: np.array(np.from_dlpack(x), copy=True),
                            lambda x: _np_address(np.from_dlpack(x)), lambda x: True))  # fmt: skip
    if want("cupy"):
        import cupy

        out += [
            Consumer("cupy", "dlpack", cupy.from_dlpack, cupy.asnumpy, lambda x: x.data.ptr,
                     lambda x: True),
            Consumer("cupy", "cuda-array-interface", cupy.asarray, cupy.asnumpy,
                     lambda x: x.data.ptr, lambda x: True),
        ]  # fmt: skip
    return out


# ------------------------------------------------------------ one cell


def _producer_address(obj: Any) -> int | None:
    for probe in (
        lambda o: o.data_ptr(),
        lambda o: o.__array_interface__["data"][0],
        lambda o: o.unsafe_buffer_pointer(),
        lambda o: _arrow_address(o),
    ):
        try:
            value = probe(obj)
        except Exception:
            continue
        if isinstance(value, int):
            return value
    return None


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype == object and b.dtype != object:  # e.g. polars' object columns
        try:
            a = np.asarray(a.tolist(), dtype=b.dtype).reshape(b.shape)
        except (TypeError, ValueError):
            return False
    if a.size == 0:
        return True
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype.itemsize != b.dtype.itemsize:
        return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64)))
    return a.tobytes() == b.tobytes()


def _counters() -> tuple[int, int, int, int]:
    if "bridge" not in sys.modules:
        return (0, 0, 0, 0)
    from bridge.core.native import _C

    s = _C.stats()
    return (s["exports"] - s["export_deleters"], s["imports"] - s["import_releases"],
            s["arrow_exports"] - s["arrow_releases"], s["arrow_imports"] - s["arrow_import_releases"])  # fmt: skip


_SPEAKS: dict[str, Callable[[Any], bool]] = {
    "dlpack": lambda o: hasattr(o, "__dlpack__"),
    "arrow": lambda o: any(hasattr(o, m) for m in (
        "__arrow_c_array__", "__arrow_c_stream__", "__arrow_c_device_array__")),
    "cuda-array-interface": lambda o: hasattr(o, "__cuda_array_interface__"),
}  # fmt: skip


def run_cell(cell: Cell, consumer: Consumer, on_made: Callable[[], None] | None = None) -> Cell:
    """Run one exchange and fill in its verdict and detail (``on_made`` is
    called once the producer has made its object, before the consumer runs)."""
    try:
        obj, expected = produce(cell.producer, cell.dtype, cell.layout, cell.readonly)
    except NotMade as e:
        cell.verdict, cell.detail = "n/a", str(e)
        return cell
    except Exception as e:  # the producer library refuses to make this case
        cell.verdict = "n/a"
        cell.detail = f"{cell.producer} refused to make it: {type(e).__name__}: {str(e)[:100]}"
        return cell
    if on_made is not None:
        on_made()
    speaks = _SPEAKS.get(cell.protocol)
    if speaks is not None and not speaks(obj) and not (
        cell.protocol == "arrow" and isinstance(obj, np.ndarray)  # Arrow consumers take buffers
    ):
        cell.verdict, cell.detail = "n/a", f"{cell.producer} does not speak {cell.protocol}"
        return cell
    src_addr = _producer_address(obj)
    gc.collect(0)  # settle earlier cells' objects before counting this one's
    before = _counters()
    try:
        result = consumer.take(obj)
    except _REFUSALS as e:
        cell.verdict, cell.detail = "refused", f"{type(e).__name__}: {str(e)[:120]}"
        return cell
    except Exception as e:  # a refusal of an unexpected type (jax's runtime errors among them)
        kind = type(e).__name__
        allowed = "Jax" in kind or "Arrow" in kind or "Polars" in kind or "Compute" in kind
        cell.verdict = "refused" if allowed else "violation"
        cell.detail = f"{kind}: {str(e)[:120]}" if allowed else (
            f"unexpected exception type {kind}: {str(e)[:100]}"
        )
        return cell
    try:
        got = consumer.values(result)
    except Exception as e:  # the exchange worked; the checker cannot read this result type
        cell.verdict = "unverified"
        cell.detail = f"result not readable by the checker: {type(e).__name__}: {str(e)[:80]}"
        return cell
    got = np.asarray(got)
    if got.dtype == object and got.shape == () and expected.dtype != object:
        cell.verdict = "refused"
        cell.detail = "not an array to this consumer: it was wrapped as a Python object"
        return cell
    if got.ndim != expected.ndim and got.size == expected.size and consumer.protocol == "arrow":
        # Arrow consumers without a tensor type take N-d input as a flat array.
        cell.detail = f"taken as a {got.ndim}-d array of {got.size} values"
        expected = expected.reshape(got.shape)
    if not _same(got, expected):
        cell.verdict, cell.detail = "violation", "values differ"
        return cell
    if cell.readonly and consumer.writable(result) and consumer.peer in ("numpy", "bridge"):
        cell.verdict, cell.detail = "violation", "read-only source came back writable"
        return cell
    if cell.readonly and consumer.writable(result):
        cell.detail = f"read-only lost: {consumer.peer} has no read-only tensors"
    dst_addr = None
    try:
        dst_addr = consumer.address(result)
    except Exception:
        dst_addr = None
    empty = expected.size == 0
    if empty:
        cell.verdict = "zero-copy" if dst_addr == src_addr else "copy"
        cell.detail = cell.detail or "empty tensor: nothing to share"
    elif src_addr is None or dst_addr is None:
        cell.verdict = "unverified"
        cell.detail = cell.detail or "addresses not observable; values equal"
    elif dst_addr == src_addr:
        cell.verdict = "zero-copy"
    else:
        cell.verdict = "copy"
    del result, got  # the producer stays alive: only the consumer's references must go
    gc.collect(0)
    after = _counters()
    for _ in range(20):  # some consumers (jax) free their buffers asynchronously
        if after == before:
            break
        time.sleep(0.005)
        gc.collect()
        after = _counters()
    if after != before:
        cell.verdict = "violation"
        cell.detail = f"bridge deleters unbalanced after the consumer died: {before} -> {after}"
    return cell


# ------------------------------------------------------------ the grid


def plan(
    producers: Iterable[str], consumer_list: list[Consumer], dtypes: Iterable[str],
    protocols: Iterable[str] | None = None,
) -> list[Cell]:  # fmt: skip
    """Every cell for the given producers, consumers, dtypes and protocols."""
    cells = []
    protocols = set(protocols) if protocols else None
    for p in producers:
        for c in consumer_list:
            if protocols and c.protocol not in protocols:
                continue
            for dt in dtypes:
                for layout in LAYOUTS:
                    for ro in (False, True):
                        if ro and p not in ("numpy", "bridge"):
                            continue
                        cells.append(Cell(p, c.peer, c.protocol, dt, layout, ro))
    return cells


def _worker(cells: list[dict[str, Any]]) -> None:
    """Subprocess body: run cells, one JSON line before ('start') and after each.
    Consumer libraries are imported when their first cell comes."""
    table: dict[tuple[str, str], Consumer] = {}
    loaded: set[str] = set()
    for raw in cells:
        cell = Cell(**raw)
        if cell.consumer not in loaded:
            loaded.add(cell.consumer)
            table.update({(c.peer, c.protocol): c for c in consumers({cell.consumer})})
            # Freezing what the import made keeps each cell's gc.collect() from
            # walking torch's and jax's heaps.
            gc.collect()
            gc.freeze()
        print(json.dumps({"start": cell.key()}), flush=True)
        consumer = table.get((cell.consumer, cell.protocol))
        if consumer is None:
            cell.verdict, cell.detail = "n/a", "consumer not installed"
        else:
            run_cell(cell, consumer, lambda: print(json.dumps({"made": True}), flush=True))
        print(json.dumps({"done": dataclasses.asdict(cell)}), flush=True)


def run_matrix(cells: list[Cell], progress: Callable[[Cell], None] | None = None) -> list[Cell]:
    """Run ``cells``: one subprocess per producer, producers in parallel (one
    per CPU), consumer libraries imported as their cells come. A crash marks
    the cell it happened in and the rest run in a fresh process; when the
    producer itself crashed making a case, the other cells of that case are
    marked without being run again (making the case does not depend on the
    consumer)."""
    groups: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        groups[c.producer].append(c)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1)) as pool:
        parts = list(pool.map(lambda todo: _run_group(todo, progress), groups.values()))
    return [c for part in parts for c in part]


def _run_group(todo: list[Cell], progress: Callable[[Cell], None] | None) -> list[Cell]:
    done: list[Cell] = []
    broken: dict[tuple[str, str, bool], str] = {}  # cases the producer crashed making
    while todo:
        ready = []
        while todo and (todo[0].dtype, todo[0].layout, todo[0].readonly) in broken:
            c = todo.pop(0)
            c.verdict = "crash"
            c.detail = "the producer crashed making this case: " + broken[(c.dtype, c.layout, c.readonly)]
            ready.append(c)
        for c in ready:
            done.append(c)
            if progress:
                progress(c)
        if not todo:
            break
        finished, crash = _run_worker(todo, progress)
        done += finished
        todo = todo[len(finished):]
        if crash is not None and todo:
            crashed = todo.pop(0)
            made, why = crash
            crashed.verdict = "crash"
            crashed.detail = why if made else "the producer crashed making this case: " + why
            if not made:
                broken[(crashed.dtype, crashed.layout, crashed.readonly)] = why
            done.append(crashed)
            if progress:
                progress(crashed)
    return done


_WORKER = "import sys, bridge.kit.matrix as m, json; m._worker(json.loads(sys.stdin.read()))"


def _run_worker(
    cells: list[Cell], progress: Callable[[Cell], None] | None, code: str = _WORKER
) -> tuple[list[Cell], tuple[bool, str] | None]:
    """Run ``cells`` in one child process (``python -c code``, reading the cells
    as JSON on stdin); returns the finished cells and, when the child died
    before the end, whether the producer had made its object and why."""
    payload = json.dumps([dataclasses.asdict(c) for c in cells])
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
    # stderr goes to a file, not a pipe: a child that writes more than a pipe
    # holds to stderr while this reads its stdout would otherwise block both.
    errfile = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errfile, text=True, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    finished: list[Cell] = []
    made = False
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "start" in msg:
            made = False
        elif "made" in msg:
            made = True
        elif "done" in msg:
            cell = Cell(**msg["done"])
            finished.append(cell)
            if progress:
                progress(cell)
    rc = proc.wait()
    with errfile:
        errfile.seek(0)
        err = errfile.read()
    if len(finished) == len(cells):
        return finished, None
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    why = next((ln for ln in lines if "Error" in ln or "error" in ln or "Abort" in ln), lines[-1] if lines else "")
    return finished, (made, f"process died (exit {rc}): {why.strip()[:140]}")


# ------------------------------------------------------------ output


VERDICTS = ("zero-copy", "copy", "unverified", "refused", "violation", "crash", "n/a")


def summarise(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per (producer, consumer, protocol) with the count of each verdict."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for c in cells:
        rows[(c.producer, c.consumer, c.protocol)][c.verdict] += 1
    return [{"producer": p, "consumer": c, "protocol": pr, **{v: n[v] for v in VERDICTS}}
            for (p, c, pr), n in sorted(rows.items())]  # fmt: skip


def to_markdown(cells: list[Cell]) -> str:
    """A Markdown report: the summary table, then every violation and crash."""
    lines = ["| producer | consumer | protocol | " + " | ".join(VERDICTS) + " |",
             "|---|---|---|" + "---|" * len(VERDICTS)]  # fmt: skip
    for r in summarise(cells):
        lines.append(f"| {r['producer']} | {r['consumer']} | {r['protocol']} | "
                     + " | ".join(str(r[v] or "") for v in VERDICTS) + " |")  # fmt: skip
    bad = [c for c in cells if c.verdict in ("violation", "crash")]
    if bad:
        lines += ["", "## Violations and crashes", "", "| producer | consumer | protocol | case | verdict | detail |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for c in bad:
            lines.append(f"| {c.producer} | {c.consumer} | {c.protocol} | {c.case} | {c.verdict} | "
                         f"{c.detail.replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def print_table(cells: list[Cell]) -> None:
    """The summary for a terminal (rich when installed), then violations and crashes."""
    rows = summarise(cells)
    bad = [c for c in cells if c.verdict in ("violation", "crash")]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(to_markdown(cells))
        return
    colours = {"zero-copy": "green", "copy": "yellow", "unverified": "yellow", "refused": "blue",
               "violation": "red", "crash": "bold red", "n/a": "dim"}  # fmt: skip
    table = Table(title="bridge interop matrix: cells per verdict")
    for col in ("producer", "consumer", "protocol"):
        table.add_column(col)
    for v in VERDICTS:
        table.add_column(v, justify="right", style=colours[v])
    for r in rows:
        table.add_row(r["producer"], r["consumer"], r["protocol"], *(str(r[v] or "") for v in VERDICTS))
    console = Console(width=max(Console().width, 140))
    console.print(table)
    if bad:
        detail = Table(title="violations and crashes")
        for col in ("producer", "consumer", "protocol", "case", "verdict", "detail"):
            detail.add_column(col)
        for c in bad:
            detail.add_row(c.producer, c.consumer, c.protocol, c.case, c.verdict, c.detail)
        console.print(detail)


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    """``python -m bridge matrix``: run the matrix and print it. Exit code 1
    only for bridge's own failures (violations or crashes in cells where
    bridge produces or consumes)."""
    ap = argparse.ArgumentParser(prog="bridge matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--producer", action="append", help="only these producers (comma-separated)")
    ap.add_argument("--consumer", action="append", help="only these consumers")
    ap.add_argument("--protocol", action="append", help=f"only these protocols ({', '.join(PROTOCOLS)})")
    ap.add_argument("--dtype", action="append",
                    help=f"dtypes, from {', '.join(DTYPES)} (default: {', '.join(DEFAULT_DTYPES)})")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print the cells as JSON on stdout")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown report")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--list", action="store_true",
                    help="list the valid peer, protocol and dtype names, and which peers are installed")  # fmt: skip
    args = ap.parse_args(argv)
    if args.list:
        print(names_listing())
        return 0
    chosen = {}
    for option, valid in (("producer", PEERS), ("consumer", PEERS), ("protocol", PROTOCOLS),
                          ("dtype", DTYPES)):  # fmt: skip
        names = _split(getattr(args, option))
        unknown = [n for n in names or () if n not in valid]
        if unknown:
            ap.error(f"unknown {option} {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
        chosen[option] = names
    producers = [p for p in (chosen["producer"] or PEERS) if available(p)]
    wanted_consumers = set(chosen["consumer"] or PEERS)
    cons = [c for c in consumers() if c.peer in wanted_consumers]
    dtypes = chosen["dtype"] or list(DEFAULT_DTYPES)
    cells = plan(producers, cons, dtypes, chosen["protocol"])
    results = _run_with_progress(cells, quiet=args.no_progress or args.json or args.markdown)
    if args.json:
        json.dump([dataclasses.asdict(c) | {"case": c.case} for c in results], sys.stdout, indent=1)
        print()
    elif args.markdown:
        print(to_markdown(results), end="")
    else:
        print_table(results)
    own = [c for c in results if bridge_at_fault(c)]
    if own and not (args.json or args.markdown):
        print(f"{len(own)} cells are bridge's own failures", file=sys.stderr)
    return 1 if own else 0


def names_listing() -> str:
    """The names the matrix options take (``--list``)."""
    peers = ", ".join(f"{p}{'' if available(p) else ' (not installed)'}" for p in PEERS)
    return (f"peers (--producer, --consumer): {peers}\n"
            f"protocols (--protocol): {', '.join(PROTOCOLS)}\n"
            f"dtypes (--dtype): {', '.join(DTYPES)}\n"
            f"default dtypes: {', '.join(DEFAULT_DTYPES)}")  # fmt: skip


def bridge_at_fault(cell: Cell) -> bool:
    """Whether a violation or crash is bridge's own: bridge consuming anything,
    or bridge producing for bridge or for NumPy (the reference consumer).
    Another consumer crashing on, or misreading, a valid bridge export is
    that consumer's failure, reported but not bridge's."""
    if cell.verdict not in ("violation", "crash"):
        return False
    if cell.detail.startswith("the producer crashed") and cell.producer != "bridge":
        return False
    return cell.consumer == "bridge" or (cell.producer == "bridge" and cell.consumer == "numpy")


def _run_with_progress(cells: list[Cell], quiet: bool) -> list[Cell]:
    if quiet or not sys.stderr.isatty():
        return run_matrix(cells, _dots(len(cells)) if not quiet else None)
    try:
        from rich.progress import Progress
    except ImportError:
        return run_matrix(cells, _dots(len(cells)))
    with Progress(transient=True) as bar:
        task = bar.add_task("exchanging", total=len(cells))
        return run_matrix(cells, lambda c: bar.advance(task))


def _dots(total: int) -> Callable[[Cell], None]:
    seen = iter(range(1, total + 1))

    def tick(cell: Cell) -> None:
        n = next(seen, total)
        if n % 500 == 0 or n == total:
            print(f"  {n}/{total} cells", file=sys.stderr, flush=True)

    return tick


def iter_cells(cells: list[Cell], **where: Any) -> Iterator[Cell]:
    """The cells whose fields equal ``where`` (a small query helper for tests)."""
    for c in cells:
        if all(getattr(c, k) == v for k, v in where.items()):
            yield c


def _import_all() -> None:  # pragma: no cover - used by `python -m bridge matrix --help`
    for p in PEERS:
        if available(p):
            importlib.import_module(_MODULE.get(p, p))
