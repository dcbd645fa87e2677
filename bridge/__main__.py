"""``python -m bridge`` (also the ``bridge`` console script).

Subcommands: ``tour`` (the default): a short walk through storage sharing,
views and a NumPy round trip, each claim checked as it is printed.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import bridge


def tour() -> int:
    """Print a checked walk through the core; returns a process exit code."""
    print(f"dlpack-bridge {bridge.__version__}: the strided core in a few steps\n")
    points = bridge.arange(9, dtype=bridge.float32).reshape(3, 3)
    print("points = bridge.arange(9.).reshape(3, 3)")
    print(points, "\n")

    tr = points.t()
    same = tr.data_ptr() == points.data_ptr()
    print(f"points.t() shares the storage: {same}; strides {points.stride()} -> {tr.stride()}")
    inner = points[1:3, 1:3]
    print(
        f"points[1:3, 1:3]: offset {inner.storage_offset()}, strides {inner.stride()}, "
        f"contiguous {inner.is_contiguous()}"
    )
    inner[0, 0] = 40.0
    print(f"inner[0, 0] = 40 is seen through points[1, 1]: {points[1, 1].item()}")
    rev = points[::-1, ::-2]
    print(f"points[::-1, ::-2] (negative steps): strides {rev.stride()}, values {rev.tolist()}")
    big = points[0].broadcast_to((1000, 3))
    print(
        f"broadcast_to((1000, 3)): strides {big.stride()}, "
        f"storage still {big.untyped_storage().nbytes()} bytes\n"
    )

    arr = points.numpy()
    arr[2, 2] = -1.0
    print(f"points.numpy() shares memory: a NumPy write is seen by bridge -> {points[2, 2].item()}")
    back = bridge.tensor(np.linspace(0, 1, 4))
    print(f"bridge.tensor(ndarray) copies: {back} ({back.dtype})")
    shared = np.from_dlpack(points)
    shared[0, 0] = 11.0
    again = bridge.from_dlpack(shared)
    dl_ok = again.data_ptr() == points.data_ptr() and points[0, 0].item() == 11.0
    print(f"DLPack: np.from_dlpack(points) and back share one buffer: {dl_ok}")
    perm = bridge.arange(24).reshape(2, 3, 4).permute(2, 0, 1)
    print(
        f"permute(2, 0, 1): strides {perm.stride()}, contiguous() -> "
        f"{perm.contiguous().stride()}"
    )
    ok = same and dl_ok and points[1, 1].item() == 40.0 and points[2, 2].item() == -1.0
    print("\nall checks passed" if ok else "\nA CHECK FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bridge``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="bridge", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("tour", help="a checked walk through storages, views and NumPy")
    args = parser.parse_args(argv)
    if args.command in (None, "tour"):
        return tour()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
