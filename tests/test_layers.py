"""The package's layers, checked from the source: the core imports no interop
module, interop protocol modules do not import each other, and nothing but
the kit (and the top-level shims that re-export it) imports the kit.

Every ``import``/``from ... import`` anywhere in a module counts, including
those inside functions and ``if TYPE_CHECKING:`` blocks: a lazy import is
still a dependency.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

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


def imports_of(path: pathlib.Path) -> set[str]:
    """Every bridge module ``path`` imports (``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``)."""
    name = module_name(path)
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in ALL or sub in NATIVE else base)
    return {m for m in found if m == "bridge" or m.startswith("bridge.")}


ALL = {module_name(p) for p in PKG.rglob("*.py")}
EDGES = {module_name(p): imports_of(p) for p in PKG.rglob("*.py")}


def layer(mod: str) -> str:
    if mod in NATIVE or mod.startswith("bridge.core"):
        return "core"
    if mod == "bridge.interop":
        return "interop"
    if mod.startswith("bridge.interop."):
        return "interop." + mod.split(".")[2]
    if mod.startswith("bridge.kit"):
        return "kit"
    return "top"


def test_the_layers_exist_as_folders() -> None:
    layers = {layer(m) for m in ALL}
    assert {"core", "interop", "kit", "top"} <= layers
    assert {f"interop.{p}" for p in PROTOCOLS} <= layers, layers


@pytest.mark.parametrize("mod", sorted(m for m in ALL if layer(m) == "core"))
def test_the_core_imports_only_the_core(mod: str) -> None:
    bad = sorted(m for m in EDGES[mod] if layer(m) != "core")
    assert not bad, f"{mod} (core) imports {bad}"


@pytest.mark.parametrize("mod", sorted(m for m in ALL if layer(m).startswith("interop.")))
def test_an_interop_protocol_imports_no_other_protocol(mod: str) -> None:
    mine = layer(mod)
    bad = sorted(m for m in EDGES[mod] if layer(m) not in ("core", mine))
    assert not bad, f"{mod} ({mine}) imports {bad}"


@pytest.mark.parametrize("mod", sorted(ALL))
def test_only_the_kit_and_its_shims_import_the_kit(mod: str) -> None:
    if layer(mod) == "kit" or mod in SHIMS:
        return
    bad = sorted(m for m in EDGES[mod] if layer(m) == "kit")
    assert not bad, f"{mod} imports the kit: {bad}"


def test_the_interop_facade_imports_no_kit() -> None:
    assert not [m for m in EDGES["bridge.interop"] if layer(m) in ("kit", "top")]


def test_import_bridge_loads_neither_the_kit_nor_optional_peers() -> None:
    """``import bridge`` is the core and interop: the kit, and the peers only
    some calls need (pyarrow, torch, ml_dtypes), load on first use."""
    code = (
        "import sys, bridge\n"
        "bad = sorted(m for m in sys.modules if m.startswith('bridge.kit') or m.split('.')[0] in ('torch', 'pytest', 'pyarrow', 'ml_dtypes'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_edges_are_read() -> None:
    # guards the parser: a known edge of each kind is seen
    assert "bridge.core.tensor" in EDGES["bridge.core.factories"]
    assert "bridge.core.native" in EDGES["bridge.interop.dlpack"]
    assert any(m.startswith("bridge.kit") for m in EDGES["bridge.matrix"])
    assert "bridge.interop.arrow.types" in EDGES["bridge.interop.arrow.export"]
