"""bridge.convert's one pass (issue 45): a call reads its source once and
judges each leaf once, and the C engine makes the fix on that pass; a
same-library call returns its input.

Counted by the C counters (``_C.stats()``: ``convert_reads``,
``convert_judgements``, ``convert_upcalls``), which every path bumps: each
test converts once to register the destination, then counts one call.
Results are checked through each library's own API.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from convert_helpers import run_in_threads, spy

import bridge
from bridge.core.native import stats

torch = pytest.importorskip("torch")
pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.thread_unsafe(reason="counts with the process-wide C counters")

KEYS = ("convert_reads", "convert_judgements", "convert_upcalls")


def counted(make: Callable[[], Any]) -> tuple[Any, tuple[int, ...], list[warnings.WarningMessage]]:
    """make() once to register (and warm: its warning worded) its destination, then again,
    counted: (result, (reads, judgements, up-calls), warnings)."""
    with warnings.catch_warnings(record=True):  # (warned, not ignored: an ignored warning is never worded)
        warnings.simplefilter("always")
        make()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        before = stats()
        out = make()
        after = stats()
    return out, tuple(after[k] - before[k] for k in KEYS), said


def _read_only(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a = a.copy()
    a.flags.writeable = False
    return a


A = np.arange(256, dtype=np.float32)


# ------------------------------------------------------------------ counters, one array


def test_an_array_held_as_it_is_is_read_once_judged_once_and_never_enters_python() -> None:
    for src in (A, torch.from_numpy(A), pa.array(A)):
        out, counts, said = counted(lambda src=src: bridge.convert(src, np))
        assert counts == (1, 1, 0), type(src)
        assert np.shares_memory(out, A) or type(src).__module__.startswith("pyarrow")
        assert said == []


@pytest.mark.parametrize("kind", ["read-only ndarray", "pyarrow", "negative strides", "misaligned"])
def test_a_copy_fix_is_made_on_the_one_pass_and_python_only_words_it(kind: str) -> None:
    made = {
        "read-only ndarray": lambda: _read_only(A),
        "pyarrow": lambda: pa.array(A),
        "negative strides": lambda: A[::-1],
        "misaligned": lambda: np.arange(9, dtype=np.complex128).view(np.uint8)[8:136].view(np.complex128),
    }[kind]
    src = made()
    with spy() as calls:
        out, counts, said = counted(lambda: bridge.convert(src, torch))
    # read-only memory's words name nothing of the array, a layout's only its strides: the engine
    # keeps the warning Python made at the first call, and words the later ones without entering
    # Python; an alignment's name the address, worded each time
    assert calls == [] and counts == (1, 1, 1 if kind == "misaligned" else 0)
    want = src.to_numpy() if kind == "pyarrow" else np.asarray(src)
    np.testing.assert_array_equal(out.numpy(), want)
    assert out.is_contiguous() and out.data_ptr() % 64 == 0  # fresh memory of bridge's, aligned
    assert len(said) == 1 and issubclass(said[0].category, bridge.CopyWarning)
    warning = said[0].message
    assert isinstance(warning, bridge.CopyWarning)
    kinds = {"read-only ndarray": "read-only", "pyarrow": "read-only", "negative strides": "layout",
             "misaligned": "alignment"}  # fmt: skip
    assert warning.kind == kinds[kind]
    assert said[0].filename == __file__  # at the caller's line


def test_a_layouts_warning_is_remembered_by_its_strides() -> None:
    """The words name the strides: each layout gets its own, and a later
    call with the same strides is worded by the engine without Python."""
    b = np.arange(64, dtype=np.float32)
    said = []
    for view in (b[::-1], b[::-2], b[::-1], b[:32][::-1], b[::-2]):
        with pytest.warns(bridge.CopyWarning) as caught:
            bridge.convert(view, torch)
        said.append(str(caught[0].message))
    assert "negative strides (-1,)" in said[0] and "negative strides (-2,)" in said[1]
    assert said[2] == said[3] == said[0] and said[4] == said[1]
    _, counts, _ = counted(lambda: bridge.convert(b[::-2], torch))
    assert counts == (1, 1, 0)


def test_readonly_share_lends_on_the_one_pass_without_python() -> None:
    for src in (_read_only(A), pa.array(A)):
        with spy() as calls:
            out, counts, said = counted(lambda src=src: bridge.convert(src, torch, readonly="share"))
        assert calls == [] and counts == (1, 1, 0) and said == []
        address = src.ctypes.data if isinstance(src, np.ndarray) else src.buffers()[1].address
        assert out.data_ptr() == address


def test_a_fix_the_engine_leaves_to_python_is_judged_once() -> None:
    """A dtype only ml_dtypes' view holds (bfloat16 into NumPy): the general
    path's fix, on the tensor C imported (one read), with the judgement C
    made on it (the up-call's ``judged=``): never judged again."""
    bf = torch.arange(6, dtype=torch.bfloat16)
    with spy() as calls:
        out, counts, _ = counted(lambda: bridge.convert(bf, np))
    assert len(calls) == 2 and all(isinstance(c, bridge.Tensor) for c in calls)  # (the first call, then the counted)
    assert counts == (1, 1, 1)
    assert out.dtype.name == "bfloat16" and np.array_equal(out.astype(np.float32), np.arange(6, dtype=np.float32))
    with pytest.raises(TypeError, match="judged"):
        bridge.convert(bf, np, judged=0)  # type: ignore[call-overload]  # (the engine's word, not the caller's)


# ------------------------------------------------------------------ counters, batches


def test_a_batch_whose_leaves_need_fixes_is_one_traversal_of_the_engine() -> None:
    """A dict of 8 with read-only, reversed and Arrow leaves: each leaf read
    once and judged once, the copies made by the engine, and Python reached
    once, to word the batch's one CopyWarning from C's judgements."""
    batch = {f"k{i}": np.arange(64, dtype=np.float32) + i for i in range(5)}
    batch["ro"] = _read_only(A)
    batch["flipped"] = A[::-1]
    batch["arrow"] = pa.array(A + 1)  # (pa.array(A) would be A's memory, which flipped overlaps)
    with spy() as calls:
        out, counts, said = counted(lambda: bridge.convert(batch, torch))
    assert calls == [] and counts == (8, 8, 1)
    assert len(said) == 1
    w = said[0].message
    assert isinstance(w, bridge.CopyWarning) and said[0].filename == __file__
    assert list(w.leaves) == ["['ro']", "['flipped']", "['arrow']"]
    assert "copied 3 of 8 arrays" in str(w)
    for k, v in batch.items():
        want = v.to_numpy() if k == "arrow" else v
        np.testing.assert_array_equal(out[k].numpy(), want)
    assert all(out[f"k{i}"].data_ptr() == batch[f"k{i}"].ctypes.data for i in range(5))  # held as they are
    out["ro"][0] = 9.0  # torch writes: its own memory
    assert batch["ro"][0] == 0.0


def test_a_batchs_warning_that_names_no_tensor_is_worded_by_python_once() -> None:
    """Read-only leaves only: the warning's words name no tensor, so Python
    words it at the first call and the engine warns it again, at the
    caller's line, without entering Python; each warning a new instance."""
    batch = {"x": _read_only(A), "n": 3, "y": [_read_only(A + 1)], "w": A}
    with spy() as calls:
        out, counts, said = counted(lambda: bridge.convert(batch, torch))
    assert calls == [] and counts == (3, 3, 0)
    assert len(said) == 1 and said[0].filename == __file__
    w = said[0].message
    assert isinstance(w, bridge.CopyWarning) and list(w.leaves) == ["['x']", "['y'][0]"]
    assert "copied 2 of 3 arrays" in str(w) and w.kind == "read-only"
    with pytest.warns(bridge.CopyWarning) as again:
        bridge.convert(batch, torch)
    assert again[0].message is not w and str(again[0].message) == str(w)
    assert out["y"][0].tolist() == (A + 1).tolist() and out["n"] == 3


def test_batches_with_fixes_converted_by_several_threads_at_once() -> None:
    """Each call's batch state (memo, path, copies) is its own: four threads
    converting batches with read-only, reversed and Arrow leaves (and the
    warning cache they share) get their own, right results."""
    import gc
    import sys

    def work() -> None:
        for i in range(200):
            src = {"ro": _read_only(A + i), "flipped": (A + i)[::-1], "arrow": pa.array(A + 2 * i), "w": [A]}
            out = bridge.convert(src, torch)
            assert out["ro"][1].item() == 1.0 + i and out["flipped"][0].item() == 255.0 + i
            assert out["arrow"][1].item() == 1.0 + 2 * i and out["w"][0].data_ptr() == A.ctypes.data

    before = sys.getrefcount(A)
    with warnings.catch_warnings():  # (once, around the threads: catch_warnings is process-wide state)
        warnings.simplefilter("ignore", bridge.CopyWarning)
        errors = run_in_threads(work)
    assert errors == []
    gc.collect()
    assert sys.getrefcount(A) == before  # (every result and copy let go)


def test_a_batchs_copied_leaves_are_named_by_their_paths() -> None:
    x, y = _read_only(A[:4]), _read_only(A[4:8])
    with pytest.warns(bridge.CopyWarning) as caught:
        out = bridge.convert({"a": [x, {"b": y}], "c": (A[:2],)}, torch)
    w = caught[0].message
    assert isinstance(w, bridge.CopyWarning)
    assert list(w.leaves) == ["['a'][0]", "['a'][1]['b']"]
    assert "copied 2 of 3 arrays" in str(w)
    assert out["a"][1]["b"].tolist() == y.tolist() and isinstance(out["c"], tuple)


def test_a_batch_shares_read_only_leaves_on_the_one_pass() -> None:
    batch = {"ro": _read_only(A), "arrow": pa.array(A), "w": A}
    with spy() as calls:
        out, counts, said = counted(lambda: bridge.convert(batch, torch, readonly="share"))
    assert calls == [] and counts == (3, 3, 0) and said == []
    assert out["ro"].data_ptr() == batch["ro"].ctypes.data
    assert out["arrow"].data_ptr() == batch["arrow"].buffers()[1].address


def _with_general_leaf(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with one more leaf the engine leaves to Python (Arrow bools,
    bit-packed), so that the whole batch takes the general path."""
    return {**batch, "bits": pa.array([True, False])}


@pytest.mark.parametrize("path", ["engine", "general"])
def test_a_leaf_held_as_it_is_stays_the_sources_memory_beside_an_overlapping_copy(path: str) -> None:
    """One rule on both paths: a writable array and a read-only view over
    part of its memory: the array is held as it is (zero-copy), the view
    copied alone, and the warning names only the view."""
    base = np.arange(16.0)
    part = base[4:12]
    part.flags.writeable = False
    batch = {"all": base, "part": part}
    if path == "general":
        batch = _with_general_leaf(batch)
    with spy() as calls, pytest.warns(bridge.CopyWarning) as caught:
        out = bridge.convert(batch, torch)
    assert (calls == []) == (path == "engine")
    assert out["all"].data_ptr() == base.ctypes.data
    assert out["part"].data_ptr() != part.ctypes.data and out["part"].tolist() == part.tolist()
    w = caught[0].message
    assert isinstance(w, bridge.CopyWarning) and "['part']" in w.leaves and "['all']" not in w.leaves


@pytest.mark.parametrize("path", ["engine", "general"])
def test_overlapping_copies_in_a_batch_still_share_one_copy(path: str) -> None:
    """Read-only leaves over one memory are copied as one region on either
    path (the engine hands such a batch to the general path, which makes the
    region), so that they still share memory after."""
    base = _read_only(np.arange(12.0))
    batch = {"head": base[:8], "tail": base[4:]}
    if path == "general":
        batch = _with_general_leaf(batch)
    with pytest.warns(bridge.CopyWarning):
        out = bridge.convert(batch, torch)
    assert out["tail"].data_ptr() == out["head"].data_ptr() + 4 * 8
    out["head"][5] = -1.0
    assert out["tail"][1] == -1.0 and base[5] == 5.0


def test_a_batch_whose_warning_is_an_error_raises_and_keeps_nothing() -> None:
    batch = {"ro": _read_only(A), "w": A}
    bridge.convert({"w": A}, torch)  # (registered)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        with pytest.raises(bridge.CopyWarning, match="copied 1 of 2 arrays"):
            bridge.convert(batch, torch)


# ------------------------------------------------------------------ same library


def _same_library() -> list[tuple[str, Callable[[], Any], Any]]:
    """(name, source maker, destination) for every installed library convert returns itself for."""
    cases: list[tuple[str, Callable[[], Any], Any]] = [
        ("numpy", lambda: np.arange(8.0), np),
        ("numpy read-only", lambda: _read_only(np.arange(8.0)), np),
        ("numpy view", lambda: np.arange(8.0)[::-2], np),
        ("torch", lambda: torch.arange(8.0), torch),
        ("pyarrow", lambda: pa.array(np.arange(8.0)), pa),
    ]
    if importlib.util.find_spec("polars") is not None:
        import polars as pl

        cases.append(("polars", lambda: pl.Series("x", np.arange(8.0)), pl))
    if importlib.util.find_spec("jax") is not None:
        import jax
        import jax.numpy as jnp

        cases.append(("jax", lambda: jnp.arange(8.0, dtype=jnp.float32), jax))
    if importlib.util.find_spec("tvm_ffi") is not None:
        import tvm_ffi

        cases.append(("tvm_ffi", lambda: tvm_ffi.from_dlpack(np.arange(8.0)), tvm_ffi))
    return cases


@pytest.mark.parametrize("name, make, to", _same_library(), ids=[c[0] for c in _same_library()])
def test_a_same_library_call_returns_its_input(name: str, make: Callable[[], Any], to: Any) -> None:
    x = make()
    out, counts, said = counted(lambda: bridge.convert(x, to))
    assert out is x, name
    assert counts == (1, 1, 0) and said == []


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_a_same_library_call_that_needs_a_fix_makes_it() -> None:
    """The judgement gates the identity: a torch complex128 aligned to 8 bytes
    (which torch's kernels crash on) is copied aligned; a NumPy array of
    the other byte order is swapped; a subclass NumPy's own identity turns
    into an ndarray (np.asarray of a masked array) is not returned as it is."""
    raw = np.zeros(9, dtype=np.complex128).view(np.uint8)[8:136].view(np.complex128)
    raw[:] = np.arange(8) + 1j
    t = torch.from_numpy(raw)
    with pytest.warns(bridge.CopyWarning, match="aligned"):
        out = bridge.convert(t, torch)
    assert out is not t and out.data_ptr() % 16 == 0 and torch.equal(out, t)
    swapped = np.arange(4, dtype=">f8")
    with pytest.warns(bridge.CopyWarning, match="byte order"):
        native = bridge.convert(swapped, np)
    assert native is not swapped and native.dtype == np.float64 and np.array_equal(native, swapped)
    masked = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    assert type(bridge.convert(masked, np)) is np.ndarray  # its data, as np.asarray(masked) gives
    matrix = np.asmatrix(np.arange(4.0).reshape(2, 2))
    got = bridge.convert(matrix, np)
    assert type(got) is np.ndarray and np.shares_memory(got, matrix)  # as np.asarray(matrix) gives


def test_a_torch_tensor_that_requires_grad_is_refused_even_into_torch() -> None:
    """convert's refusal (the producer's, through torch's exchange API) holds
    for a same-library call too: convert never hands back an autograd leaf."""
    p = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(BufferError, match="require"):
        bridge.convert(p, torch)


# ------------------------------------------------------------------ asks, tables, streams


def test_asks_are_made_in_one_copy_on_the_one_pass() -> None:
    """copy=True, a cast, row-major and writable memory: the asks read by
    Python once per kind of call (the convert_asks up-call, its answer
    remembered), the one copy made by the C engine."""
    a64 = np.arange(256, dtype=np.float64)
    for kw, dtype in ((dict(copy=True), torch.float64), (dict(dtype=torch.float32), torch.float32),
                      (dict(dtype="float16", contiguous=True), torch.float16)):  # fmt: skip
        with spy() as calls:
            out, counts, said = counted(lambda kw=kw: bridge.convert(a64[::-1], torch, **kw))  # type: ignore[arg-type]
        assert calls == [] and said == [], kw
        assert counts[:2] == (1, 1) and counts[2] == (0 if "copy" in kw else 1), (kw, counts)
        assert out.dtype == dtype and out.is_contiguous()
        np.testing.assert_array_equal(out.numpy(), a64[::-1].astype(out.numpy().dtype))
    ro = _read_only(A)
    out, counts, said = counted(lambda: bridge.convert(ro, torch, writable=True))
    assert counts == (1, 1, 1) and said == [] and out.data_ptr() != ro.ctypes.data
    out[0] = 5.0
    assert ro[0] == 0.0  # a copy: the source is never written


def test_a_tables_columns_are_read_and_judged_once_each() -> None:
    batch = pa.record_batch({f"c{i}": pa.array(np.arange(16, dtype=np.float32) + i) for i in range(6)})
    with spy() as calls:
        out, counts, said = counted(lambda: bridge.convert(batch, np, columns=["c4", "c1"]))
    assert calls == [] and counts == (2, 2, 0) and said == []
    assert list(out) == ["c4", "c1"]
    np.testing.assert_array_equal(out["c4"], batch.column("c4").to_numpy())
    with pytest.raises(ValueError, match="no column 'zz'"):  # the general path's words
        bridge.convert(batch, np, columns=["zz"])


def test_a_streams_batches_are_each_one_pass_of_the_engine() -> None:
    batch = pa.record_batch({f"c{i}": pa.array(np.arange(16, dtype=np.float32) + i) for i in range(3)})

    def stream() -> Any:
        return list(bridge.convert(pa.RecordBatchReader.from_batches(batch.schema, [batch] * 4), np, columns=["c2"]))

    with spy() as calls:
        out, counts, said = counted(stream)
    assert len(calls) == 2  # the stream itself (a unit: the general path makes its iterator), both calls
    assert counts[:2] == (4, 4) and said == []
    assert [list(b) for b in out] == [["c2"]] * 4


@pytest.mark.parametrize("shape, strides, want", [
    ((2, 1, 3), (3, -7, 1), (3, 3, 1)),  # a dim of one element: the row-major stride after it
    ((1, 1), (-5, 9), (1, 1)),
    ((4,), (-1,), (-1,)),  # a dim stepped along keeps its stride
    ((0, 3), (-3, 1), (3, 1)),  # empty: every stride its row-major one
    ((), (), ()),
])  # fmt: skip
def test_the_strides_convert_hands_over_are_one_rule(shape: tuple[int, ...], strides: tuple[int, ...],
                                                       want: tuple[int, ...]) -> None:  # fmt: skip
    """``_C.unit_strides`` is the rule both the C engine (as it builds a managed
    tensor) and the general path (``_unit_strides``) apply."""
    from bridge.core.native import _C
    from bridge.crossing.convert import _unit_strides

    assert _C.unit_strides(shape, strides) == want
    if shape and 0 not in shape:
        base = bridge.zeros(64)
        t = base.as_strided(shape, strides, 32)
        assert _unit_strides(t).stride() == want


def test_the_same_library_rule_is_one_on_both_paths() -> None:
    """The same answer whichever path a call takes (first call, later calls):
    an ask (even one met as it is) is no identity; an empty own array is;
    a batch's leaf never is (its siblings may send the batch to the general
    path, which builds every leaf anew)."""
    a = np.arange(4.0)
    assert [bridge.convert(a, np, contiguous=True) is a for _ in range(3)] == [False] * 3
    t = torch.arange(4.0)
    assert [bridge.convert(t, torch, writable=True) is t for _ in range(3)] == [False] * 3
    e = torch.empty(0)
    assert [bridge.convert(e, torch) is e for _ in range(2)] == [True, True]
    p = pa.array(np.empty(0, np.float32))
    assert [bridge.convert(p, pa) is p for _ in range(2)] == [True, True]
    odd = torch.empty(0).as_strided((0, 3), (0, 0))  # (an empty tensor's strides are any; torch keeps them)
    assert [bridge.convert(odd, torch) is odd for _ in range(2)] == [True, True]
    assert bridge.crossing.convert.plan(odd, torch).fixes == ()
    if importlib.util.find_spec("onnxruntime") is not None:  # (its empty tensors' DLPack strides are (0,))
        import onnxruntime as ort

        o = ort.OrtValue.ortvalue_from_numpy(np.zeros(0, bool))
        assert [bridge.convert(o, "onnxruntime") is o for _ in range(2)] == [True, True]
    assert bridge.convert({"a": a}, np)["a"] is not a
    assert bridge.convert({"a": a, "b": pa.array([True, False])}, np)["a"] is not a


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is a test extra")
def test_a_dtype_the_record_refused_is_judged_again_where_the_destination_changed() -> None:
    """jax's record holds 64-bit dtypes only as jax_enable_x64 was when it was
    made: an int64 tensor after the switch is judged again by Python (C's
    judgement does not travel for a dtype), and jax takes it. In a
    subprocess: the switch is process-wide."""
    import subprocess
    import sys

    code = (
        "import numpy as np, jax, bridge\n"
        "t = bridge.from_numpy(np.arange(4, dtype=np.float32))\n"
        "bridge.convert(t, jax)\n"  # (the record, made without x64)
        "jax.config.update('jax_enable_x64', True)\n"
        "out = bridge.convert(bridge.from_numpy(np.arange(4, dtype=np.int64)), jax)\n"
        "print(out.dtype, out.tolist())\n"
    )
    # (under make test-sanitize the child runs the plain build: jaxlib's C++ exceptions
    # trip ASan's __cxa_throw interceptor in a child started with the runtime preloaded,
    # and what this checks is Python's judging, not C's memory)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = os.pathsep.join(p for p in env["PYTHONPATH"].split(os.pathsep) if "sanitize" not in p)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[-2] == "int64 [0, 1, 2, 3]"


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is a test extra")
def test_jax_host_import_made_first_by_several_threads_at_once() -> None:
    import threading

    import jax

    from bridge.crossing import destinations

    destinations._JAX_HOST = None
    x = bridge.zeros(16)
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        for _ in range(5):
            bridge.convert(x, jax)

    assert run_in_threads(go) == []
    assert destinations._JAX_HOST is not None and len(destinations._JAX_HOST) == 3
    assert float(bridge.convert(x, jax).sum()) == 0.0


# ------------------------------------------------------------------ a CopyWarning the filters ignore


def _warned(make: Callable[[], Any]) -> list[warnings.WarningMessage]:
    """The CopyWarnings make() warns under the filters in force (recorded:
    catch_warnings(record=True) keeps the filters, and records what they let
    through, as showwarning would show it)."""
    with warnings.catch_warnings(record=True) as said:
        make()
    return [w for w in said if issubclass(w.category, bridge.CopyWarning)]


_FIXES: dict[str, Callable[[], Any]] = {
    "one array (C)": lambda: bridge.convert(A[::-1], torch),
    "a batch (C)": lambda: bridge.convert({"a": _read_only(A), "b": A}, torch),
    "one array (Python: Arrow bools)": lambda: bridge.convert(pa.array([True, False]), torch),
    "a batch (Python)": lambda: bridge.convert({"a": pa.array([True, False]), "b": A[::-1]}, torch),
}


@pytest.mark.parametrize("path", list(_FIXES))
def test_an_ignored_copy_warning_is_not_made_and_every_other_filter_still_decides(path: str) -> None:
    """The engine (and the general path) skips making a CopyWarning that the
    filters ignore wherever it is warned, and only then: each filter below is
    put in force after the call before it was remembered as ignored, and a
    filter that names a module, a message or a line, or says anything but
    "ignore", leaves the decision to Python's warnings."""
    make = _FIXES[path]
    from bridge import _C

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        for _ in range(3):
            assert _warned(make) == []
        assert _C.copy_warning_ignored(bridge.CopyWarning)
        with spy() as calls:  # (nothing is worded: Python's convert_copied is not reached)
            make()
        assert calls == [] or path.endswith("(Python)") or "Python:" in path
        # a new list (catch_warnings) and filters changed in place are both seen
        with warnings.catch_warnings():
            warnings.simplefilter("always", bridge.CopyWarning)
            assert len(_warned(make)) == 1
        assert _warned(make) == []
        warnings.filters.insert(0, ("error", None, bridge.CopyWarning, None, 0))  # (by hand, no _filters_mutated)
        with pytest.raises(bridge.CopyWarning):
            make()
        del warnings.filters[0]
        assert _warned(make) == []
        # the first filter of the category names this module: Python decides, and it matches here
        warnings.filterwarnings("error", category=bridge.CopyWarning, module=__name__)
        assert not _C.copy_warning_ignored(bridge.CopyWarning)
        with pytest.raises(bridge.CopyWarning):
            make()
        warnings.filterwarnings("ignore", category=bridge.CopyWarning)
        assert _warned(make) == []
        # one that names another module does not match here, and the ignore below it decides
        warnings.filterwarnings("error", category=bridge.CopyWarning, module="another_module")
        assert _warned(make) == []
        # an ignore of some words only: the words decide, which only Python reads
        warnings.filterwarnings("always", category=bridge.CopyWarning)
        warnings.filterwarnings("ignore", message="nothing convert says", category=bridge.CopyWarning)
        assert len(_warned(make)) == 1
        # a parent category ignored is every CopyWarning ignored
        warnings.simplefilter("ignore", UserWarning)
        assert _warned(make) == []
        # an ignore of some words before it ignores or passes on: still every CopyWarning ignored
        warnings.filterwarnings("ignore", message="numpy.ndarray size changed", category=Warning)
        assert _C.copy_warning_ignored(bridge.CopyWarning) and _warned(make) == []
        # but an error for some words (which convert's match) is Python's to decide, and raises
        warnings.filterwarnings("error", message="convert", category=Warning)
        assert not _C.copy_warning_ignored(bridge.CopyWarning)
        with pytest.raises(bridge.CopyWarning):
            make()


def test_copy_warning_ignored_takes_a_warning_class() -> None:
    import bridge.crossing.convert  # noqa: F401  (which names CopyWarning the category asked about)
    from bridge import _C

    with pytest.raises(TypeError, match="Warning class"):
        _C.copy_warning_ignored(int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Warning class"):
        _C.copy_warning_ignored("ignore")  # type: ignore[arg-type]
    assert _C.copy_warning_ignored(RuntimeWarning) is False  # (one category is remembered: CopyWarning's)


def test_a_filter_category_that_changes_the_filters_while_read_is_safe() -> None:
    """A category's __subclasscheck__ is Python code: one that empties the
    filters list and converts again while the engine reads the filters
    (re-entering it) leaves no crash and no wrong answer: Python's warnings
    decide as they would have."""
    src = A[::-1]
    state = {"calls": 0}

    class Meddling(type):
        def __subclasscheck__(cls, sub: type) -> bool:
            state["calls"] += 1
            if state["calls"] == 1:
                del warnings.filters[1:]  # shrinks the list under the reader
                bridge.convert(src, torch)  # and comes back in
            return False

    class Odd(Warning, metaclass=Meddling):
        pass

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", bridge.CopyWarning)
        warnings.simplefilter("ignore", Odd)  # first: read before the CopyWarning's ignore
        out = bridge.convert(src, torch)
        assert np.array_equal(out.numpy(), src)
        again = bridge.convert(src, torch)  # (the list as it is now: its one filter, of Odd)
        assert np.array_equal(again.numpy(), src)
    assert state["calls"] >= 1
    assert all(issubclass(w.category, bridge.CopyWarning) for w in said)


def test_a_filter_python_reads_differently_is_pythons_to_decide() -> None:
    """What the engine cannot read as CPython would (a category whose
    subclasses change without the filter changing, a malformed filter
    CPython refuses, a warnings module put in the place of the one it read)
    leaves the warning to Python, which then decides as it always does."""
    import abc
    import sys

    src = A[::-1]

    class Family(Warning, metaclass=abc.ABCMeta):  # (a category that gains members by registration)
        pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        warnings.filterwarnings("error", category=Family)
        assert _warned(lambda: bridge.convert(src, torch)) == []
        Family.register(bridge.CopyWarning)  # the filter now matches, though neither it nor the list changed
        with pytest.raises(bridge.CopyWarning):
            bridge.convert(src, torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        assert _warned(lambda: bridge.convert(src, torch)) == []
        warnings.filters.insert(0, (42, None, RuntimeWarning, None, 0))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="action must be a string"):  # (CPython's own refusal)
            bridge.convert(src, torch)
    real = sys.modules["warnings"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        assert _warned(lambda: bridge.convert(src, torch)) == []
        try:
            sys.modules["warnings"] = object()  # type: ignore[assignment]  (not even a module)
            from bridge import _C

            assert not _C.copy_warning_ignored(bridge.CopyWarning)
        finally:
            sys.modules["warnings"] = real
        assert _C.copy_warning_ignored(bridge.CopyWarning)


def test_the_engines_remembered_state_survives_forks_mid_traffic_and_leaks_nothing() -> None:
    """The engine's process-wide memory of this issue (the warnings filters
    it read, the last destination looked up) under real use: four threads
    convert with copies (an ignored warning, a remembered destination) while
    the main thread forks three times; each child converts again, through
    both, and changes the filters (which it must see). In a subprocess: a
    fork of the test runner's own threads is not this test's to make.
    Then, here: a thousand calls hold no more references than one."""
    import subprocess
    import sys

    code = r"""
import os, sys, threading, warnings, numpy as np, torch, bridge
warnings.simplefilter("ignore", bridge.CopyWarning)
a = np.arange(256, dtype=np.float32)
stop = threading.Event()
def traffic():
    while not stop.is_set():
        bridge.convert(a[::-1], torch); bridge.convert(a, np); bridge.convert({"x": a[::-2]}, "torch")
threads = [threading.Thread(target=traffic) for _ in range(4)]
for t in threads: t.start()
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        ok = True
        try:
            for _ in range(3):
                ok &= bool(np.array_equal(bridge.convert(a[::-1], torch).numpy(), a[::-1]))
                ok &= bridge.convert(a, np) is a
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                bridge.convert(a[::-1], torch)
            ok &= len(said) == 1
        except BaseException as e:
            print(repr(e), file=sys.stderr); ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
stop.set()
for t in threads: t.join()
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]

    src = A[::-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        for _ in range(3):
            bridge.convert(src, torch)
        before = (sys.getrefcount(torch), sys.getrefcount(warnings.filters), sys.getrefcount(src))
        for _ in range(1000):
            bridge.convert(src, torch)
        assert (sys.getrefcount(torch), sys.getrefcount(warnings.filters), sys.getrefcount(src)) == before
