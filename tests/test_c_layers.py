"""The C side keeps its layers, as the Python side does (tests/test_layers.py).

``cdefs/`` has folders that mirror ``bridge/``: ``core/`` (the object types),
``interop/`` (one file per protocol direction), ``crossing/`` (``bridge.convert``'s
fast path, above interop), ``drivers/`` (test-only), and
at the top the ABI headers, ``bridge.h`` (the cffi surface) and ``module.c``,
the one file that joins the layers. Read from the source:

- a core file includes only core headers and the top-level ABI/cffi headers
  (``dlpack.h``, ``dlpack_next.h``, ``arrow_c_data.h``, ``bridge.h``);
- every ``bridge_*`` name a core file uses (a call, a table, a variable) is
  defined in ``cdefs/core/`` (definitions are found by a regex over the
  sources and mapped to their folder);
- an interop or crossing file uses no name defined only in ``cdefs/drivers/``;
- no core or interop file uses a name defined only in ``cdefs/crossing/``.

A failure names the file and the offending include or name.
"""

from __future__ import annotations

import pathlib
import re

import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CDEFS = ROOT / "cdefs"
# The headers at the top of cdefs/ that every layer may include.
SHARED_HEADERS = {"dlpack.h", "dlpack_next.h", "arrow_c_data.h", "bridge.h"}

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A function definition at file level: a signature at column 0 followed by "{".
_FUNC_DEF = re.compile(r"^[A-Za-z_][\w \t*]*?\b(bridge_\w+)\s*\([^;{}]*\)\s*\{", re.M)
# A variable or table defined at file level (not an extern declaration).
_VAR_DEF = re.compile(
    r"^(?!extern\b|typedef\b)[A-Za-z_][\w \t*]*?\b(bridge_\w+)\s*(?:\[[^\]]*\])?\s*(?:=|;)", re.M
)
_NAME = re.compile(r"\bbridge_\w+\b")


def sources() -> dict[str, str]:
    """cdefs/'s C files (not the generated _native.c), by path from cdefs/."""
    return {
        p.relative_to(CDEFS).as_posix(): p.read_text()
        for p in sorted(CDEFS.rglob("*.[ch]"))
        if p.name != "_native.c"
    }


def folder(path: str) -> str:
    """The layer of a file: its folder under cdefs/, "top" at the top."""
    return path.split("/")[0] if "/" in path else "top"


def _code(text: str) -> str:
    """The text without comments; string literals emptied (include lines kept)."""
    text = _COMMENT.sub(" ", text)
    return "\n".join(
        line if line.lstrip().startswith("#") else _STRING.sub('""', line)
        for line in text.splitlines()
    )


def definitions(srcs: dict[str, str]) -> dict[str, set[str]]:
    """Each bridge_* function, variable or table defined in srcs -> the
    folders defining it."""
    defs: dict[str, set[str]] = {}
    for path, text in srcs.items():
        code = _code(text)
        for m in [*_FUNC_DEF.finditer(code), *_VAR_DEF.finditer(code)]:
            defs.setdefault(m.group(1), set()).add(folder(path))
    return defs


def resolve(path: str, include: str, srcs: dict[str, str]) -> str:
    """Where a quoted include lands: next to the including file, else from
    cdefs/ (the one include directory); the name as written when neither."""
    here = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    for candidate in (here + include, include):
        parts: list[str] = []
        for part in candidate.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part != ".":
                parts.append(part)
        if "/".join(parts) in srcs:
            return "/".join(parts)
    return include


def violations(srcs: dict[str, str]) -> list[str]:
    """Every break of the C layering rules in srcs, as "file: what"."""
    defs = definitions(srcs)
    bad: list[str] = []
    for path, text in srcs.items():
        layer = folder(path)
        code = _code(text)
        if layer == "core":
            for inc in _INCLUDE.findall(code):
                target = resolve(path, inc, srcs)
                if folder(target) != "core" and target not in SHARED_HEADERS:
                    bad.append(f"{path}: includes {inc!r} ({target}), not a core header")
        for name in sorted(set(_NAME.findall(code))):
            homes = defs.get(name)
            if not homes:
                continue  # a type, macro or declaration only: nothing to call
            if layer == "core" and "core" not in homes:
                bad.append(f"{path}: uses {name}, defined in {sorted(homes)}, not in core/")
            if layer in ("interop", "crossing") and homes == {"drivers"}:
                bad.append(f"{path}: uses {name}, defined only in drivers/")
            if layer in ("core", "interop") and homes == {"crossing"}:
                bad.append(f"{path}: uses {name}, defined only in crossing/, a layer above")
    return bad


def test_core_includes_and_calls_only_core() -> None:
    srcs = sources()
    assert {folder(p) for p in srcs} == {"top", "core", "interop", "crossing", "drivers"}
    bad = violations(srcs)
    assert not bad, "the C layers are crossed:\n" + "\n".join(bad)


def test_definitions_are_found_in_their_folders() -> None:
    """The regexes find the definitions the layering rule relies on."""
    defs = definitions(sources())
    assert defs["bridge_tensor_new"] == {"core"}  # a function
    assert defs["bridge_storage_owner"] == {"core"}  # a static inline in core.h
    assert defs["bridge_view_methods"] == {"core"}  # a method table
    assert defs["bridge_dlpack_release"] == {"interop"}
    assert defs["bridge_cuda_transfer"] == defs["bridge_cuda_copy"] == {"interop"}
    assert defs["bridge_init"] == {"top"}


def test_the_checker_reports_each_kind_of_crossing() -> None:
    """Each rule names the offending file and name on a made-up tree."""
    srcs = {
        "bridge.h": "int bridge_init(void);\n",
        "core/core.h": '#include "bridge.h"\nvoid bridge_core_fn(void);\n',
        "core/a.c": '#include "core.h"\n#include "interop/x.h"\n'
        "void bridge_core_fn(void) {\n  bridge_interop_fn(); /* bridge_in_comment() */\n}\n",
        "interop/x.h": '#include "core/core.h"\n',
        "interop/b.c": '#include "x.h"\nvoid bridge_interop_fn(void) {\n  bridge_core_fn();\n'
        '  bridge_driver_fn("bridge_in_string");\n  bridge_crossing_fn();\n}\n',
        "crossing/d.c": '#include "interop/x.h"\nint bridge_crossing_fn(void) {\n  bridge_interop_fn();\n'
        "  return bridge_driver_fn(0);\n}\n",
        "drivers/c.c": "int bridge_driver_fn(const char *s) {\n  bridge_interop_fn();\n  return 0;\n}\n",
    }
    assert violations(srcs) == [
        "core/a.c: includes 'interop/x.h' (interop/x.h), not a core header",
        "core/a.c: uses bridge_interop_fn, defined in ['interop'], not in core/",
        "interop/b.c: uses bridge_crossing_fn, defined only in crossing/, a layer above",
        "interop/b.c: uses bridge_driver_fn, defined only in drivers/",
        "crossing/d.c: uses bridge_driver_fn, defined only in drivers/",
    ]


def test_the_extension_compiles_every_c_file() -> None:
    """pyproject.toml lists every .c file of cdefs/ (a file added to a folder
    and not listed builds here with `find` but not in `pip install .`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (ext,) = project["tool"]["setuptools"]["ext-modules"]
    listed = {s.removeprefix("cdefs/") for s in ext["sources"]}
    on_disk = {p.relative_to(CDEFS).as_posix() for p in CDEFS.rglob("*.c")}
    assert on_disk - listed == set(), "pyproject.toml's sources lack these cdefs/ files"
    headers = {p.relative_to(CDEFS).as_posix() for p in CDEFS.rglob("*.h")}
    assert headers - {d.removeprefix("cdefs/") for d in ext["depends"]} == set()
