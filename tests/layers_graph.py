"""The package's import graph, read from the source with ``ast`` (no module is
imported to read it). Shared by ``tests/test_layers.py`` (the layering
rules) and ``tests/test_architecture_doc.py`` (the pictures in
``docs/architecture.md``).

Every ``import``/``from ... import`` anywhere in a module counts, including
those inside functions and ``if TYPE_CHECKING:`` blocks: a lazy import is
still a dependency. :data:`EAGER` keeps apart the imports that run when the
module itself is imported (module level, class bodies, ``try`` blocks), so a
picture can tell them from the lazy ones.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import bridge

PKG = pathlib.Path(bridge.__file__).parent
# The native extension's modules belong to the core.
NATIVE = {"bridge._native", "bridge._C", "bridge._drivers"}
# Top-level modules that only re-export a layer under its public path.
SHIMS = {"bridge", "bridge.arrow", "bridge.dlpack", "bridge.matrix", "bridge.conformance",
         "bridge.pytest_plugin", "bridge.__main__"}  # fmt: skip
PROTOCOLS = {"dlpack", "numpy", "cuda", "arrow"}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    return "TYPE_CHECKING" in names


def _import_nodes(node: ast.AST, lazy: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node``, with whether it is lazy (runs
    only when a function is called, or never: ``if TYPE_CHECKING:``)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, lazy
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        lazy = True
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _import_nodes(child, True)
        for child in node.orelse:
            yield from _import_nodes(child, lazy)
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, lazy)


def import_kinds(path: pathlib.Path) -> dict[str, bool]:
    """Every bridge module ``path`` imports, mapped to whether some import of
    it is eager (runs when ``path`` is imported). ``from a import b`` counts
    as ``a.b`` when that is a module, else ``a``."""
    name = module_name(path)
    is_pkg = path.name == "__init__.py"
    found: dict[str, bool] = {}

    def add(mod: str, lazy: bool) -> None:
        found[mod] = found.get(mod, False) or not lazy

    for node, lazy in _import_nodes(ast.parse(path.read_text(), str(path)), False):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, lazy)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
            base = ".".join(anchor + ([base] if base else []))
        for a in node.names:
            sub = f"{base}.{a.name}"
            add(sub if sub in ALL or sub in NATIVE else base, lazy)
    return {m: eager for m, eager in found.items() if m == "bridge" or m.startswith("bridge.")}


def imports_of(path: pathlib.Path) -> set[str]:
    """Every bridge module ``path`` imports, eagerly or lazily."""
    return set(import_kinds(path))


ALL = {module_name(p) for p in PKG.rglob("*.py")}
PATHS = {module_name(p): p for p in PKG.rglob("*.py")}
KINDS = {mod: import_kinds(p) for mod, p in PATHS.items()}
EDGES = {mod: set(kinds) for mod, kinds in KINDS.items()}
EAGER = {mod: {m for m, eager in kinds.items() if eager} for mod, kinds in KINDS.items()}


def layer(mod: str) -> str:
    if mod in NATIVE or mod.startswith("bridge.core"):
        return "core"
    if mod == "bridge.interop":
        return "interop"
    if mod.startswith("bridge.interop."):
        return "interop." + mod.split(".")[2]
    if mod.startswith("bridge.crossing"):
        return "crossing"
    if mod.startswith("bridge.kit"):
        return "kit"
    return "top"
