"""The destination table against the installed libraries: each DLPack
destination's own import, handed a bridge tensor of each dtype, keeps exactly
the dtypes its record says it holds, and takes (or refuses) the strides and
alignment the record says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import bridge
from bridge.crossing import destinations
from bridge.crossing.capabilities import DESTINATIONS, SUB_BYTE
from bridge.kit.matrix_frameworks import dtype_name


def _raw(dest: str) -> tuple[Callable[[Any], Any], Callable[[Any], str]]:
    """The destination's own DLPack import, and how to name its result's dtype."""
    if dest == "numpy":
        return np.from_dlpack, lambda r: dtype_name(r.dtype)
    if dest == "torch":
        import torch

        return torch.from_dlpack, lambda r: dtype_name(r.dtype)
    if dest == "jax":
        import jax.dlpack

        return jax.dlpack.from_dlpack, lambda r: dtype_name(r.dtype)
    if dest == "paddle":
        import paddle

        return paddle.from_dlpack, lambda r: dtype_name(r.dtype)
    if dest == "tvm_ffi":
        import tvm_ffi

        return tvm_ffi.from_dlpack, lambda r: str(r.dtype)
    if dest == "mlx":
        import mlx.core as mx

        return mx.from_dlpack, lambda r: dtype_name(r.dtype)
    import onnxruntime as ort

    # onnxruntime names float8e4m3fn, float8e8m0: bridge's names without the underscore
    return ort.OrtValue.from_dlpack, lambda r: dtype_name(r.data_type())


DLPACK = [d for d in ("numpy", "torch", "jax", "paddle", "tvm_ffi", "mlx", "onnxruntime")
          if d in destinations.installed()]  # fmt: skip
WHOLE_BYTE = [d.name for d in bridge.all_dtypes() if d.name not in SUB_BYTE]


_ORT_NAMES = {"float8e8m0": "float8_e8m0fnu"}  # onnxruntime's name for the one it spells differently


def _same(bridge_name: str, theirs: str) -> bool:
    return _ORT_NAMES.get(theirs, theirs).replace("_", "") == bridge_name.replace("_", "")


@pytest.mark.parametrize("dest", DLPACK)
def test_the_dtypes_held_are_the_dtypes_kept(dest: str) -> None:
    h = destinations.resolve(dest)  # jax: as configured now (64-bit types with jax_enable_x64 only)
    take, name_of = _raw(dest)
    wrong = []
    for name in WHOLE_BYTE:
        try:
            kept = _same(name, name_of(take(bridge.zeros(4, dtype=name))))
        except Exception:  # each library refuses with its own exception type
            kept = False
        if kept != (name in h.dtypes):
            wrong.append(f"{name}: {'kept' if kept else 'not kept'}")
    assert not wrong, f"{dest}'s record disagrees with {dest}: {wrong}"


def test_no_destination_claims_the_padded_sub_byte_types() -> None:
    # bridge stores float6/float4 one element a byte; the libraries that name
    # these types pack them, so only bridge (and NumPy through ml_dtypes) hold them.
    for name, h in DESTINATIONS.items():
        if name != "bridge":
            assert not (h.dtypes & SUB_BYTE), name


def test_jax_refuses_what_its_record_says() -> None:
    jax = pytest.importorskip("jax")
    h = DESTINATIONS["jax"]
    assert h.strides == "compact" and not h.zero_strides and h.alignment == 64
    x = bridge.arange(64, dtype=bridge.float32)
    with pytest.raises(Exception, match="compact"):
        jax.dlpack.from_dlpack(x.reshape(8, 8)[:, :2])
    with pytest.raises(ValueError, match="aligned to 64"):
        jax.dlpack.from_dlpack(x[1:], copy=False)
    assert jax.dlpack.from_dlpack(x.reshape(8, 8).t()).unsafe_buffer_pointer() == x.data_ptr()


def test_onnxruntime_refuses_what_its_record_says() -> None:
    ort = pytest.importorskip("onnxruntime")
    assert DESTINATIONS["onnxruntime"].strides == "contiguous"
    with pytest.raises(RuntimeError, match="Contiguous"):
        ort.OrtValue.from_dlpack(bridge.zeros(4, 4).t())


def test_legacy_capsule_destinations_ask_for_one() -> None:
    # read-only memory cannot be a legacy capsule: the destinations asking for one refuse it
    frozen = np.zeros(4, dtype=np.float32)
    frozen.flags.writeable = False
    t = bridge.from_numpy(frozen)
    for name, h in DESTINATIONS.items():
        if name not in DLPACK:
            continue
        take, _ = _raw(name)
        try:
            take(t)
            refused = False
        except BufferError as err:
            refused = "legacy" in str(err)
        assert refused == (h.capsule == "legacy"), name
