"""The worker of ``test_convert_differential.py``: one case of
``bridge.convert(source, destination, copy=..., readonly=...)`` made and
checked in a child process, so that a crash (a destination trusting memory it
cannot hold, a kernel reading misaligned memory) fails the case instead of
killing the test run.

The test (the parent) draws a case as plain data (:func:`run` takes it as a
JSON-able dict) and hands it to a :class:`Worker`: a ``python -c`` child that
imports the libraries once and runs case after case, answering each with the
list of problems found (empty: the case passed). A child that dies is
reported with its signal and the case in flight, and a fresh one serves the
next case.

Each case is built in the source library (numpy, bridge, torch, jax, paddle,
tvm_ffi, pyarrow, polars, nanoarrow, mlx, onnxruntime, Python buffers) over a
layout drawn by the parent, and checked through the destination's own API,
never bridge's (except for the bridge destination itself): its dtype, shape
and values against NumPy's reference; its first element's address against
the source's (a zero-copy result shares it; a copy does not and is warned or
refused); read-only memory kept read-only; a write into a copy not reaching
the source; the destination's own computations on it (in this child); and
the result still right after the source is deleted and garbage collected.

What each destination holds is written here once more, from
``docs/convert.md`` (not read from bridge's table):
:data:`differential_sources.RULES`. Where it and bridge disagree the case
fails.

This module runs a case and holds the child and its parent; the dtypes, the
rules and the sources are in ``differential_sources.py``, the reading of a
destination's result and the oracle (what convert must do) in
``differential_destinations.py``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import warnings
from typing import Any

import numpy as np
from differential_destinations import (
    RESULT_TYPES,
    _dotted,
    _new_value,
    compute,
    dest_address,
    dest_dtype,
    dest_shape,
    dest_values,
    destination,
    expect,
    same_library,
    write_first,
)
from differential_sources import RULES, CannotMake, Source, _lib, build, read_source, same_values

# ------------------------------------------------------------------ one case


def _scribble(nbytes: int) -> list[np.ndarray[Any, Any]]:
    """Fresh allocations of about ``nbytes`` filled with a pattern: memory
    freed too early is likely reused by them, and then reads wrong."""
    size = max(nbytes + 256, 64)
    return [np.full(size, 0xA5, np.uint8) for _ in range(8)] + [np.full(size * 2, 0x5A, np.uint8)]


#: The modules each source and destination imports.
_NEEDS = {"numpy-scalar": ("numpy",), "buffer": ("numpy",), "python": ("numpy",), "table": ("pyarrow", "polars"),
          "pyarrow": ("pyarrow", "pyarrow.compute"), "pyarrow-chunked": ("pyarrow",), "pyarrow-tensor": ("pyarrow",),
          "nanoarrow": ("nanoarrow", "pyarrow"), "jax": ("jax", "jax.numpy"), "mlx": ("mlx.core",),
          "polars": ("polars", "pyarrow")}  # fmt: skip
_frozen = 0


def _prepare(case: dict[str, Any]) -> None:
    """Import what the case needs, then freeze everything the imports made
    out of the collector's sight: a full collection (two a case) over torch,
    paddle and jax's objects would take a quarter of a second."""
    global _frozen
    for who in ("bridge", "ml_dtypes", case["src"], case.get("dest", "numpy")):
        for module in _NEEDS.get(who, (who,)):
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    if len(sys.modules) != _frozen:
        gc.collect()
        gc.freeze()
        _frozen = len(sys.modules)


def run(case: dict[str, Any]) -> dict[str, Any]:
    """Make and check one case: ``{"skip": why}`` where its source library
    cannot make it, else ``{"problems": [...], "notes": [...]}``."""
    _prepare(case)
    if _serving:
        import faulthandler

        faulthandler.dump_traceback_later(HANG, exit=True)  # a hang: where it hangs, then the child ends
    if "jax" in (case["src"], case.get("dest")):
        import jax

        jax.config.update("jax_enable_x64", bool(case.get("x64")))
    if case["src"] == "python":
        return _refusal(case, case["value"] if case["value_kind"] != "tuple" else tuple(case["value"]),
                        TypeError, ("holds values, not memory",))  # fmt: skip
    if case["src"] == "table":
        return _table_case(case, _table(case["table"]))
    try:
        obj, src, ref = build(case)
    except CannotMake as why:
        return {"skip": str(why)}
    if case.get("nulls"):
        return _refusal(case, obj, ValueError, ("null",))
    STATS.clear()
    problems = _check(case, obj, src, ref)
    return {"problems": problems, "notes": [f"source: {src}"], "stats": dict(STATS)}


#: What the last case did (for the notes): refused, shared or copied, and whether a write was tried.
STATS: dict[str, Any] = {}


def _args(case: dict[str, Any]) -> dict[str, Any]:
    """``copy=`` and ``readonly=`` as the case passes them: Python's values, or
    NumPy's ``bool_`` and ``str_`` of them (which convert reads alike)."""
    copy, policy = case["copy"], case["readonly_policy"]
    if case.get("numpy_args"):
        copy, policy = (None if copy is None else np.bool_(copy)), np.str_(policy)
    return {"copy": copy, "readonly": policy}


def _table(kind: str) -> Any:
    if kind == "pandas-int-labels":  # labels that are not str: the dict's keys are the labels
        return _lib("pandas").DataFrame({0: [1.0, 2.0], 1: [3, 4]})
    if kind == "polars":
        return _lib("polars").DataFrame({"a": [1.0, 2.0], "b": [1, 2]})
    pa = _lib("pyarrow")
    return pa.table({"a": [1.0, 2.0]}) if kind == "pyarrow" else pa.record_batch({"a": [1.0, 2.0]})


def _table_case(case: dict[str, Any], table: Any) -> dict[str, Any]:
    """A table converts to a dict of its columns, each read through the
    destination's own API equal to the column read through the table's; a
    column the destination cannot hold is refused with the spec's types."""
    import bridge

    problems: list[str] = []
    want = {name: np.asarray(table[name].to_numpy() if hasattr(table[name], "to_numpy") else table[name])
            for name in (table.column_names if hasattr(table, "column_names") else table.columns)}  # fmt: skip
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            out = bridge.convert(table, destination(case["dest"], case["to"]), **_args(case))
    except Exception as err:  # (a column it cannot hold, copy=False where one must be copied)
        err.__traceback__ = None
        named = isinstance(err, (TypeError, ValueError, BufferError)) and str(err).strip()
        return {"problems": [] if named else _judge_error(err, None, ()), "notes": [f"refused: {err}"]}
    if not isinstance(out, dict) or list(out) != list(want):
        return {"problems": [f"gave {type(out).__name__} {list(out) if isinstance(out, dict) else ''}; want a dict "
                             f"of columns {list(want)}"], "notes": []}  # fmt: skip
    for name, ref in want.items():
        got = dest_values(case["dest"], out[name], str(ref.dtype))
        if got.shape != ref.shape or not np.array_equal(got.astype(ref.dtype), ref):
            problems.append(f"column {name!r}: {got.tolist()} != the table's {ref.tolist()}")
    return {"problems": problems, "notes": []}


def _refusal(case: dict[str, Any], obj: Any, kind: type[BaseException], words: tuple[str, ...]) -> dict[str, Any]:
    import bridge

    problems: list[str] = []
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            out = bridge.convert(obj, destination(case["dest"], case["to"]), **_args(case))
    except Exception as err:
        err.__traceback__ = None
        problems += _judge_error(err, kind, words)
    else:
        problems.append(f"accepted {type(obj).__name__} (gave a {type(out).__name__}); want {kind.__name__} naming "
                        f"{words}")  # fmt: skip
    return {"problems": problems, "notes": []}


def _judge_error(err: BaseException, kind: type[BaseException] | None, words: tuple[str, ...]) -> list[str]:
    msg = str(err)
    said = f"{type(err).__name__}: {msg}"
    if not isinstance(err, (TypeError, ValueError, BufferError)):
        return [f"refused with {said} (a refusal must be a TypeError, ValueError or BufferError)"]
    if not msg.strip():
        return [f"refused with an empty {type(err).__name__}"]
    if kind is None:
        return [f"refused what the destination holds: {said}"]
    out = []
    if not isinstance(err, kind):
        out.append(f"refused with {said}; want a {kind.__name__}")
    if not any(w.lower() in msg.lower() for w in words):
        out.append(f"refused with {said}, which names none of {words}")
    return out


def _check(case: dict[str, Any], obj: Any, src: Source, ref: np.ndarray[Any, Any]) -> list[str]:
    import bridge

    dest, copy, policy = case["dest"], case["copy"], case["readonly_policy"]
    want = expect(case, src, same_library(dest, obj))
    to = destination(dest, case["to"])
    _choose_path(to, case.get("path", "fast"))
    err: BaseException | None = None
    r: Any = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = bridge.convert(obj, to, **_args(case))
        except Exception as e:
            err = e
            err.__traceback__ = None  # (it would hold this frame, and the source, in a cycle)
    copy_warnings = [w.message for w in caught if isinstance(w.message, bridge.CopyWarning)]
    others = [f"{w.category.__name__}: {w.message}" for w in caught if not isinstance(w.message, bridge.CopyWarning)]
    problems: list[str] = [f"convert() let a warning of its own through: {o}" for o in others]
    if err is not None:
        STATS["outcome"] = "refused"
        problems += _judge_error(err, want.error, want.words)
        if copy_warnings:
            problems.append(f"refused ({type(err).__name__}) yet warned of a copy: {copy_warnings[0]}")
        return problems
    if want.error is not None:
        return [*problems, f"accepted; want a {want.error.__name__} naming one of {want.words}"]

    # -- the result's type, dtype, shape and values (its own API)
    result_type = _dotted(RESULT_TYPES[dest])
    if not isinstance(r, result_type):
        return [*problems, f"returned a {type(r).__module__}.{type(r).__qualname__}, not a {RESULT_TYPES[dest]}"]
    got_dtype = dest_dtype(dest, r)
    if got_dtype != src.dtype:
        problems.append(f"the result's dtype is {got_dtype}, the source's {src.dtype}")
    got_shape = dest_shape(dest, r)
    if got_shape != ref.shape:
        return [*problems, f"the result's shape is {got_shape}, the source's {ref.shape}"]
    try:
        values = dest_values(dest, r, src.dtype)
    except Exception as e:
        return [*problems, f"{dest}'s own API cannot read the result: {type(e).__name__}: {e}"]
    if dest == "pyarrow" and hasattr(r, "to_numpy_ndarray") and len(r):
        try:
            r.to_numpy_ndarray()
        except Exception as e:
            problems.append(f"pyarrow's own FixedShapeTensorArray.to_numpy_ndarray() refuses the result ({r.type}): "
                            f"{type(e).__name__}: {e}")  # fmt: skip
    if not same_values(values, ref):
        problems.append(f"the result's values differ from the source's:\n got {values!r}\nwant {ref!r}")

    # -- warnings against the copies made
    kinds = [f.kind for f in copy_warnings[0].fixes if f.copies] if copy_warnings else []
    if copy is None:
        if want.copies and len(copy_warnings) != 1:
            problems.append(f"copied for {list(want.copies)} with {len(copy_warnings)} CopyWarnings (want one)")
        if not want.copies and copy_warnings:
            problems.append(f"warned of a copy ({copy_warnings[0]}) where the destination holds the source as it is")
        if want.copies and copy_warnings:
            w = copy_warnings[0]
            if w.kind != want.copies[0]:
                problems.append(f"the CopyWarning's kind is {w.kind!r}; the first copy is {want.copies[0]!r} "
                                f"({w})")  # fmt: skip
            unexpected = set(kinds) - set(want.copies) - set(want.may)
            missing = set(want.copies) - set(kinds)
            if unexpected or missing:
                problems.append(f"the CopyWarning's copying fixes are {kinds}, want {list(want.copies)} ({w})")
    elif copy_warnings:
        problems.append(f"copy={copy} warned: {copy_warnings[0]}")

    # -- zero-copy by address
    numel = math.prod(ref.shape)
    addr = dest_address(dest, r, numel)
    shares = addr is not None and src.addr is not None and addr == src.addr
    STATS["outcome"] = "shared" if shares else "copied" if numel and addr is not None else "unknown"
    if numel and src.addr is not None and addr is not None:
        if not want.copies and not shares:
            problems.append(f"a silent copy: no CopyWarning (copy={copy}) but the result is at {addr:#x}, the "
                            f"source's first element at {src.addr:#x}")  # fmt: skip
        if want.copies and shares:
            problems.append(f"said it copies ({list(want.copies)}) but the result shares the source's memory")
    # -- read-only stays read-only
    if src.readonly and policy != "share" and shares and r is not obj:  # (its input itself: nothing lent)
        if RULES[dest].readonly == "writes":
            problems.append(f"read-only memory shared writable: {dest} writes through its result")
        problems += _still_read_only(dest, r)
    if src.readonly and policy == "share" and not want.copies and numel and not shares and src.addr is not None:
        problems.append("readonly='share' copied")

    # -- the destination's own computations on the result, against the values it holds (checked above)
    problems += compute(dest, r, src.dtype, values)

    # -- a write into a copy does not reach the source
    expected = values.copy()
    if numel and not shares and (want.copies or copy):
        before = read_source(src.kind, obj, src.dtype)
        value = _new_value(ref, src.dtype)
        try:
            wrote = write_first(dest, r, src.dtype, value, expected)
        except Exception:  # the library refuses the write (its own error, not a crash): nothing to compare
            wrote, expected = False, values.copy()
        STATS["wrote"] = wrote
        if wrote:
            after = dest_values(dest, r, src.dtype)
            if not same_values(after, expected):
                problems.append(f"a write into {dest}'s copy did not land: got {after!r}, want {expected!r}")
                expected = after
            if not same_values(read_source(src.kind, obj, src.dtype), before):
                problems.append("a write into the copy reached the source's memory")

    # -- the result outlives the source
    kind, dtype, nbytes = src.kind, src.dtype, max(ref.nbytes, 64)
    ring: list[Any] = [obj]
    ring.append(ring)  # the source dies in a reference cycle: freed by the collector, not by its count
    del obj, src, caught, copy_warnings, ring
    gc.collect()
    junk = _scribble(nbytes * 4)
    gc.collect()
    later = dest_values(dest, r, dtype)
    if not same_values(later, expected):  # (what it held before, right or wrong)
        problems.append(f"the result changed after the {kind} source was deleted (memory freed under it):\n got "
                        f"{later!r}\nwant {expected!r}")  # fmt: skip
    del junk
    return problems


def _choose_path(to: Any, path: str) -> None:
    """Send the case down convert's general path (``"general"``: the C fast
    path forgets every destination, as on a first call) or let the fast path
    take it where it can (``"fast"``: ``to`` is registered by converting a
    plain tensor first, as any later call finds it)."""
    import bridge
    from bridge.core.native import _C

    if path == "general":
        _C.convert_forget()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge.convert(bridge.zeros(2, dtype=bridge.float32), to)


def _still_read_only(dest: str, r: Any) -> list[str]:
    """The result over read-only memory says read-only, and cannot be made writable."""
    if dest == "numpy":
        if r.flags.writeable:
            return ["read-only memory shared as a writable NumPy array"]
        try:
            r.flags.writeable = True
        except ValueError:
            return []
        return ["read-only memory shared as a NumPy array that can be made writable (flags.writeable = True)"]
    if dest == "bridge" and not r.is_readonly:
        return ["read-only memory shared as a writable bridge tensor"]
    return []


# ------------------------------------------------------------------ the child and its parent

_MARK = "@@differential@@"
#: Seconds a case may run in the child, once its libraries are imported.
HANG = 10
_serving = False


def serve() -> None:
    """The child: run each JSON case read from stdin, answer each on stdout."""
    import faulthandler

    global _serving
    _serving = True
    faulthandler.enable()  # a crash prints where it happened, for the parent to show
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' chatter goes to stderr
    for line in sys.stdin:
        case = json.loads(line)
        try:
            answer = run(case)
        except Exception as e:
            import traceback

            answer = {"problems": [f"the check itself failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"],
                      "notes": []}  # fmt: skip
        gc.collect()
        faulthandler.cancel_dump_traceback_later()
        print(_MARK, json.dumps(answer, default=repr), file=out, flush=True)


class Worker:
    """The parent's handle on the child: :meth:`run` a case, get its answer;
    a child that dies is answered as a crash and replaced on the next case."""

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.err: Any = None

    def _start(self) -> subprocess.Popen[str]:
        here = os.path.dirname(os.path.abspath(__file__))
        self.err = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
        env.setdefault("JAX_PLATFORMS", "cpu")
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        env.setdefault("GLOG_minloglevel", "2")
        return subprocess.Popen([sys.executable, "-c", "import differential_helpers as d; d.serve()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                env=env)  # fmt: skip

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        timer = threading.Timer(self.timeout, proc.kill)
        timer.daemon = True
        timer.start()
        try:
            proc.stdin.write(json.dumps(case) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                mark, _, rest = line.partition(" ")
                if mark == _MARK:
                    return dict(json.loads(rest))
        except (BrokenPipeError, OSError):
            pass
        finally:
            timer.cancel()
        rc = proc.wait()
        self.proc = None
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace")[-3000:]
        self.err.close()
        self.err = None
        how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
        with contextlib.suppress(ValueError):
            import signal

            how = f"signal {signal.Signals(-rc).name}" if rc < 0 else how
        return {"problems": [f"the process crashed ({how}) in this case; its stderr ends:\n{tail}"], "notes": []}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.err is not None:
            self.err.close()
            self.err = None
