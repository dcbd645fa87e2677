"""bridge.convert against the real destination libraries: zero-copy where the
destination holds the memory (proven by address), each fix with its warning,
its copy=False error and copy=True, the read-only policies, and the errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from convert_helpers import address, importable, source, values

import bridge
from bridge.crossing import destinations
from bridge.crossing.capabilities import DESTINATIONS
from bridge.crossing.convert import CopyWarning, plan

INSTALLED = destinations.installed()
# Destinations whose tensors are writable: read-only memory is copied for them.
WRITES = {n for n, h in DESTINATIONS.items() if h.readonly == "writes" and not h.always_copies}
SOURCES = ["bridge", "numpy", "torch", "jax"]


def _need(dest: str) -> None:
    pytest.importorskip(DESTINATIONS[dest].module)


def _convert_quiet(x: Any, to: Any, **kw: Any) -> Any:
    """convert(), failing the test on any CopyWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CopyWarning)
        return bridge.convert(x, to, **kw)


def _src_address(x: Any) -> int:
    return bridge.asarray(x).data_ptr() if not isinstance(x, bridge.Tensor) else x.data_ptr()


REF = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("dest", INSTALLED)
@pytest.mark.parametrize("src", SOURCES)
def test_every_destination_from_every_source(src: str, dest: str) -> None:
    if src != "numpy":
        pytest.importorskip(src)
    x = source(src, REF)
    h = DESTINATIONS[dest]
    why = ("destination" if h.always_copies else "read-only" if src == "jax" and dest in WRITES  # jax's are read-only
           else "alignment" if h.alignment and _src_address(x) % h.alignment else "")  # fmt: skip
    if why:
        with pytest.warns(CopyWarning) as rec:
            r = bridge.convert(x, dest)
        assert rec[0].message.kind == why  # type: ignore[union-attr]
    else:
        r = _convert_quiet(x, dest)
        assert address(dest, r) == _src_address(x), "the result must share the source's memory"
    np.testing.assert_array_equal(values(dest, r), REF)


@pytest.mark.parametrize("dest", INSTALLED)
def test_copy_true_always_copies(dest: str) -> None:
    x = bridge.tensor(REF)
    kinds = [f.kind for f in plan(x, dest, copy=True).fixes]
    assert kinds == (["destination"] if DESTINATIONS[dest].always_copies else ["requested"])  # one copy, not two
    r = _convert_quiet(x, dest, copy=True)  # asked for: no warning
    assert address(dest, r) != x.data_ptr()
    np.testing.assert_array_equal(values(dest, r), REF)


@pytest.mark.parametrize("dest", INSTALLED)
def test_zero_d_and_zero_size(dest: str) -> None:
    h = DESTINATIONS[dest]
    base = bridge.tensor(REF)
    zero_d = base.reshape(-1)[0]  # offset 0: aligned
    # (Arrow's fixed_shape_tensor export takes no zero-width element: (0, 4), not (3, 0))
    for x in (zero_d, base[2:2], base[1:1, 1]):
        if x.ndim == 0 and not h.zero_d:
            with pytest.raises(BufferError, match="0-d"):
                bridge.convert(x, dest)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CopyWarning)  # mlx copies; empty views may be re-laid
            r = bridge.convert(x, dest)
        got = values(dest, r)
        np.testing.assert_array_equal(got.reshape(np.asarray(x.numpy()).shape), x.numpy())


def test_negative_strides_into_torch_are_a_contiguous_copy() -> None:
    torch = pytest.importorskip("torch")
    x = bridge.tensor(REF).flip(0)
    p = plan(x, torch)
    assert [f.kind for f in p.fixes] == ["layout"] and "negative strides" in p.reasons
    with pytest.warns(CopyWarning, match="negative strides") as rec:
        r = bridge.convert(x, torch)
    assert rec[0].message.kind == "layout"  # type: ignore[union-attr]
    assert r.is_contiguous() and r.data_ptr() != x.data_ptr()
    np.testing.assert_array_equal(r.numpy(), REF[::-1])
    with pytest.raises(BufferError, match="negative strides"):
        bridge.convert(x, torch, copy=False)
    # the same view from NumPy (which torch would abort on)
    with pytest.warns(CopyWarning, match="negative strides"):
        np.testing.assert_array_equal(bridge.convert(REF[::-1, ::-2], torch).numpy(), REF[::-1, ::-2])


def test_jax_takes_compact_views_and_copies_the_rest() -> None:
    jax = pytest.importorskip("jax")
    x = bridge.tensor(REF)
    r = _convert_quiet(x.t(), jax)  # a transposition is compact
    assert r.unsafe_buffer_pointer() == x.data_ptr()
    np.testing.assert_array_equal(np.asarray(r), REF.T)
    with pytest.warns(CopyWarning, match="compact") as rec:
        r = bridge.convert(x[:, :2], jax)  # row-major but with gaps
    assert rec[0].message.kind == "layout"  # type: ignore[union-attr]
    np.testing.assert_array_equal(np.asarray(r), REF[:, :2])
    with pytest.raises(BufferError, match="compact"):
        bridge.convert(x[:, :2], jax, copy=False)


def test_jax_alignment_is_an_aligned_copy() -> None:
    jax = pytest.importorskip("jax")
    x = bridge.arange(64, dtype=bridge.float32)
    aligned = x[16:]  # 64 bytes in
    assert _convert_quiet(aligned, jax).unsafe_buffer_pointer() == aligned.data_ptr()
    unaligned = x[1:]
    with pytest.warns(CopyWarning, match="64-byte aligned") as rec:
        r = bridge.convert(unaligned, jax)
    assert rec[0].message.kind == "alignment"  # type: ignore[union-attr]
    assert r.unsafe_buffer_pointer() % 64 == 0
    np.testing.assert_array_equal(np.asarray(r), np.arange(1, 64, dtype=np.float32))
    with pytest.raises(BufferError, match="aligned"):
        bridge.convert(unaligned, jax, copy=False)


def test_jax_round_trip_through_bridge_shares_read_only_memory() -> None:
    jax = pytest.importorskip("jax")
    a = jax.numpy.arange(16, dtype=jax.numpy.float32)
    t = _convert_quiet(a, bridge)
    assert t.is_readonly and t.data_ptr() == a.unsafe_buffer_pointer()
    p = plan(t, jax)
    assert [f.kind for f in p.fixes] == ["alias"] and not p.copies
    b = _convert_quiet(t, jax)
    assert b.unsafe_buffer_pointer() == a.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(b), np.arange(16, dtype=np.float32))
    # a read-only NumPy array too (numpy -> jax used to fail: jax asks for a legacy capsule)
    ro = np.arange(16, dtype=np.float32)
    ro.flags.writeable = False
    if ro.__array_interface__["data"][0] % 64 == 0:
        assert _convert_quiet(ro, jax).unsafe_buffer_pointer() == ro.__array_interface__["data"][0]
    else:
        with pytest.warns(CopyWarning, match="aligned"):
            np.testing.assert_array_equal(np.asarray(bridge.convert(ro, jax)), ro)


def test_jax_without_x64_refuses_64_bit_dtypes() -> None:
    jax = pytest.importorskip("jax")
    if jax.config.jax_enable_x64:
        assert destinations.resolve(jax).holds_dtype("int64")
        return
    with pytest.raises(BufferError, match="jax_enable_x64"):
        bridge.convert(bridge.arange(4), jax)
    assert not destinations.resolve("jax").holds_dtype("float64")


def test_bfloat16_and_float8_into_numpy_are_ml_dtypes_views() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        x = bridge.arange(8, dtype=bridge.float32).to(name)
        p = plan(x, np)
        assert [f.kind for f in p.fixes] == ["dtype-view"] and not p.copies
        r = _convert_quiet(x, np)
        assert r.dtype == np.dtype(getattr(ml_dtypes, name))
        assert r.__array_interface__["data"][0] == x.data_ptr()
        np.testing.assert_array_equal(r.astype(np.float32), np.arange(8, dtype=np.float32))
    # float64 is NumPy's own (a prefix test on "float6" once counted it as an ml_dtypes type)
    assert plan(bridge.zeros(2, dtype=bridge.float64), np).fixes == ()


def test_bfloat16_from_numpy_into_torch() -> None:
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    r = _convert_quiet(a, torch)
    assert r.dtype == torch.bfloat16 and r.data_ptr() == a.__array_interface__["data"][0]


def test_paddle_offset_is_folded_into_the_pointer() -> None:
    paddle = pytest.importorskip("paddle")
    x = bridge.tensor(REF)[1:, 1:]
    p = plan(x, paddle)
    assert [f.kind for f in p.fixes] == ["offset"] and not p.copies
    r = _convert_quiet(x, paddle)
    assert r.data_ptr() == x.data_ptr()
    np.testing.assert_array_equal(r.numpy(), REF[1:, 1:])


def test_negative_strides_into_paddle_are_a_copy() -> None:
    paddle = pytest.importorskip("paddle")
    with pytest.warns(CopyWarning, match="negative strides"):
        r = bridge.convert(REF[::-1], paddle)
    np.testing.assert_array_equal(r.numpy(), REF[::-1])


def test_onnxruntime_takes_row_major_only() -> None:
    ort = pytest.importorskip("onnxruntime")
    x = bridge.tensor(REF)
    with pytest.warns(CopyWarning, match="row-major"):
        r = bridge.convert(x.t(), ort)
    np.testing.assert_array_equal(r.numpy(), REF.T)
    with pytest.raises(BufferError, match="complex64"):
        bridge.convert(bridge.zeros(2, dtype=bridge.complex64), ort)


def test_arrow_destinations() -> None:
    pa = pytest.importorskip("pyarrow")
    x = bridge.tensor(REF)
    r = _convert_quiet(x, pa)
    assert isinstance(r, pa.FixedShapeTensorArray) and address("pyarrow", r) == x.data_ptr()
    with pytest.warns(CopyWarning, match="row-major"):
        r = bridge.convert(x[:, 1], pa)  # stride 4
    np.testing.assert_array_equal(r.to_numpy(), REF[:, 1])
    with pytest.raises(BufferError, match="bfloat16"):
        bridge.convert(bridge.zeros(2, dtype=bridge.bfloat16), pa)
    if importable("polars"):
        with pytest.raises(BufferError, match="at most 2 dims"):
            bridge.convert(bridge.zeros((2, 2, 2)), "polars")


def test_mlx_always_copies() -> None:
    mx = pytest.importorskip("mlx.core")
    x = bridge.tensor(REF)
    assert [f.kind for f in plan(x, mx).fixes] == ["destination"]
    with pytest.raises(BufferError, match="copies every import"):
        bridge.convert(x, mx, copy=False)
    with pytest.warns(CopyWarning) as rec:
        r = bridge.convert(x.flip(1), mx)  # negative strides: bridge's copy first
    assert [f.kind for f in rec[0].message.fixes] == ["layout", "destination"]  # type: ignore[union-attr]
    np.testing.assert_array_equal(np.array(r), REF[:, ::-1])


# ------------------------------------------------------------------ read-only


def _readonly() -> np.ndarray[Any, Any]:
    a = np.arange(12, dtype=np.float32)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("dest", sorted(WRITES & set(INSTALLED)))
def test_read_only_into_a_writing_destination(dest: str) -> None:
    a = _readonly()
    src = a.__array_interface__["data"][0]
    with pytest.warns(CopyWarning, match="read-only") as rec:
        r = bridge.convert(a, dest)
    assert rec[0].message.kind == "read-only"  # type: ignore[union-attr]
    assert address(dest, r) != src
    np.testing.assert_array_equal(values(dest, r), a)
    with pytest.raises(BufferError, match="read-only"):
        bridge.convert(a, dest, readonly="error")
    with pytest.raises(BufferError, match="read-only"):
        bridge.convert(a, dest, copy=False)
    shared = _convert_quiet(a, dest, readonly="share")
    assert address(dest, shared) == src
    assert [f.kind for f in plan(a, dest, readonly="share").fixes] == ["read-only-share"]


def test_read_only_stays_read_only_where_the_destination_says_so() -> None:
    a = _readonly()
    r = _convert_quiet(a, np)
    assert not r.flags.writeable and r.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    t = _convert_quiet(a, bridge)
    assert t.is_readonly
    if importable("pyarrow"):
        assert address("pyarrow", _convert_quiet(a, "pyarrow")) == a.__array_interface__["data"][0]


def test_a_read_only_copy_is_writable_and_leaves_the_source_alone() -> None:
    torch = pytest.importorskip("torch")
    a = _readonly()
    with pytest.warns(CopyWarning):
        r = bridge.convert(a, torch)
    r[0] = 100.0
    assert a[0] == 0.0


# ------------------------------------------------------------------ refusals and errors


def test_torch_tensors_torch_would_not_export_are_refused() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(BufferError, match="gradient"):
        bridge.convert(torch.ones(3, requires_grad=True), np)
    with pytest.raises(BufferError, match="conjugate"):
        bridge.convert(torch.ones(3, dtype=torch.complex64).conj(), np)
    with pytest.raises(BufferError):
        bridge.convert(torch.ones(3).to_sparse(), np)


def test_unknown_destinations_list_the_installed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("nope", "os", object, int):
        with pytest.raises(ValueError, match="installed destinations: bridge, numpy"):
            bridge.convert(bridge.zeros(2), bad)
    monkeypatch.setattr(destinations, "_importable", lambda module: module != "cupy")
    with pytest.raises(ValueError, match=r"'cupy' is not installed.*installed destinations"):
        bridge.convert(bridge.zeros(2), "cupy")
    with pytest.raises(TypeError, match="module, its name or a type"):
        bridge.convert(bridge.zeros(2), 3)


def test_objects_bridge_cannot_import_are_a_type_error() -> None:
    for bad in (object(), "text"):
        with pytest.raises(TypeError, match="cannot import"):
            bridge.convert(bad, np)


def test_bad_policies() -> None:
    with pytest.raises(ValueError, match="readonly"):
        bridge.convert(bridge.zeros(2), np, readonly="maybe")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="copy"):
        bridge.convert(bridge.zeros(2), np, copy="yes")  # type: ignore[arg-type]


def test_destinations_named_every_way() -> None:
    x = bridge.zeros(2)
    assert destinations.resolve(np).name == destinations.resolve("numpy").name == "numpy"
    assert destinations.resolve(np.ndarray).name == "numpy"
    assert destinations.resolve(bridge).name == destinations.resolve(bridge.Tensor).name == "bridge"
    assert isinstance(bridge.convert(x, np.ndarray), np.ndarray)
    assert isinstance(bridge.convert(x, bridge.Tensor), bridge.Tensor)
    if importable("jax"):
        import jax
        import jax.numpy as jnp

        assert destinations.resolve(jnp).name == destinations.resolve(jax.Array).name == "jax"
    if importable("torch"):
        import torch

        assert isinstance(bridge.convert(x, torch.Tensor), torch.Tensor)
    if importable("mlx.core"):
        import mlx.core as mx

        assert destinations.resolve("mlx.core").name == destinations.resolve(mx.array).name == "mlx"


def test_copy_warning_is_one_filterable_category() -> None:
    x = bridge.tensor(REF)[:, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CopyWarning)
        with pytest.raises(CopyWarning):
            bridge.convert(x, "pyarrow" if importable("pyarrow") else "jax")
    assert issubclass(bridge.CopyWarning, UserWarning)


def test_a_bridge_tensor_into_bridge_is_itself() -> None:
    x = bridge.tensor(REF)
    assert bridge.convert(x, bridge) is x


def test_rows_of_no_elements() -> None:
    """A (4, 0) tensor: four rows of nothing. pyarrow holds it (a
    FixedShapeTensorArray of four empty rows); polars' Arrow import panics on
    it, so convert refuses it by the record, before polars sees it."""
    pa = pytest.importorskip("pyarrow")
    t = bridge.zeros(4, 0)
    out = bridge.convert(t, pa)
    assert len(out) == 4 and out.to_numpy_ndarray().shape == (4, 0)
    assert bridge.convert(bridge.zeros(4, 0, 2).permute(0, 2, 1), pa).to_numpy_ndarray().shape == (4, 2, 0)
    pytest.importorskip("polars")
    with pytest.raises(BufferError, match="polars cannot hold rows of no elements"):
        bridge.convert(t, "polars")
    assert len(bridge.convert(bridge.zeros(0, 3), "polars")) == 0  # no rows: fine


@pytest.mark.parametrize("make", ["pa-array", "pa-chunked", "polars"])
def test_arrow_bools_are_unpacked_in_one_named_copy(make: str) -> None:
    """Arrow's bools are bits: neither DLPack nor a zero-copy Arrow import takes
    them, so convert unpacks them (one copy, a CopyWarning of kind "unpack";
    copy=False refuses, naming it)."""
    pa = pytest.importorskip("pyarrow")
    if make == "polars":
        pl = pytest.importorskip("polars")
        x: object = pl.Series([True, False, True])
    else:
        x = pa.array([True, False, True]) if make == "pa-array" else pa.chunked_array([[True], [False, True]])
    kinds = ["concatenate", "unpack"] if make == "pa-chunked" else ["unpack"]  # its two chunks: one copy
    assert [f.kind for f in plan(x, "numpy").fixes] == kinds
    with pytest.warns(bridge.CopyWarning) as caught:
        out = bridge.convert(x, "numpy")
    assert caught[0].message.kind == kinds[0]  # type: ignore[union-attr]
    assert out.dtype == bool and out.tolist() == [True, False, True] and out.flags.writeable
    with pytest.raises(BufferError, match="bit-packed"):
        bridge.convert(x, "numpy", copy=False)
    torch = pytest.importorskip("torch")
    with pytest.warns(bridge.CopyWarning):
        assert bridge.convert(x, torch).tolist() == [True, False, True]
