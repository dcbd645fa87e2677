"""bridge.empty and bridge.zeros: C functions (``py_empty`` and ``py_zeros`` in
cdefs/core/values.c) that finish the common call themselves (sizes as ints or
one sequence, dtype None or a bridge dtype, device None or "cpu",
contiguous_format) and hand every other call, as it came, to the Python
general path (``_empty_general`` and ``_zeros_general`` in
bridge/core/factories.py: the up-calls ``empty_slow`` and ``zeros_slow``).

Each branch of the C is held to the general path, which is what bridge.empty
and bridge.zeros were before they were C: the same tensor, or the same error
type and words. The words themselves are pinned where a test names a branch."""

from __future__ import annotations

import gc
import inspect
import operator
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import bridge
from bridge.core import factories
from bridge.core.native import _C

GENERAL: dict[Callable[..., Any], Callable[..., Any]] = {
    bridge.empty: factories._empty_general,
    bridge.zeros: factories._zeros_general,
}
FACTORIES = [bridge.empty, bridge.zeros]
IDS = ["empty", "zeros"]


def outcome(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a call gives: the tensor's type and geometry, or the error's type and words."""
    try:
        t = f(*args, **kwargs)
    except Exception as e:  # any error is an outcome to compare
        return (type(e), re.sub(r" at 0x[0-9a-f]+", "", str(e)))  # (two iterators' reprs differ by address)
    return (type(t), t.dtype, t.shape, t.stride(), t.storage_offset(), t.untyped_storage().nbytes(),
            str(t.device), t.data_ptr() % 64)  # fmt: skip


@contextmanager
def routed() -> Iterator[list[str]]:
    """The names of the up-calls (empty_slow, zeros_slow) the calls inside reach."""
    calls: list[str] = []
    saved = {name: _C.upcall(name) for name in ("empty_slow", "zeros_slow")}

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def general(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return fn(*args, **kwargs)

        return general

    for name, fn in saved.items():
        _C._register(name, spy(name, fn))
    try:
        yield calls
    finally:
        for name, fn in saved.items():
            _C._register(name, fn)


class Index:
    """An int by __index__ only (what operator.index reads)."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


class BadIndex:
    def __index__(self) -> int:
        raise RuntimeError("no index today")


class Seq:
    """A sequence by __len__ and __getitem__, without __iter__."""

    def __init__(self, *v: int) -> None:
        self.v = v

    def __len__(self) -> int:
        return len(self.v)

    def __getitem__(self, i: int) -> int:
        return self.v[i]


class IndexTuple(tuple):  # type: ignore[type-arg]
    """A tuple that is also an int (its __index__ wins, as operator.index reads it)."""

    def __index__(self) -> int:
        return 5


class ReversedTuple(tuple):  # type: ignore[type-arg]
    """A tuple that iterates otherwise than its items (tuple() reads the iteration)."""

    def __iter__(self) -> Iterator[Any]:
        return iter(tuple.__getitem__(self, slice(None, None, -1)))


# Sizes, as calls make them (a function each: an iterator is used up by a call).
SIZES: list[Callable[[], tuple[Any, ...]]] = [
    lambda: (), lambda: (16,), lambda: (2, 3), lambda: ((2, 3),), lambda: ([2, 3],), lambda: ((),),
    lambda: ([],), lambda: (0,), lambda: (0, 5), lambda: (1, 1, 1), lambda: (range(2, 5),),
    lambda: (-1,), lambda: (2, -3), lambda: ((2, -3),), lambda: (-1, 2**63), lambda: (2**63,),
    lambda: (-(2**63),), lambda: (-(2**63) - 1,), lambda: (2**62,), lambda: (2**61, 4),
    lambda: (2**32, 2**32), lambda: (2, 2**62, 4), lambda: (3, 2**62), lambda: (2**40, 2**40, 0),
    lambda: (0, 2**40, 2**40), lambda: (2, 0, 2**40, 2**40), lambda: ((2**63 - 1, 0),), lambda: ((0, 2**63 - 1),),
    lambda: (2.0,), lambda: (2, 3.0), lambda: ((2, 3.0),), lambda: ("2",), lambda: ("ab",), lambda: ("",),
    lambda: (None,), lambda: ((None,),), lambda: (b"\x02",), lambda: (bytearray(b"\x02\x03"),),
    lambda: (True,), lambda: (False,), lambda: (2, True), lambda: ((True, 2),), lambda: ([True],),
    lambda: (np.int64(4),), lambda: (np.int32(2), np.uint8(3)), lambda: ((np.int64(2), 3),),
    lambda: (np.array(3),), lambda: (np.array([2, 3]),), lambda: (np.bool_(True),), lambda: (np.float64(2.0),),
    lambda: (Index(3),), lambda: (Index(-1),), lambda: (Index(2**70),), lambda: (BadIndex(),),
    lambda: ((BadIndex(),),), lambda: (Seq(2, 3),), lambda: (iter([2, 3]),), lambda: ({2: 1},),
    lambda: ((2, 3), 4), lambda: ((2,), (3,)), lambda: ([2], 3), lambda: ([[2, 3]],), lambda: (1 + 2j,),
    lambda: ((1,) * 64,), lambda: ((1,) * 65,), lambda: (1,) * 65, lambda: ((1,) * 64 + (-1,),),
    lambda: (IndexTuple((2, 3)),), lambda: (ReversedTuple((2, 3)),), lambda: (slice(2),),
]  # fmt: skip
KWARGS: list[dict[str, Any]] = [
    {}, {"dtype": None}, {"dtype": bridge.float64}, {"dtype": bridge.bool}, {"dtype": bridge.complex128},
    {"dtype": bridge.float4_e2m1fn}, {"device": None}, {"device": "cpu"}, {"device": bridge.device("cpu")},
    {"device": "cpu:0"}, {"device": "cuda"}, {"device": "bogus"}, {"device": 0}, {"dtype": np.float16},
    {"dtype": "int8"}, {"dtype": "bogus"}, {"dtype": int}, {"dtype": 3},
    {"memory_format": bridge.contiguous_format}, {"memory_format": bridge.preserve_format},
    {"memory_format": bridge.channels_last}, {"memory_format": None}, {"size": 3}, {"dtyp": bridge.int8},
    {"dtype": bridge.int16, "device": "cpu", "memory_format": bridge.contiguous_format},
    {"device": "cuda", "dtype": "bogus"},
]  # fmt: skip


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_every_call_is_the_general_paths(f: Callable[..., Any]) -> None:
    """The C and the general path agree on every size and keyword of the tables."""
    for size in SIZES:
        for kwargs in KWARGS:
            args = size()  # the same objects for both (an iterator anew: a call uses it up)
            again = size() if any(isinstance(a, Iterator) for a in args) else args
            got, want = outcome(f, *args, **kwargs), outcome(GENERAL[f], *again, **kwargs)
            assert got == want, (args, kwargs)


def test_torch_sizes_are_the_general_paths(torch: Any) -> None:
    for f in FACTORIES:
        for size in (torch.Size([2, 3]), torch.Size([]), torch.Size([2, -1]), torch.tensor(3), torch.tensor([2, 3])):
            for kwargs in ({}, {"device": "cpu"}, {"dtype": torch.float64}, {"device": torch.device("cpu")}):
                assert outcome(f, size, **kwargs) == outcome(GENERAL[f], size, **kwargs), (size, kwargs)


def test_the_other_layouts_are_the_general_paths() -> None:
    for size in ((2, 3, 4, 5), (2, 3, 4, 5, 6), (2, 3)):
        for fmt in (bridge.channels_last, bridge.channels_last_3d, bridge.preserve_format, bridge.contiguous_format):
            for device in (None, "cpu"):
                got = outcome(bridge.empty, *size, memory_format=fmt, device=device)
                assert got == outcome(factories._empty_general, *size, memory_format=fmt, device=device)
    t = bridge.empty(2, 3, 4, 5, memory_format=bridge.channels_last)
    assert t.stride() == (60, 1, 15, 3) and t.is_contiguous(memory_format=bridge.channels_last)


# ------------------------------------------------------------------ routes


@pytest.mark.thread_unsafe(reason="swaps the process-wide up-calls empty_slow and zeros_slow for spies")
@pytest.mark.parametrize(
    ("call", "shape", "dtype"),
    [
        (lambda f: f(16), (16,), bridge.float32),
        (lambda f: f(), (), bridge.float32),
        (lambda f: f(2, 3), (2, 3), bridge.float32),
        (lambda f: f((2, 3)), (2, 3), bridge.float32),
        (lambda f: f([2, 3]), (2, 3), bridge.float32),
        (lambda f: f(range(2, 4)), (2, 3), bridge.float32),
        (lambda f: f(np.int64(2), np.uint8(3)), (2, 3), bridge.float32),
        (lambda f: f((np.int32(2), Index(3))), (2, 3), bridge.float32),
        (lambda f: f(2, dtype=bridge.float64), (2,), bridge.float64),
        (lambda f: f(2, dtype=None, device=None), (2,), bridge.float32),
        (lambda f: f(2, 3, device="cpu"), (2, 3), bridge.float32),
        (lambda f: f((2, 3), device="cpu", dtype=bridge.int8), (2, 3), bridge.int8),
        (lambda f: f([2, 3], device="cpu"), (2, 3), bridge.float32),
        (lambda f: f(device="cpu"), (), bridge.float32),
        (lambda f: f(0, 2**62, device="cpu"), (0, 2**62), bridge.float32),
        # keyword names made at run time: not the interned objects, the same names
        (lambda f: f(2, **{"".join(["dt", "ype"]): bridge.uint8, "".join(["dev", "ice"]): "cpu"}), (2,), bridge.uint8),
    ],
)  # fmt: skip
def test_the_common_calls_never_leave_c(call: Callable[..., Any], shape: tuple[int, ...], dtype: Any) -> None:
    for f in FACTORIES:
        with routed() as calls:
            t = call(f)
        assert calls == [] and t.shape == shape and t.dtype is dtype and t.is_contiguous()
    with routed() as calls:
        t = bridge.empty(2, memory_format=bridge.contiguous_format, device="cpu")
    assert calls == [] and t.shape == (2,)


@pytest.mark.thread_unsafe(reason="swaps the process-wide up-calls empty_slow and zeros_slow for spies")
@pytest.mark.parametrize(
    "call",
    [
        lambda f: f(-1), lambda f: f(2, -3), lambda f: f(2.5), lambda f: f(True), lambda f: f((2, "3")),
        lambda f: f(2**63), lambda f: f(2**32, 2**32), lambda f: f(2**40, 2**40, 0), lambda f: f(0, 2**40, 2**40),
        lambda f: f(*(1,) * 65), lambda f: f(np.array([2, 3])), lambda f: f(BadIndex()), lambda f: f(None),
        lambda f: f(2, bridge.float64),
    ],
)  # fmt: skip
def test_the_errors_of_the_common_calls_are_cs(call: Callable[..., Any]) -> None:
    for f in FACTORIES:
        with routed() as calls, pytest.raises((TypeError, ValueError, RuntimeError)):
            call(f)
        assert calls == []


@pytest.mark.thread_unsafe(reason="swaps the process-wide up-calls empty_slow and zeros_slow for spies")
@pytest.mark.parametrize(
    "call",
    [
        lambda f: f(2, dtype="float64"), lambda f: f(2, dtype=np.float64), lambda f: f(2, dtype=float),
        lambda f: f(2, dtype=np.dtype("<f4")), lambda f: f(2, device=bridge.device("cpu")),
        lambda f: f(2, device="cpu:0"), lambda f: f(2, device="CPU"), lambda f: f(2, device="cuda"),
        lambda f: f(2, bogus=1), lambda f: f(size=2),
        # device="cpu" reads sizes as the general path does: C takes only exact ints
        lambda f: f(np.int64(2), device="cpu"), lambda f: f(True, device="cpu"), lambda f: f(-1, device="cpu"),
        lambda f: f(2**63, device="cpu"), lambda f: f(2**62, 4, device="cpu"), lambda f: f(iter([2]), device="cpu"),
        lambda f: f(0, 2**40, 2**40, device="cpu"), lambda f: f(2**40, 2**40, 0, device="cpu"),
        lambda f: f((2, 2.0), device="cpu"), lambda f: f(*(1,) * 65, device="cpu"), lambda f: f(Seq(2), device="cpu"),
        lambda f: f(IndexTuple((2, 3)), device="cpu"), lambda f: f(ReversedTuple((2, 3)), device="cpu"),
    ],
)  # fmt: skip
def test_every_other_call_goes_to_the_general_path_once(call: Callable[..., Any]) -> None:
    for f, name in ((bridge.empty, "empty_slow"), (bridge.zeros, "zeros_slow")):
        with routed() as calls:
            try:
                call(f)
            except (TypeError, ValueError, RuntimeError):
                pass
        assert calls == [name]


@pytest.mark.thread_unsafe(reason="swaps the process-wide up-calls empty_slow and zeros_slow for spies")
def test_the_other_layouts_and_zeros_memory_format_go_to_the_general_path() -> None:
    for fmt in (bridge.channels_last, bridge.preserve_format, None, "contiguous_format"):
        with routed() as calls:
            try:
                bridge.empty(2, 3, 4, 5, memory_format=fmt)
            except TypeError:
                pass
        assert calls == ["empty_slow"]
    with routed() as calls, pytest.raises(TypeError, match=r"^zeros\(\) got an unexpected keyword argument 'memory_format'"):
        bridge.zeros(2, memory_format=bridge.contiguous_format)
    assert calls == ["zeros_slow"]


# --------------------------------------------------- each branch, in words


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_negative_sizes(f: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match=r"^negative dimension -3 in size$"):
        f(2, -3)
    with pytest.raises(ValueError, match=r"^negative dimension -1 in size$"):
        f([2, -1])
    with pytest.raises(ValueError, match=r"^negative dimension -1 in size$"):
        f(Index(-1))
    # the general path's words, with the size (device="cpu" went there before C did)
    with pytest.raises(ValueError, match=r"^negative dimension -3 in size \(2, -3\)$"):
        f(2, -3, device="cpu")
    with pytest.raises(ValueError, match=r"^negative dimension -1 in size \(-1, 9223372036854775808\)$"):
        f(-1, 2**63, device="cpu")


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_sizes_past_64_bits(f: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match=r"^size 9223372036854775808 does not fit in a 64-bit integer$"):
        f(2**63)
    with pytest.raises(ValueError, match=r"^size -9223372036854775809 does not fit in a 64-bit integer$"):
        f(-(2**63) - 1)
    with pytest.raises(ValueError, match=r"^size 1180591620717411303424 does not fit in a 64-bit integer$"):
        f((2, Index(2**70)))
    with pytest.raises(ValueError, match=r"^shape 18446744073709551616 does not fit in a 64-bit integer$"):
        f(2**64, device="cpu")
    big = r"larger than the 9223372036854775807 bytes \(2\*\*63 - 1\) a storage can address$"
    with pytest.raises(ValueError, match=r"^a tensor of size \(4294967296, 4294967296\) needs 73786976294838206464 bytes, " + big):
        f(2**32, 2**32)
    with pytest.raises(ValueError, match=r"^a tensor of size \(2305843009213693952,\) needs 9223372036854775808 bytes, " + big):
        f(2**61)  # 2**63 bytes: one past the largest
    with pytest.raises(ValueError, match=r"^a tensor of size \(1152921504606846976,\) needs 9223372036854775808 bytes, " + big):
        f(2**60, dtype=bridge.float64)
    with pytest.raises(ValueError, match=big):
        f(2**62, 2, device="cpu")
    with pytest.raises(ValueError, match=r"^a tensor of size \(1099511627776, 1099511627776, 0\) has more than 2\*\*63 - 1 elements$"):
        f(2**40, 2**40, 0)
    with pytest.raises(ValueError, match=r"^size has 65 entries; a tensor has at most 64 dimensions$"):
        f(*(1,) * 65)
    with pytest.raises(ValueError, match=r"^shape has 65 entries; a tensor has at most 64 dimensions$"):
        f(*(1,) * 65, device="cpu")
    assert f((1,) * 64).shape == (1,) * 64
    assert f(2**63 - 1, 0).shape == (2**63 - 1, 0)
    assert f(0, 2**63 - 1).stride() == (2**63 - 1, 1)


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_an_empty_tensor_whose_strides_overflow_is_a_value_error(f: Callable[..., Any]) -> None:
    """No element, but row-major strides past int64: ValueError, with or
    without device="cpu" (without it, the strides were left unset before)."""
    words = r"^the contiguous strides of size \(0, 1099511627776, 1099511627776\) do not fit in a 64-bit integer$"
    for device in (None, "cpu"):
        with pytest.raises(ValueError, match=words):
            f(0, 2**40, 2**40, device=device)
    with pytest.raises(ValueError, match=words):
        _C.new_empty((0, 2**40, 2**40), bridge.float32, False)


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_sizes_that_are_not_ints(f: Callable[..., Any]) -> None:
    for args, shown in [((2.5,), "2.5"), ((2, 3.0), r"\(2, 3.0\)"), (((2, 3.0),), r"\(2, 3.0\)"),
                        (("2",), r"\('2',\)"), ((None,), "None"), (([2, None],), r"\(2, None\)"),
                        (((2, 3), 4), r"\(\(2, 3\), 4\)"), (([[2, 3]],), r"\(\[2, 3\],\)"),
                        ((np.float64(2.0),), r"(np.float64\()?2.0\)?")]:  # fmt: skip
        with pytest.raises(TypeError, match=rf"^size must be a sequence of ints, got {shown}$"):
            f(*args)
    with pytest.raises(TypeError, match=r"^only integer scalar arrays can be converted to a scalar index$"):
        f(np.array([2, 3]))  # an int by its type: its __index__ says otherwise
    with pytest.raises(RuntimeError, match=r"^no index today$"):
        f(2, BadIndex())  # an __index__'s own error, as it is


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_bool_sizes(f: Callable[..., Any]) -> None:
    for args, shown in [((True,), r"\(True,\)"), ((2, False), r"\(2, False\)"), (([True, 2],), r"\(True, 2\)"),
                        ((np.bool_(True),), r"(np.True_|True)")]:  # fmt: skip
        with pytest.raises(TypeError, match=rf"^size must be a sequence of ints, got {shown}$"):
            f(*args)
    # device="cpu" reads sizes with operator.index, which takes a bool (as it did before)
    assert f(True, 2, device="cpu").shape == (1, 2)


@pytest.mark.parametrize("f", FACTORIES, ids=IDS)
def test_numpy_ints_and_mixed_sequences(f: Callable[..., Any]) -> None:
    assert f(np.int64(2), np.uint8(3)).shape == (2, 3)
    assert f((np.int32(2), 3, Index(4))).shape == (2, 3, 4)
    assert f([np.int16(2), 3]).shape == (2, 3)
    assert f(np.array(3)).shape == (3,)
    assert f(range(1, 4)).shape == (1, 2, 3)
    assert f(np.int64(2), 3, device="cpu").shape == (2, 3)
    assert f(np.array([2, 3]), device="cpu").shape == (2, 3)
    assert f(Seq(2, 3)).shape == (2, 3)


@pytest.mark.parametrize(("f", "name"), [(bridge.empty, "empty"), (bridge.zeros, "zeros")], ids=IDS)
def test_keyword_misuse(f: Callable[..., Any], name: str) -> None:
    for bad in ("size", "dtyp", "out", "requires_grad", "layout", "pin_memory"):
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument '{bad}'"):
            f(2, **{bad: None})
    with pytest.raises(TypeError, match=r"^size must be a sequence of ints, got \(2, bridge.float64\)$"):
        f(2, bridge.float64)  # dtype is keyword-only: positionally it is a size
    with pytest.raises(TypeError, match=r"^unknown dtype 'float33'"):
        f(2, dtype="float33")
    with pytest.raises(TypeError, match=r"^cannot interpret 3 as a dtype$"):
        f(2, dtype=3)
    with pytest.raises(RuntimeError, match=r"^bridge allocates only CPU memory, got device='cuda'; "):
        f(2, device="cuda")
    with pytest.raises(ValueError, match=r"^unknown device type 'bogus'"):
        f(2, device="bogus")
    assert f(2, dtype="int8").dtype is bridge.int8 and f(2, dtype=np.float64).dtype is bridge.float64
    assert f(2, device=bridge.device("cpu")).device == bridge.device("cpu")


def test_memory_format_misuse() -> None:
    with pytest.raises(TypeError, match=r"^expected a bridge.memory_format, got None$"):
        bridge.empty(2, memory_format=None)
    with pytest.raises(ValueError, match=r"^required rank 4 tensor to use channels_last format, got 1-d$"):
        bridge.empty(2, memory_format=bridge.channels_last)
    with pytest.raises(TypeError, match=r"^zeros\(\) got an unexpected keyword argument 'memory_format'"):
        bridge.zeros(2, memory_format=bridge.contiguous_format)


# ------------------------------------------------------------ the tensors


@pytest.mark.parametrize("dtype", [bridge.float32, bridge.int8, bridge.float64, bridge.complex128, bridge.bool,
                                   bridge.bfloat16, bridge.float8_e4m3fn])  # fmt: skip
def test_fresh_aligned_writable_contiguous_memory(dtype: Any) -> None:
    for f in FACTORIES:
        a, b = f(3, 5, dtype=dtype), f((3, 5), dtype=dtype, device="cpu")
        for t in (a, b):
            assert type(t) is bridge.Tensor and t.dtype is dtype and t.shape == (3, 5) and t.stride() == (5, 1)
            assert t.data_ptr() % 64 == 0 and t.storage_offset() == 0 and not t.is_readonly
            assert t.untyped_storage().nbytes() == 15 * dtype.itemsize and t.device == bridge.device("cpu")
        assert a.untyped_storage() is not b.untyped_storage()


def test_zeros_are_zero_in_a_reused_block() -> None:
    """A small block freed dirty and allocated again reads zeros through zeros()."""
    for n in (1, 16, 1000):
        dirty = bridge.empty(n, dtype=bridge.int64)
        dirty.fill_(-1)
        del dirty
        for z in (bridge.zeros(n, dtype=bridge.int64), bridge.zeros(n, dtype=bridge.int64, device="cpu")):
            assert not np.asarray(z).any()


def test_a_list_that_an_index_changes_is_read_from_a_snapshot() -> None:
    """An item's __index__ that empties, or grows, the list being read: the
    sizes are the list's items as the call found them (as tuple(list) reads
    them), never read from the array the list had before (freed by the change)."""
    sizes: list[Any] = []

    class Clears:
        def __index__(self) -> int:
            sizes.clear()
            return 2

    class Grows:
        def __index__(self) -> int:
            sizes.extend([1] * 100)
            return 2

    for f in FACTORIES:
        for device in (None, "cpu"):
            sizes[:] = [Clears(), 3, 4]
            assert f(sizes, device=device).shape == (2, 3, 4) and sizes == []
            sizes[:] = [Grows(), 3]
            assert f(sizes, device=device).shape == (2, 3) and len(sizes) == 102
            sizes[:] = [Clears(), 3.5]
            with pytest.raises(TypeError, match=r"^size must be a sequence of ints, got \(<.*Clears object at 0x[0-9a-f]+>, 3.5\)$"):
                f(sizes)


@pytest.mark.thread_unsafe(reason="counts references to the shared dtype objects")
def test_no_reference_is_kept_or_lost() -> None:
    sizes, shape, dt = [2, 3], (2, 3), bridge.int16
    counts = [sys.getrefcount(o) for o in (sizes, shape, dt, bridge.float32)]
    for f in FACTORIES:
        for _ in range(100):
            f(sizes)
            f(*shape, dtype=dt)
            f(shape, device="cpu", dtype=dt)
            for bad in ((-1,), (2.5,), ([2, None],), (2**63,)):
                with pytest.raises((TypeError, ValueError)):
                    f(*bad, dtype=dt)
            with pytest.raises(TypeError):
                f(sizes, dtype=dt, bogus=1)
    gc.collect()
    assert [sys.getrefcount(o) for o in (sizes, shape, dt, bridge.float32)] == counts


# ------------------------------------------------------------ introspection


def test_the_public_names_are_the_c_functions() -> None:
    assert bridge.empty is _C.empty and bridge.zeros is _C.zeros
    assert factories.empty is _C.empty and factories.zeros is _C.zeros
    assert "empty" in bridge.__all__ and "zeros" in bridge.__all__
    assert inspect.isbuiltin(bridge.empty) and inspect.isbuiltin(bridge.zeros)


def test_docstrings_and_signatures() -> None:
    assert bridge.empty.__text_signature__ == (
        "(*size, dtype=None, device=None, memory_format=bridge.contiguous_format)"
    )
    assert bridge.zeros.__text_signature__ == "(*size, dtype=None, device=None)"
    # the contract's first words are the general path's docstring (one text, two homes)
    for c, py in ((bridge.empty, factories._empty_general), (bridge.zeros, factories._zeros_general)):
        first = " ".join(inspect.getdoc(py).split("\n\n")[0].split())  # type: ignore[union-attr]
        assert " ".join((c.__doc__ or "").split()).startswith(first)
        assert "TypeError" in (c.__doc__ or "") and "ValueError" in (c.__doc__ or "")
    sig = inspect.signature(bridge.zeros)
    assert [(p.name, p.kind, p.default) for p in sig.parameters.values()] == [
        ("size", inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty),
        ("dtype", inspect.Parameter.KEYWORD_ONLY, None),
        ("device", inspect.Parameter.KEYWORD_ONLY, None),
    ]
    # memory_format's default is an object (as torch's own text signature says), which
    # inspect's text-signature reader (3.11's, at least) does not evaluate
    try:
        sig = inspect.signature(bridge.empty)
    except ValueError:
        pass
    else:
        assert list(sig.parameters) == ["size", "dtype", "device", "memory_format"]
    assert factories._empty_general.__qualname__ == "empty" and factories._zeros_general.__qualname__ == "zeros"


def test_the_general_paths_are_the_registered_up_calls() -> None:
    assert _C.upcall("empty_slow") is factories._empty_general
    assert _C.upcall("zeros_slow") is factories._zeros_general
    assert {"empty_slow", "zeros_slow"} <= set(_C.UPCALLS)


def test_operator_index_reads_what_c_reads() -> None:
    """The C reads an int as operator.index does (an Index, numpy ints)."""
    for v in (Index(7), np.int8(7), np.uint64(7), 7):
        assert bridge.empty(v).shape == (operator.index(v),)
