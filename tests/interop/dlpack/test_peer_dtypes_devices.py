"""The dtype and device exchange with the peers that speak it or have their own
types: paddle (``__dlpack_data_type__``/``__dlpack_device__``), tvm-ffi, jax and
MLX. The mapping itself is bridge.core's (tests/core/test_dtypes.py and
test_device.py test it with hand-made objects, NumPy, ml_dtypes and torch);
these peers start threads, so they are imported here, not in tests/core,
whose fork tests must not inherit them."""

from __future__ import annotations

import pytest

import bridge
from bridge.core.device import device

PADDLE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]  # fmt: skip


def test_jax_dtypes():
    jnp = pytest.importorskip("jax.numpy")
    assert bridge.get_dtype(jnp.bfloat16) is bridge.bfloat16
    assert bridge.get_dtype(jnp.float32) is bridge.float32
    assert bridge.get_dtype(jnp.dtype("float8_e4m3fn")) is bridge.float8_e4m3fn
    assert bridge.empty(2, dtype=jnp.int16).dtype is bridge.int16


def test_tvm_ffi_dtypes():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    for dt in bridge.all_dtypes():
        if dt.is_complex:  # tvm-ffi has no complex names
            continue
        tdt = tvm_ffi.dtype(dt.name)
        assert bridge.get_dtype(tdt) is dt
        assert (tdt.type_code, tdt.bits, tdt.lanes) == dt.__dlpack_data_type__()


def test_tvm_ffi_vector_dtype_is_a_type_error():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    with pytest.raises(TypeError, match="4 lanes"):
        bridge.get_dtype(tvm_ffi.dtype("float32x4"))


def test_paddle_dtypes_through_the_protocol():
    paddle = pytest.importorskip("paddle")
    for name in PADDLE_NAMES:
        pdt = getattr(paddle, name)
        assert bridge.get_dtype(pdt).name == name
        assert bridge.get_dtype(pdt).__dlpack_data_type__() == pdt.__dlpack_data_type__()
    # paddle's dtypes are int-valued enums: view() reads them as dtypes, not sizes.
    assert bridge.zeros(4).view(paddle.float16).shape == (8,)
    assert bridge.empty(2, dtype=paddle.bfloat16).dtype is bridge.bfloat16


def test_paddle_dtype_without_equivalent_is_a_type_error():
    paddle = pytest.importorskip("paddle")
    with pytest.raises(TypeError, match="has no bridge dtype"):
        bridge.get_dtype(paddle.pstring)  # (0, 0, 0)


def test_mlx_dtypes_by_their_names():
    mx = pytest.importorskip("mlx.core")
    assert bridge.get_dtype(mx.float32) is bridge.float32
    assert bridge.get_dtype(mx.bfloat16) is bridge.bfloat16


def test_tvm_ffi_jax_and_paddle_devices():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    assert device(tvm_ffi.device("cpu")) == device("cpu")
    assert device(tvm_ffi.device("cuda:3")) == device("cuda:3")
    jax = pytest.importorskip("jax")
    assert device(jax.devices("cpu")[0]) == device("cpu")
    paddle = pytest.importorskip("paddle")
    assert device(paddle.CPUPlace()) == device("cpu")
    x = paddle.arange(4).astype("float32")
    # paddle's Tensor.device is a str subclass with __dlpack_device__.
    assert device(x.device) == device("cpu") and device(x.place) == device("cpu")
    assert bridge.zeros(2).to(x.device, x.dtype).dtype is bridge.float32


def test_a_producer_refusing_dl_device_keeps_its_buffer_error() -> None:
    """A producer whose __dlpack__ refuses dl_device (cuda-core's
    StridedMemoryView refuses even its own device) gets its BufferError back
    from from_dlpack(x, device="cpu"): its __dlpack_device__ is asked with the
    refusal set aside, not called with an exception pending (a SystemError)."""
    import numpy as np

    class Refuses:
        def __init__(self) -> None:
            self.a = np.arange(4.0)

        def __dlpack__(self, *, stream: object = None, max_version: object = None, dl_device: object = None,
                       copy: object = None) -> object:  # fmt: skip
            if dl_device is not None:
                raise BufferError("not supported: dl_device other than None")
            return self.a.__dlpack__(max_version=max_version)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    with pytest.raises(BufferError, match="dl_device other than None"):
        bridge.from_dlpack(Refuses(), device="cpu")
    assert bridge.from_dlpack(Refuses()).tolist() == [0.0, 1.0, 2.0, 3.0]
