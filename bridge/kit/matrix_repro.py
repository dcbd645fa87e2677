"""Reproducers people can file: ``python -m bridge matrix --repro DIR``.

For every crash and violation cell of a run, :func:`write_reproducers` writes
to ``DIR`` one standalone Python script (``<cell>.py``) and an issue text
(``<cell>.md``), then runs each script once (:func:`check_reproducers`) and
lists them, with what each run showed, in ``DIR/index.md`` and
``DIR/index.json``.

A script uses the cell's two libraries only (and NumPy, which makes the
case's values; ml_dtypes where the dtype is one of its): it makes the
producer's tensor as the matrix did (dtype, shape, strides, offset: the
templates of :mod:`bridge.kit.matrix_repro_peers`), hands it across through
the cell's protocol and checks what the cell's rule says. It exits 1 and
prints ``REPRODUCED: ...`` while the failure shows, 0 and ``FIXED? ...``
once it does not. A crash is reproduced in a child interpreter
(``subprocess.run([sys.executable, "-c", CODE])``), whose death (a signal,
or an exit by an uncaught panic) the script reports.

A cell that its two libraries cannot express alone (the DLPack C exchange
API, which has no Python call; a rule only bridge's counters see; a peer or
protocol without templates) gets a script that uses bridge, and its text
says why (:attr:`Repro.why_bridge`); where bridge is one of the two
libraries, using it is no exception.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

import numpy as np

from bridge.kit.matrix_grid import Cell, culprits
from bridge.kit.matrix_holds import CONVERT, CONVERT_BATCH, CONVERTS, record
from bridge.kit.matrix_layouts import DEVICE_LAYOUTS
from bridge.kit.matrix_repro_peers import (
    CONSUMERS,
    HELPERS,
    LAYOUT_WORDS,
    LAYOUTS,
    MODULES,
    PRODUCERS,
    Consumer,
    Producer,
)
from bridge.kit.rules import RULES

__all__ = ["Repro", "reproducer", "write_reproducers", "check_reproducers", "repro_links", "report_reproducers",
           "STATUSES"]

#: What running a script showed: ``reproduced`` (exit non-zero, ``REPRODUCED:``),
#: ``fixed?`` (exit 0, ``FIXED?``), ``error`` (anything else: the script itself
#: failed), ``timeout``, or ``not checked`` (written, not run).
STATUSES = ("reproduced", "fixed?", "error", "timeout", "not checked")

# The rules a script checks with the two libraries' own calls; any other
# (bridge's counters: deleter, arrow-release; convert's batch and table)
# re-runs the cell through bridge's kit.
_VALUE_RULES = ("values", "strides", "shape", "packed-subbyte", "jax-array", "arrow-device-stream", "alignment",
                "byte-order", "chunks")
_KEYWORDS = {"copy": "copy", "dl_device": "dl_device"}
_STDLIB = ("sys", "re", "signal", "subprocess", "ctypes")
#: Seconds one script may run when checked (a crash script starts a second
#: interpreter that imports the consumer's library: paddle takes 7 s here).
TIMEOUT_S = 120.0
# Scripts of the same libraries are checked in one interpreter, this many at
# a time, so that each library is imported once per batch (torch: 3.5 s).
_BATCH = 40


@dataclasses.dataclass
class Repro:
    """One cell's reproducer: the ``script`` and ``issue`` texts, the file
    name they are written under (``name`` + ``.py`` / ``.md``), the
    top-level modules the script imports (``modules``), and, where it uses
    bridge though neither side is bridge, why (``why_bridge``; empty for a
    standalone script). ``status`` (one of :data:`STATUSES`) and ``said``
    (the script's last line) are filled in by :func:`check_reproducers`."""

    cell: Cell
    name: str
    script: str
    issue: str = ""
    modules: tuple[str, ...] = ()
    why_bridge: str = ""
    status: str = "not checked"
    said: str = ""

    @property
    def standalone(self) -> bool:
        """Whether the script uses only the cell's two libraries (and NumPy)."""
        return not self.why_bridge


def _name(cell: Cell) -> str:
    parts = (cell.producer, cell.consumer, cell.protocol, cell.dtype, cell.layout, *(("ro",) if cell.readonly else ()))
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts))


def _module(peer: str) -> str:
    return MODULES.get(peer, peer)


def _np_dtype(dtype: str) -> tuple[str, str]:
    """``(expression, import)`` of a NumPy dtype: NumPy's own, else ml_dtypes'."""
    if dtype == "bool":
        return "bool", ""
    # (not np.dtype(name): it knows ml_dtypes' names once ml_dtypes is imported, np.bfloat16 is no name)
    return (f"np.{dtype}", "") if hasattr(np, dtype) else (f"ml_dtypes.{dtype}", "import ml_dtypes")


_PLACED = '''def placed(values, raw=None):
    """A copy of values whose first element sits half an element past an element boundary."""
    size = values.dtype.itemsize
    raw = np.zeros(values.nbytes + 2 * size, np.uint8) if raw is None else raw
    at = next(k for k in range(2 * size) if (raw.ctypes.data + k) % size == size // 2)
    out = np.ndarray(values.shape, values.dtype, buffer=raw, offset=at)
    out[...] = values
    return out
'''


_AT = '''def at(values, shift):
    """A copy of values at shift bytes past a 64-byte boundary (where the matrix's tensor lay)."""
    raw = np.zeros(values.nbytes + 64, np.uint8)
    out = np.ndarray(values.shape, values.dtype, buffer=raw, offset=(shift - raw.ctypes.data) % 64)
    out[...] = values
    return out
'''


def _shift(cell: Cell) -> int:
    """Bytes past a 64-byte boundary to place the case's 4x12 base at, so
    that its view's first element has the cell's alignment."""
    from bridge.kit.matrix_peers import reference

    base = reference(cell.dtype, "contiguous")
    view = eval(_spell(cell.layout, "numpy", "base"), {"np": np, "base": base})
    first = int(view.__array_interface__["data"][0]) - int(base.__array_interface__["data"][0])
    alignment = cell.alignment or 64
    return ((0 if alignment >= 64 else alignment) - first) % 64


def _spell(layout: str, family: str, name: str) -> str:
    """``layout`` applied to ``name`` in ``family``'s indexing."""
    spellings = LAYOUTS[layout]
    return re.sub(r"\bb\b", name, spellings.get(family, spellings["numpy"]))


def _case(cell: Cell, p: Producer) -> tuple[list[str], list[str]]:
    """``(imports, lines)`` that make ``expected`` (the case's values as
    NumPy holds them) and ``x`` (the producer's tensor), as the matrix does."""
    dt, dt_import = _np_dtype(cell.dtype)
    imports = [i for i in (dt_import, *p.imports) if i]
    helper = {"component-aligned": _PLACED, **HELPERS}.get(cell.layout)
    lines = [helper] if helper else []
    made = "(np.arange(48).reshape(4, 12) % 2)" if cell.dtype == "bool" else "np.arange(48).reshape(4, 12)"
    made = f"{made}.astype({dt})"
    h = record(cell.consumer)
    placed = cell.layout in ("component-aligned", "byte-misaligned")  # placed by its own helper
    if p.shares and h is not None and h.alignment and cell.alignment is not None and not placed:
        # The consumer's record asks an alignment (jax, tensorflow: they share only 64-byte aligned
        # memory), and the producer shares NumPy's: placed as the matrix's was, or the script would
        # show the other behaviour whenever malloc placed it otherwise.
        lines.append(_AT)
        made = f"at({made}, {_shift(cell)})"
    lines += [f"base = {made}  # the 4x12 tensor every layout is a view of",
              f"ref = {_spell(cell.layout, 'numpy', 'base')}  # layout {cell.layout}: the case as NumPy lays it out",
              "expected = ref.copy()"]  # fmt: skip
    keys = ("ro",) if cell.readonly else ()
    special = next((p.special[k] for k in (*keys, "component-aligned", cell.dtype, cell.layout)
                    if k in p.special and (k != "component-aligned" or cell.layout == k)), None)  # fmt: skip
    view = _spell(cell.layout, p.family or "numpy", "b")
    if special is not None:
        lines.append(special.format(view=view, dtype=cell.dtype))
    elif p.family:
        lines += [f"b = {p.make}  # {cell.producer}'s 4x12 tensor", f"x = {view}  # laid out as ref"]
    else:
        lines.append(f"x = {p.make}")
    if cell.readonly:
        lines[-1] += "  # read-only memory"
    if p.flat:
        lines.append("expected = expected.reshape(-1)  # an Arrow array is 1-d: the values flat")
    return imports, lines


def _take(cell: Cell, c: Consumer) -> tuple[str, list[str], str]:
    """``(call, imports, why bridge)`` of the consumer's call on ``x``."""
    if cell.protocol == CONVERT:
        return f'bridge.convert(x, "{cell.consumer}")', ["import bridge"], ""
    if cell.protocol == CONVERT_BATCH:  # x inside a batch, as the matrix converts it: its "x" is the cell's
        return f'bridge.convert({{"x": x, "label": "cat", "again": [x]}}, "{cell.consumer}")["x"]', ["import bridge"], ""
    call = c.takes[cell.protocol]
    extra = ["from bridge import _drivers"] if "_drivers." in call else []
    return call, extra, c.notes.get(cell.protocol, "")


def _indent(lines: Iterable[str], by: str = "    ") -> list[str]:
    return [by + ln if ln else ln for ln in "\n".join(lines).splitlines()]


def _say(text: str) -> str:
    return f"print({'f' if '{' in text else ''}{text!r})"


def _end(reproduced: str, fixed: str, cond: str) -> list[str]:
    return [f"if {cond}:", f"    {_say(reproduced)}", "    sys.exit(1)"] + ([_say(fixed), "sys.exit(0)"] if fixed else [])


def _check(cell: Cell, c: Consumer, p: Producer, call: str) -> list[str] | None:
    """The lines that hand ``x`` across and check the cell's rule, ending in
    ``sys.exit``; None where the templates lack what the rule needs."""
    rule, take = cell.rule, f"y = {call}  # {cell.protocol}"
    if rule in _VALUE_RULES:
        lines = [take, f"got = np.asarray({c.values})"]
        if cell.protocol.startswith("arrow"):  # Arrow consumers without a tensor type take N-d input flat
            lines += ["if got.ndim != expected.ndim and got.size == expected.size:",
                      "    expected = expected.reshape(got.shape)"]  # fmt: skip
        same = "got.shape == expected.shape and np.array_equal(got.astype(expected.dtype), expected)"
        lines += _end("REPRODUCED: other values arrived: {got.ravel()[:8].tolist()}... for "
                      "{expected.ravel()[:8].tolist()}...", "", f"not ({same})")  # fmt: skip
        if c.compute and "computed" in cell.detail:
            lines += [f"y = {c.compute}  # the library's own kernels on what it took", f"got = np.asarray({c.values})"]
            lines += _end(f"REPRODUCED: {c.compute} on the result computed other values: {{got.ravel()[:8].tolist()}}", "",
                          f"not ({same})")  # fmt: skip
        return [*lines, 'print("FIXED? the values crossed intact")', "sys.exit(0)"]
    if rule == "unknown-code" and "arrived as device type" in cell.detail:  # DLPack main's device codes
        made = DEVICE_LAYOUTS[cell.layout]
        host = " and arrived != 1" if made == 20 else ""  # TPU host memory may arrive as a CPU array
        return [take, "arrived = int(y.__dlpack_device__()[0])", *_end(
            f"REPRODUCED: DLPack device type {made} arrived as device type {{arrived}}",
            f"FIXED? DLPack device type {made} arrived as {{arrived}}", f"arrived != {made}{host}")]  # fmt: skip
    if rule == "unknown-code" and "bcomplex32" in cell.detail:
        if not c.dtype:
            return None
        return [take, "try:", f"    arrived = {c.dtype}", "except Exception as e:  # taken, but of no dtype it names",
                f'    arrived = f"a dtype {cell.consumer} cannot name ({{e}})"', *_end(
            "REPRODUCED: bcomplex32 (DLPack code 18) arrived as {arrived}", "FIXED? arrived as {arrived}",
            '"bcomplex" not in arrived.lower()')]  # fmt: skip
    if rule == "unknown-code":  # the values read back from the device codes' host memory
        return _check(dataclasses.replace(cell, rule="values"), c, p, call)
    if rule == "dtype":
        if not c.dtype:
            return None
        return [take, f"arrived = {c.dtype}", *_end(
            f"REPRODUCED: {cell.dtype} arrived as {{arrived}}", f"FIXED? {cell.dtype} arrived as {cell.dtype}",
            f"arrived != {cell.dtype!r}")]  # fmt: skip
    if rule == "exceptions":
        return ["try:", f"    {take}", "except (BufferError, TypeError, ValueError) as e:",
                '    print(f"FIXED? refused with {type(e).__name__}, a type the spec allows: {e}")', "    sys.exit(0)",
                "except Exception as e:",
                '    print(f"REPRODUCED: refused with {type(e).__module__}.{type(e).__qualname__}, '
                'not BufferError, TypeError or ValueError: {e}")', "    sys.exit(1)",
                'print("FIXED? the consumer took it")', "sys.exit(0)"]  # fmt: skip
    if rule == "read-only":
        if not c.poke and not c.writable:
            return None
        lines = [take, "first = expected[(0,) * expected.ndim]",
                 "v = (not bool(first)) if expected.dtype == bool else (first + 1).item()  # a value to write"]  # fmt: skip
        if c.poke:
            lines += ["try:", f"    {c.poke}  # one element, with {cell.consumer}'s own API",
                      "except Exception as e:", '    print(f"the write was refused: {type(e).__name__}: {e}")']
            lines += _end(f"REPRODUCED: a write through {cell.consumer}'s result changed the read-only source", "",
                          "not np.array_equal(np.asarray(x), expected)")  # fmt: skip
        if c.writable:
            lines += _end("REPRODUCED: the read-only source came back writable", "", c.writable)
        return [*lines, 'print("FIXED? the read-only source stayed read-only")', "sys.exit(0)"]
    if rule in _KEYWORDS:
        word = _KEYWORDS[rule]
        lines = ["try:", f"    {take}", "except TypeError as e:", f'    if "{word}" in str(e):',
                 f'        print(f"REPRODUCED: __dlpack__ does not take {word}=: {{e}}")', "        sys.exit(1)",
                 "    raise"]  # fmt: skip
        if "does not take" in cell.detail:
            return [*lines, f'print("FIXED? __dlpack__ took {word}=")', "sys.exit(0)"]
        if rule != "copy" or not (c.address and p.address):
            return None
        return lines + _end("REPRODUCED: copy=True returned the producer's own memory",
                            "FIXED? copy=True returned new memory", f"{c.address} == {p.address}")
    return None


def _crash(c: Consumer, call: str, readonly: bool) -> list[str]:
    """The cell's whole exchange (take, read back, compute, write), as the
    matrix's child ran it: what crashed in it crashes here."""
    steps = [f"y = {call}", f"got = np.asarray({c.values})"]
    if c.compute:
        steps += [f"y = {c.compute}", f"got = np.asarray({c.values})"]
    if readonly and c.poke:
        steps += ["first = expected[(0,) * expected.ndim]",
                  "v = (not bool(first)) if expected.dtype == bool else (first + 1).item()", c.poke]  # fmt: skip
    return ["try:", *_indent(steps), "except Exception as e:  # a refusal is no crash",
            '    print(f"raised {type(e).__name__}: {e}")', "else:", '    print("survived")']  # fmt: skip


# Runs CODE in a child interpreter (faulthandler on: a fatal signal names
# the line of CODE it struck) and reports its death: the signal or exit
# status, the line of its stderr that says most, and where in CODE it died.
_RUN_CHILD = [
    "proc = subprocess.run([sys.executable, '-X', 'faulthandler', '-c', CODE], capture_output=True, text=True)",
    "if proc.returncode != 0:",
    "    how = f'signal {signal.Signals(-proc.returncode).name}' if proc.returncode < 0 else f'exit {proc.returncode}'",
    "    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]",
    "    marks = ('terminate called', 'Check failed', 'Fatal Python error', 'Segfault', 'Panic', 'Error')",
    "    why = next((ln for ln in lines if any(m in ln for m in marks)), lines[-1] if lines else '')",
    "    at = re.findall(r'File \"<string>\", line (\\d+)', proc.stderr)",
    "    where = f' at `{CODE.splitlines()[int(at[0]) - 1].strip()}`' if at else ''",
    "    print(f'REPRODUCED: the process died ({how}){where}: {why.strip()[:300]}')",
    "    sys.exit(1)",
]  # fmt: skip


def _kit_script(cell: Cell) -> list[str]:
    """The lines re-running ``cell`` through bridge's kit in a child
    interpreter (for what the two libraries cannot express alone)."""
    code = ["from bridge.kit.matrix_cell import run_cell", "from bridge.kit.matrix_grid import Cell",
            "from bridge.kit.matrix_peers import consumers", "",
            f"cell = Cell{(cell.producer, cell.consumer, cell.protocol, cell.dtype, cell.layout, cell.readonly)!r}",
            f"take = next(c for c in consumers({{{cell.consumer!r}}}) if c.protocol == {cell.protocol!r})",
            "run_cell(cell, take)", 'print(cell.verdict, cell.rule, cell.detail, sep="|")']  # fmt: skip
    out = ["import re", "import signal", "import subprocess", "import sys", "", "CODE = r'''", *code, "'''", *_RUN_CHILD]
    if cell.verdict == "crash":
        return [*out, "print(f'FIXED? the process lived: {proc.stdout.strip()[-300:]}')", "sys.exit(0)"]
    return [*out, "said = (proc.stdout.strip().splitlines() or [''])[-1]",
            "verdict, rule, detail = (said.split('|', 2) + ['', ''])[:3]",
            *_end(f"REPRODUCED: {{verdict}} of {cell.rule}: {{detail}}", "FIXED? {verdict}: {detail}",
                  f"verdict == 'violation' and rule == {cell.rule!r}")]  # fmt: skip


def reproducer(cell: Cell) -> Repro:
    """The reproducer of a crash or violation ``cell`` (its issue text is
    left empty: :func:`write_reproducers` adds it): standalone where the
    templates of both peers, the protocol and the rule's check exist, else
    the kit's (:attr:`Repro.why_bridge` says why)."""
    p, c = PRODUCERS.get(cell.producer), CONSUMERS.get(cell.consumer)
    name, why = _name(cell), ""
    body: list[str] | None = None
    imports: list[str] = []
    if p is None or c is None:
        why = f"there is no reproducer template for {cell.producer if p is None else cell.consumer}"
    elif cell.protocol not in c.takes and cell.protocol not in (CONVERT, CONVERT_BATCH):
        why = f"there is no reproducer template for {cell.consumer} through {cell.protocol}"
    elif cell.layout not in LAYOUTS:
        why = f"there is no reproducer template for the {cell.layout} layout"
    else:
        call, extra, why = _take(cell, c)
        imports, case = _case(cell, p)
        imports = list(dict.fromkeys([*imports, *c.imports, *extra]))
        if cell.verdict == "crash":
            code = ["import numpy as np", *imports, "", *case, "", *_crash(c, call, cell.readonly)]
            if "'''" in "\n".join(code):
                raise ValueError(f"{name}: a template holds ''' (the crash script quotes its code so)")
            body = ["CODE = r'''", *code, "'''", *_RUN_CHILD,
                    "print(f'FIXED? the process lived: {proc.stdout.strip()[-300:]}')", "sys.exit(0)"]  # fmt: skip
            imports = ["import re", "import signal", "import subprocess"]
        else:
            checked = _check(cell, c, p, call)
            if checked is None:
                why = f"there is no template for what the {cell.rule or cell.verdict} rule needs from {cell.consumer}"
            else:
                body, imports = ["", *case, "", *checked], ["import numpy as np", *imports]
    if body is None:
        why = why or f"the {cell.rule} rule is judged by bridge's kit"
        lines = _kit_script(cell)
    else:
        lines = ["import sys", *[i for i in imports if i.split()[1] in _STDLIB], "",
                 *[i for i in imports if i.split()[1] not in _STDLIB], *body]
    if body is not None and ("bridge" in (cell.producer, cell.consumer) or cell.protocol in CONVERTS):
        why = ""  # bridge is one of the two libraries (the kit's script is still told: it is no library call)
    libs = " and ".join(sorted({cell.producer, cell.consumer})).replace(
        "handmade", "a DLPack capsule made by hand (ctypes)")
    helpers = [m for m in ("numpy", "ml_dtypes") if f"import {m}" in "\n".join(lines) and m not in libs]
    also = f" (and {', '.join(helpers)})" if helpers else ""
    uses = f"Uses {libs}{also}, and bridge: {why}." if why else f"Uses {libs}{also} only."
    doc = [f'"""Reproduces {cell.producer} -> {cell.consumer} via {cell.protocol}, case {cell.case}: '
           f'{cell.verdict}{f" of {cell.rule}" if cell.rule else ""}.', "", uses,
           'Exits 1 printing "REPRODUCED: ..." while the failure shows, 0 printing "FIXED? ..." once it',
           "does not. Written by `python -m bridge matrix --repro` (dlpack-bridge).", '"""']  # fmt: skip
    text = "\n".join(["#!/usr/bin/env python3", *doc, *lines]) + "\n"
    modules = sorted({m.split()[1].split(".")[0] for m in re.findall(r"^(?:import|from) [\w.]+", text, re.M)})
    return Repro(cell, name, text, modules=tuple(modules), why_bridge=why)


# ------------------------------------------------------------ issue texts

_EXPECTED = {
    "crash": "The consumer takes the tensor, or refuses it with an exception (BufferError where it cannot "
             "import it); the process does not die.",
    "read-only": "The consumer refuses the read-only memory, or returns a result that cannot be written "
                 "through: the write raises and the source keeps its values.",
    "dtype": "The result has the producer's dtype, {dtype}.",
    "exceptions": "A refusal is a BufferError, TypeError or ValueError.",
    "copy": "The producer's `__dlpack__` takes `copy=`, and copy=True returns new memory.",
    "dl_device": "The producer's `__dlpack__` takes `dl_device=` (here the tensor's own device, the CPU).",
}  # fmt: skip


def _title(cell: Cell, call: str) -> str:
    case = f"{cell.dtype} {cell.layout}{' read-only' if cell.readonly else ''} tensor from {cell.producer}"
    rule, d = cell.rule, cell.detail
    if cell.verdict == "crash":
        return f"`{call}` crashes the process on a {case}"
    if rule == "read-only":
        return f"`{call}` writes through the read-only memory of a {case}"
    if rule == "dtype":
        return f"`{call}`: {d}"
    if rule == "exceptions":
        kind = d.split("refused with ", 1)[-1].split(",", 1)[0]
        return f"`{call}` refuses a {case} with {kind}, not BufferError/TypeError/ValueError"
    if rule in _VALUE_RULES:
        return f"`{call}` reads other values from a {case}"
    if rule in _KEYWORDS and "does not take" in d:
        return f"{cell.producer}'s `__dlpack__` does not take `{_KEYWORDS[rule]}=`"
    return f"{cell.producer} -> {cell.consumer} via {cell.protocol}, {cell.case}: {rule or cell.verdict}"


def _versions(r: Repro, distributions: Mapping[str, list[str]]) -> str:
    from bridge.kit.matrix import _version

    peers = dict.fromkeys([r.cell.producer, r.cell.consumer, "numpy", *(["ml_dtypes"] if "ml_dtypes" in r.modules else [])])
    names = ", ".join(f"{p} {_version(p, distributions)}" for p in peers)
    return f"{names}; Python {platform.python_version()}, {platform.system()} {platform.machine()}"


def _issue(r: Repro, culprit: str, distributions: Mapping[str, list[str]]) -> str:
    cell = r.cell
    c = CONSUMERS.get(cell.consumer)
    call = (c.takes.get(cell.protocol) if c else None) or f"{cell.consumer} via {cell.protocol}"
    if cell.protocol in (CONVERT, CONVERT_BATCH):
        call = _take(cell, c)[0] if c else f'bridge.convert(x, "{cell.consumer}")'
    rule = RULES.get(cell.rule)
    cite = (f"**{rule.name}**: {rule.cite()} ({rule.url})\n\n> {rule.text}" if rule else
            "The process must survive the exchange: a consumer refuses what it cannot take, it does not "
            "die (DLPack C API; Array API, from_dlpack, Raises).")  # fmt: skip
    expected = _EXPECTED.get(cell.rule or cell.verdict, rule.text if rule else "")
    if cell.rule in _VALUE_RULES:
        expected = "The result holds the producer's values, bit for bit, in the producer's shape."
    bridge_note = f"\n\nThis reproducer uses bridge besides its two libraries: {r.why_bridge}." if r.why_bridge else ""
    return (f"# {_title(cell, call)}\n\n"
            f"- Versions: {_versions(r, distributions)}\n"
            f"- Exchange: {cell.producer} -> {cell.consumer} through `{cell.protocol}` (`{call}`)\n"
            f"- Case: dtype {cell.dtype}, {LAYOUT_WORDS.get(cell.layout, cell.layout)}"
            f"{', read-only memory' if cell.readonly else ''}\n"
            f"- Held responsible: {culprit or cell.consumer}\n"
            f"- Found by: the interop matrix of dlpack-bridge (`python -m bridge matrix`)\n\n"
            f"## Rule\n\n{cite}\n\n## Expected\n\n{expected.format(dtype=cell.dtype)}\n\n"
            f"## Observed\n\n{cell.verdict}: {cell.detail}\n{{checked}}\n"
            f"## Reproducer\n\n`python {r.name}.py` exits 1 and prints `REPRODUCED: ...` while the failure shows, "
            f"0 and `FIXED? ...` once it does not.{bridge_note}\n\n```python\n{r.script}```\n")  # fmt: skip


# ------------------------------------------------------------ writing, checking, the index


def write_reproducers(cells: Sequence[Cell], directory: str | os.PathLike[str], *, check: bool = True,
                      timeout_s: float = TIMEOUT_S, workers: int | None = None) -> list[Repro]:  # fmt: skip
    """Write the reproducer and issue text of every crash and violation cell
    of ``cells`` (a whole run: who is held responsible is told from all of
    them) to ``directory`` (made when missing), run each script once when
    ``check`` (:func:`check_reproducers`), write ``index.md`` and
    ``index.json``, and return the reproducers in the cells' order."""
    out = pathlib.Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    blamed = culprits(list(cells))
    distributions = importlib.metadata.packages_distributions()
    repros = []
    for cell, who in zip(cells, blamed):
        if cell.verdict not in ("crash", "violation"):
            continue
        r = reproducer(cell)
        r.issue = _issue(r, who, distributions)
        (out / f"{r.name}.py").write_text(r.script, encoding="utf-8")
        repros.append(r)
    if check:
        check_reproducers(repros, out, timeout_s=timeout_s, workers=workers)
    for r in repros:  # the issue says what its script showed on this run's versions
        shown = f"\nChecked when written: {r.status} (`{r.said}`).\n" if r.status != "not checked" else ""
        (out / f"{r.name}.md").write_text(r.issue.replace("{checked}", shown), encoding="utf-8")
    _write_index(repros, out)
    return repros


def _status(code: int, out: str) -> tuple[str, str]:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if ln.startswith(("REPRODUCED:", "FIXED?"))), lines[-1] if lines else "")
    if code != 0 and said.startswith("REPRODUCED:"):
        return "reproduced", said
    if code == 0 and said.startswith("FIXED?"):
        return "fixed?", said
    return "error", f"exit {code}: {said}"[:400]


# Runs scripts one after the other as __main__ (runpy: each with its own
# globals), so that the libraries they import are imported once; a script
# that hangs is ended by faulthandler's watchdog (a C thread: it ends a
# script stuck in C code too). Each result is a JSON line in the log.
_RUNNER = r"""
import contextlib, faulthandler, io, json, runpy, sys
paths, log_path, timeout = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
with open(log_path, "a") as log:
    for path in paths:
        log.write(json.dumps({"start": path}) + "\n"); log.flush()
        buf, code = io.StringIO(), 0
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:
            code = 1; buf.write(f"\n{type(e).__name__}: {e}")
        finally:
            faulthandler.cancel_dump_traceback_later()
        log.write(json.dumps({"done": path, "code": code, "out": buf.getvalue()[-4000:]}) + "\n"); log.flush()
"""


def _run_batch(paths: list[str], timeout_s: float) -> dict[str, tuple[str, str]]:
    """Each script of ``paths`` run once: path -> (status, what it said). A
    script that ends the batch's interpreter is run again on its own (it
    reports for itself), and the batch goes on after it."""
    results: dict[str, tuple[str, str]] = {}
    todo = list(paths)
    while todo:
        with tempfile.TemporaryDirectory() as tmp:
            log = pathlib.Path(tmp, "log.jsonl")
            try:
                proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(todo), str(log), str(timeout_s)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      timeout=timeout_s * (len(todo) + 1))  # fmt: skip
                stderr = proc.stderr
            except subprocess.TimeoutExpired:
                stderr = "Timeout"
            events = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
        started = [e["start"] for e in events if "start" in e]
        for e in events:
            if "done" in e:
                results[e["done"]] = _status(e["code"], e["out"])
        lost = [p for p in started if p not in results]
        for p in lost:  # the script in flight when the batch's interpreter ended
            results[p] = ("timeout", f"ran over {timeout_s:.0f} s") if "Timeout" in stderr else _run_alone(p, timeout_s)
        todo = [p for p in todo if p not in results]
        if todo and not started:  # the interpreter could not even start a script
            results.update({p: ("error", stderr.strip()[-300:]) for p in todo})
            break
    return results


def _run_alone(path: str, timeout_s: float) -> tuple[str, str]:
    try:
        proc = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", f"ran over {timeout_s:.0f} s"
    return _status(proc.returncode, proc.stdout + ("\n" + proc.stderr.strip() if proc.returncode > 0 else ""))


def check_reproducers(repros: Sequence[Repro], directory: str | os.PathLike[str], *, timeout_s: float = TIMEOUT_S,
                      workers: int | None = None) -> None:  # fmt: skip
    """Run each written script of ``repros`` (in ``directory``) once, at
    most ``timeout_s`` seconds each, and fill in its ``status`` and ``said``.

    Scripts that import the same libraries run in one interpreter, one
    after the other (as ``python script.py`` runs them: as ``__main__``, with
    globals of their own), batches of them on ``workers`` processes (default:
    the CPU count), so a full run's reproducers import torch a few times,
    not a thousand; a crash script's child is an interpreter of its own, as
    when the script is run by hand."""
    out = pathlib.Path(directory)
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in repros:
        groups.setdefault(r.modules, []).append(str((out / f"{r.name}.py").resolve()))
    batches = [paths[i:i + _BATCH] for paths in groups.values() for i in range(0, len(paths), _BATCH)]
    results: dict[str, tuple[str, str]] = {}
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for done in pool.map(lambda b: _run_batch(b, timeout_s), batches):
            results.update(done)
    for r in repros:
        r.status, r.said = results.get(str((out / f"{r.name}.py").resolve()), ("not checked", ""))


def _write_index(repros: Sequence[Repro], out: pathlib.Path) -> None:
    counts = {s: sum(r.status == s for r in repros) for s in STATUSES}
    rows = [{"script": f"{r.name}.py", "issue": f"{r.name}.md", "producer": r.cell.producer,
             "consumer": r.cell.consumer, "protocol": r.cell.protocol, "case": r.cell.case, "verdict": r.cell.verdict,
             "rule": r.cell.rule, "status": r.status, "said": r.said, "standalone": r.standalone,
             "uses_bridge_because": r.why_bridge} for r in repros]  # fmt: skip
    (out / "index.json").write_text(json.dumps({"counts": counts, "reproducers": rows}, indent=1) + "\n")
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    kit = sum(not r.standalone for r in repros)
    lines = ["# Reproducers", "", f"{len(repros)} crash and violation cells: {head}. "
             f"{len(repros) - kit} use only their two libraries (and NumPy); {kit} use bridge besides "
             "(the column says why). Each `.py` exits 1 printing `REPRODUCED: ...` while its failure shows; "
             "each `.md` is its issue text.", "",
             "| cell | verdict | status | script | issue | bridge used because |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in repros:
        c = r.cell
        lines.append(f"| {c.producer} -> {c.consumer} via {c.protocol}, {c.case} | {c.verdict} {c.rule} | {r.status} "
                     f"| [{r.name}.py]({r.name}.py) | [{r.name}.md]({r.name}.md) | {r.why_bridge} |")  # fmt: skip
    (out / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def repro_links(repros: Sequence[Repro], directory: str | os.PathLike[str],
                page: str | os.PathLike[str]) -> dict[tuple[str, str, str, str, str, bool], str]:  # fmt: skip
    """Each reproducer's script as a link relative to the folder of the HTML
    ``page`` (``Cell.key() -> href``), for the report's red cells."""
    base = pathlib.Path(page).expanduser().resolve().parent
    folder = pathlib.Path(directory).expanduser().resolve()
    return {r.cell.key(): pathlib.Path(os.path.relpath(folder / f"{r.name}.py", base)).as_posix() for r in repros}


def report_reproducers(cells: Sequence[Cell], directory: str | os.PathLike[str], page: str | None,
                       stream: TextIO) -> dict[tuple[str, str, str, str, str, bool], str] | None:  # fmt: skip
    """``--repro DIR``: :func:`write_reproducers` of ``cells``, one line
    saying what their runs showed on ``stream``; returns the links for the
    HTML ``page`` (None without one)."""
    repros = write_reproducers(cells, directory)
    counts = ", ".join(f"{n} {s}" for s in STATUSES if (n := sum(r.status == s for r in repros)))
    kit = sum(not r.standalone for r in repros)
    index = pathlib.Path(directory).expanduser().resolve() / "index.md"
    print(f"Reproducers: {len(repros)} written, each run once ({counts or 'none'}); {kit} use bridge besides "
          f"their two libraries: {index}", file=stream)  # fmt: skip
    return repro_links(repros, directory, page) if page else None
