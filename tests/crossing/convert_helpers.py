"""How the crossing tests read a destination's result: its first element's
address (None where the library has no way to tell) and its values as a
NumPy array, and how they make a source of each library."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import bridge
from bridge.core.native import _C
from bridge.crossing import convert as conv


def address(dest: str, r: Any) -> int | None:
    """The address of ``r``'s first element (the destination's own object)."""
    if dest == "bridge":
        return int(r.data_ptr())
    if dest == "numpy":
        return int(r.__array_interface__["data"][0])
    if dest in ("torch", "paddle", "onnxruntime"):
        return int(r.data_ptr())
    if dest == "jax":
        return int(r.unsafe_buffer_pointer())
    if dest == "tvm_ffi":
        return int(np.from_dlpack(r).__array_interface__["data"][0])
    if dest == "pyarrow":
        arr = r.storage.values if hasattr(r, "storage") else r
        return int(arr.buffers()[1].address + arr.offset * arr.type.bit_width // 8)
    if dest == "polars":
        return int(np.asarray(r.to_numpy()).__array_interface__["data"][0])
    return None  # mlx copies every import


def values(dest: str, r: Any) -> np.ndarray[Any, Any]:
    """``r``'s values (a copy)."""
    if dest == "bridge":
        return np.array(r.numpy(), copy=True)
    if dest == "torch":
        import torch

        return np.array((r.float() if r.dtype == torch.bfloat16 else r).numpy(), copy=True)
    if dest == "paddle":
        return np.array(r.numpy(), copy=True)
    if dest == "tvm_ffi":
        return np.array(np.from_dlpack(r), copy=True)
    if dest == "onnxruntime":
        return np.array(r.numpy(), copy=True)
    if dest == "pyarrow":
        if hasattr(r, "to_numpy_ndarray"):
            return np.array(r.to_numpy_ndarray(), copy=True)
        return np.array(r.to_numpy(zero_copy_only=False), copy=True)
    if dest == "polars":
        return np.array(r.to_numpy(), copy=True)
    return np.array(r, copy=True)  # numpy, jax, mlx


def source(kind: str, ref: np.ndarray[Any, Any]) -> Any:
    """``ref``'s values as an object of library ``kind`` (bridge allocates
    its own 64-byte aligned memory; torch and jax their own)."""
    if kind == "bridge":
        return bridge.tensor(ref)
    if kind == "numpy":
        return np.array(ref, copy=True)
    if kind == "torch":
        import torch

        return torch.from_numpy(np.array(ref, copy=True))
    if kind == "jax":
        import jax.numpy as jnp

        return jnp.asarray(ref)
    raise ValueError(kind)


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@contextmanager
def spy() -> Iterator[list[object]]:
    """Record each call of the general path (the convert_slow up-call)."""
    calls: list[object] = []
    general = conv._general

    def recording(*args: Any, **kwargs: Any) -> object:
        calls.append(args[0] if args else kwargs.get("obj"))
        return general(*args, **kwargs)

    _C._register("convert_slow", recording)
    try:
        yield calls
    finally:
        _C._register("convert_slow", general)


def run_in_threads(work: Callable[[], object], n: int = 4) -> list[BaseException]:
    """``work()`` on ``n`` threads at once; the exceptions they raised (a
    thread's exception is otherwise lost)."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as err:  # (collected for the test to show)
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors
