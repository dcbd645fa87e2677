"""bridge.convert meets malformed producers as bridge.from_dlpack does.

Every managed tensor convert receives, whether a producer hands it over
through its C exchange API (the fast path) or in a capsule (the general
path), passes the one check ``parse_managed`` in cdefs/interop/dlpack_import.c
makes: the same BufferError, word for word, for every destination, on the
first call for a destination and on every later one, and the producer's
deleter runs exactly once. The producers are hand-made structs
(tests/handmade.py) behind ``_drivers.handing_api()``, an exchange API that
hands over whatever it is given, unchecked.
"""

from __future__ import annotations

import gc
import importlib.util

import numpy as np
import pytest
from bridge._native import ffi
from handmade import MALFORMED, Handmade, deleter_calls

import bridge
from bridge.core.native import _C, _drivers
from bridge.crossing import convert as conv

DESTINATIONS = [name for name in ("bridge", "numpy", "torch", "paddle")
                if name == "bridge" or importlib.util.find_spec(name) is not None]  # fmt: skip
HANDING = _drivers.handing_api()


class Producer:
    """An object that offers only the C exchange API, handing over ``h``'s struct."""

    __dlpack_c_exchange_api__ = HANDING

    def __init__(self, h: Handmade) -> None:
        # manager_ctx set, as real producers set it: paddle never calls the deleter of a
        # tensor whose manager_ctx is NULL (the spec leaves it to the producer; a leak in paddle)
        h.m.manager_ctx = h.m
        self.managed = int(ffi.cast("uintptr_t", h.m))


def _refusal(call) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:
        call()
    return info.type, str(info.value)


def _reference(kwargs: dict[str, object]) -> tuple[type[BaseException], str]:
    """What bridge.from_dlpack says of the same struct in a capsule."""
    return _refusal(lambda: bridge.from_dlpack(Handmade(**kwargs).capsule()))


VERSIONED = [(kw, m) for kw, m in MALFORMED if kw.get("versioned", True)]


@pytest.mark.parametrize("to", DESTINATIONS)
@pytest.mark.parametrize("kwargs, match", VERSIONED)
def test_a_malformed_exchange_api_tensor_is_refused_like_from_dlpack(kwargs, match, to):
    want = _reference(kwargs)
    assert want[0] is BufferError
    for first in (True, False):  # unregistered (the general path), then registered (the fast path)
        if first:
            _C.convert_forget()
        before = deleter_calls()
        got = _refusal(lambda: bridge.convert(Producer(Handmade(**kwargs)), to))
        gc.collect()
        assert got == want, (first, got, want)
        assert deleter_calls() == before + 1  # released exactly once, by bridge
    assert _C.convert_registered(to) or to not in ("bridge", "numpy")
    # from_dlpack of the same producer says it too
    assert _refusal(lambda: bridge.from_dlpack(Producer(Handmade(**kwargs)))) == want


@pytest.mark.parametrize("to", DESTINATIONS)
@pytest.mark.parametrize("kwargs, match", MALFORMED)
def test_a_malformed_capsule_is_refused_like_from_dlpack(kwargs, match, to):
    want = _reference(kwargs)
    before = deleter_calls()
    assert _refusal(lambda: bridge.convert(Handmade(**kwargs).capsule(), to)) == want
    gc.collect()
    assert deleter_calls() == before + 1


@pytest.mark.parametrize("to", DESTINATIONS)
def test_a_well_formed_exchange_api_only_producer_converts_on_the_first_call(to):
    for first in (True, False):
        if first:
            _C.convert_forget()
        before = deleter_calls()
        out = bridge.convert(Producer(Handmade(buf=np.arange(64, dtype=np.float32))), to)
        assert np.array_equal(np.asarray(bridge.from_dlpack(out).numpy()),
                              np.arange(6, dtype=np.float32).reshape(2, 3))  # fmt: skip
        del out
        gc.collect()
        assert deleter_calls() == before + 1


class BadDevice(bridge.device):
    """A device whose to_dlpack() answers something other than a pair."""

    answer: object = None

    def to_dlpack(self):  # type: ignore[override]
        return self.answer


@pytest.mark.parametrize("answer", ["nope", (1,), (1, 0, 0), None, [1, 0]])
def test_a_device_subclass_whose_to_dlpack_lies_is_a_type_error(answer):
    bad = type("Lying", (BadDevice,), {"answer": answer})("cpu")
    assert isinstance(bad, bridge.device)
    t = bridge.arange(3)
    with pytest.raises(TypeError, match=r"to_dlpack\(\) returned"):
        t.__dlpack__(dl_device=bad)
    with pytest.raises(TypeError, match=r"to_dlpack\(\) returned"):
        bridge.from_dlpack(np.arange(3), device=bad)


class CapsuleProducer:
    """An object that offers only ``__dlpack__`` (no C exchange API): each call
    answers a new struct made of ``kwargs`` (tests/handmade.py)."""

    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.asked = 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked += 1
        return Handmade(**self.kwargs).capsule()

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("to", DESTINATIONS)
@pytest.mark.parametrize("kwargs, match", MALFORMED)
def test_a_malformed_dlpack_producer_is_refused_like_from_dlpack(kwargs, match, to):
    """The fast path hands a producer's valid versioned host tensor straight
    to NumPy or the destination's exchange API: anything else is refused, in
    from_dlpack's words, and every struct the producer made is released once."""
    want = _reference(kwargs)
    for first in (True, False):
        if first:
            _C.convert_forget()
        before = deleter_calls()
        p = CapsuleProducer(**kwargs)
        assert _refusal(lambda p=p: bridge.convert(p, to)) == want
        gc.collect()
        assert deleter_calls() == before + p.asked


@pytest.mark.parametrize("to, flags", [("numpy", 0), ("numpy", 1), ("numpy", "legacy"), ("torch", 0)],
                         ids=["numpy", "numpy-read-only", "numpy-legacy", "torch"])  # fmt: skip
def test_a_dlpack_producer_goes_straight_into_the_destination(to, flags):
    """A valid host tensor the destination holds goes to NumPy's C API or the
    destination's exchange API as it is: no bridge tensor, no general path."""
    pytest.importorskip(to)
    buf = np.arange(64, dtype=np.float32)
    bridge.convert(np.ones(2, np.float32), to)  # registered
    calls = []
    general = conv._general
    _C._register("convert_slow", lambda *a, **k: calls.append(a) or general(*a, **k))
    try:
        before = deleter_calls()
        legacy = flags == "legacy"  # (mlx's kind): it cannot say writable, so it is lent read-only
        p = CapsuleProducer(buf=buf, code=2, bits=32, **({"versioned": False} if legacy else {"flags": flags}))
        flags = 1 if legacy else flags
        out = bridge.convert(p, to)
    finally:
        _C._register("convert_slow", general)
    assert calls == [] and p.asked == 1  # the fast path finished it, asking once
    got = out if to == "numpy" else out.numpy()
    assert np.array_equal(got, buf[:6].reshape(2, 3))
    if to == "numpy":
        assert out.ctypes.data == buf.ctypes.data and out.flags.writeable == (not flags)
        if flags:
            with pytest.raises(ValueError):
                out.flags.writeable = True  # lent read-only: NumPy cannot turn it writable
    else:
        assert out.data_ptr() == buf.ctypes.data
    del out, got
    gc.collect()
    assert deleter_calls() == before + 1  # released once, when the result died
