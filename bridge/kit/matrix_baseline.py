"""Baselines: the verdicts of one run saved to a file, and a later run judged
against them, so that CI fails only when something got worse.

``python -m bridge matrix --save-baseline FILE`` writes one entry per cell
(:func:`from_cells`, :func:`save`); ``--baseline FILE`` runs the matrix and
compares (:func:`load`, :func:`compare`, :func:`finish`). The pytest plugin
does the same for the conformance checks of a project's own producer, one
entry per (test, check) (:mod:`bridge.kit.plugin`, the ``--dlpack-baseline``
options).

The verdicts are ranked best to worst (:data:`MATRIX_ORDER`,
:data:`CONFORMANCE_ORDER`). An entry whose verdict ranks worse than the
baseline's fails the comparison; one that got better, changed within its rank, is new, is
missing, or is not ranked on one side (``n/a``, ``not applicable``: nothing
was exchanged, so there is nothing to compare) is reported and fails nothing.

The file is JSON with sorted keys and no date, so that saving the same
results twice gives the same bytes and a baseline's diff in review shows only
verdicts and versions that changed::

    {"entries": {"numpy -> bridge via dlpack: float32/contiguous": {"verdict": "zero-copy"}, ...},
     "format": "dlpack-bridge-baseline", "format_version": 1, "kind": "matrix",
     "options": {"consumers": null, "dtypes": [...], "producers": ["numpy"], "protocols": null},
     "verdict_order": [["zero-copy", "empty"], ["copy"], ...],
     "versions": {"bridge": "0.1.0", "numpy": "2.4.6", "python": "3.11.9", ...}}

Of the kit, this module imports the matrix's modules only inside the
functions that need them: the pytest plugin reads a baseline with it and
never needs the matrix, and :mod:`bridge.kit.matrix` imports it without a
cycle.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TextIO

if TYPE_CHECKING:
    from bridge.kit.matrix_grid import Cell

__all__ = [
    "FORMAT", "FORMAT_VERSION", "MATRIX", "CONFORMANCE", "MATRIX_ORDER", "CONFORMANCE_ORDER",
    "UNRANKED", "Outcome", "Baseline", "Change", "Comparison", "rank", "cell_key", "parse_cell_key",
    "matrix_options", "matrix_selection", "matrix_versions", "from_cells", "check_key", "check_test",
    "conformance_versions", "dumps", "save", "loads",
    "load", "compare", "OutputKind", "output_problem", "check_outputs", "prepare", "finish",
]  # fmt: skip

#: The ``format`` field every baseline file carries: a JSON file without it
#: is some other file, named in the error rather than misread.
FORMAT = "dlpack-bridge-baseline"
#: The layout of the file. A reader refuses other versions: a baseline read
#: wrongly would pass or fail CI for reasons nobody can see.
FORMAT_VERSION = 1
#: The kind of a baseline of the interop matrix (one entry per cell).
MATRIX = "matrix"
#: The kind of a baseline of the pytest plugin (one entry per test and check).
CONFORMANCE = "conformance"

#: The matrix's verdicts, best first; verdicts in one tuple rank the same.
#: ``zero-copy`` and ``empty`` share the top: a zero-size tensor has no bytes
#: to share, and ``empty`` is the best it can do. A ``copy`` still works;
#: ``unverified`` worked but the checker lost sight of the address or values,
#: which could hide a copy or a misread, so it ranks below ``copy``;
#: ``refused`` is a clean refusal the specs allow; ``violation`` breaks a rule;
#: ``crash`` kills the process. ``n/a`` (the producer cannot make the case or
#: does not speak the protocol) is :data:`UNRANKED`.
MATRIX_ORDER: tuple[tuple[str, ...], ...] = (
    ("zero-copy", "empty"), ("copy",), ("unverified",), ("refused",), ("violation",), ("crash",),
)  # fmt: skip
#: The conformance statuses, best first (``not applicable`` is :data:`UNRANKED`).
CONFORMANCE_ORDER: tuple[tuple[str, ...], ...] = (("passed",), ("warning",), ("failed",))
#: Per kind, the verdicts outside the order: nothing was judged, so a change
#: to or from one of them is reported as not compared, never as worse. (An
#: ``n/a`` cell did not happen, as a missing one did not, and missing cells
#: fail nothing; the price is that a producer that stops making a case is
#: reported, not failed.)
UNRANKED: dict[str, tuple[str, ...]] = {MATRIX: ("n/a",), CONFORMANCE: ("not applicable",)}
_ORDERS = {MATRIX: MATRIX_ORDER, CONFORMANCE: CONFORMANCE_ORDER}
# What one entry is called in messages.
_NOUN = {MATRIX: "cell", CONFORMANCE: "check"}


def rank(kind: str, verdict: str) -> int | None:
    """The rank of ``verdict`` in ``kind``'s order (0 is best), None for an
    unranked verdict; ValueError for a verdict the kind does not have (a
    hand-edited baseline's typo must not read as some rank)."""
    for i, tier in enumerate(_ORDERS[kind]):
        if verdict in tier:
            return i
    if verdict in UNRANKED[kind]:
        return None
    known = [v for tier in _ORDERS[kind] for v in tier] + list(UNRANKED[kind])
    raise ValueError(f"unknown {kind} verdict {verdict!r}; known: {', '.join(known)}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One entry's verdict, and what says more about it: the ``rule`` a
    violation broke, the ``reason`` a copy copied (empty when there is none).
    Only ``verdict`` is ranked; ``rule`` and ``reason`` tell a change within a
    rank (a violation of another rule)."""

    verdict: str
    rule: str = ""
    reason: str = ""

    def __str__(self) -> str:
        more = self.rule or self.reason
        return f"{self.verdict} ({more})" if more else self.verdict

    def to_json(self) -> dict[str, str]:
        """The entry as the file holds it: empty fields left out."""
        return {k: v for k, v in (("verdict", self.verdict), ("rule", self.rule), ("reason", self.reason)) if v}


@dataclass(slots=True)
class Baseline:
    """A run's verdicts: ``kind`` (:data:`MATRIX` or :data:`CONFORMANCE`),
    ``entries`` (key -> :class:`Outcome`), the ``versions`` of Python, bridge
    and the libraries involved (name -> version), and the ``options`` the run
    was made with (JSON values)."""

    kind: str
    entries: dict[str, Outcome]
    versions: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ the matrix's cells

# "numpy -> bridge via dlpack: float32/transposed/ro": readable in a diff and
# in CI logs, and parsed back (matrix_selection): no peer, protocol, dtype or
# layout name holds a space, a colon or a slash.
_CELL_KEY = re.compile(r"^(\S+) -> (\S+) via ([^\s:]+): ([^/\s]+)/([^/\s]+)(/ro)?$")


def cell_key(cell: Cell) -> str:
    """The baseline's key of a matrix cell: producer, consumer, protocol and
    case (``dtype/layout``, ``/ro`` when read-only), which is what identifies
    a cell (:meth:`~bridge.kit.matrix_grid.Cell.key`)."""
    return f"{cell.producer} -> {cell.consumer} via {cell.protocol}: {cell.case}"


def parse_cell_key(key: str) -> tuple[str, str, str, str, str, bool]:
    """``(producer, consumer, protocol, dtype, layout, readonly)`` of a key
    :func:`cell_key` made; ValueError for any other string."""
    m = _CELL_KEY.match(key)
    if m is None:
        raise ValueError(f"not a matrix cell key: {key!r} (expected 'producer -> consumer via protocol: dtype/layout[/ro]')")
    return m[1], m[2], m[3], m[4], m[5], m[6] is not None


def matrix_options(producers: Sequence[str] | None, consumers: Sequence[str] | None,
                   protocols: Sequence[str] | None, dtypes: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The options of a matrix run as a baseline records them: the names each
    filter option gave (None: not filtered, every one) and the dtypes run."""
    def names(v: Sequence[str] | None) -> list[str] | None:
        return list(v) if v else None

    return {"producers": names(producers), "consumers": names(consumers), "protocols": names(protocols),
            "dtypes": list(dtypes)}  # fmt: skip


def matrix_selection(options: Mapping[str, Any]) -> Callable[[str], bool]:
    """Whether a cell key lies inside the filters of ``options``
    (:func:`matrix_options`): a filtered run is compared only on the cells it
    could have run; a baseline cell outside is counted, not reported missing."""
    def allowed(name: str) -> Callable[[str], bool]:
        chosen = options.get(name)
        return (lambda v: True) if not chosen else (lambda v: v in chosen)

    producer, consumer, protocol, dtype = (allowed(n) for n in ("producers", "consumers", "protocols", "dtypes"))

    def selected(key: str) -> bool:
        p, c, proto, dt, _, _ = parse_cell_key(key)
        return producer(p) and consumer(c) and protocol(proto) and dtype(dt)

    return selected


def matrix_versions() -> dict[str, str]:
    """Python's version, bridge's, and each installed peer's as the matrix's
    HTML report records them (:func:`bridge.kit.matrix.report_meta`)."""
    import bridge
    from bridge.kit.matrix import _version
    from bridge.kit.matrix_grid import PEERS, available

    versions = {"python": platform.python_version(), "bridge": bridge.__version__}
    distributions = importlib.metadata.packages_distributions()
    versions.update({p: _version(p, distributions) for p in PEERS if p != "bridge" and available(p)})
    return versions


def from_cells(cells: Iterable[Cell], options: Mapping[str, Any],
               versions: Mapping[str, str] | None = None) -> Baseline:  # fmt: skip
    """The baseline of a matrix run's ``cells``; ``versions`` default to
    :func:`matrix_versions`. A cell's ``rule`` is kept for a violation and its
    ``reason`` for a copy; the detail is not (it holds addresses and messages
    that change between runs and would make every save a diff)."""
    entries = {
        cell_key(c): Outcome(c.verdict, c.rule if c.verdict == "violation" else "",
                             c.reason if c.verdict == "copy" else "")
        for c in cells
    }
    return Baseline(MATRIX, entries, dict(versions if versions is not None else matrix_versions()), dict(options))


# ------------------------------------------------------------------ the plugin's checks


def check_key(test: str, check: str) -> str:
    """The baseline's key of one conformance check of one test:
    ``"<pytest node id>::<check name>"`` (check names hold no ``::``)."""
    return f"{test}::{check}"


def check_test(key: str) -> str:
    """The pytest node id of a :func:`check_key`."""
    return key.rsplit("::", 1)[0]


def conformance_versions(modules: Iterable[str]) -> dict[str, str]:
    """Python's, bridge's and pytest's versions, and those of the installed
    distributions that provide ``modules`` (the producers' top-level
    packages: the project under test, when it is installed)."""
    import bridge

    versions = {"python": platform.python_version(), "bridge": bridge.__version__}
    distributions = importlib.metadata.packages_distributions()
    for module in ("pytest", *sorted(set(modules))):
        for dist in distributions.get(module, ()):
            try:
                versions[module] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


# ------------------------------------------------------------------ the file


def dumps(baseline: Baseline) -> str:
    """The file's text: JSON, keys sorted, one key per line, a final newline."""
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": baseline.kind,
        # For the reader of the file; comparing uses this module's order.
        "verdict_order": [list(tier) for tier in _ORDERS[baseline.kind]],
        "versions": baseline.versions,
        "options": baseline.options,
        "entries": {k: o.to_json() for k, o in baseline.entries.items()},
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def save(baseline: Baseline, path: str | os.PathLike[str]) -> None:
    """Write ``baseline`` to ``path`` (:func:`dumps`), replacing it whole: a
    reader never sees half a file (written beside it, to ``path`` + ``.tmp``,
    then renamed). When writing or renaming fails (a full disk, ``path`` a
    folder), the OSError propagates and the ``.tmp`` file is removed."""
    tmp = f"{os.fspath(path)}.tmp"
    text = dumps(baseline)  # (before the file is opened: nothing to remove if this fails)
    made = False
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            made = True
            f.write(text)
        os.replace(tmp, path)
        made = False  # renamed: the name is the baseline's now
    finally:
        if made:
            try:
                os.unlink(tmp)
            except OSError:
                pass  # the error being raised says more than this one would


def loads(text: str, kind: str, source: str = "baseline") -> Baseline:
    """Parse a baseline file's ``text``, which must be of ``kind``.

    ValueError, starting with ``source`` and saying why, for text that is not
    JSON, not a baseline (no ``format``), of another format version or kind,
    or with a malformed entry: an unknown verdict, a matrix key that names no
    cell, a field that is not a string.
    """
    def bad(why: str) -> NoReturn:
        raise ValueError(f"{source}: {why}")

    try:
        doc = json.loads(text)
    except RecursionError:
        # json's parser recurses once per level: [[[...]]] thousands deep overflows it.
        bad(f"not a dlpack-bridge baseline: JSON nested too deeply to read (a baseline nests {_DEPTH} levels)")
    except ValueError as e:  # JSONDecodeError, and an integer of more digits than int() takes
        bad(f"not JSON ({e})")
    if _deeper_than(doc, _MAX_DEPTH):
        # Parsed, but comparing and printing its values would recurse as deep.
        bad(f"not a dlpack-bridge baseline: JSON nested more than {_MAX_DEPTH} levels deep "
            f"(a baseline nests {_DEPTH})")  # fmt: skip
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        bad(f"not a dlpack-bridge baseline (no \"format\": \"{FORMAT}\" field)")
    version = doc.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:  # true and 1.0 equal 1, and are no version
        bad(f"format version {doc.get('format_version')!r}, this dlpack-bridge reads version {FORMAT_VERSION} "
            f"(save the baseline again with this version)")  # fmt: skip
    if doc.get("kind") != kind:
        bad(f"a baseline of kind {doc.get('kind')!r}, not {kind!r}")
    raw, versions, options = doc.get("entries"), doc.get("versions", {}), doc.get("options", {})
    if not isinstance(raw, dict):
        bad('"entries" is not an object')
    if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
        bad('"versions" is not an object of strings')
    if not isinstance(options, dict):
        bad('"options" is not an object')
    entries: dict[str, Outcome] = {}
    for key, value in raw.items():
        fields = value if isinstance(value, dict) else {}
        if "verdict" not in fields:
            bad(f"entry {key!r}: {value!r} has no \"verdict\"")
        if set(fields) - {"verdict", "rule", "reason"} or not all(isinstance(v, str) for v in fields.values()):
            bad(f"entry {key!r}: {value!r} is not {{\"verdict\": str, \"rule\": str, \"reason\": str}}")
        try:
            rank(kind, fields.get("verdict", ""))
            if kind == MATRIX:
                parse_cell_key(key)
        except ValueError as e:
            bad(f"entry {key!r}: {e}")
        entries[key] = Outcome(fields["verdict"], fields.get("rule", ""), fields.get("reason", ""))
    return Baseline(kind, entries, dict(versions), dict(options))


# The nesting of a baseline's JSON (the document, "entries", an entry; "options", a list),
# and the most a file may have: past it, it is no baseline, whatever its fields.
_DEPTH = 3
_MAX_DEPTH = 16


def _deeper_than(doc: Any, limit: int) -> bool:
    """Whether ``doc`` (parsed JSON) nests lists and objects more than ``limit`` deep."""
    todo = [(doc, 1)]  # a loop, not recursion: the depth is what is in question
    while todo:
        value, depth = todo.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in children)
    return False


def load(path: str | os.PathLike[str], kind: str) -> Baseline:
    """Read the baseline file at ``path`` (:func:`loads`); ValueError naming
    the file and the reason, also when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"baseline {os.fspath(path)}: cannot read it ({e})") from None
    return loads(text, kind, f"baseline {os.fspath(path)}")


# ------------------------------------------------------------------ comparing


@dataclass(frozen=True, slots=True)
class Change:
    """One entry that differs: its ``key``, its outcome in the baseline
    (``before``) and in this run (``after``); None where it has none."""

    key: str
    before: Outcome | None
    after: Outcome | None

    def __str__(self) -> str:
        before = str(self.before) if self.before is not None else "(not in the baseline)"
        after = str(self.after) if self.after is not None else "(not in this run)"
        return f"{self.key}: {before} -> {after}"


@dataclass(slots=True)
class Comparison:
    """A run judged against a baseline (:func:`compare`).

    ``worse``: entries whose verdict ranks worse than the baseline's (the
    only failures); ``better``: ranks better; ``changed``: the same rank but
    another verdict, rule or reason; ``new``: in this run, not in the baseline;
    ``missing``: in the baseline and inside this run's selection, not run;
    ``not_compared``: unranked (n/a) on one side; ``unchanged``: how many are
    the same; ``outside``: how many baseline entries lie outside this run's
    selection; ``versions`` and ``options``: (name, baseline's, this run's)
    for each that differs.
    """

    kind: str
    worse: list[Change] = field(default_factory=list)
    better: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    new: list[Change] = field(default_factory=list)
    missing: list[Change] = field(default_factory=list)
    not_compared: list[Change] = field(default_factory=list)
    unchanged: int = 0
    outside: int = 0
    versions: list[tuple[str, str, str]] = field(default_factory=list)
    options: list[tuple[str, Any, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether anything got worse: the one thing that fails a run."""
        return bool(self.worse)

    def lines(self, source: str = "the baseline", limit: int = 20) -> list[str]:
        """The comparison for a person: the entries that got worse first (all
        of them), then those that got better (all), then the rest, each list
        but the first two cut to ``limit`` lines, then the versions and
        options that differ, and a last line with the counts and the outcome."""
        noun = _NOUN[self.kind]
        out: list[str] = []

        def section(title: str, changes: list[Change], cut: int | None) -> None:
            if not changes:
                return
            out.append(f"{title}: {len(changes)} {noun}(s)")
            shown = changes if cut is None else changes[:cut]
            out.extend(f"  {c}" for c in shown)
            if len(shown) < len(changes):
                out.append(f"  ... and {len(changes) - len(shown)} more")

        section(f"WORSE than {source} (these fail)", self.worse, None)
        section(f"better than {source} (not a failure; save the baseline again to keep them)", self.better, None)
        section("changed within the same rank (not a failure)", self.changed, limit)
        section(f"new in this run, not in {source} (not a failure)", self.new, limit)
        section(f"in {source} but missing from this run (not a failure)", self.missing, limit)
        section(f"not compared: {', '.join(UNRANKED[self.kind])} on one side (not a failure)",
                self.not_compared, limit)  # fmt: skip
        if self.outside:
            out.append(f"{self.outside} {noun}(s) of {source} lie outside this run's selection: not compared")
        if self.versions:
            out.append(f"versions that differ from {source}'s: " + "; ".join(
                f"{n} {b or '(not recorded)'} -> {a or '(not here)'}" for n, b, a in self.versions))  # fmt: skip
        if self.options:
            out.append(f"options that differ from {source}'s: " + "; ".join(
                f"{n} {json.dumps(b)} -> {json.dumps(a)}" for n, b, a in self.options))  # fmt: skip
        compared = len(self.worse) + len(self.better) + len(self.changed) + self.unchanged
        out.append(f"compared with {source}: {compared} {noun}(s), {len(self.worse)} worse, {len(self.better)} better, "
                   f"{len(self.changed)} changed, {self.unchanged} unchanged, {len(self.new)} new, "
                   f"{len(self.missing)} missing, {len(self.not_compared)} not compared: "
                   + ("FAILED (something got worse)" if self.failed else "passed (nothing got worse)"))  # fmt: skip
        return out


def compare(baseline: Baseline, current: Baseline, selected: Callable[[str], bool] | None = None) -> Comparison:
    """Judge ``current`` (this run) against ``baseline``, both of one kind.

    Every entry of ``current`` is compared; an entry of ``baseline`` that
    ``current`` lacks is ``missing`` when ``selected(key)`` (default: always)
    says this run could have made it, else counted in ``outside``. The lists
    keep ``current``'s order (the run's), missing entries the baseline's.
    """
    if baseline.kind != current.kind:
        raise ValueError(f"a {baseline.kind} baseline cannot judge a {current.kind} run")
    kind, result = current.kind, Comparison(current.kind)
    for key, after in current.entries.items():
        before = baseline.entries.get(key)
        if before is None:
            result.new.append(Change(key, None, after))
            continue
        was, now = rank(kind, before.verdict), rank(kind, after.verdict)
        if before == after:
            result.unchanged += 1
        elif was is None or now is None:
            result.not_compared.append(Change(key, before, after))
        elif now > was:
            result.worse.append(Change(key, before, after))
        elif now < was:
            result.better.append(Change(key, before, after))
        else:
            result.changed.append(Change(key, before, after))
    for key, before in baseline.entries.items():
        if key in current.entries:
            continue
        if selected is None or selected(key):
            result.missing.append(Change(key, before, None))
        else:
            result.outside += 1
    for name in sorted(set(baseline.versions) | set(current.versions)):
        b, a = baseline.versions.get(name, ""), current.versions.get(name, "")
        if b != a:
            result.versions.append((name, b, a))
    for name in sorted(set(baseline.options) | set(current.options)):
        was, now = baseline.options.get(name), current.options.get(name)
        if was != now:
            result.options.append((name, was, now))
    return result


# ------------------------------------------------------------------ the command line


#: How a command writes an output path: ``"file"``, a file written in place,
#: its missing folders made (``--html``); ``"replaced"``, a file written beside
#: it and renamed over it, in a folder that must exist (``--save-baseline``,
#: :func:`save`); ``"folder"``, a folder files are written into, made with its
#: missing parents (``--repro``).
OutputKind = Literal["file", "replaced", "folder"]


def _write_problem(folder: str) -> str | None:
    # Write and search: a file is made in it by name. access() also says no
    # on a read-only file system, even to root; effective ids, as open() uses.
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        return f"the folder {folder} is not writable"
    # access() lets root through where the file system itself refuses (/proc,
    # /sys, a FUSE mount): a file made there and dropped tells. TemporaryFile
    # makes it unnamed (O_TMPFILE) where Linux can, else unlinks it at once,
    # so nothing is left behind.
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"cannot write in the folder {folder} ({e.strerror or e})"
    return None


def _nearest_existing(path: str) -> str:
    # The path cut back, as given, to its longest part that exists ("." when
    # none does: the current folder). Not normalized: the system walks "f/../x"
    # through f, which fails when f is a file, where normpath would make it "x".
    while path and not os.path.lexists(path):
        path = path.rstrip(os.sep) if path.endswith(os.sep) else os.path.dirname(path)
    return path or os.curdir


def _not_a_folder(path: str) -> str:
    if os.path.islink(path) and not os.path.exists(path):
        return f"{path} is a broken symbolic link"
    return f"{path} is a file, not a folder" if os.path.isfile(path) else f"{path} is not a folder"


def output_problem(path: str, how: OutputKind) -> str | None:
    """What stops a command from writing ``path`` the way ``how`` says
    (:data:`OutputKind`), as a phrase for an error message, or None when
    nothing does: checked before the work, so that a bad path fails at once,
    not after it, and nothing is left behind. The checks: the path is not empty; a
    file's path is not a folder (and, written in place, an existing file is
    writable); a folder's path, or the nearest existing part of a path whose
    missing folders are made, is a folder in which a file can be made (a
    nameless one is made and dropped: access() lets root through where the
    file system refuses); a replaced file's folder exists. A write can still
    fail later (a full disk): this is not a reservation."""
    if not path:
        return "the path is empty"
    if how == "folder":
        start = path
    else:
        if os.path.isdir(path):
            return "it is a folder, not a file"
        if how == "file" and os.path.isfile(path) and not os.access(path, os.W_OK):
            return "the file is not writable"
        start = os.path.dirname(path) or os.curdir
    there = _nearest_existing(start)
    if how == "replaced" and there != start:
        return f"no folder {start}"
    if not os.path.isdir(there):
        return _not_a_folder(there)
    return _write_problem(there)


def check_outputs(outputs: Iterable[tuple[str, str | None, OutputKind]], error: Callable[[str], NoReturn]) -> None:
    """Before a command's work: each ``(flag, path, how)`` of ``outputs``
    given (``path`` not None) checked with :func:`output_problem`, and no two
    naming the same path (the second would overwrite the first, or fail on
    the folder the first made). ``error`` (argparse's ``parser.error``: exit
    status 2) gets ``"FLAG PATH: problem"`` for the first one found."""
    seen: dict[str, str] = {}
    for flag, path, how in outputs:
        if path is None:
            continue
        problem = output_problem(path, how)
        if problem is not None:
            error(f"{flag} {path}: {problem}")
        where = os.path.realpath(path)
        if where in seen:
            error(f"{seen[where]} and {flag} both name {path}: give each its own path")
        seen[where] = flag


def prepare(baseline_path: str | None, save_path: str | None, error: Callable[[str], NoReturn]) -> Baseline | None:
    """Before the matrix runs: the baseline ``--baseline`` names, read and
    validated (None without one; :func:`load`), and ``--save-baseline``'s
    path checked (:func:`output_problem`), so that a bad file or path fails
    at once, not after minutes of cells. ``error`` (argparse's
    ``parser.error``: exit status 2) gets the reason."""
    check_outputs([("--save-baseline", save_path, "replaced")], error)
    if baseline_path is None:
        return None
    try:
        return load(baseline_path, MATRIX)
    except ValueError as e:
        error(str(e))


def finish(cells: Iterable[Cell], options: Mapping[str, Any], baseline: Baseline | None,
           baseline_path: str | None, save_path: str | None, out: TextIO, default: int) -> int:  # fmt: skip
    """After the matrix ran: compare ``cells`` with ``baseline`` (when given)
    and print the comparison to ``out``, then save them to ``save_path``
    (when given; after comparing, so one file can be judged and renewed in
    one run). Returns the exit code: 1 when a cell got worse than the
    baseline, else 0; without a baseline, ``default`` (the matrix's own)."""
    current = from_cells(cells, options)
    code = default
    if baseline is not None:
        result = compare(baseline, current, matrix_selection(options))
        print("\n".join(result.lines(f"baseline {baseline_path}")), file=out)
        code = 1 if result.failed else 0
    if save_path is not None:
        save(current, save_path)
        print(f"baseline saved: {save_path} ({len(current.entries)} cells)", file=out)
    return code
