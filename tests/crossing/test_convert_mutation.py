"""Inputs that change while they convert.

A leaf's import runs Python (an ``__arrow_c_array__``, a ``__dlpack__``), and
another thread may run meanwhile: a list, dict, tuple's contents or table
changed under ``bridge.convert`` gives the result of the snapshot the call
read, or a clear error; never freed memory (the fast path read a shrunk
list's freed slots: SIGSEGV, heap-use-after-free under ASan), never a changed
input (``_rebuild`` once cleared a copy of a Mapping that shared its items
with the input). Each case runs against the C batch loop (a destination
holding the leaves as they are) and the general path (one that copies).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, MutableMapping

import numpy as np
import pytest

import bridge

# numpy holds every leaf as it is (the C loop takes them); "numpy" with
# writable=True makes each leaf a copy (the general path's).
PATHS = [pytest.param({}, id="fast"), pytest.param({"writable": True}, id="general")]


def _convert(obj: object, kw: dict[str, object]) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bridge.convert(obj, np, **kw)


class Meddler:
    """An array whose ``__dlpack__`` runs ``meddle`` first (once), as a
    producer's Python may: the import of this leaf changes its container."""

    def __init__(self, values: np.ndarray, meddle: object) -> None:
        self.a = values
        self.meddle = meddle
        self.calls = 0

    def __dlpack__(self, **kw: object) -> object:
        self.calls += 1
        if self.calls == 1 and callable(self.meddle):
            self.meddle()
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()


def _values(out: object) -> object:
    """Converted output as plain Python numbers (containers kept)."""
    if isinstance(out, np.ndarray):
        return out.tolist()
    if isinstance(out, dict):
        return {k: _values(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return type(out)(_values(v) for v in out)
    return out


@pytest.mark.parametrize("kw", PATHS)
def test_a_list_that_shrinks_under_its_first_leaf_converts_as_read(kw: dict[str, object]) -> None:
    items: list[object] = []

    def shrink() -> None:
        del items[1:]

    items += [Meddler(np.arange(3.0), shrink), *[np.full(4, float(i)) for i in range(1, 40)]]
    before = list(items)
    out = _convert(items, kw)
    assert isinstance(out, list) and len(out) == len(before)  # the list as the call read it
    assert _values(out)[0] == [0.0, 1.0, 2.0] and _values(out)[39] == [39.0] * 4
    assert len(items) == 1  # (the producer's own change stands; convert made none)


@pytest.mark.parametrize("kw", PATHS)
def test_a_list_that_grows_under_a_leaf_converts_as_read(kw: dict[str, object]) -> None:
    items: list[object] = []
    items += [Meddler(np.arange(2.0), lambda: items.extend(np.zeros(1) for _ in range(100))), np.ones(2)]
    out = _convert(items, kw)
    assert _values(out) == [[0.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("kw", PATHS)
def test_a_list_whose_items_are_replaced_under_a_leaf_converts_as_read(kw: dict[str, object]) -> None:
    items: list[object] = []

    def swap() -> None:
        items[1] = "not an array any more"
        items[2] = None

    items += [Meddler(np.arange(2.0), swap), np.ones(2), np.zeros(2)]
    out = _convert(items, kw)
    assert _values(out) == [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]


@pytest.mark.parametrize("kw", PATHS)
def test_a_dict_that_changes_under_a_leaf_converts_as_read(kw: dict[str, object]) -> None:
    d: dict[str, object] = {}

    def change() -> None:
        d.clear()
        d.update(other=np.zeros(1))

    d.update(a=Meddler(np.arange(2.0), change), b=np.ones(2), c={"deep": np.full(2, 7.0)})
    out = _convert(d, kw)
    assert _values(out) == {"a": [0.0, 1.0], "b": [1.0, 1.0], "c": {"deep": [7.0, 7.0]}}
    assert list(d) == ["other"]


@pytest.mark.parametrize("kw", PATHS)
def test_a_tuples_contents_that_change_under_a_leaf_convert_as_read(kw: dict[str, object]) -> None:
    inner: list[object] = []
    inner += [np.ones(2), np.zeros(2)]
    t = (Meddler(np.arange(2.0), inner.clear), inner, {"k": inner})
    out = _convert(t, kw)
    assert isinstance(out, tuple)
    assert _values(out) == ([0.0, 1.0], [[1.0, 1.0], [0.0, 0.0]], {"k": [[1.0, 1.0], [0.0, 0.0]]})


class Store(MutableMapping[str, object]):
    """A MutableMapping that keeps its items in an attribute, with no
    ``__copy__``: ``copy.copy`` of it shares that dict."""

    def __init__(self, data: dict[str, object] | None = None) -> None:
        self.data = dict(data or {})

    def __getitem__(self, k: str) -> object:
        return self.data[k]

    def __setitem__(self, k: str, v: object) -> None:
        self.data[k] = v

    def __delitem__(self, k: str) -> None:
        del self.data[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class NoArgStore(Store):
    """One whose constructor takes no items: the result is a plain dict."""

    def __init__(self) -> None:
        super().__init__()


@pytest.mark.parametrize("kw", PATHS)
def test_convert_never_rewrites_the_callers_mapping(kw: dict[str, object]) -> None:
    a, b = np.arange(3.0), np.ones(2)
    src = Store({"a": a, "b": b})
    out = _convert(src, kw)
    assert src.data["a"] is a and src.data["b"] is b  # the input untouched
    assert isinstance(out, Store) and out is not src and out.data is not src.data
    assert _values(dict(out)) == {"a": [0.0, 1.0, 2.0], "b": [1.0, 1.0]}
    odd = NoArgStore()
    odd["x"] = a
    out2 = _convert(odd, kw)
    assert odd.data["x"] is a and type(out2) is dict and _values(out2) == {"x": [0.0, 1.0, 2.0]}


def test_a_defaultdict_keeps_its_factory_and_the_input_its_items() -> None:
    from collections import OrderedDict, defaultdict

    a = np.arange(2.0)
    dd: defaultdict[str, object] = defaultdict(list, {"a": a})
    out = _convert(dd, {"writable": True})
    assert type(out) is defaultdict and out.default_factory is list and dd["a"] is a
    od = OrderedDict([("z", a), ("y", np.ones(1))])
    out2 = _convert(od, {})
    assert type(out2) is OrderedDict and list(out2) == ["z", "y"] and od["z"] is a


def test_a_batch_that_holds_itself_is_a_clear_error() -> None:
    loop: list[object] = [np.ones(2)]
    loop.append(loop)
    with pytest.raises(ValueError, match="nests deeper than"):
        _convert(loop, {})


@pytest.mark.thread_unsafe(reason="starts its own threads")
def test_a_batch_changed_by_another_thread_converts_a_snapshot_or_raises_clearly() -> None:
    """Another thread appends to, pops from and reassigns a list and a dict
    that convert reads again and again: every result is one the containers
    held at some point (every item converted, no foreign object left
    unconverted), or a RuntimeError from reading a Mapping that changed size
    (Python's own iteration check); never a crash."""
    shared_list: list[object] = [np.ones(4) for _ in range(50)]
    shared_dict: dict[int, object] = {i: np.ones(4) for i in range(50)}
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            shared_list.append(np.full(4, 2.0))
            shared_list.pop(0)
            shared_dict[i % 80] = np.full(4, 3.0)
            shared_dict.pop((i + 40) % 80, None)
            i += 1

    th = threading.Thread(target=churn)
    th.start()
    try:
        for kw in ({}, {"writable": True}) * 50:
            for obj in (shared_list, shared_dict):
                try:
                    out = _convert(obj, kw)
                except RuntimeError as e:
                    assert "changed size during iteration" in str(e)
                    continue
                leaves = out if isinstance(out, list) else list(out.values())  # type: ignore[union-attr]
                assert all(isinstance(x, np.ndarray) and x.shape == (4,) for x in leaves)
    finally:
        stop.set()
        th.join()


@pytest.mark.parametrize("kw", PATHS)
def test_a_pandas_frame_read_while_another_thread_drops_columns(kw: dict[str, object]) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({f"c{i}": np.full(3, float(i)) for i in range(30)})
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            name = f"c{i % 30}"
            if name in frame.columns:
                del frame[name]
            else:
                frame[name] = np.full(3, float(i % 30))
            i += 1

    th = threading.Thread(target=churn)
    th.start()
    try:
        for _ in range(100):
            try:
                out = _convert(frame, kw)
            except (RuntimeError, ValueError) as e:  # changed while read; a column gone before it was chosen
                assert "changed while" in str(e) or "no column" in str(e) or "more than one column" in str(e)
                continue
            assert isinstance(out, dict)
            assert all(v.tolist() == [float(k[1:])] * 3 for k, v in out.items())  # type: ignore[union-attr]
    finally:
        stop.set()
        th.join()
