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


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:-1", "", "cuda:1:2"])
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
