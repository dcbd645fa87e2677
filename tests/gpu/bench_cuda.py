"""One CUDA exchange, side by side (`make test-gpu` runs it after the tests).

Every path moves the same 1 KiB float32 CUDA tensor between frameworks with
the spec's stream semantics (each consumer passes or waits on its current
stream). Target: every bridge path faster than the faster of the torch <->
CuPy paths. Prints one table; exits 1 when a target is missed or no GPU.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import bridge


def per_call(fn: Callable[[], object], repeat: int = 7, min_time: float = 0.2) -> float:
    """Best per-call seconds over `repeat` runs of at least `min_time` each."""
    n = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= min_time / 10:
            break
        n *= 2
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n * 10):
            fn()
        best.append((time.perf_counter() - t0) / (n * 10))
    return min(best)


def fmt(s: float) -> str:
    return f"{s * 1e6:7.2f} us"


def main() -> int:
    import cupy
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    c = cupy.arange(256, dtype=cupy.float32)
    b = bridge.from_dlpack(x)
    bc = bridge.from_dlpack(c)
    torch.cuda.synchronize()

    refs = {
        "torch.from_dlpack(cupy)": lambda: torch.from_dlpack(c),
        "cupy.from_dlpack(torch)": lambda: cupy.from_dlpack(x),
    }
    rows = {
        "bridge.from_dlpack(torch cuda)  [C exchange API]": lambda: bridge.from_dlpack(x),
        "torch.from_dlpack(bridge cuda)": lambda: torch.from_dlpack(b),
        "cupy.from_dlpack(bridge cuda)": lambda: cupy.from_dlpack(bc),
        "bridge.from_dlpack(cupy)": lambda: bridge.from_dlpack(c),
        "cupy.asarray(bridge cuda)  [__cuda_array_interface__]": lambda: cupy.asarray(bc),
        "bridge.from_cuda_array_interface(cupy)": lambda: bridge.from_cuda_array_interface(c),
    }
    for fn in (*refs.values(), *rows.values()):  # every path aliases: checked once
        out = fn()
        ptr = out.data_ptr() if hasattr(out, "data_ptr") else out.data.ptr
        assert ptr in (x.data_ptr(), c.data.ptr), "an exchange copied"

    print(f"bridge {bridge.__version__}  torch {torch.__version__}  cupy {cupy.__version__}  "
          f"{torch.cuda.get_device_name()}")  # fmt: skip
    print("per call, best of 7 runs of >= 0.2 s; 1 KiB float32 CUDA tensor\n")
    ref_times = {k: per_call(f) for k, f in refs.items()}
    target = min(ref_times.values())
    width = max(map(len, (*refs, *rows))) + 2
    for k, v in ref_times.items():
        print(f"{k:<{width}} {fmt(v)}   (reference)")
    missed = []
    for k, f in rows.items():
        v = per_call(f)
        ok = v < target
        if not ok:
            missed.append(k)
        print(f"{k:<{width}} {fmt(v)}   {v / target:5.2f}x of the faster torch<->cupy path  "
              f"{'ok' if ok else 'MISS'}")  # fmt: skip
    print(f"\nmedian of the bridge rows: {fmt(statistics.median(per_call(f, 3) for f in rows.values()))}")
    if missed:
        print("target missed:", ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
