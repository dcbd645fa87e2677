"""``python -m bridge``, also installed as the ``dlpack-bridge`` console script
(not ``bridge``: iproute2's ``/sbin/bridge`` has that name on every Linux machine).

Subcommands: ``tour`` (the default): a short walk through storage sharing,
views, a NumPy round trip and a tensor crossing into a child process and
back, each claim checked as it is printed.
``check module:expr``: run the DLPack conformance checks on a producer (an
object, or a zero-argument factory of them) and exit non-zero if a rule failed.
``matrix [options]``: the interop matrix over the frameworks installed (see
``python -m bridge matrix --help``); exits non-zero only for bridge's own failures.

Every command's output may go to a reader that stops early (``| head``): the
command then ends quietly with status 141 (:data:`EXIT_BROKEN_PIPE`), with no
traceback.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Callable
from typing import Any

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
    mp_ok = _tour_processes(points)
    ok = same and dl_ok and mp_ok and points[1, 1].item() == 40.0 and points[2, 2].item() == -1.0
    print("\nall checks passed" if ok else "\nA CHECK FAILED")
    return 0 if ok else 1


def _tour_child(inbox: Any, outbox: Any) -> None:
    t = inbox.get(timeout=60)
    t[0, 1] = 99.0  # seen by the parent: the same memory
    outbox.put(t[1:])  # a view goes back, still over that memory
    inbox.get(timeout=60)  # a descriptor is handed over by its sender: stay until it is taken


def _tour_processes(points: bridge.Tensor) -> bool:
    """One tensor into a spawned child process and back, through shared memory."""
    ctx = multiprocessing.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_tour_child, args=(inbox, outbox))
    child.start()
    points.share_memory_()
    inbox.put(points)
    back = outbox.get(timeout=60)
    inbox.put("taken")
    child.join(60)
    back[0, 0] = 7.0
    ok = points[0, 1].item() == 99.0 and points[1, 0].item() == 7.0
    print(
        f"multiprocessing: points.share_memory_() went to a spawned child as a file descriptor; "
        f"its write points[0, 1] = 99 is seen here, and the view it sent back writes into "
        f"points too: {ok}"
    )
    return ok


def check(spec: str, consumer: str | None = None, as_json: bool = False, isolate: bool = True) -> int:
    """``python -m bridge check``: load ``spec`` ("module:expr", see
    :func:`bridge.kit.conformance.load`), check it, print the report (a table, or
    JSON with ``as_json``); returns 0 when no rule failed, 1 when one did, 2
    when ``spec`` could not be loaded or is not a producer."""
    from bridge.kit import conformance

    try:
        subject = conformance.load(spec)
        report = conformance.check(subject, consumer=consumer, isolate=isolate)
    except Exception as e:
        print(f"{prog()} check: cannot check {spec!r}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if as_json else report)
    return 0 if report else 1


_ROLE = re.compile(r":[a-z]+:`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _role_text(m: re.Match[str]) -> str:
    # Sphinx's ~a.b shows only the last part, b.
    target = m.group(1)
    return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help, wrapped at spaces only: names such as
    ``cuda-array-interface`` and ``dlpack-copy`` are never split at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def plain(text: str) -> str:
    """``text`` (reStructuredText from a docstring) as the plain text a terminal
    shows: ``x`` becomes x and :func:`a.b` becomes a.b (:func:`~a.b`: b)."""
    return _LITERAL.sub(r"\1", _ROLE.sub(_role_text, text))


def _tour_command(args: argparse.Namespace) -> int:
    return tour()


def _check_command(args: argparse.Namespace) -> int:
    return check(args.spec, args.consumer, args.json, not args.in_process)


#: The exit status when the reader of stdout went away before the output
#: ended (``python -m bridge matrix --json | head``): 128 + SIGPIPE, what a shell
#: reports for a writer that SIGPIPE ended.
EXIT_BROKEN_PIPE = 128 + 13


def quiet_on_closed_pipe(command: Callable[[], int]) -> int:
    """Run ``command`` (returns an exit code) and flush stdout; when the
    reader closed the pipe (BrokenPipeError), return :data:`EXIT_BROKEN_PIPE`
    with no traceback. Python's recipe (the ``signal`` module's note on
    SIGPIPE): stdout is pointed at devnull, so the flush at interpreter exit
    does not fail a second time."""
    try:
        code = command()
        sys.stdout.flush()  # what is still buffered must fail here, not at exit
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


#: The console script's name (pyproject.toml's ``[project.scripts]``).
SCRIPT = "dlpack-bridge"


def prog() -> str:
    """The command as the user typed it, for usage lines and messages:
    ``dlpack-bridge`` when started as the console script, else ``python -m bridge``."""
    started = re.split(r"[\\/]", sys.argv[0])[-1] if sys.argv else ""  # also a Windows path
    return SCRIPT if started.removesuffix(".exe") == SCRIPT else "python -m bridge"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bridge`` and of the ``dlpack-bridge`` script; returns the exit code
    (:data:`EXIT_BROKEN_PIPE` when stdout's reader went away early)."""
    return quiet_on_closed_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["matrix"]:  # its own parser: many options, documented there
        from bridge.kit import matrix

        return matrix.main(raw[1:])
    from bridge.kit.matrix_grid import PEERS, PROTOCOLS

    parser = argparse.ArgumentParser(
        prog=prog(), description=plain(__doc__ or ""),
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="{tour,check,matrix}")
    # One parser per subcommand, each with set_defaults(run=handler(args) -> exit code).
    sub.add_parser(
        "tour", help="a checked walk through storages, views and NumPy (the default)",
        description="A short walk through storage sharing, views, a NumPy round trip and a tensor "
        "crossing into a child process and back, each claim checked as it is printed. Exit "
        "status: 0 when every check held.",
    ).set_defaults(run=_tour_command)
    chk = sub.add_parser(
        "check",
        help="DLPack conformance checks for a producer (and optionally a consumer)",
        description="Import MODULE, evaluate EXPR in its namespace (the module is also bound "
        "to its own name) and check the result, a DLPack producer or a zero-argument factory "
        "of them. The report names the producer by its type's public path (numpy.ndarray, "
        "torch.Tensor, bridge.Tensor). Exit status: 0 conforms, 1 a rule failed, 2 could not load.",
    )
    chk.add_argument("spec", metavar="module:expr", help='e.g. "numpy:lambda: numpy.arange(6.0)"')
    chk.add_argument("--consumer", metavar="module:expr", help="also check this from_dlpack-like function")
    chk.add_argument("--json", action="store_true", help="print the report as JSON")
    chk.add_argument("--in-process", action="store_true", help="run the consumer checks in this process")
    chk.set_defaults(run=_check_command)
    # Listed for the top-level help only: main() hands "matrix ..." to its own parser.
    sub.add_parser(
        "matrix",
        help=f"the interop matrix (python -m bridge matrix --help); peers: {', '.join(PEERS)}; "
        f"protocols: {', '.join(PROTOCOLS)}",
    )
    args = parser.parse_args(argv)
    if args.command is None:
        return tour()
    code: int = args.run(args)
    return code

