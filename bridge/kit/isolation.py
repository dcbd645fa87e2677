"""Subprocess isolation, shared by the matrix and the conformance checks.

Both run code that may crash the interpreter (a consumer library trusting a
malformed capsule, a producer aborting in C++) in a child ``python -c``, so a
crash ends the child, not the caller. The child reports progress as marked
JSON lines on stdout (:func:`emit`); the parent (:func:`run_child`) hands each
event to a callback as it arrives and returns how the child ended
(:class:`ChildExit`), so the caller can tell which item was in flight when it
died and go on with the rest in a fresh child.

A child gets the objects it works on by name: :func:`spec_of` names a
callable as ``"module:qualname"`` and :func:`load` evaluates such a
``"module:expr"`` spec back into an object.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["ChildExit", "emit", "run_child", "load", "spec_of"]

# Lines without it are the child's own chatter (a library printing to
# stdout), never mistaken for an event.
_MARK = "@@bridge-kit@@"


def emit(event: str, payload: Any, stream: TextIO | None = None) -> None:
    """Child side: report ``event`` with a JSON-serialisable ``payload`` to the
    parent, on ``stream`` (default: ``sys.stdout`` now), flushed at once so
    the event survives a crash right after it."""
    print(_MARK, event, json.dumps(payload), file=stream or sys.stdout, flush=True)


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How a child ended: its ``returncode`` (negative: killed by that
    signal), whether it was killed for running past its timeout
    (``timed_out``), and everything it wrote to stderr."""

    returncode: int
    timed_out: bool
    stderr: str

    def cause(self) -> str:
        """``"signal SIGSEGV"`` for a child killed by a signal, else ``"exit status N"``."""
        rc = self.returncode
        if rc < 0:
            try:
                return f"signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"signal {-rc}"
        return f"exit status {rc}"


def run_child(
    code: str,
    args: Sequence[str] = (),
    *,
    on_event: Callable[[str, Any], None],
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> ChildExit:
    """Run ``python -c code args...`` with this interpreter and wait for it.

    Each line the child writes with :func:`emit` is decoded and passed to
    ``on_event(event, payload)`` while the child runs; other stdout lines (and
    an event line cut short by the child's death) are ignored. ``stdin`` is written to the child's stdin and closed (None: the
    child inherits this process's stdin). ``env`` entries are added to this
    process's environment. A child still running after ``timeout`` seconds
    (None: no limit) is killed and reported with ``timed_out``. Returns a
    :class:`ChildExit`; never raises for anything the child does. An
    exception from ``on_event`` kills the child and propagates.
    """
    # stderr goes to a file, not a pipe: a child that writes more than a pipe
    # holds to stderr while this reads its stdout would otherwise block both.
    with tempfile.TemporaryFile() as errfile:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=None if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=errfile, text=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
        expired = threading.Event()

        def expire() -> None:
            if proc.poll() is None:
                expired.set()
                proc.kill()

        timer = threading.Timer(timeout, expire) if timeout is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            if stdin is not None:
                assert proc.stdin is not None
                proc.stdin.write(stdin)
                proc.stdin.close()
            assert proc.stdout is not None
            for line in proc.stdout:
                mark, _, rest = line.partition(" ")
                if mark != _MARK:
                    continue
                event, _, payload = rest.partition(" ")
                try:
                    decoded = json.loads(payload)
                except json.JSONDecodeError:  # a line cut short by the child's death
                    continue
                on_event(event, decoded)
        except BaseException:
            proc.kill()  # a caller's error must not leave an orphan behind
            proc.wait()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        rc = proc.wait()
        errfile.seek(0)
        err = errfile.read().decode(errors="replace")
    return ChildExit(rc, expired.is_set(), err)


# ------------------------------------------------------------ naming objects


def load(spec: str) -> Any:
    """Evaluate ``"module:expr"``: import ``module`` and evaluate ``expr`` in
    its namespace, with the module also bound to its own last name and its
    top-level package to its first (``"numpy:lambda: numpy.arange(6.0)"``).

    The split is at the first ``:``, so ``expr`` may contain colons. This
    runs arbitrary code, exactly like ``python -c``. Raises ValueError for a
    spec without ``module:`` or ``expr``, ImportError/any error from the
    evaluation as is.
    """
    module_name, sep, expr = spec.partition(":")
    module_name, expr = module_name.strip(), expr.strip()
    if not sep or not module_name or not expr:
        raise ValueError(f"expected 'module:expr', got {spec!r}")
    module = importlib.import_module(module_name)
    namespace = dict(vars(module))
    top = module_name.split(".")[0]
    namespace.setdefault(module_name.rsplit(".", 1)[-1], module)
    namespace.setdefault(top, importlib.import_module(top))
    return eval(expr, namespace, _ModuleNames(module))


class _ModuleNames(dict[str, Any]):
    """Names the module makes on first use (a module ``__getattr__``, as
    ``bridge.check``) for ``eval``: looked up when the namespace has none."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self._module = module

    def __missing__(self, name: str) -> Any:
        try:
            return getattr(self._module, name)
        except AttributeError:
            raise KeyError(name) from None


def spec_of(obj: Any) -> str | None:
    """A ``"module:qualname"`` that :func:`load` turns back into ``obj`` in
    another process (a string is taken as a spec already), or None when
    ``obj`` cannot be named so: a lambda, a nested function, something of
    ``__main__``, or a name that does not lead back to ``obj``."""
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    spec = f"{module}:{qualname}"
    try:
        return spec if load(spec) is obj else None
    except Exception:
        return None
