"""Element alignment: memory aligned to a dtype's component but not to its
whole element (complex128 at 8 bytes, NumPy calls it aligned) goes into torch
and paddle as one named ``alignment`` copy, never as is: their complex kernels
crash on it (SIGSEGV in ``x * 2``, ``x.clone()``, ``fill_``; measured on
torch 2.13 and paddle 3.3). Arrow destinations get item-size aligned memory,
as Arrow asks. The destination's own operations on the result run in a
subprocess, so that a regression fails a test instead of killing the run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import bridge
from bridge.core.native import _C
from bridge.crossing.capabilities import DESTINATIONS


def _component_aligned(dtype: str, n: int = 6) -> np.ndarray:
    """n elements of complex ``dtype`` starting half an element past an element boundary."""
    comp = np.dtype(dtype).itemsize // 2
    raw = np.zeros((n + 2) * 2 + 16, dtype=f"f{comp}")
    k = next(k for k in range(16) if (raw[k:].ctypes.data % (2 * comp)) == comp)
    a = raw[k : k + 2 * n].view(dtype)
    a[:] = np.arange(n) + 1j * np.arange(n)
    assert a.ctypes.data % a.itemsize == comp and a.flags.aligned  # aligned, as NumPy sees it
    return a


INSTALLED = [n for n in ("torch", "paddle") if importlib.util.find_spec(n) is not None]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("to", INSTALLED)
def test_complex_aligned_to_its_component_is_one_alignment_copy(to: str, dtype: str) -> None:
    assert DESTINATIONS[to].element_aligned >= {"complex64", "complex128"}
    a = _component_aligned(dtype)
    for fast in (False, True):  # the first call registers the destination; the second is the C path
        if not fast:
            _C.convert_forget()
        with pytest.warns(bridge.CopyWarning, match=rf"needs its data {a.itemsize}-byte aligned") as caught:
            out = bridge.convert(a, to)
        kinds = [w.message.kind for w in caught if isinstance(w.message, bridge.CopyWarning)]  # type: ignore[union-attr]
        assert kinds == ["alignment"]
        back = bridge.from_dlpack(out)
        assert back.data_ptr() != a.ctypes.data and back.data_ptr() % a.itemsize == 0
        assert np.array_equal(back.numpy(), a)
        with pytest.raises(BufferError, match="aligned"):
            bridge.convert(a, to, copy=False)
    aligned = np.arange(6, dtype=dtype)
    assert aligned.ctypes.data % aligned.itemsize == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        assert bridge.from_dlpack(bridge.convert(aligned, to)).data_ptr() == aligned.ctypes.data


@pytest.mark.parametrize("to", INSTALLED)
def test_the_destination_computes_on_what_convert_hands_it(to: str) -> None:
    """Each length and each operation that crashed on zero-copy memory, on
    convert's result, in a subprocess."""
    code = textwrap.dedent(f"""
        import warnings, numpy as np, bridge
        import {to} as lib
        warnings.simplefilter("ignore", bridge.CopyWarning)
        for n in range(1, 13):
            raw = np.zeros(2 * n + 4)
            a = raw[1 if raw.ctypes.data % 16 == 0 else 2:][: 2 * n].view(np.complex128)
            a[:] = np.arange(n) + 1j
            assert a.ctypes.data % 16 == 8
            want = a.copy()
            x = bridge.convert(a, lib)
            assert np.array_equal((x * 2).numpy(), want * 2)
            assert np.array_equal((x + 1).numpy(), want + 1)
            assert np.array_equal(x.clone().numpy(), want)
            x.fill_(1.0)
            assert np.array_equal(x.numpy(), np.ones(n, np.complex128))
            assert np.array_equal(a, want)  # a copy: the source is untouched
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


@pytest.mark.parametrize("to", [n for n in ("pyarrow", "polars") if importlib.util.find_spec(n) is not None])
def test_arrow_destinations_get_item_size_aligned_memory(to: str) -> None:
    raw = np.zeros(64, np.uint8)
    mis = np.frombuffer(raw.data, dtype=np.float32, count=8, offset=2 if raw.ctypes.data % 4 == 0 else 0)
    assert mis.ctypes.data % 4 == 2
    with pytest.warns(bridge.CopyWarning, match="4-byte aligned") as caught:
        out = bridge.convert(mis, to)
    assert [w.message.kind for w in caught if isinstance(w.message, bridge.CopyWarning)] == ["alignment"]  # type: ignore[union-attr]
    assert np.array_equal(np.asarray(out), mis)
    with pytest.raises(BufferError, match="aligned"):
        bridge.convert(mis, to, copy=False)
