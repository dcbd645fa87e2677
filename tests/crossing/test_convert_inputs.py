"""What bridge.convert takes and gives, as a user meets it: its signature's
errors in Python's own words, ``to=`` a subclass, NumPy scalars, bytes and
Python values, tables, and the fixes it makes where a source cannot be
shared as it is (Arrow chunks, non-native byte order, strides of size-1
dims, nulls). Each result is checked through the destination's own API.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import bridge
from bridge.crossing.convert import plan

torch = pytest.importorskip("torch")


def _kinds(caught: list[warnings.WarningMessage]) -> list[str]:
    return [w.message.kind for w in caught if isinstance(w.message, bridge.CopyWarning)]  # type: ignore[union-attr]


# ------------------------------------------------------------ the signature


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bridge.convert(), r"^convert\(\) missing 2 required positional arguments: 'obj' and 'to'$"),
        (lambda: bridge.convert(np.arange(3)), r"^convert\(\) missing 1 required positional argument: 'to'$"),
        (lambda: bridge.convert(to=np), r"^convert\(\) missing 1 required positional argument: 'obj'$"),
        (lambda: bridge.convert(np.arange(3), np, None), r"^convert\(\) takes 2 positional arguments but 3 were given$"),
        (lambda: bridge.convert(np.arange(3), np, dtyp="f"), r"^convert\(\) got an unexpected keyword argument 'dtyp'$"),
        (lambda: bridge.convert(np.arange(3), np, to=np), r"^convert\(\) got multiple values for argument 'to'$"),
    ],
)  # fmt: skip
def test_signature_errors_are_pythons_own_words_about_convert(call, message) -> None:
    for _ in range(2):  # the destination unregistered, then registered
        with pytest.raises(TypeError, match=message) as info:
            call()
        assert "_general" not in str(info.value)


def test_obj_and_to_may_be_keywords() -> None:
    a = np.arange(3.0)
    for _ in range(2):
        out = bridge.convert(obj=a, to=torch, copy=False)
        assert out.data_ptr() == a.ctypes.data


def test_to_a_subclass_is_a_value_error_naming_the_type_convert_returns() -> None:
    with pytest.raises(ValueError, match=r"torch\.nn\.parameter\.Parameter is a subclass of torch\.Tensor.*"
                                         r"convert returns torch\.Tensor"):  # fmt: skip
        bridge.convert(np.arange(3.0), torch.nn.Parameter)
    with pytest.raises(ValueError, match=r"subclass of numpy\.ndarray"):
        bridge.convert(np.arange(3.0), np.ma.MaskedArray)
    assert type(bridge.convert(np.arange(3.0), torch.Tensor)) is torch.Tensor
    assert type(bridge.convert(np.arange(3.0), np.ndarray)) is np.ndarray


# ------------------------------------------------------------ values


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "float32", "float64",
                                   "complex64", "complex128"])  # fmt: skip
@pytest.mark.parametrize("to", ["numpy", "torch", "bridge"])
def test_numpy_scalars_of_every_dtype_are_zero_d_values(dtype: str, to: str) -> None:
    """A NumPy scalar is an immutable value: a 0-d tensor of it, one named copy
    (its __array_interface__ would lend its bytes writable)."""
    x = np.array(3, dtype=dtype)[()]
    assert isinstance(x, np.generic)
    with pytest.warns(bridge.CopyWarning) as caught:
        out = bridge.convert(x, to)
    assert _kinds(caught) == ["value"]
    back = out.numpy() if to != "numpy" else out
    assert back.shape == () and back.dtype == np.dtype(dtype) and back == x
    with pytest.raises(BufferError, match="immutable value"):
        bridge.convert(x, to, copy=False)


def test_bytes_are_read_only_bytes_as_a_bytearray_is_writable() -> None:
    ro = bridge.convert(b"abcd", np)
    rw_src = bytearray(b"abcd")
    rw = bridge.convert(rw_src, np)
    assert ro.tolist() == rw.tolist() == [97, 98, 99, 100] and ro.dtype == rw.dtype == np.uint8
    assert not ro.flags.writeable and rw.flags.writeable
    rw[0] = 65
    assert rw_src[0] == 65  # shared
    with pytest.warns(bridge.CopyWarning, match="read-only"):
        bridge.convert(b"abcd", torch)  # torch writes: a copy, never bytes made writable


@pytest.mark.parametrize("value", [[1, 2, 3], (1.0, 2.0), 3, 2.5, 1j, True])
@pytest.mark.parametrize("to", ["numpy", "torch", "bridge"])
def test_python_values_are_refused_in_the_same_words_everywhere(value: object, to: str) -> None:
    with pytest.raises(TypeError, match=rf"convert\(\): a Python {type(value).__name__} holds values, not memory; "
                                        r"make an array of it first"):  # fmt: skip
        bridge.convert(value, to)


@pytest.mark.parametrize("make", ["pandas", "polars", "pa-table", "pa-batch"])
def test_tables_convert_to_a_dict_of_columns_and_plan_names_them(make: str) -> None:
    if make == "pandas":
        pd = pytest.importorskip("pandas")
        x: object = pd.DataFrame({"a": [1.0, 2.0]})
    elif make == "polars":
        pl = pytest.importorskip("polars")
        x = pl.DataFrame({"a": [1.0, 2.0], "b": [1, 2]})
    else:
        pa = pytest.importorskip("pyarrow")
        x = pa.table({"a": [1.0, 2.0]}) if make == "pa-table" else pa.record_batch({"a": [1.0, 2.0]})
    out = bridge.convert(x, "numpy")
    assert isinstance(out, dict) and out["a"].tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match=r"is a table \(\d columns?: 'a'.*plan one column \(x\['a'\]\)"):
        plan(x, "numpy")


# ------------------------------------------------------------ fixes


@pytest.mark.parametrize("make", ["pa-chunked", "polars-chunks"])
def test_arrow_chunks_are_one_named_concatenating_copy(make: str) -> None:
    pa = pytest.importorskip("pyarrow")
    if make == "pa-chunked":
        x: object = pa.chunked_array([[1.0, 2.0], [3.0]])
    else:
        pl = pytest.importorskip("polars")
        x = pl.concat([pl.Series([1.0, 2.0]), pl.Series([3.0])], rechunk=False)
        assert x.n_chunks() == 2  # type: ignore[attr-defined]
    assert [f.kind for f in plan(x, torch).fixes] == ["concatenate"]
    for copy in (None, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = bridge.convert(x, torch, copy=copy)
        assert out.tolist() == [1.0, 2.0, 3.0]
        assert _kinds(caught) == (["concatenate"] if copy is None else [])
        out[0] = 9.0  # new, writable memory
    with pytest.raises(BufferError, match=r"convert\(copy=False\): the Arrow .* 2 (chunks|batches)"):
        bridge.convert(x, torch, copy=False)


def test_arrow_nulls_are_refused_naming_what_convert_takes() -> None:
    pa = pytest.importorskip("pyarrow")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing of pyarrow's own (its legacy-capsule warning) reaches the user
        for to in ("numpy", "torch"):
            with pytest.raises(ValueError, match=r"1 nulls and a tensor has no missing values: fill them first "
                                                 r".*bridge\.from_arrow\(x, with_mask=True\)"):  # fmt: skip
                bridge.convert(pa.array([1, None, 3]), to)
    values, valid = bridge.from_arrow(pa.array([1, None, 3]), with_mask=True)  # the way named
    assert bridge.convert(valid, np).tolist() == [True, False, True]
    assert bridge.convert(values, np)[valid.numpy()].tolist() == [1, 3]


def test_big_endian_arrays_are_one_named_byte_swapping_copy() -> None:
    a = np.arange(6, dtype=">i4").reshape(2, 3)
    for to in ("numpy", "torch", "bridge"):
        with pytest.warns(bridge.CopyWarning) as caught:
            out = bridge.convert(a, to)
        assert _kinds(caught) == ["byte-order"]
        got = out if to == "numpy" else out.numpy()
        assert got.dtype == np.dtype("<i4") and got.tolist() == a.tolist()
        with pytest.raises(BufferError, match="non-native byte order"):
            bridge.convert(a, to, copy=False)


def test_size_one_dims_carry_no_stride_a_destination_refuses() -> None:
    """A dim of one element says nothing with its stride; bridge hands it over
    as the row-major one, and a contiguous copy is row-major in every dim."""
    mx = pytest.importorskip("mlx.core")
    for a in (np.arange(5, dtype=np.float32)[::-1][:1],
              np.arange(10, dtype=np.float32).reshape(5, 2)[::-1][:1]):  # fmt: skip
        assert a.strides[0] < 0
        for copy in (None, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", bridge.CopyWarning)  # mlx copies every import
                assert np.array_equal(np.asarray(bridge.convert(a, mx, copy=copy)), a)
    t = bridge.arange(5, dtype=bridge.float32).flip(0)[:1]
    assert t.stride() == (-1,)
    assert t.clone(memory_format=bridge.contiguous_format).stride() == (1,)  # as torch's
    for _ in range(2):  # the general path, then the fast one
        x = bridge.convert(t, torch)
        assert x.stride() == (1,) and x.tolist() == [4.0] and x.data_ptr() == t.data_ptr()
    assert np.from_dlpack(t).strides == (-4,)  # __dlpack__ keeps the view's own, as NumPy's and torch's do
