"""The one lending decision (``bridge_lend`` in cdefs/core/storage.c, ``_C.lend``):
may memory be lent as it is to a kind of consumer, and how. Its table, and
every exporter following it, each checked through the consumer's own API."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import bridge
from bridge.core.native import _C
from bridge.crossing.capabilities import DESTINATIONS

KINDS = {"flagged": _C.CONSUMER_FLAGGED, "immutable": _C.CONSUMER_IMMUTABLE,
         "never-writes": _C.CONSUMER_NEVER_WRITES, "unflagged": _C.CONSUMER_UNFLAGGED}  # fmt: skip
READONLY = {"flagged": _C.LEND_READONLY, "immutable": _C.LEND_READONLY, "never-writes": _C.LEND_ALIAS,
            "unflagged": _C.LEND_REFUSED}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_table(kind: str) -> None:
    assert _C.lend(False, KINDS[kind]) == _C.LEND_WRITABLE
    assert _C.lend(True, KINDS[kind]) == READONLY[kind]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown consumer kind 9"):
        _C.lend(True, 9)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        _C.lend(True)  # type: ignore[call-arg]


def _readonly() -> bridge.Tensor:
    a = np.arange(6.0)
    a.flags.writeable = False
    t = bridge.from_numpy(a)
    assert t.is_readonly
    return t


def test_every_exporter_follows_it() -> None:
    t, w = _readonly(), bridge.arange(6.0)
    # flagged consumers are told: NumPy's interfaces, the buffer protocol, a versioned capsule
    assert not np.asarray(t).flags.writeable and np.asarray(w).flags.writeable
    assert not np.from_dlpack(t).flags.writeable
    assert memoryview(t).readonly and not memoryview(w).readonly
    with pytest.raises(TypeError, match="read-write bytes-like"):  # CPython's words for our BufferError
        io.BytesIO(b"x").readinto(t)  # asks for a writable buffer
    assert io.BytesIO(b"\0" * 8).readinto(w) == 8
    # unflagged ones are refused: a legacy capsule
    with pytest.raises(BufferError, match="legacy DLPack capsule"):
        t.__dlpack__()
    assert w.__dlpack__() is not None
    # Arrow's consumers never write (its buffers are immutable to both sides): lent as it is
    pa = pytest.importorskip("pyarrow")
    for x in (t, w):
        arr = pa.array(x)
        assert arr.buffers()[1].address == x.data_ptr() and not arr.buffers()[1].is_mutable
        assert not arr.to_numpy(zero_copy_only=True).flags.writeable
        buf = bridge.arrow.to_buffer(x)
        assert buf.address == x.data_ptr() and not buf.is_mutable
    assert bridge.from_arrow(pa.array(w)).is_readonly  # what comes back from Arrow is read-only too


def test_convert_asks_it_for_each_destination() -> None:
    """Each destination's consumer kind decides what read-only memory gets: as
    it is (told), through a writable alias, or a copy (the capability table)."""
    for name, h in DESTINATIONS.items():
        kind = h.consumer()
        if h.readonly == "writes":
            assert kind == _C.CONSUMER_UNFLAGGED, name
        elif h.route in ("arrow", "arrow-column"):
            assert kind == _C.CONSUMER_IMMUTABLE, name
        elif h.capsule == "legacy":
            assert kind == _C.CONSUMER_NEVER_WRITES, name
        else:
            assert kind == _C.CONSUMER_FLAGGED, name
    t = _readonly()
    with pytest.warns(bridge.CopyWarning, match="read-only"):
        out = bridge.convert(t, "torch")  # torch's tensors are writable: copied
    assert out.data_ptr() != t.data_ptr()
    kept = bridge.convert(t, np)  # NumPy says read-only: shared
    assert kept.ctypes.data == t.data_ptr() and not kept.flags.writeable


def test_a_storage_becomes_read_only_through_one_method_for_good() -> None:
    s = bridge.arange(4.0).untyped_storage()
    ptr, owner = s.data_ptr(), s.owner
    s._make_readonly()
    assert s.is_readonly and s.data_ptr() == ptr and s.owner is owner
    s._make_readonly()
    assert s.is_readonly
    back = pickle.loads(pickle.dumps(s, protocol=5))
    assert back.is_readonly  # a copy of read-only memory stays read-only


def test_making_a_storage_read_only_while_threads_export_it() -> None:
    """Real threads export a tensor (NumPy's interface, buffers, versioned
    capsules) while another makes its storage read-only: every export made
    after the flip is read-only, none fails, and the memory stays the same."""
    import threading

    t = bridge.arange(1024.0)
    ptr = t.data_ptr()
    flipped = threading.Event()
    errors: list[BaseException] = []
    late_writable: list[str] = []

    def export() -> None:
        try:
            for _ in range(2000):
                after = flipped.is_set()  # read before the export: a later export must see the flip
                a = np.asarray(t)
                m = memoryview(t)
                c = np.from_dlpack(t)
                assert a.ctypes.data == ptr and c.ctypes.data == ptr
                if after and (a.flags.writeable or not m.readonly or c.flags.writeable):
                    late_writable.append(f"{a.flags.writeable} {m.readonly} {c.flags.writeable}")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=export) for _ in range(4)]
    for th in threads:
        th.start()
    t.untyped_storage()._make_readonly()
    flipped.set()
    for th in threads:
        th.join()
    assert not errors and not late_writable, (errors, late_writable[:3])
    assert t.is_readonly and not np.asarray(t).flags.writeable
