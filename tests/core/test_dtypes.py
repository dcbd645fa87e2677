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
    assert bridge.get_dtype(float) is bridge.float32
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
