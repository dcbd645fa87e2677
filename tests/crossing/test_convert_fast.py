"""bridge.convert's C fast path (cdefs/crossing/convert.c) against its general path.

Every source kind (bridge tensor, ndarray, torch, paddle), every layout and
dtype case, into every installed destination: the fast path (a registered
destination) must give what the general path (``bridge.crossing.convert._general``,
the Python that decides every fix) gives: the same type, the same sharing of
memory, the same values, the same warnings and the same errors. A spy on the
``convert_slow`` up-call shows which cases the fast path finishes on its own.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from convert_helpers import run_in_threads, spy

import bridge
from bridge.core.native import _C, stats
from bridge.crossing import convert as conv
from bridge.crossing.destinations import installed

torch = pytest.importorskip("torch")
try:
    import paddle
except ImportError:  # optional peer
    paddle = None
try:
    import tvm_ffi
except ImportError:  # optional peer
    tvm_ffi = None

DESTS = [d for d in installed() if d != "jax"]  # (jax: its own tests; it needs x64 settings)


def _base() -> np.ndarray[Any, Any]:
    return np.arange(24, dtype=np.float32).reshape(4, 6)


# name -> (ndarray view builder): the layouts and dtypes, as NumPy makes them
CASES: dict[str, Callable[[], np.ndarray[Any, Any]]] = {
    "contiguous": _base,
    "transposed": lambda: _base().T,
    "negative": lambda: _base()[::-1],
    "offset": lambda: _base()[1:],
    "odd-offset": lambda: np.arange(25, dtype=np.float32)[1:].reshape(4, 6),
    "step": lambda: _base()[:, ::2],
    "broadcast": lambda: np.broadcast_to(np.arange(6, dtype=np.float32), (4, 6)),
    "0-d": lambda: np.array(3.5, dtype=np.float32),
    "empty": lambda: np.zeros((0, 3), dtype=np.float32),
    "int64": lambda: np.arange(6, dtype=np.int64),
    "int8": lambda: np.arange(6, dtype=np.int8),
    "bool": lambda: np.arange(6) % 2 == 0,
    "float16": lambda: np.arange(6, dtype=np.float16),
    "complex64": lambda: np.arange(6, dtype=np.complex64),
    "uint32": lambda: np.arange(6, dtype=np.uint32),
    "3-d": lambda: np.arange(60, dtype=np.float64).reshape(3, 4, 5),
    "byteswapped": lambda: np.arange(6, dtype=">f4"),
}


def _readonly(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a = a.copy() if a.base is None else a
    a.flags.writeable = False
    return a


def sources(case: str) -> Iterator[tuple[str, object, np.ndarray[Any, Any]]]:
    """(source kind, object, the ndarray its values equal) for one case."""
    a = CASES[case]()
    yield "ndarray", a, a
    if a.dtype.isnative:
        yield "bridge", bridge.from_numpy(a), a
        if a.flags.writeable and case != "broadcast":
            ro = _readonly(a.copy())
            yield "ndarray-readonly", ro, ro
            yield "bridge-readonly", bridge.from_numpy(ro), ro
    if case in ("negative", "byteswapped", "broadcast") or not a.flags.writeable:
        return  # torch cannot hold these itself
    t = torch.from_numpy(a)
    yield "torch", t, a
    if paddle is not None and case in ("contiguous", "int64", "0-d", "3-d", "float16", "bool"):
        yield "paddle", paddle.to_tensor(a), a
    if tvm_ffi is not None and case in ("contiguous", "transposed", "offset", "0-d", "int8", "float16"):
        yield "tvm_ffi", tvm_ffi.from_dlpack(np.ascontiguousarray(a) if case == "transposed" else a), a


def address(x: object) -> int | None:
    """The address of x's first element, where its library says it."""
    if isinstance(x, np.ndarray):
        return int(x.__array_interface__["data"][0]) if x.size else None
    if isinstance(x, bridge.Tensor):
        return x.data_ptr() if x.numel() else None
    if isinstance(x, torch.Tensor):
        return x.data_ptr() if x.numel() else None
    if paddle is not None and isinstance(x, paddle.Tensor):
        return int(x.data_ptr()) if x.size else None
    return None


def values(x: object) -> np.ndarray[Any, Any]:
    """x's values as an ndarray (a copy), through its library's own route."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().copy()
    if paddle is not None and isinstance(x, paddle.Tensor):
        return np.array(x.numpy())
    if isinstance(x, bridge.Tensor):
        return np.array(x.numpy())
    mod = type(x).__module__.split(".")[0]
    if mod == "pyarrow":
        if hasattr(x, "to_numpy_ndarray"):  # a FixedShapeTensorArray
            return np.array(x.to_numpy_ndarray())
        return np.array(x.to_numpy(zero_copy_only=False))  # type: ignore[attr-defined]
    if mod == "polars":
        return np.array(x.to_list())  # type: ignore[attr-defined]
    if mod == "tvm_ffi":
        return np.array(np.from_dlpack(x))
    if mod == "onnxruntime":
        return np.array(x.numpy())  # type: ignore[attr-defined]
    return np.array(x)


def outcome(fn: Callable[[], object], src: object) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn()
        except Exception as err:  # the outcome is compared, whatever it is
            return {"error": type(err), "message": str(err)}
    kinds = [(w.category, getattr(w.message, "kind", None)) for w in caught]
    src_addr, out_addr = address(src), address(out)
    writable = out.flags.writeable if isinstance(out, np.ndarray) else (
        not out.is_readonly if isinstance(out, bridge.Tensor) else None)
    return {"type": type(out), "shares": None if out_addr is None or src_addr is None else out_addr == src_addr,
            "warnings": kinds, "result": out, "writable": writable,
            "dtype": str(getattr(out, "dtype", None))}  # fmt: skip


@pytest.mark.parametrize("dest", DESTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_path_gives_what_the_general_path_gives(case: str, dest: str) -> None:
    for kind, obj, expect in sources(case):
        general = outcome(lambda obj=obj: conv._general(obj, dest), obj)
        outcome(lambda obj=obj: bridge.convert(obj, dest), obj)  # registers dest
        assert _C.convert_registered(dest) or dest in ("mlx", "onnxruntime") or "error" in general
        fast = outcome(lambda obj=obj: bridge.convert(obj, dest), obj)
        where = f"{kind} {case} -> {dest}"
        if "error" in general:
            assert fast.get("error") is general["error"], where
            assert fast["message"] == general["message"], where
            continue
        assert "error" not in fast, f"{where}: {fast}"
        assert fast["type"] is general["type"], where
        assert fast["shares"] == general["shares"], where
        assert fast["warnings"] == general["warnings"], where
        assert fast["writable"] == general["writable"], where
        assert fast["dtype"] == general["dtype"], where
        got, want = values(fast["result"]), values(general["result"])
        assert got.shape == want.shape and np.array_equal(got, want), where
        if dest in ("numpy", "bridge", "torch", "paddle") and expect.dtype != bool:
            np.testing.assert_array_equal(got.astype(expect.dtype), expect, err_msg=where)


def test_the_plain_cases_never_enter_python() -> None:
    """Memory a destination holds as it is goes C to C: from a bridge tensor,
    an ndarray, torch and paddle into torch, paddle, tvm-ffi, NumPy and bridge."""
    a = _base()
    srcs: list[object] = [bridge.from_numpy(a), a, torch.from_numpy(a), a[1:], bridge.from_numpy(a).t()]
    if paddle is not None:
        srcs.append(paddle.to_tensor(a))
    dests: list[object] = [torch, "torch", torch.Tensor, bridge, np, "numpy"]
    if paddle is not None:
        dests.append(paddle)
    for to in dests:
        bridge.convert(a, to)  # registers it
    with spy() as calls:
        for src in srcs:
            for to in dests:
                out = bridge.convert(src, to)
                assert address(out) == address(src) or to in (np, "numpy")
    assert calls == []


@pytest.mark.thread_unsafe(reason="counts with the process-wide C counters")
def test_a_copy_fix_is_made_in_c_on_the_one_pass() -> None:
    """A fix one row-major copy makes (a layout, here) is made by the C
    engine: the general path is never called, the source read and judged
    once; only the warning's words come from Python."""
    a = _base()
    bridge.convert(a, torch)
    before = stats()
    with spy() as calls, pytest.warns(bridge.CopyWarning, match="negative strides"):
        out = bridge.convert(a[::-1], torch)
    after = stats()
    assert np.array_equal(out.numpy(), a[::-1]) and not np.shares_memory(out.numpy(), a)
    assert calls == []
    assert [after[k] - before[k] for k in ("convert_reads", "convert_judgements", "convert_upcalls")] == [1, 1, 1]


def test_cases_with_a_fix_the_engine_leaves_go_to_the_general_path_imported_once() -> None:
    a = _base()
    bf = torch.arange(6, dtype=torch.bfloat16)
    bridge.convert(bf, np)
    with spy() as calls:
        view = bridge.convert(bf, np)  # a dtype view through ml_dtypes: the general path's fix
    assert view.dtype.name == "bfloat16" and view.__array_interface__["data"][0] == bf.data_ptr()
    assert len(calls) == 1 and isinstance(calls[0], bridge.Tensor)  # read once, in C, through torch's API
    t = torch.from_numpy(a).t()
    with spy() as calls:
        out2 = bridge.convert(t, "numpy")
    assert calls == [] and np.shares_memory(out2, a)


def test_keywords_the_engine_does_not_take_go_to_the_general_path() -> None:
    """copy=True and the asks of one array (dtype=, contiguous=, writable=) are
    made by the C engine; copy=False and device= are the general path's."""
    a = _base()
    bridge.convert(a, torch)
    with spy() as calls:
        bridge.convert(a, torch, copy=None, readonly="copy")
        assert calls == []
        out = bridge.convert(a, torch, copy=True)
        assert out.data_ptr() != a.ctypes.data and calls == []
        cast = bridge.convert(a, torch, dtype=torch.float64, contiguous=True, writable=True)
        assert cast.dtype == torch.float64 and calls == []
        bridge.convert(obj=a, to=torch)  # obj and to by keyword: the same call, laid out again
        bridge.convert(a, to=torch, readonly="copy")
        assert calls == []
        bridge.convert(a, torch, copy=False)
        bridge.convert(a, torch, device="cpu")
        assert len(calls) == 2


def test_bad_arguments_raise_as_the_general_path_says() -> None:
    a = _base()
    bridge.convert(a, torch)
    with pytest.raises(TypeError, match="copy must be None, True or False"):
        bridge.convert(a, torch, copy="yes")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="readonly must be"):
        bridge.convert(a, torch, readonly="maybe")  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        bridge.convert(a)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        bridge.convert()  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="'to' is a module, its name or a type"):
        bridge.convert(a, [torch])  # unhashable: not a registry key
    with pytest.raises(ValueError, match="installed destinations"):
        bridge.convert(a, "no-such-library")
    with pytest.raises(TypeError, match="cannot import"):
        bridge.convert(object(), torch)
    with pytest.raises(BufferError, match="require gradient"):
        bridge.convert(torch.ones(3, requires_grad=True), torch)
    with pytest.raises(BufferError, match="negative bit"):
        bridge.convert(torch.ones(3, dtype=torch.complex64).conj().imag, bridge)


def test_an_ndarray_source_lives_as_long_as_the_result() -> None:
    gc.collect()  # earlier tests' exports released first
    before = stats()
    a = np.arange(1000, dtype=np.float32)
    ref = weakref.ref(a)
    bridge.convert(a, torch)
    out = bridge.convert(a, torch)
    del a
    gc.collect()
    assert ref() is not None
    assert float(out.sum()) == float(np.arange(1000, dtype=np.float32).sum())
    del out
    gc.collect()
    assert ref() is None
    after = stats()
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"]


@pytest.mark.thread_unsafe(reason="empties the process-wide registry of destinations (convert_forget) and asserts "
                                  "on what it holds, which the other test threads' converts fill again")
def test_registry_functions() -> None:
    bridge.convert(_base(), "torch")
    assert _C.convert_registered("torch")
    _C.convert_forget()
    assert not _C.convert_registered("torch")
    assert not _C.convert_registered([1])  # unhashable: simply not there
    bridge.convert(_base(), "torch")
    assert _C.convert_registered("torch")
    with pytest.raises(TypeError, match="spec: dict"):
        _C.convert_register("x", None, [])
    with pytest.raises(ValueError, match="spec has no"):
        _C.convert_register("x", None, {})
    good = conv._spec(conv.resolve("numpy"))
    for key, bad, why in [("dtypes", ((2, 32, 1, 0),), "DLPack's ranges"), ("dtypes", ((2, 256, 1),), "ranges"),
                          ("dtypes", ((-1, 8, 1),), "ranges"), ("dtypes", ([2, 32, 1],), "ranges"),
                          ("alignment", 2**40, "out of range"), ("element_aligned", ((99, 8, 1),), "not in dtypes"),
                          ("devices", (64,), "device type 64, not one of DLPack's"),
                          ("devices", (-1,), "device type -1")]:
        with pytest.raises(ValueError, match=why):
            _C.convert_register("x", None, {**good, key: bad})
    with pytest.raises(TypeError):
        _C.convert_register("x", None, {**good, "zero": "yes"})
    assert not _C.convert_registered("x")
    _C.convert_register("x", None, None)  # always the general path
    assert _C.convert_registered("x")
    _C.convert_forget()


@pytest.mark.thread_unsafe(reason="empties and refills the process-wide registry of destinations")
def test_the_last_destination_looked_up_follows_the_registry() -> None:
    """The engine remembers the last destination it looked up (a loop into one
    skips the registry's dict) only while the registry stands: forgotten,
    replaced by a record of the general path, or registered again, the next
    call reads what the registry holds now."""
    src = _base()
    for _ in range(2):
        assert isinstance(bridge.convert(src, "torch"), torch.Tensor)
    _C.convert_forget()
    _C.convert_register("torch", None, None)  # the general path's, by hand
    with spy() as calls:
        assert isinstance(bridge.convert(src, "torch"), torch.Tensor)
    assert len(calls) == 1  # the general path, not the record remembered before
    _C.convert_forget()
    with spy() as calls:
        for _ in range(2):
            assert isinstance(bridge.convert(src, "torch"), torch.Tensor)
    assert calls == [] and _C.convert_registered("torch")
    for _ in range(300):  # (past the registry's bound of 256: it is emptied on the way)
        bridge.convert(src, bridge)
        bridge.convert(src, "torch")
    assert np.array_equal(bridge.convert(src, "torch").numpy(), src)


@pytest.mark.parametrize("dest", ["torch", "numpy", "bridge"])
def test_the_first_call_takes_the_fast_path(dest: str) -> None:
    """A destination convert() has not met is registered on the way and taken
    on the fast path at once: the first call does not go through the general
    path (the first call into torch cost 150 us against 0.6 us for a later
    one when it did)."""
    _C.convert_forget()
    to = {"torch": torch, "numpy": np, "bridge": bridge}[dest]
    with spy() as calls:
        r = bridge.convert(_base(), to)
    assert calls == [] and _C.convert_registered(to)
    assert np.array_equal(r if dest == "numpy" else r.numpy(), _base())
    with spy() as calls:  # what cannot be named is still the general path's to explain
        with pytest.raises(ValueError, match="no destination"):
            bridge.convert(_base(), "no_such_library")
    assert len(calls) == 1 and not _C.convert_registered("no_such_library")


def test_a_destination_the_fast_path_cannot_take_is_asked_about_once() -> None:
    """mlx copies every import, so it is the general path's; the C path
    remembers that instead of making the registration up-call on every call."""
    assert "mlx" in installed()  # a test extra on Linux
    _C.convert_forget()
    asked: list[object] = []
    register = conv._register_for

    def recording(to: object) -> None:
        asked.append(to)
        register(to)

    _C._register("convert_register_for", recording)
    try:
        with spy() as calls, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                bridge.convert(_base(), "mlx")
    finally:
        _C._register("convert_register_for", register)
    assert asked == ["mlx"] and len(calls) == 3 and _C.convert_registered("mlx")


def test_converts_from_threads_agree() -> None:
    a = _base()
    t = torch.from_numpy(a)

    def work() -> None:
        for i in range(300):
            if i % 50 == 0:
                _C.convert_forget()  # registrations racing lookups
            out = bridge.convert(a if i % 2 else t, torch)
            assert out.data_ptr() == a.ctypes.data
            assert bridge.convert(t, bridge).data_ptr() == a.ctypes.data

    errors = run_in_threads(work)
    assert not errors, errors


def test_an_ndarray_made_in_c_keeps_the_memory_alive() -> None:
    """convert(x, numpy) builds the array through NumPy's C API: its base keeps
    the bridge storage (or the source ndarray) alive, read-only stays read-only."""
    t = bridge.arange(1000, dtype=bridge.float64)
    bridge.convert(t, np)
    arr = bridge.convert(t, np)
    assert arr.base is not None and arr.flags.writeable
    del t
    gc.collect()
    assert arr.sum() == sum(range(1000))
    ro = np.arange(10.0)
    ro.flags.writeable = False
    assert bridge.convert(ro, np) is ro  # a same-library call: its input, as np.asarray(ro) gives
    out = bridge.convert(ro[1:], np)
    assert out is not ro and not out.flags.writeable and np.shares_memory(out, ro)
    rt = bridge.convert(bridge.from_numpy(ro), np)
    assert not rt.flags.writeable and np.shares_memory(rt, ro)
    with pytest.raises(ValueError, match="WRITEABLE"):  # its base is no array: writes cannot be re-enabled
        rt.flags.writeable = True
    with pytest.raises(ValueError):
        rt[0] = 1.0
    del ro
    gc.collect()
    assert out.sum() == 45.0 and rt.sum() == 45.0  # their bases keep the source alive
