"""The C device table (cdefs/core/devices.c): the one description of a device
kind, read by bridge.device, the DLPack importer, Arrow's device mapping and
the rule for which devices bridge copies between. Checked against dlpack.h's
enum (through cffi) and the Arrow C Device Interface's values."""

from __future__ import annotations

import pytest
from bridge._native import ffi, lib

import bridge

# DLPack's DLDeviceType (v1.3 plus its main branch) and bridge's names.
DLPACK = {"cpu": lib.kDLCPU, "cuda": lib.kDLCUDA, "cuda_host": lib.kDLCUDAHost, "opencl": lib.kDLOpenCL,
          "vulkan": lib.kDLVulkan, "metal": lib.kDLMetal, "vpi": lib.kDLVPI, "rocm": lib.kDLROCM,
          "rocm_host": lib.kDLROCMHost, "ext_dev": lib.kDLExtDev, "cuda_managed": lib.kDLCUDAManaged,
          "oneapi": lib.kDLOneAPI, "webgpu": lib.kDLWebGPU, "hexagon": lib.kDLHexagon, "maia": lib.kDLMAIA,
          "trn": lib.kDLTrn, "tpu": lib.kDLTPU, "tpu_host": lib.kDLTPUHost, "ascend": lib.kDLAscend}  # fmt: skip
HOST = {"cpu", "cuda_host", "rocm_host", "cuda_managed", "tpu_host"}


def test_the_table_names_every_dlpack_device_type() -> None:
    assert (lib.kDLTPU, lib.kDLTPUHost, lib.kDLAscend, lib.kDLBcomplex) == (19, 20, 21, 18)
    known = {}
    i = 0
    while code := lib.bridge_device_type_at(i):
        known[ffi.string(lib.bridge_device_name(code)).decode()] = code
        i += 1
    assert known == DLPACK
    assert lib.bridge_device_name(0) == ffi.NULL and lib.bridge_device_name(22) == ffi.NULL


@pytest.mark.parametrize("name", sorted(DLPACK))
def test_bridge_devices_follow_the_table(name: str) -> None:
    d = bridge.device(name, None if name == "cpu" else 1)
    assert d.to_dlpack() == (DLPACK[name], 0 if name == "cpu" else 1)
    assert bridge.device.from_dlpack(*d.to_dlpack()) == d
    assert d.is_host_accessible == (name in HOST) == bool(lib.bridge_host_accessible(DLPACK[name]))


def test_arrow_device_types_both_ways() -> None:
    """Arrow's device types take DLPack's values; bridge exchanges CPU, CUDA
    and CUDA host memory through Arrow."""
    pairs = {lib.kDLCPU: lib.ARROW_DEVICE_CPU, lib.kDLCUDA: lib.ARROW_DEVICE_CUDA,
             lib.kDLCUDAHost: lib.ARROW_DEVICE_CUDA_HOST}  # fmt: skip
    for code in DLPACK.values():
        assert lib.bridge_device_to_arrow(code) == pairs.get(code, 0)
    for code, arrow in pairs.items():
        assert lib.bridge_device_from_arrow(arrow) == code
    assert lib.bridge_device_from_arrow(0) == 0 and lib.bridge_device_from_arrow(lib.kDLROCM) == 0


def test_an_arrow_device_array_on_a_device_arrow_is_not_exchanged_for() -> None:
    from bridge.interop.arrow.imports import _device_of

    assert bridge.arange(4).__arrow_c_device_array__()[1] is not None  # CPU: exchanged

    assert _device_of(lib.ARROW_DEVICE_CUDA_HOST, 2) == bridge.device("cuda_host", 2)
    assert _device_of(lib.ARROW_DEVICE_CPU, -1) == bridge.device("cpu")
    with pytest.raises(ValueError, match="Arrow device type 10 is not supported"):
        _device_of(10, 0)


@pytest.mark.parametrize("src", sorted(DLPACK))
@pytest.mark.parametrize("dst", sorted(DLPACK))
def test_which_devices_bridge_copies_between(src: str, dst: str) -> None:
    """The CUDA copy engine: one side CUDA, the other CUDA or memory the host
    reads; new copies land in CPU, CUDA or CUDA host memory."""
    want = ("cuda" in (src, dst) and (src == "cuda" or src in HOST) and dst in ("cpu", "cuda", "cuda_host"))
    assert bool(lib.bridge_device_copyable(DLPACK[src], DLPACK[dst])) == want


def test_a_copy_to_a_device_bridge_cannot_reach_says_so() -> None:
    t = bridge.arange(4)
    with pytest.raises(BufferError, match="bridge copies within host memory and between host and CUDA"):
        t.__dlpack__(dl_device=(lib.kDLROCM, 0), copy=True)
