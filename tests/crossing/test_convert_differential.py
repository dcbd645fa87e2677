"""bridge.convert, differentially: random sources of every installed library
into every installed destination, with every ``copy`` and ``readonly``
policy, checked through the destination's own API against NumPy's reference.

A case is drawn here as plain data: the source library, its dtype, its layout
(contiguous, permuted, stepped, negative and zero strides, size-1 dims with
odd strides, 0-d and zero-size), its memory's offset and alignment (64-byte
aligned, element-aligned, aligned to a complex number's component only,
misaligned to its item size), its byte order (NumPy sources) and whether it
is read-only, and the destination, how it is named, ``copy`` and
``readonly``, and which of convert's paths takes it (the general one, as on
a first call, or the C fast path). A source library that cannot make a
layout gets one it can make. Each case is made and checked in a child
process (:mod:`differential_helpers`), which the destination's crashes and
hangs end instead of the test run; what each destination holds is restated
in :mod:`differential_sources` from docs/convert.md (``RULES``), not read
from bridge's own table:

- the values, dtype and shape equal NumPy's reference (read by the
  destination's own API: ``numpy()``, ``to_numpy()``, ``np.asarray``, ...);
- no CopyWarning (copy=None) means zero-copy: the result's first element is
  the source's, by each library's own address (``data_ptr()``,
  ``unsafe_buffer_pointer()``, ``buffers()[1].address``, ...); a copy is warned
  (copy=None, its kind the first copying fix of docs/convert.md's rules) or
  refused (copy=False, a BufferError naming the reason), and always made
  under copy=True;
- read-only memory never becomes writable through the result, unless
  readonly="share";
- a write into a copy does not reach the source;
- the destination's own arithmetic on the result (doubling, a sum) is right;
- the result is still right after the source dies (in a reference cycle,
  freed by ``gc.collect()``) and fresh allocations reuse freed memory;
- every refusal is a TypeError, ValueError or BufferError naming its reason.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from differential_helpers import Worker
from differential_sources import ALL, BASE, COMPLEX, FLOATS, INTS, ITEMSIZE, WIDE
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from bridge.crossing.capabilities import DESTINATIONS

# One worker process (the module's fixture) answers the cases, one line each way:
# several test threads at once would read each other's answers (and hang waiting for
# theirs). Nothing runs in this process to share between threads: convert runs there.
pytestmark = pytest.mark.thread_unsafe(
    reason="its cases go to one worker process shared by the module, over one pipe, a line each way"
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# cupy holds CUDA memory only; the destinations here are the host's.
DESTS = [name for name, h in DESTINATIONS.items() if name != "cupy" and _installed(h.module)]

_ARROW = BASE
#: Each source: its library, the dtypes it makes, and the layouts it makes
#: ("any" strides, "nonneg" strides, "contiguous" only, "1d", or its own).
SOURCES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "numpy": ("numpy", ALL, "any"),
    "numpy-scalar": ("numpy", ALL, "scalar"),
    "bridge": ("bridge", ALL, "any"),
    "torch": ("torch", ALL, "nonneg"),
    "jax": ("jax", ALL, "own"),
    "paddle": ("paddle", tuple(n for n in (*BASE, *COMPLEX) if n != "uint16"), "nonneg"),  # paddle's uint16 is bfloat16
    "tvm_ffi": ("tvm_ffi", (*BASE, *COMPLEX), "any"),
    "pyarrow": ("pyarrow", _ARROW, "1d"),
    "pyarrow-chunked": ("pyarrow", _ARROW, "1d"),
    "pyarrow-tensor": ("pyarrow", tuple(n for n in _ARROW if n != "bool"), "tensor"),
    "polars": ("polars", (*INTS, *FLOATS, "bool"), "polars"),
    "nanoarrow": ("nanoarrow", _ARROW, "1d"),
    "mlx": ("mlx.core", ("bool", *INTS, "float16", "float32", "complex64"), "mlx"),
    "onnxruntime": ("onnxruntime", BASE, "contiguous"),
    "buffer": ("numpy", ("uint8",), "1d"),
    "python": ("numpy", ("float64",), "value"),
    "table": ("pyarrow", ("float64",), "value"),
}  # fmt: skip
MAKERS = [s for s, (module, _, _) in SOURCES.items() if _installed(module)]
#: The sources whose memory the case places (offset, alignment); the others allocate their own.
PLACED = {"numpy", "bridge", "torch", "paddle", "tvm_ffi", "pyarrow", "pyarrow-chunked", "pyarrow-tensor",
          "nanoarrow", "onnxruntime"}  # fmt: skip

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                          HealthCheck.filter_too_much])  # fmt: skip

dims = st.sampled_from([1, 1, 2, 2, 3, 3, 4, 5, 0])


# ------------------------------------------------------------------ layouts


def _shifts(dtype: str) -> st.SearchStrategy[int]:
    """Bytes past a 64-byte boundary: aligned, element-aligned, aligned to a
    complex number's component only, misaligned to the item size."""
    size = ITEMSIZE[dtype]
    options = [0, 0, 0, size, 2 * size, 3 * size % 64]
    if dtype in COMPLEX:
        options += [size // 2, size // 2 + size]
    if size > 1:
        options += [1, size - 1]
    return st.sampled_from(options)


@st.composite
def strided(draw: st.DrawFn, cls: str, ndim: int | None = None) -> dict[str, Any]:
    """A shape and strides (in elements) of family drawn from those ``cls``
    allows, and the offset and length of the memory under them."""
    if ndim is None:
        ndim = draw(st.integers(0, 4))
    shape = draw(st.lists(dims, min_size=ndim, max_size=ndim))
    families = ["contiguous"]
    if cls in ("any", "nonneg"):
        families += ["permuted", "stepped", "broadcast", "size-1", "mixed"]
        if cls == "any":
            families.append("negative")
    family = draw(st.sampled_from(families))
    neg = cls == "any"
    perm = list(range(ndim))
    steps = [1] * ndim
    if family in ("permuted", "mixed"):
        perm = draw(st.permutations(range(ndim)))
    if family in ("stepped", "mixed"):
        steps = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    strides = [0] * ndim
    acc = draw(st.integers(1, 2)) if family in ("stepped", "mixed") else 1
    for d in reversed(perm):
        strides[d] = acc * steps[d]
        acc = strides[d] * max(shape[d], 1)
    if family in ("negative", "mixed") and neg:
        signs = draw(st.lists(st.sampled_from([1, -1]), min_size=ndim, max_size=ndim))
        strides = [s * g for s, g in zip(strides, signs)]
    if family in ("broadcast", "mixed"):
        zeros = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
        strides = [0 if z else s for s, z in zip(strides, zeros)]
    if family in ("size-1", "mixed"):
        odd = [-7, -1, 0, 3, 5, 1000] if neg else [0, 3, 5, 1000]
        strides = [draw(st.sampled_from(odd)) if n == 1 else s for n, s in zip(shape, strides)]
    extra = draw(st.integers(0, 2))
    tail = draw(st.integers(0, 2))
    if math.prod(shape):
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        offset, base_len = -lo + extra, -lo + extra + hi + 1 + tail
    else:
        offset, base_len = extra, extra + tail
    return {"family": family, "shape": shape, "strides": strides, "offset": offset, "base_len": base_len}


@st.composite
def cases(draw: st.DrawFn, src: str, dest: str) -> dict[str, Any]:
    """One case of ``src`` into ``dest``."""
    _, dtypes, cls = SOURCES[src]
    dtype = draw(st.sampled_from(dtypes))
    case: dict[str, Any] = {"src": src, "dest": dest, "dtype": dtype,
                            "copy": draw(st.sampled_from([None, None, False, True])),
                            "readonly_policy": draw(st.sampled_from(["copy", "error", "share"])),
                            "to": draw(st.sampled_from(["name", "module", "type"])),
                            "path": draw(st.sampled_from(["fast", "fast", "general"])),
                            "shift": 0, "readonly": False, "byteorder": "=",
                            # copy= and readonly= as NumPy's bool_ and str_: read as the Python values
                            "numpy_args": draw(st.booleans())}  # fmt: skip
    if "jax" in (src, dest):
        case["x64"] = draw(st.booleans()) or (src == "jax" and dtype in WIDE)
    if cls == "value":
        if src == "python":
            kind = draw(st.sampled_from(["list", "tuple", "int", "float", "bool"]))
            case.update(value_kind=kind, value={"list": [1.0, 2.0], "tuple": [1, 2], "int": 3, "float": 2.5,
                                                "bool": True}[kind])  # fmt: skip
        else:
            tables = (["pyarrow", "record-batch"] + (["polars"] if _installed("polars") else []) +
                      (["pandas-int-labels"] if _installed("pandas") else []))  # fmt: skip
            case["table"] = draw(st.sampled_from(tables))
        return case
    if cls == "scalar":
        case.update(shape=[], strides=[], offset=draw(st.integers(0, 2)), base_len=3)
        return case
    if cls in ("any", "nonneg", "contiguous"):
        case.update(draw(strided(cls if cls != "contiguous" else "contiguous")))
    elif cls == "own":  # jax: its own row-major memory
        case.update(draw(strided("contiguous")))
    elif cls == "1d":
        case.update(draw(strided("contiguous", ndim=1)))
    elif cls == "tensor":
        rows = draw(st.integers(0, 3))
        inner = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))  # (Arrow: list_size > 0)
        perm = draw(st.permutations(range(len(inner))))
        offset = draw(st.integers(0, 2))
        case.update(phys=[rows, *inner], perm=perm, shape=[rows, *(inner[p] for p in perm)], offset=offset,
                    base_len=offset + rows * math.prod(inner) + draw(st.integers(0, 2)), strides=[])  # fmt: skip
    elif cls == "polars":
        ndim = draw(st.integers(1, 2))
        case.update(shape=draw(st.lists(dims, min_size=ndim, max_size=ndim)), offset=draw(st.integers(0, 2)),
                    base_len=0, strides=[])  # fmt: skip
        case["chunks"] = draw(st.integers(1, 3)) if ndim == 1 else 1
    elif cls == "mlx":
        ndim = draw(st.integers(0, 3))
        shape = draw(st.lists(dims, min_size=ndim, max_size=ndim))
        op = draw(st.sampled_from(["none", "transpose", "slice", "broadcast"]))
        arg: Any = None
        if op == "transpose":
            arg = draw(st.permutations(range(ndim)))
        elif op == "slice":
            arg = [[draw(st.integers(0, 1)), draw(st.integers(1, 2))] for _ in shape]
        elif op == "broadcast":
            arg = [draw(st.integers(0, 3)), *(draw(st.sampled_from([n, 3])) if n == 1 else n for n in shape)]
        case.update(shape=shape, strides=[], offset=0, base_len=0, mlx_op=op, mlx_arg=arg)
    if src in PLACED:
        case["shift"] = draw(_shifts(dtype))
    if src in ("numpy", "bridge", "buffer"):
        case["readonly"] = draw(st.booleans())
    if src == "numpy" and dtype not in ("bool", "int8", "uint8") and ITEMSIZE[dtype] > 1 and dtype in (
            *INTS, "float16", "float32", "float64", *COMPLEX):  # fmt: skip
        case["byteorder"] = draw(st.sampled_from(["=", "=", "=", "swap"]))
    if src in ("torch", "paddle"):
        case["own"] = draw(st.booleans())
    if src == "pyarrow-chunked":
        case["chunks"] = draw(st.integers(1, 3))
    if src == "pyarrow" and case["shape"] and case["shape"][0] >= 2:
        case["nulls"] = draw(st.integers(0, 9)) == 0
    if src == "nanoarrow":
        case["wrap"] = draw(st.booleans())
    if src == "buffer":
        case["memoryview"] = draw(st.booleans())
    return case


# ------------------------------------------------------------------ running


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.close()


def _run(worker: Worker, case: dict[str, Any]) -> None:
    note(f"case: {json.dumps(case)}")
    answer = worker.run(case)
    if "skip" in answer:
        assume(False)
    for n in answer.get("notes", []):
        note(n)
    problems = answer["problems"]
    assert not problems, (f"bridge.convert({case['src']} -> {case['dest']}, copy={case['copy']}, "
                          f"readonly={case['readonly_policy']!r}):\n- " + "\n- ".join(problems) +
                          f'\nrerun it alone: cd tests/crossing && python -c "import differential_helpers as d; '
                          f'print(d.run({case!r}))"')  # fmt: skip


_ARRAY_SOURCES = [s for s in MAKERS if s not in ("python", "table")]


@pytest.mark.parametrize("dest", DESTS)
@settings(SETTINGS, max_examples=25)
@given(data=st.data())
def test_every_source_into(worker: Worker, dest: str, data: st.DataObject) -> None:
    src = data.draw(st.sampled_from(_ARRAY_SOURCES), label="source")
    _run(worker, data.draw(cases(src, dest), label="case"))


@pytest.mark.parametrize("src", _ARRAY_SOURCES)
@settings(SETTINGS, max_examples=12)
@given(data=st.data())
def test_from_source_into_every_destination(worker: Worker, src: str, data: st.DataObject) -> None:
    dest = data.draw(st.sampled_from(DESTS), label="destination")
    _run(worker, data.draw(cases(src, dest), label="case"))


@settings(SETTINGS, max_examples=15)
@given(data=st.data())
def test_python_values_are_type_errors_and_tables_dicts_of_columns(worker: Worker, data: st.DataObject) -> None:
    src = data.draw(st.sampled_from([s for s in ("python", "table") if s in MAKERS]), label="source")
    dest = data.draw(st.sampled_from(DESTS), label="destination")
    _run(worker, data.draw(cases(src, dest), label="case"))
