"""``python -m bridge`` (also the ``bridge`` console script).

Subcommands: ``tour`` (the default): a short walk through storage sharing,
views and a NumPy round trip, each claim checked as it is printed.
``check module:expr``: run the DLPack conformance checks on a producer (an
object, or a zero-argument factory of them) and exit non-zero if a rule failed.
``matrix [options]``: the interop matrix over the frameworks installed (see
``python -m bridge matrix --help``); exits non-zero only for bridge's own failures.
"""

from __future__ import annotations

import argparse
import json
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


def check(spec: str, consumer: str | None = None, as_json: bool = False, isolate: bool = True) -> int:
    """``bridge check``: load ``spec`` ("module:expr", see
    :func:`bridge.kit.conformance.load`), check it, print the report (a table, or
    JSON with ``as_json``); returns 0 when no rule failed, 1 when one did, 2
    when ``spec`` could not be loaded or is not a producer."""
    from bridge.kit import conformance

    try:
        subject = conformance.load(spec)
        report = conformance.check(subject, consumer=consumer, isolate=isolate)
    except Exception as e:
        print(f"bridge check: cannot check {spec!r}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if as_json else report)
    return 0 if report else 1


def _tour_command(args: argparse.Namespace) -> int:
    return tour()


def _check_command(args: argparse.Namespace) -> int:
    return check(args.spec, args.consumer, args.json, not args.in_process)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bridge``; returns the exit code."""
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["matrix"]:  # its own parser: many options, documented there
        from bridge.kit import matrix

        return matrix.main(raw[1:])
    parser = argparse.ArgumentParser(
        prog="bridge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    # One parser per subcommand, each with set_defaults(run=handler(args) -> exit code).
    sub.add_parser("matrix", help="the interop matrix (python -m bridge matrix --help)")
    sub.add_parser("tour", help="a checked walk through storages, views and NumPy").set_defaults(
        run=_tour_command
    )
    chk = sub.add_parser(
        "check",
        help="DLPack conformance checks for a producer (and optionally a consumer)",
        description="Import MODULE, evaluate EXPR in its namespace (the module is also bound "
        "to its own name) and check the result, a DLPack producer or a zero-argument factory "
        "of them. Exit status: 0 conforms, 1 a rule failed, 2 could not load.",
    )
    chk.add_argument("spec", metavar="module:expr", help='e.g. "numpy:lambda: numpy.arange(6.0)"')
    chk.add_argument("--consumer", metavar="module:expr", help="also check this from_dlpack-like function")
    chk.add_argument("--json", action="store_true", help="print the report as JSON")
    chk.add_argument("--in-process", action="store_true", help="run the consumer checks in this process")
    chk.set_defaults(run=_check_command)
    args = parser.parse_args(argv)
    if args.command is None:
        return tour()
    code: int = args.run(args)
    return code

