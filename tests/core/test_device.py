"""Devices: parsing, equality, DLPack mapping."""

from __future__ import annotations

import pickle

import pytest

import bridge
from bridge.core.device import device


def test_forms():
    assert str(device("cpu")) == "cpu" and device("cpu").index is None
    assert device("cuda").index is None
    assert device("cuda:1") == device("cuda", 1) == device(("cuda", 1)) == device(1)
    assert device("cuda:1").type == "cuda" and device("cuda:1").index == 1
    assert device(device("cuda:2")) == device("cuda:2")
    assert device("CUDA:0") == "cuda:0"
    assert repr(device("cuda:1")) == "device(type='cuda', index=1)"
    assert bridge.device is device


def test_aliases():
    assert device("xpu:0").type == "oneapi"
    assert device("hip").type == "rocm"


def test_dlpack_mapping_round_trips_every_type():
    for name, code in [("cpu", 1), ("cuda", 2), ("cuda_host", 3), ("opencl", 4), ("vulkan", 7),
                       ("metal", 8), ("vpi", 9), ("rocm", 10), ("rocm_host", 11), ("ext_dev", 12),
                       ("cuda_managed", 13), ("oneapi", 14), ("webgpu", 15), ("hexagon", 16),
                       ("maia", 17), ("trn", 18)]:  # fmt: skip
        d = device(name, 0) if name != "cpu" else device(name)
        assert d.to_dlpack() == (code, 0)
        assert device.from_dlpack(code, 0) == d
    assert device.from_dlpack(2, 3) == device("cuda:3")


def test_hash_and_pickle():
    assert len({device("cuda:0"), device("cuda", 0), device("cpu")}) == 2
    assert pickle.loads(pickle.dumps(device("cuda:1"))) == device("cuda:1")


@pytest.mark.parametrize("bad", ["meta", "cuda:x", "cuda:-1", "", "cuda:1:2"])
def test_bad_strings_raise_value_error(bad):
    with pytest.raises(ValueError):
        device(bad)


def test_bad_index_raises():
    with pytest.raises(ValueError, match="non-negative"):
        device("cuda", -1)
    with pytest.raises(ValueError, match="already has an index"):
        device("cuda:0", 1)
    with pytest.raises(ValueError, match="cpu has only index 0"):
        device("cpu", 1)
    with pytest.raises(TypeError):
        device("cuda", 1.5)


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError):
        device(1.0)
    with pytest.raises(TypeError):
        device(("cuda",))


def test_unknown_dlpack_device_type():
    with pytest.raises(ValueError, match="unknown DLPack device type 5"):
        device.from_dlpack(5, 0)


def test_host_accessible():
    assert device("cpu").is_host_accessible
    assert device("cuda_host", 0).is_host_accessible
    assert not device("cuda:0").is_host_accessible


# ------------------------------------------------- device exchange and foreign devices


class ExchangeDevice:
    """A hand-made foreign device speaking the device exchange protocol."""

    def __init__(self, answer):
        self.answer = answer

    def __dlpack_device__(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def __repr__(self):
        return f"ExchangeDevice({self.answer!r})"


ALL_TYPES = [("cpu", 1), ("cuda", 2), ("cuda_host", 3), ("opencl", 4), ("vulkan", 7), ("metal", 8), ("vpi", 9),
             ("rocm", 10), ("rocm_host", 11), ("ext_dev", 12), ("cuda_managed", 13), ("oneapi", 14),
             ("webgpu", 15), ("hexagon", 16), ("maia", 17), ("trn", 18)]  # fmt: skip


def test_every_device_speaks_the_exchange_protocol():
    for name, code in ALL_TYPES:
        d = device(name) if name == "cpu" else device(name, 2)
        assert d.__dlpack_device__() == d.to_dlpack() == (code, 0 if name == "cpu" else 2)
        assert device(ExchangeDevice(d.__dlpack_device__())) == d
    assert device("cuda").__dlpack_device__() == (2, 0)


def test_torch_devices(torch):
    assert device(torch.device("cpu")) == device("cpu")
    assert device(torch.device("cuda", 1)) == device("cuda:1")
    assert device(torch.device("cuda")) == device("cuda") and device(torch.device("cuda")).index is None
    assert device(torch.device("mps")).type == "metal"
    assert device(torch.device("xpu:2")) == device("oneapi", 2)


def test_torch_device_without_equivalent_is_a_value_error(torch):
    with pytest.raises(ValueError, match="unknown device type 'meta'"):
        device(torch.device("meta"))


def test_a_tensor_is_not_a_device():
    with pytest.raises(TypeError, match="got a tensor"):
        device(bridge.zeros(1))


def test_a_foreign_tensor_is_not_a_device(torch):
    with pytest.raises(TypeError, match=r"got a tensor \(torch\.Tensor\)"):
        device(torch.zeros(1))


def test_foreign_device_with_an_index_is_a_type_error():
    with pytest.raises(TypeError, match="has its own index"):
        device(ExchangeDevice((2, 0)), 1)


def test_exchange_unknown_device_type_is_a_value_error():
    with pytest.raises(ValueError, match="DLPack device type 99, which bridge has no name for"):
        device(ExchangeDevice((99, 0)))


def test_exchange_negative_id_is_a_value_error():
    with pytest.raises(ValueError, match="negative device id -1"):
        device(ExchangeDevice((2, -1)))


@pytest.mark.parametrize("answer", [(2,), "cuda", (2.0, 0), (True, 0), None])
def test_exchange_malformed_answer_is_a_type_error(answer):
    with pytest.raises(TypeError, match="not a \\(device_type, device_id\\) tuple of ints"):
        device(ExchangeDevice(answer))


def test_exchange_method_that_raises_is_a_type_error():
    with pytest.raises(TypeError, match="its __dlpack_device__\\(\\) raised RuntimeError: gone"):
        device(ExchangeDevice(RuntimeError("gone")))


def test_is_device_like():
    from bridge.core.device import is_device_like

    assert is_device_like(device("cpu")) and is_device_like(ExchangeDevice((1, 0)))
    assert not is_device_like("cpu") and not is_device_like(bridge.zeros(1)) and not is_device_like(bridge.float32)


def test_foreign_devices_wherever_a_device_is_taken():
    cpu = ExchangeDevice((1, 0))
    t = bridge.zeros(2, 2)
    results = {
        "empty": bridge.empty(2, device=cpu), "empty(fmt)": bridge.empty(1, 2, 1, 1, device=cpu,
                                                                        memory_format=bridge.channels_last),
        "zeros": bridge.zeros(2, device=cpu), "ones": bridge.ones(2, device=cpu),
        "full": bridge.full((2,), 1.0, device=cpu), "arange": bridge.arange(2, device=cpu),
        "tensor": bridge.tensor([1.0], device=cpu), "empty_strided": bridge.empty_strided((2,), (1,), device=cpu),
        "empty_like": bridge.empty_like(t, device=cpu), "to": t.to(cpu), "to(device=)": t.to(device=cpu),
        "to(device, dtype)": t.to(cpu, bridge.float64), "new_empty": t.new_empty(2, device=cpu),
        "new_ones": t.new_ones(2, device=cpu), "as_tensor": bridge.as_tensor([1.0], device=cpu),
        "asarray": bridge.asarray(t, device=cpu), "from_dlpack": bridge.from_dlpack(t, device=cpu),
        "UntypedStorage": bridge.UntypedStorage(4, device=cpu),
    }  # fmt: skip
    for where, got in results.items():
        assert got.device == device("cpu"), where
    assert t.to(cpu, bridge.float64).dtype is bridge.float64


def test_torch_dtype_and_device_together(torch):
    out = bridge.empty(2, dtype=torch.float16, device=torch.device("cpu"))
    assert out.dtype is bridge.float16 and out.device == device("cpu") and out.shape == (2,)
    assert bridge.zeros(2).to(torch.device("cpu"), torch.int32).dtype is bridge.int32


def test_foreign_device_bridge_cannot_allocate_on_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="only CPU memory"):
        bridge.empty(2, device=ExchangeDevice((2, 0)))


class StrDevice(str):
    """A device that is a str subclass, as paddle's are ("gpu:0")."""

    def __dlpack_device__(self):
        return (2, 1)


def test_a_str_device_speaking_the_protocol_is_read_through_it():
    assert device(StrDevice("gpu")) == device("cuda:1")  # the protocol, not the text
    from bridge.core.device import is_device_like

    assert is_device_like(StrDevice("cpu")) and not is_device_like("cpu")
    with pytest.raises(RuntimeError, match="cannot move memory from cpu to cuda:1"):
        bridge.zeros(2).to(StrDevice("cpu"))


def test_from_dlpack_device_that_is_no_device_is_a_type_error():
    with pytest.raises(TypeError, match="expects a string, tuple, int or device object"):
        bridge.from_dlpack(bridge.zeros(2), device=object())
