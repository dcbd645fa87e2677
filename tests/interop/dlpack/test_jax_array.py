"""``Tensor.__jax_array__``: jax.numpy takes bridge tensors, sharing their memory
through DLPack where jax can, copying where it cannot (bridge.interop.jax_array)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from lifetimes import balanced, snapshot

import bridge

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")


def _address(a) -> int:
    return int(a.unsafe_buffer_pointer())


def test_asarray_shares_compact_memory():
    t = bridge.arange(12.0).reshape(3, 4)
    for x in (t, t.t()):  # a permutation of a compact layout is shared too
        a = jnp.asarray(x)
        assert isinstance(a, jax.Array) and a.shape == x.shape and a.dtype == jnp.float32
        assert _address(a) == x.data_ptr()
        assert np.array_equal(np.asarray(a), np.asarray(x))


def test_jax_keeps_the_memory_alive():
    before = snapshot()
    t = bridge.arange(8.0)
    a = jnp.asarray(t)
    del t
    gc.collect()
    assert a.tolist() == list(map(float, range(8)))
    del a
    assert balanced(before)["exports"] == 1  # one DLPack export, released when jax let go


@pytest.mark.parametrize(
    "make",
    [lambda: bridge.arange(12.0).reshape(3, 4)[:, ::2],
     lambda: bridge.arange(6.0)[::-1],
     lambda: bridge.arange(3.0).broadcast_to((2, 3)),
     lambda: bridge.from_dlpack(np.arange(6.0, dtype=np.float32).__dlpack__()),  # legacy: read-only
     lambda: bridge.tensor([1, 2, 3, 12], dtype=bridge.uint8).view(bridge.float4_e2m1fn)],
    ids=["stepped", "negative", "broadcast", "read-only", "float4"],
)  # fmt: skip
def test_what_jax_cannot_share_is_copied(make):
    t = make()
    a = jnp.asarray(t)
    assert a.shape == t.shape and a.dtype == t.dtype.numpy_dtype
    assert np.array_equal(np.asarray(a).astype(np.float32), np.asarray(t).astype(np.float32))
    storage = t.untyped_storage()
    assert not storage.data_ptr() <= _address(a) < storage.data_ptr() + storage.nbytes()


def test_read_only_memory_is_never_handed_to_jax():
    src = np.arange(4.0, dtype=np.float32)
    src.flags.writeable = False
    t = bridge.from_numpy(src)
    assert t.is_readonly
    a = jnp.asarray(t)
    assert _address(a) != t.data_ptr() and a.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_jax_rules_apply_to_the_result():
    a = jnp.asarray(bridge.arange(3, dtype=bridge.int64))
    assert a.dtype == (jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    assert jnp.asarray(bridge.ones(2, dtype=bridge.bfloat16)).dtype == jnp.bfloat16
    assert jnp.asarray(bridge.ones(2, dtype=bridge.bool)).dtype == jnp.bool_


def test_jax_entry_points_that_honour_the_protocol():
    """jax 0.10 calls __jax_array__ in jnp.asarray/array, a jax.Array's operators
    (both sides), jnp.stack/concatenate and jnp.einsum (their own conversion
    runs before jit)."""
    t = bridge.arange(4.0)
    assert jnp.array(t).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (jnp.ones(4) + t).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert (t * jnp.full(4, 2.0)).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert jnp.stack([t, t]).shape == (2, 4) and jnp.concatenate([t, t]).shape == (8,)
    assert float(jnp.einsum("i,i", t, t)) == 14.0


@pytest.mark.parametrize("fn", [jnp.sin, jnp.sum, lambda x: jnp.add(x, 1)], ids=["sin", "sum", "add"])
def test_jitted_jax_functions_refuse_the_protocol(fn):
    """Most jax.numpy functions are jitted: jax abstractifies their arguments
    first, and refuses __jax_array__ there (jax's rule, not bridge's);
    jnp.asarray first works."""
    t = bridge.arange(4.0)
    with pytest.raises(ValueError, match="__jax_array__"):
        fn(t)
    assert np.allclose(np.asarray(fn(jnp.asarray(t))), np.asarray(fn(np.arange(4.0, dtype=np.float32))))


def test_jit_arguments_are_not_converted_by_jax():
    f = jax.jit(lambda x: x * 2)
    with pytest.raises(ValueError, match="__jax_array__"):
        f(bridge.arange(3.0))
    assert f(jnp.asarray(bridge.arange(3.0))).tolist() == [0.0, 2.0, 4.0]


def test_packed_pairs_have_no_jax_form():
    t = bridge.tensor([0x21], dtype=bridge.uint8).view(bridge.float4_e2m1fn_x2)
    with pytest.raises(TypeError, match="packs 2 values"):
        jnp.asarray(t)


def test_jax_array_is_an_up_call_of_the_core():
    assert bridge.core.native.upcall("jax_array") is bridge.interop.jax_array.to_jax
    assert "jax" not in bridge.core.tensor.__dict__
