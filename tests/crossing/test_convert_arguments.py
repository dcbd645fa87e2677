"""Every argument of ``bridge.convert`` read as it is documented: one reading
of each keyword (bridge.crossing.arguments; ``device=`` by
``bridge.core.device``), the check and the use the same code, NumPy's bools and
ints among the inputs; tables whose column labels are not plain unique
strings; and foreign exchange APIs that break the C API's contract."""

from __future__ import annotations

import gc
import importlib.util
import warnings

import numpy as np
import pytest

import bridge
from bridge.core.native import _C, _drivers
from bridge.crossing import convert as conv

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is the writable destination these use")


def _read_only(n: int = 4) -> np.ndarray:
    a = np.arange(n, dtype=np.float32)
    a.flags.writeable = False
    return a


# ------------------------------------------------------------------ copy= and readonly=


@needs_torch
@pytest.mark.parametrize("false", [False, np.False_], ids=["False", "np.False_"])
def test_copy_false_of_either_kind_refuses_the_read_only_copy(false: object) -> None:
    import torch

    with pytest.raises(BufferError, match=r"copy=False"):
        bridge.convert(_read_only(), torch, copy=false)
    assert conv.plan(_read_only(), torch, copy=false).copies  # the plan shows the copy instead


@needs_torch
@pytest.mark.parametrize("true", [True, np.True_], ids=["True", "np.True_"])
def test_copy_true_of_either_kind_always_copies_and_does_not_warn(true: object) -> None:
    import torch

    a = np.arange(4, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = bridge.convert(a, torch, copy=true)
    assert t.data_ptr() != a.ctypes.data and t.tolist() == a.tolist()


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, np.int64(0), np.float64(0.0), "no", [], np.array(False)])
def test_copy_that_is_not_none_or_a_bool_is_a_type_error_on_every_path(bad: object) -> None:
    for obj, kw in ((np.arange(3), {}), ({"a": np.arange(3)}, {}), (np.arange(3), {"dtype": "float32"})):
        with pytest.raises(TypeError, match="copy must be None, True or False"):
            bridge.convert(obj, np, copy=bad, **kw)
    with pytest.raises(TypeError, match="copy must be None, True or False"):
        conv.plan(np.arange(3), np, copy=bad)


@needs_torch
def test_readonly_is_read_as_its_value_whatever_str_type_carries_it() -> None:
    import torch

    with pytest.raises(BufferError):
        bridge.convert(_read_only(), torch, readonly=np.str_("error"))
    for bad in ("Copy", "", None, 0, b"copy"):
        with pytest.raises(ValueError, match="readonly must be"):
            bridge.convert(np.arange(3), torch, readonly=bad)


@pytest.mark.parametrize("name", ["contiguous", "writable", "stack"])
def test_flags_take_python_and_numpy_bools_and_nothing_else(name: str) -> None:
    pa = pytest.importorskip("pyarrow")
    obj = pa.table({"a": np.arange(3.0), "b": np.arange(3.0)}) if name == "stack" else np.arange(3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ok in (True, np.True_, False, np.False_):
            bridge.convert(obj, np, **{name: ok})
    for bad in (0, 1, "yes", np.int8(1), None):
        with pytest.raises(TypeError, match=f"{name} must be True or False"):
            bridge.convert(obj, np, **{name: bad})


# ------------------------------------------------------------------ device=


@pytest.mark.parametrize("bad", [(1, -1), (1, 2**70), "cpu:-1", (2, -1), (2, 2**31), "cuda:99999999999",
                                 (1, 1), "cpu:1", (99, 0), (np.int64(1), np.int64(-1))])  # fmt: skip
def test_out_of_range_devices_are_refused_in_every_form(bad: object) -> None:
    with pytest.raises(ValueError):
        bridge.device(bad)
    with pytest.raises(ValueError):
        bridge.convert(np.arange(3), np, device=bad)


@pytest.mark.parametrize("good", [(1, 0), (np.int64(1), np.int32(0)), "cpu", "cpu:0", ("cpu", 0), bridge.device("cpu")])
def test_the_cpu_in_every_form_is_the_cpu(good: object) -> None:
    assert bridge.device(good) == bridge.device("cpu")
    a = np.arange(3)
    assert bridge.convert(a, np, device=good) is not None


def test_device_reads_numpy_ints_as_ints_and_bools_as_nothing() -> None:
    assert bridge.device(np.int64(1)) == bridge.device("cuda:1")
    assert bridge.device((2, np.int64(3))) == bridge.device("cuda:3")
    assert bridge.device("cuda", np.int32(2)) == bridge.device("cuda:2")
    for bad in (True, np.True_, (True, 0), (1, False)):
        with pytest.raises((TypeError, ValueError)):
            bridge.device(bad)


# ------------------------------------------------------------------ columns=


def test_pandas_labels_that_are_not_strings_are_the_dicts_keys() -> None:
    pd = pytest.importorskip("pandas")
    out = bridge.convert(pd.DataFrame(np.arange(6.0).reshape(3, 2)), np)
    assert list(out) == [0, 1] and out[1].tolist() == [1.0, 3.0, 5.0]
    assert list(bridge.convert(pd.DataFrame(np.zeros((2, 2))), np, columns=[1])) == [1]
    multi = pd.DataFrame(np.arange(6.0).reshape(3, 2), columns=pd.MultiIndex.from_tuples([("a", "x"), ("a", "y")]))
    out = bridge.convert(multi, np)
    assert list(out) == [("a", "x"), ("a", "y")] and out[("a", "y")].tolist() == [1.0, 3.0, 5.0]
    assert bridge.convert(multi, np, stack=True).tolist() == multi.to_numpy().tolist()


@pytest.mark.parametrize("lib", ["pandas", "pyarrow"])
def test_a_name_twice_is_a_value_error_naming_it_and_stack_takes_them_by_position(lib: str) -> None:
    pytest.importorskip(lib)
    if lib == "pandas":
        import pandas as pd

        table = pd.DataFrame(np.arange(6.0).reshape(3, 2), columns=["a", "a"])
    else:
        import pyarrow as pa

        table = pa.table([pa.array([0.0, 2.0, 4.0]), pa.array([1.0, 3.0, 5.0])], names=["a", "a"])
    for kw in ({}, {"columns": ["a"]}):
        with pytest.raises(ValueError, match="more than one column named 'a'"):
            bridge.convert(table, np, **kw)
    assert bridge.convert(table, np, stack=True).tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_no_columns_is_an_empty_dict_and_no_columns_to_stack_a_value_error() -> None:
    pa = pytest.importorskip("pyarrow")
    assert bridge.convert(pa.table({"a": [1.0]}), np, columns=[]) == {}
    assert bridge.convert(pa.table({}), np) == {}
    with pytest.raises(ValueError, match="no columns to stack"):
        bridge.convert(pa.table({}), np, stack=True)


@pytest.mark.parametrize(("columns", "error"), [("a", TypeError), (["a", "a"], ValueError), ([None], TypeError),
                                                ([["a"]], TypeError), (["zz"], ValueError), ({"a"}, TypeError)])  # fmt: skip
def test_bad_columns_are_named(columns: object, error: type[Exception]) -> None:
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(error, match="columns"):
        bridge.convert(pa.table({"a": [1.0], "b": [2.0]}), np, columns=columns)


# ------------------------------------------------------------------ exchange APIs


class Liar:
    """A producer whose C exchange API succeeds with a Python exception set."""

    __dlpack_c_exchange_api__ = _drivers.lying_api()

    def __init__(self) -> None:
        self.tensor = bridge.arange(4, dtype=bridge.float32)


class LiarWithDlpack(Liar):
    """The same, with ``__dlpack__`` to fall back on."""

    def __dlpack__(self, **kw: object) -> object:
        return self.tensor.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


@pytest.mark.parametrize("call", [bridge.from_dlpack, lambda x: bridge.convert(x, np),
                                  lambda x: bridge.convert([x], np), lambda x: bridge.convert(x, "bridge")])  # fmt: skip
def test_an_exchange_api_that_succeeds_with_an_error_set_is_a_buffer_error(call) -> None:
    before = _C.stats()
    with pytest.raises(BufferError, match="returned success with a Python exception set") as info:
        call(Liar())
    assert isinstance(info.value.__cause__, RuntimeError) and "lying" in str(info.value.__cause__)
    out = call(LiarWithDlpack())  # the producer's own __dlpack__ then answers
    assert out is not None
    del out, info
    gc.collect()
    after = _C.stats()  # the tensor handed over with the error was released, as was the fallback's
    assert after["exports"] - before["exports"] == after["export_deleters"] - before["export_deleters"]


@pytest.mark.thread_unsafe(reason="registers a destination in the process-wide registry and empties it after "
                                  "(convert_forget), which also drops the other test threads' registrations")
def test_a_destination_api_that_succeeds_with_an_error_set_is_a_buffer_error() -> None:
    class Key:
        pass

    _C.convert_register(Key, _drivers.lying_api(), conv._SPECS["bridge"])
    try:
        with pytest.raises(BufferError, match="destination's DLPack exchange API broke its contract") as info:
            bridge.convert(np.arange(3.0), Key)
        assert isinstance(info.value.__cause__, RuntimeError)
    finally:
        _C.convert_forget()
