"""The package's layers, checked from the source: the core imports no interop
module, interop protocol modules do not import each other, the crossing layer
(``bridge.convert``) imports the core and interop only, and nothing but the
kit (and the top-level shims that re-export it) imports the kit.

The graph is read by ``tests/layers_graph.py`` (shared with the architecture
page's test): every ``import``/``from ... import`` anywhere in a module
counts, including those inside functions and ``if TYPE_CHECKING:`` blocks: a
lazy import is still a dependency.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from layers_graph import ALL, EDGES, PROTOCOLS, SHIMS, layer


def test_the_layers_exist_as_folders() -> None:
    layers = {layer(m) for m in ALL}
    assert {"core", "interop", "crossing", "kit", "top"} <= layers
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


@pytest.mark.parametrize("mod", sorted(m for m in ALL if layer(m) == "crossing"))
def test_the_crossing_imports_only_the_core_interop_and_itself(mod: str) -> None:
    bad = sorted(m for m in EDGES[mod] if layer(m) not in ("core", "crossing") and not layer(m).startswith("interop"))
    assert not bad, f"{mod} (crossing) imports {bad}"


@pytest.mark.parametrize("mod", sorted(m for m in ALL if layer(m) == "core" or layer(m).startswith("interop")))
def test_nothing_below_the_crossing_imports_it(mod: str) -> None:
    bad = sorted(m for m in EDGES[mod] if layer(m) == "crossing")
    assert not bad, f"{mod} imports the crossing layer: {bad}"


@pytest.mark.parametrize("mod", sorted(m for m in ALL if layer(m) != "kit" and m not in SHIMS))
def test_only_the_kit_and_its_shims_import_the_kit(mod: str) -> None:
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
    assert "bridge.crossing.capabilities" in EDGES["bridge.crossing.convert"]


def _cycle(mods: set[str]) -> list[str]:
    """One import cycle among ``mods`` (by EDGES, lazy and TYPE_CHECKING
    imports included), as the modules along it; [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        stack.append(m)
        for n in sorted(EDGES[m] & mods):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return []

    for m in sorted(mods):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return []


def test_the_crossing_layer_has_no_import_circle() -> None:
    """convert and units used to import each other (units lazily): the
    values both use (Fix, Plan, CopyWarning, Wants, the Steps a unit converts
    with) live in bridge.crossing.fixes, which imports neither."""
    crossing = {m for m in ALL if layer(m) == "crossing"}
    assert "bridge.crossing.units" in crossing and "bridge.crossing.fixes" in crossing
    assert _cycle(crossing) == [], " -> ".join(_cycle(crossing))


def test_a_circle_is_seen() -> None:
    # guards the search: the edges with one made-up back edge have a cycle
    saved = EDGES["bridge.crossing.fixes"]
    try:
        EDGES["bridge.crossing.fixes"] = set(saved) | {"bridge.crossing.convert"}
        assert _cycle({"bridge.crossing.convert", "bridge.crossing.fixes"})
    finally:
        EDGES["bridge.crossing.fixes"] = saved
