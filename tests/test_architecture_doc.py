"""docs/architecture.md stays drawn from the code.

- The two import-graph pictures (between ``<!-- generated: layers -->`` /
  ``<!-- generated: modules -->`` and ``<!-- /generated -->``) are made here
  from the source (the AST reader of ``tests/layers_graph.py``); the doc's
  blocks must equal them. ``python tests/test_architecture_doc.py --write``
  rewrites the blocks.
- Every ``cdefs/`` file and every module of ``bridge/`` is named on the page,
  and every path the page names exists.
- In the sections on ownership and on the walk to a DLPack export, every name
  in backticks, and every code-like name in the hand-drawn ownership diagram,
  names something that exists: a C function, struct, field or string found in
  ``cdefs/``, or a Python attribute importable from ``bridge`` (or, written
  in full, from another library: ``numpy.ndarray``).
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import re
import sys

from layers_graph import ALL, EAGER, EDGES, NATIVE, PATHS, PKG, layer

ROOT = PKG.parent
DOC = ROOT / "docs" / "architecture.md"
CDEFS = ROOT / "cdefs"
REGENERATE = "python tests/test_architecture_doc.py --write"

# ----------------------------------------------------------------- pictures

# Boxes of the module picture: the five layers, the interop protocols and the
# C extension inside them. Keys are layer() values ("c" for the extension).
TITLES = {
    "top": "top-level shims: bridge/*.py",
    "kit": "kit: bridge/kit/ (loaded on first use)",
    "crossing": "crossing: bridge/crossing/ (bridge.convert)",
    "interop": "interop: bridge/interop/",
    "interop.facade": "facade: asarray, as_tensor",
    "core": "core: bridge/core/",
    "c": "C extension: cdefs/**/*.c built into bridge._native",
}
NATIVE_LABELS = {
    "bridge._native": "bridge._native: cffi module, its only call is bridge_init",
    "bridge._C": "bridge._C: the C core objects and protocol functions",
    "bridge._drivers": "bridge._drivers: test and conformance drivers",
}
ORDER = ["top", "kit", "crossing", "interop", "core"]


def box(mod: str) -> str:
    """The innermost box a module is drawn in."""
    if mod in NATIVE:
        return "c"
    lay = layer(mod)
    return "interop.facade" if lay == "interop" else lay


def inner_boxes(name: str) -> list[str]:
    """The boxes drawn inside a layer's box: the interop facade and protocols,
    and the C extension inside the core."""
    if name == "core":
        return ["c"]
    if name == "interop":
        return sorted({box(m) for m in ALL if box(m).startswith("interop.")}, key=rank)
    return []


def rank(name: str) -> tuple[int, bool, str]:
    """Boxes in reading order: top, kit, crossing, interop, core, then the C extension."""
    return ([*ORDER, "c"].index(name.split(".")[0]), name != "interop.facade", name)


def box_title(name: str) -> str:
    if name in TITLES:
        return TITLES[name]
    files = sorted(str(PATHS[m].relative_to(ROOT)) for m in ALL if box(m) == name)
    folder = files[0].rsplit("/", 1)[0] + "/"
    return f"{name}: " + (folder if len(files) > 1 else files[0])


def outer(mod: str) -> str:
    return layer(mod).split(".")[0]


def kit_group(mod: str) -> str:
    return mod.split(".")[2].split("_")[0]


def node(mod: str) -> str:
    """The node a module is drawn as: itself, except that the kit's modules
    sharing a name before the first underscore (conformance.py,
    conformance_report.py, ...) are one node."""
    if mod.startswith("bridge.kit."):
        group = kit_group(mod)
        size = sum(1 for m in ALL if m.startswith("bridge.kit.") and kit_group(m) == group)
        return f"bridge.kit.{group}*" if size > 1 else mod
    return mod


def ident(key: str) -> str:
    return (
        "m_" + re.sub(r"\W", "_", key)
        if key.startswith("bridge")
        else "L_" + re.sub(r"\W", "_", key)
    )


def label(key: str) -> str:
    if key in NATIVE:
        return NATIVE_LABELS[key]
    if key.endswith("*"):
        members = sorted(m for m in ALL if node(m) == key)
        return f"kit/{kit_group(members[0])}*.py ({len(members)} files)"
    return str(PATHS[key].relative_to(PKG))


def module_edges() -> dict[tuple[str, str], bool]:
    """(from node, to node or box) -> eager. Inside one of the five layers,
    module to module; across layers, to the imported module's box."""
    out: dict[tuple[str, str], bool] = {}
    for a, targets in EDGES.items():
        for b in targets:
            src = node(a)
            dst = node(b) if outer(a) == outer(b) else "box:" + box(b)
            if src != dst:
                out[(src, dst)] = out.get((src, dst), False) or b in EAGER[a]
    return out


def arrow(eager: bool) -> str:
    return "-->" if eager else "-.->"


def modules_picture() -> str:
    edges = module_edges()
    drawn = {k for e in edges for k in e if not k.startswith("box:")}
    by_box: dict[str, list[str]] = collections.defaultdict(list)
    for k in sorted(drawn):
        by_box[box(k.rstrip("*"))].append(k)
    lines = ["```mermaid", "flowchart TB"]

    def emit_box(name: str, indent: str) -> None:
        lines.append(f'{indent}subgraph {ident(name)}["{box_title(name)}"]')
        for k in by_box.get(name, []):
            lines.append(f'{indent}  {ident(k)}["{label(k)}"]')
        for inner in inner_boxes(name):
            emit_box(inner, indent + "  ")
        lines.append(f"{indent}end")

    for name in ORDER:
        emit_box(name, "  ")
    for (a, b), eager in sorted(edges.items()):
        dst = ident(b[4:]) if b.startswith("box:") else ident(b)
        lines.append(f"  {ident(a)} {arrow(eager)} {dst}")
    lines.append("```")
    return "\n".join(lines)


def layers_picture() -> str:
    """One node per layer (protocols and the C extension apart), an edge per
    pair of layers with the number of module imports it stands for."""
    count: collections.Counter[tuple[str, str]] = collections.Counter()
    eager: dict[tuple[str, str], bool] = {}
    for a, targets in EDGES.items():
        for b in targets:
            la, lb = box(a), box(b)
            if la != lb:
                count[(la, lb)] += 1
                eager[(la, lb)] = eager.get((la, lb), False) or b in EAGER[a]
    members = collections.Counter(box(m) for m in ALL | NATIVE)
    lines = ["```mermaid", "flowchart TB"]
    for name in sorted(members, key=rank):
        n = members[name]
        lines.append(f'  {ident(name)}["{box_title(name)}<br/>{n} module{"s" if n > 1 else ""}"]')
    for (a, b), n in sorted(count.items()):
        lines.append(f'  {ident(a)} {arrow(eager[(a, b)])}|"{n}"| {ident(b)}')
    lines.append("```")
    return "\n".join(lines)


PICTURES = {"layers": layers_picture, "modules": modules_picture}


def block_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {name} -->\n)(.*?)(\n<!-- /generated -->)", re.S)


def write() -> None:
    text = DOC.read_text()
    for name, make in PICTURES.items():
        text, n = block_re(name).subn(lambda m, make=make: m.group(1) + make() + m.group(3), text)
        assert n == 1, (
            f"docs/architecture.md has no (or several) '<!-- generated: {name} -->' blocks"
        )
    DOC.write_text(text)


def test_the_import_pictures_are_drawn_from_the_code() -> None:
    text = DOC.read_text()
    for name, make in PICTURES.items():
        found = block_re(name).findall(text)
        assert len(found) == 1, f"docs/architecture.md needs one '<!-- generated: {name} -->' block"
        assert found[0][1] == make(), (
            f"the '{name}' picture in docs/architecture.md is not the import graph of the code; "
            f"regenerate it with `{REGENERATE}`"
        )


# ---------------------------------------------------------- names and paths

SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")
PATH = re.compile(
    r"^(?P<path>[\w./*-]+\.(?:c|h|py|md|toml|pyi))(?::(?P<name>[A-Za-z_]\w*(?:\.\w+)*))?$"
)
QUOTED = re.compile(r'^"[^"\s]+"$')


def c_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(CDEFS.rglob("*.[ch]")) if p.name != "_native.c"}


def python_sources() -> str:
    return "\n".join(p.read_text() for p in sorted(PKG.rglob("*.py")))


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def python_object(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def c_field(struct: str, field: str, sources: dict[str, str]) -> bool:
    body = r"\{((?:[^{}]|\{[^{}]*\})*)\}"  # one level of nested braces (a union)
    pat = re.compile(rf"typedef struct\s*\w*\s*{body}\s*{re.escape(struct)}\s*;|"
                     rf"struct {re.escape(struct)}\s*{body}\s*;")  # fmt: skip
    for text in sources.values():
        for m in pat.finditer(text):
            fields = m.group(1) or m.group(2) or ""
            if _word(field, fields):
                return True
    return False


# Where a name without the "bridge." prefix is looked up on the Python side.
PYTHON_BASES = ("bridge", "bridge._C", "bridge._drivers", "bridge.Tensor", "bridge.UntypedStorage")


def names_something(span: str) -> bool:
    """Whether a name from the page exists in the code (see the module docstring)."""
    sources = c_sources()
    if QUOTED.match(span):
        return any(span in t for t in sources.values()) or span in python_sources()
    m = PATH.match(span)
    if m:
        bare = "/" not in m["path"]  # a file named in its folder's row: somewhere in the tree
        path = f"**/{m['path']}" if bare else m["path"]
        files = sorted(ROOT.glob(path))
        if not files:
            return False
        return m["name"] is None or all(
            _word(p, f.read_text()) for f in files for p in m["name"].split(".")
        )
    name = span.removesuffix("()")
    if name == "bridge" or name.startswith("bridge."):
        return python_object(name)
    if any(python_object(f"{base}.{name}") for base in PYTHON_BASES):
        return True
    if "." in name and python_object(name):  # another library's name: numpy.ndarray
        return True
    if "." in name:
        struct, _, rest = name.partition(".")
        return "." not in rest and c_field(struct, rest, sources)
    if importlib.util.find_spec(name) is not None:  # a module: multiprocessing
        return True
    # a C name, or a Python one defined in some module (a table, a helper), or a Makefile variable
    texts = [*sources.values(), python_sources(), (ROOT / "Makefile").read_text()]
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\s*(?:[:=(]|\b)", t) for t in texts) and any(
        _word(name, t) for t in texts)


def checkable(span: str) -> bool:
    return bool(NAME.match(span) or PATH.match(span) or QUOTED.match(span))


def section(title: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"docs/architecture.md has no section '## {title}'"
    return m.group(1)


def diagram_names(text: str) -> list[str]:
    """The code-like names in a section's mermaid diagrams' labels: quoted
    strings (#quot;...#quot;), and words with an underscore, a dot or an
    inner capital (StorageObject, bridge_storage_adopt, manager_ctx)."""
    out: list[str] = []
    for block in re.findall(r"```mermaid\n(.*?)```", text, re.S):
        for lab in re.findall(r'"([^"]*)"', block):
            lab = re.sub(r"<[^>]+>", " ", lab)
            for q in re.findall(r"#quot;(.*?)#quot;", lab):
                out.append(f'"{q}"')
            lab = re.sub(r"#quot;.*?#quot;", " ", lab)
            for word in re.findall(r"[A-Za-z_][\w.]*(?:\(\))?", lab):
                word = word.rstrip(".")
                if "_" in word or "." in word or re.search(r"[a-z][A-Z]", word):
                    out.append(word)
    return out


def test_every_name_on_the_page_exists() -> None:
    """Every section: each name in backticks and in the diagrams' labels is a
    C or Python name, a file, a module or a Makefile variable of the tree."""
    bad = []
    titles = re.findall(r"^## (.+)$", DOC.read_text(), re.M)
    assert len(titles) >= 5, titles
    for title in titles:
        text = section(title)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        spans = [s for s in SPAN.findall(prose) if checkable(s)] + diagram_names(text)
        bad += [f"{title}: {s}" for s in dict.fromkeys(spans) if not names_something(s)]
    assert not bad, f"names on docs/architecture.md that the code does not have: {bad}"


def test_every_path_on_the_page_exists() -> None:
    spans = [s for s in SPAN.findall(DOC.read_text()) if PATH.match(s)]
    bad = [s for s in dict.fromkeys(spans) if not names_something(s)]
    assert not bad, f"paths on docs/architecture.md that do not exist: {bad}"


def test_every_c_file_and_python_module_is_on_the_page() -> None:
    named = [PATH.match(s)["path"] for s in SPAN.findall(DOC.read_text()) if PATH.match(s)]
    files = [*sorted(CDEFS.rglob("*.[ch]")), CDEFS / "build.py", *sorted(PKG.rglob("*.py"))]
    missing = [str(f.relative_to(ROOT)) for f in files
               if not any(f in ROOT.glob(n) for n in named if "/" in n)]  # fmt: skip
    assert not missing, f"files docs/architecture.md does not name (add a row): {missing}"


def test_the_checker_refuses_what_does_not_exist() -> None:
    assert names_something("bridge_storage_adopt") and names_something("StorageObject.owner")
    assert names_something("bridge.UntypedStorage.owner") and names_something('"bridge.memory"')
    assert names_something("cdefs/core/storage.c:bridge_storage_adopt")
    assert not names_something("bridge_storage_set_owner")
    assert not names_something("StorageObject.keep")
    assert not names_something("StorageObject.itemsize")  # a DTypeObject field
    assert names_something("fast_block.owner") and names_something("buffer_info.keep")
    assert not names_something("bridge.UntypedStorage.keep_alive")
    assert not names_something("cdefs/bridge.c")
    assert not names_something("cdefs/core/storage.c:bridge_dlpack_build")
    assert names_something("DESTINATIONS") and names_something("SAN_TESTS") and names_something("multiprocessing")
    assert not names_something("_NO_SUCH_TABLE") and not names_something("no_such_file.py")


def test_the_cffi_surface_is_what_the_page_says() -> None:
    """bridge.h's row names every function cffi sees, and nothing else."""
    declared = set(re.findall(r"\b(bridge_\w+)\s*\(", (CDEFS / "bridge.h").read_text()))
    row = next(line for line in DOC.read_text().splitlines() if line.startswith("| `cdefs/bridge.h` |"))
    named = set(re.findall(r"`(bridge_\w+)`", row))
    assert declared == named, f"bridge.h declares {sorted(declared)}; its row names {sorted(named)}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    write()
    print(f"rewrote the generated blocks of {DOC.relative_to(ROOT)}")
