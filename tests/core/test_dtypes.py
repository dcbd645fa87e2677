"""dtypes: metadata, NumPy/DLPack mapping, promotion against PyTorch."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

import bridge
from bridge.core import dtypes as _dtypes

TORCH_NAMES = [
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
]  # fmt: skip


def test_every_dtype_metadata_is_consistent():
    for dt in bridge.all_dtypes():
        code, bits, lanes = dt.dlpack
        assert lanes == 1
        assert _dtypes.from_dlpack_code(code, bits) is dt
        assert dt.itemsize == max(bits // 8, 1)
        assert sum([dt.is_bool, dt.is_integral, dt.is_floating_point, dt.is_complex]) == 1
        assert bridge.get_dtype(dt.name) is dt
        assert pickle.loads(pickle.dumps(dt)) is dt


def test_numpy_dtypes_match_itemsize():
    for dt in bridge.all_dtypes():
        assert dt.numpy_dtype.itemsize == dt.itemsize, dt
        assert dt.bit_numpy_dtype.itemsize == dt.itemsize
        assert _dtypes.from_numpy_dtype(dt.numpy_dtype) is dt


def test_dlpack_codes_follow_the_spec():
    assert bridge.bool.dlpack == (6, 8, 1)
    assert bridge.bfloat16.dlpack == (4, 16, 1)
    assert bridge.complex64.dlpack == (5, 64, 1)
    assert bridge.float8_e4m3fn.dlpack == (10, 8, 1)
    assert bridge.float8_e8m0fnu.dlpack == (14, 8, 1)
    assert bridge.float4_e2m1fn.dlpack == (17, 4, 1)
    assert bridge.uint16.dlpack == (1, 16, 1)


def test_arrow_formats():
    assert bridge.float32.arrow_format == "f"
    assert bridge.float16.arrow_format == "e"
    assert bridge.uint64.arrow_format == "L"
    assert bridge.complex64.arrow_format is None


def test_aliases_and_specs():
    assert bridge.float is bridge.float32 and bridge.half is bridge.float16
    assert bridge.long is bridge.int64 and bridge.int is bridge.int32
    assert bridge.get_dtype(np.float64) is bridge.float64
    assert bridge.get_dtype("torch.bfloat16") is bridge.bfloat16
    assert bridge.get_dtype(float) is bridge.float64  # as torch.empty(2, dtype=float)
    assert bridge.get_dtype(int) is bridge.int64


def test_torch_dtype_objects_are_accepted(torch):
    for name in TORCH_NAMES:
        assert bridge.get_dtype(getattr(torch, name)).name == name


def test_unknown_dtype_string_raises():
    with pytest.raises(TypeError, match="unknown dtype 'float33'"):
        bridge.get_dtype("float33")


def test_unrepresentable_numpy_dtypes_raise():
    with pytest.raises(TypeError, match="structured"):
        _dtypes.from_numpy_dtype([("a", "i4"), ("b", "f4")])
    with pytest.raises(TypeError):
        _dtypes.from_numpy_dtype(object)
    with pytest.raises(ValueError, match="byte order"):
        _dtypes.from_numpy_dtype(np.dtype(">i4") if np.little_endian else np.dtype("<i4"))


def test_dtype_cannot_be_constructed():
    with pytest.raises(TypeError):
        bridge.dtype()


def test_promote_types_matches_torch(torch):
    for a, b in itertools.product(TORCH_NAMES, TORCH_NAMES):
        try:
            expected = str(torch.promote_types(getattr(torch, a), getattr(torch, b)))[6:]
        except RuntimeError:
            expected = "error"
        try:
            got = bridge.promote_types(a, b).name
        except TypeError:
            got = "error"
        assert got == expected, (a, b)


def test_can_cast_matches_torch(torch):
    for a, b in itertools.product(TORCH_NAMES, TORCH_NAMES):
        expected = torch.can_cast(getattr(torch, a), getattr(torch, b))
        assert bridge.can_cast(a, b) == expected, (a, b)


def test_promote_types_without_torch():
    assert bridge.promote_types(bridge.uint8, bridge.int8) is bridge.int16
    assert bridge.promote_types(bridge.float16, bridge.bfloat16) is bridge.float32
    assert bridge.promote_types(bridge.complex64, bridge.float64) is bridge.complex128
    assert bridge.promote_types(bridge.bool, bridge.int32) is bridge.int32
    with pytest.raises(TypeError, match="not defined"):
        bridge.promote_types(bridge.float8_e4m3fn, bridge.float32)
    with pytest.raises(TypeError, match="not defined"):
        bridge.promote_types(bridge.uint16, bridge.int32)


def test_can_cast_rules():
    assert not bridge.can_cast(bridge.float32, bridge.int32)
    assert not bridge.can_cast(bridge.int32, bridge.bool)
    assert not bridge.can_cast(bridge.complex64, bridge.float64)
    assert bridge.can_cast(bridge.int64, bridge.float16)
    assert bridge.can_cast(bridge.bool, bridge.uint8)


def test_result_type_matches_torch(torch):
    cases = [
        (([3], "float16"), 1j),
        (([3], "int8"), ((), "int64")),
        (([3], "int32"), ((), "float64")),
        (([3], "uint8"), -1),
        (([3], "int32"), 2.5),
        (([3], "bool"), 2),
        (((), "int32"), 2.5),
        (((), "float64"), ([2], "float16")),
        (([2], "bfloat16"), ((), "complex128")),
        (([2], "float64"), 1j),
        (3, 2.5),
        (True, 1),
    ]
    for x, y in cases:
        def mk(v, lib):
            if isinstance(v, tuple):
                shape, name = v
                if lib is torch:
                    return torch.zeros(shape, dtype=getattr(torch, name))
                return bridge.zeros(shape, dtype=name)
            return v

        expected = str(torch.result_type(mk(x, torch), mk(y, torch)))[6:]
        got = bridge.result_type(mk(x, bridge), mk(y, bridge)).name
        if expected == "complex32":  # bridge has no complex32 (documented)
            expected = "complex64"
        assert got == expected, (x, y)


def test_result_type_needs_an_operand():
    with pytest.raises(TypeError):
        bridge.result_type()


def test_ml_dtypes_missing_gives_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    monkeypatch.setattr(bridge.bfloat16, "_np", None)  # forget the NumPy dtype found before
    with pytest.raises(TypeError, match="ml_dtypes"):
        _ = bridge.bfloat16.numpy_dtype
    assert not bridge.bfloat16.has_numpy_dtype


def test_np_dtype_of_a_bridge_dtype():
    """np.dtype(x.dtype), as dask, xarray and da.from_array call it."""
    for dt in bridge.all_dtypes():
        assert np.dtype(dt) == dt.numpy_dtype == dt.dtype
    assert np.dtype(bridge.float32) == np.float32
    assert np.dtype(bridge.bool) == np.bool_
    assert str(np.dtype(bridge.bfloat16)) == "bfloat16"
    assert np.zeros(2, dtype=bridge.int16).dtype == np.int16


# ------------------------------------------------- dtype exchange and foreign dtypes


class ExchangeDType:
    """A hand-made foreign dtype speaking the dtype exchange protocol."""

    def __init__(self, answer):
        self.answer = answer

    def __dlpack_data_type__(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def __repr__(self):
        return f"ExchangeDType({self.answer!r})"


class IntLikeDType(ExchangeDType):
    """An int-valued dtype, as paddle's enums are (view() must not read it as a size)."""

    def __index__(self):
        return 15


def test_every_dtype_speaks_the_exchange_protocol():
    for dt in bridge.all_dtypes():
        assert dt.__dlpack_data_type__() == dt.dlpack
        assert bridge.get_dtype(ExchangeDType(dt.dlpack)) is dt


def test_python_types_mean_what_torch_means(torch):
    for py in (bool, int, float, complex):
        want = str(torch.empty(2, dtype=py).dtype).removeprefix("torch.")
        assert bridge.get_dtype(py).name == want
        assert bridge.empty(2, dtype=py).dtype.name == want
        assert bridge.zeros(2).to(py).dtype.name == str(torch.zeros(2).to(py).dtype).removeprefix("torch.")
    assert bridge.get_dtype(float) is bridge.float64 and bridge.get_dtype(complex) is bridge.complex128
    # The name "float" is torch's alias of float32, as torch.float is.
    assert bridge.get_dtype("float") is bridge.float32 and torch.float is torch.float32


def test_every_torch_dtype_maps_or_names_itself(torch):
    names = {d.name for d in bridge.all_dtypes()}
    torch_dtypes = {getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    mapped = 0
    for tdt in torch_dtypes:
        name = str(tdt).removeprefix("torch.")
        if name in names:
            mapped += 1
            assert bridge.get_dtype(tdt).name == name
            got = bridge.empty(2, dtype=tdt)
            assert got.element_size() == torch.empty(2, dtype=tdt).element_size()
        else:
            with pytest.raises(TypeError, match=f"torch.{name} has no bridge dtype"):
                bridge.get_dtype(tdt)
    assert mapped >= len(TORCH_NAMES)


def test_torch_dtype_without_equivalent_is_a_type_error(torch):
    with pytest.raises(TypeError, match=r"torch\.complex32 has no bridge dtype"):
        bridge.empty(2, dtype=torch.complex32)


def test_numpy_dtypes_scalar_types_and_strings():
    for dt in bridge.all_dtypes():
        assert bridge.get_dtype(dt.numpy_dtype) is dt
        assert bridge.get_dtype(dt.numpy_dtype.type) is dt
    for np_type in (np.bool_, np.int8, np.uint16, np.int64, np.float16, np.float64, np.complex64):
        assert bridge.get_dtype(np_type).numpy_dtype == np.dtype(np_type)
    assert bridge.get_dtype("<f4") is bridge.float32  # an array interface typestr
    assert bridge.get_dtype("i8") is bridge.int64
    assert bridge.get_dtype(" float16 ") is bridge.float16


def test_numpy_dtype_of_other_byte_order_is_a_value_error():
    with pytest.raises(ValueError, match="byte order"):
        bridge.get_dtype(">f4" if np.little_endian else "<f4")


def test_ml_dtypes_types():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dt in bridge.all_dtypes():
        if dt._np_name.startswith("ml_dtypes.") and hasattr(ml_dtypes, dt.name):
            assert bridge.get_dtype(getattr(ml_dtypes, dt.name)) is dt
            assert bridge.get_dtype(np.dtype(getattr(ml_dtypes, dt.name))) is dt


def test_ml_dtypes_type_without_equivalent_is_a_type_error():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="int4"):
        bridge.get_dtype(ml_dtypes.int4)


def test_exchange_vector_type_is_a_type_error():
    with pytest.raises(TypeError, match="2 lanes"):
        bridge.get_dtype(ExchangeDType((2, 32, 2)))


def test_exchange_unknown_code_is_a_type_error():
    with pytest.raises(TypeError, match=r"ExchangeDType\(\(99, 8, 1\)\) \(DLPack code 99, 8 bits, 1 lanes\) has no"):
        bridge.get_dtype(ExchangeDType((99, 8, 1)))


def test_exchange_zero_lanes_is_a_type_error():
    with pytest.raises(TypeError, match=r"0 lanes\) has no bridge dtype"):
        bridge.get_dtype(ExchangeDType((0, 0, 0)))


@pytest.mark.parametrize("answer", [(2, 32), "float32", (2.0, 32, 1), (2, 32, True), None])
def test_exchange_malformed_answer_is_a_type_error(answer):
    with pytest.raises(TypeError, match="not a \\(code, bits, lanes\\) tuple of ints"):
        bridge.get_dtype(ExchangeDType(answer))


def test_exchange_method_that_raises_is_a_type_error():
    with pytest.raises(TypeError, match="its __dlpack_data_type__\\(\\) raised ValueError: undefined"):
        bridge.get_dtype(ExchangeDType(ValueError("undefined")))


def test_unknown_name_lists_close_ones():
    with pytest.raises(TypeError, match=r"unknown dtype 'flaot16'; did you mean float16, "):
        bridge.get_dtype("flaot16")


def test_unknown_name_with_one_close_one():
    with pytest.raises(TypeError, match=r"unknown dtype 'halff'; did you mean half\?$"):
        bridge.get_dtype("halff")


def test_unknown_name_with_none_close_lists_all():
    with pytest.raises(TypeError, match="unknown dtype 'xyz'; known: bool, uint8"):
        bridge.get_dtype("xyz")


def test_none_is_not_a_dtype():
    with pytest.raises(TypeError, match="dtype None"):
        bridge.get_dtype(None)


def test_an_object_is_not_a_dtype():
    with pytest.raises(TypeError, match="cannot interpret 3 as a dtype"):
        bridge.get_dtype(3)


def test_foreign_dtypes_wherever_a_dtype_is_taken():
    """Every API that takes a dtype reads it through get_dtype (hand-made
    protocol dtype: float16; Python's float: float64)."""
    f16 = ExchangeDType((2, 16, 1))
    t = bridge.zeros(2, 2)
    results = {
        "empty": bridge.empty(2, dtype=f16), "zeros": bridge.zeros(2, dtype=f16), "ones": bridge.ones(2, dtype=f16),
        "full": bridge.full((2,), 1, dtype=f16), "arange": bridge.arange(3, dtype=f16),
        "tensor": bridge.tensor([1, 2], dtype=f16), "empty_strided": bridge.empty_strided((2,), (1,), dtype=f16),
        "empty_like": bridge.empty_like(t, dtype=f16), "zeros_like": bridge.zeros_like(t, dtype=f16),
        "to": t.to(f16), "to(dtype=)": t.to(dtype=f16), "type": t.type(f16), "view": t.view(f16),
        "view(dtype=)": t.view(dtype=f16), "new_empty": t.new_empty(2, dtype=f16),
        "new_zeros": t.new_zeros(2, dtype=f16), "new_full": t.new_full((2,), 1, dtype=f16),
        "new_tensor": t.new_tensor([1], dtype=f16), "as_tensor": bridge.as_tensor([1.0], dtype=f16),
        "asarray": bridge.asarray(np.zeros(2), dtype=f16), "frombuffer": bridge.frombuffer(bytearray(4), dtype=f16),
    }  # fmt: skip
    for where, got in results.items():
        assert got.dtype is bridge.float16, where
    assert bridge.zeros(2).view(IntLikeDType((0, 16, 1))).dtype is bridge.int16
    assert bridge.promote_types(f16, float) is bridge.float64
    assert bridge.finfo(f16).bits == 16 and bridge.iinfo(int).bits == 64
    assert bridge.empty(2, dtype=float).dtype is bridge.float64


def test_an_int_enum_is_still_a_size_for_view():
    import enum

    class Four(enum.IntEnum):
        n = 4

    assert bridge.zeros(2, 2).view(Four.n).shape == (4,)


def test_view_with_other_keywords_is_a_type_error():
    with pytest.raises(TypeError, match="view\\(\\) takes sizes or one dtype"):
        bridge.zeros(4).view(dtype=bridge.int32, size=(4,))
