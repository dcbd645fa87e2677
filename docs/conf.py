"""Sphinx configuration of the documentation site (``make docs``; see docs-site.md).

The repository's top level is fixed, so the whole configuration lives here in
docs/. Pages are Markdown (MyST), the API reference is autodoc over the
docstrings, and ```` ```mermaid ```` fences become diagrams that mermaid.js
renders to SVG in the browser. mermaid.js is not fetched from a CDN by the
pages: it is vendored into the site's ``_static`` from the npm package pinned
below, so the built site works offline.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docutils.nodes import Node
    from sphinx.application import Sphinx

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

project = "dlpack-bridge"
author = "dlpack-bridge authors"
copyright = "dlpack-bridge authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxcontrib.mermaid",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
# index.md takes the recipes by glob (recipes/*), so a page added there
# needs no index edit, and a glob that matches nothing yet is not an error
# (see _EmptyGlob below). A page that exists but is in no toctree still fails
# the build.

# MyST: ```mermaid fences are the mermaid directive, so the same Markdown
# renders as a diagram on GitHub and on this site; heading anchors are
# GitHub's slugs, which the pages' "#some-heading" links use.
myst_fence_as_directive = ["mermaid"]
myst_heading_anchors = 6
myst_enable_extensions = ["colon_fence"]

# autodoc: the docstrings are the reference. The API pages use the
# ``bridge-api`` directive below, which lists a module's __all__ at build
# time, so a name added there appears without editing a page.
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Entries show full names: the bridge's own names shadow builtins
# (bridge.float, bridge.int, bridge.bool), and a bare "float" would read as
# Python's.
add_module_names = True

html_theme = "alabaster"
html_title = "dlpack-bridge"
html_static_path = ["_static"]
html_theme_options = {"show_relbars": True}
html_show_sourcelink = False
html_copy_source = False  # the Markdown sources are the repository's, not the site's
# A page icon of our own: without one the browser asks for /favicon.ico (a 404).
html_favicon = "_static/favicon.svg"

# -- mermaid.js, vendored --------------------------------------------------
# The version sphinxcontrib-mermaid is tested with; the integrity is npm's
# sha512 of that tarball, checked here so a changed package fails the build.
MERMAID_VERSION = "11.12.1"
MERMAID_INTEGRITY = (
    "sha512-UlIZrRariB11TY1RtTgUWp65tphtBv4CSq7vyS2ZZ2TgoMjs2nloq+wFqxiwcxlhHUvs7DPGgMjs2aeQxz5h9g=="
)
VENDOR = Path(os.environ.get("BRIDGE_DOCS_VENDOR", ROOT / "build" / "docs-vendor"))


def vendor_mermaid(vendor: Path) -> Path:
    """The folder (under ``vendor``) holding ``mermaid/mermaid.esm.min.mjs`` and its chunks.

    Fetched once with ``npm pack`` (the npm registry is the one source that
    needs no CDN), then reused. Source maps are left out: a browser asks for
    them only with its developer tools open. RuntimeError, saying what to do,
    when npm is missing or fails, or the tarball is not the pinned one.
    """
    dest = vendor / f"mermaid-{MERMAID_VERSION}"
    if (dest / "mermaid" / "mermaid.esm.min.mjs").is_file():
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "the docs need mermaid.js from npm, and npm is not installed "
            "(apt-get install -y npm; `make docs` as root installs it)"
        )
    vendor.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=vendor) as tmp:
        spec = f"mermaid@{MERMAID_VERSION}"
        done = subprocess.run(
            [npm, "pack", spec, "--pack-destination", tmp, "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        tarball = Path(tmp) / f"mermaid-{MERMAID_VERSION}.tgz"
        if done.returncode != 0 or not tarball.is_file():
            raise RuntimeError(f"npm pack {spec} failed (exit {done.returncode}): {done.stderr}")
        digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
        if f"sha512-{digest}" != MERMAID_INTEGRITY:
            raise RuntimeError(
                f"{tarball.name}: sha512-{digest} is not the pinned {MERMAID_INTEGRITY}"
            )
        staged = Path(tmp) / "out" / "mermaid"
        with tarfile.open(tarball) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("package/dist/")
                wanted = name == "mermaid.esm.min.mjs" or (
                    name.startswith("chunks/mermaid.esm.min/") and name.endswith(".mjs")
                )
                source = tar.extractfile(member) if member.isfile() and wanted else None
                if source is not None:
                    target = staged / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(source.read())
        shutil.rmtree(dest, ignore_errors=True)
        staged.parent.rename(dest)
    return dest


html_static_path.append(str(vendor_mermaid(VENDOR)))
mermaid_use_local = "mermaid/mermaid.esm.min.mjs"
mermaid_version = MERMAID_VERSION


# -- the API pages: one entry per name of a module's __all__ ----------------
# automodule alone would miss names that are not plain module attributes
# (bridge.check loads lazily through the module's __getattr__) and data
# without a docstring (the dtype objects, the constants).


def _written_signature(obj: object) -> str:
    """The text signature of a C function whose defaults inspect cannot read
    (an object, as ``bridge.empty``'s ``memory_format=bridge.contiguous_format``),
    for autodoc to show as written; "" for every other callable (autodoc reads it)."""
    import inspect

    text = getattr(obj, "__text_signature__", None)
    if not inspect.isbuiltin(obj) or not text:
        return ""
    try:
        inspect.signature(obj)
    except ValueError:
        return text
    return ""


def _api_rst(modname: str) -> list[str]:
    """reStructuredText documenting every name of ``modname.__all__``, grouped by kind."""
    import importlib
    import inspect
    import types

    module = importlib.import_module(modname)
    groups: dict[str, list[str]] = {
        "Modules": [], "Classes": [], "Functions": [], "pytest fixtures": [],
        "pytest hooks": [], "Data": [],
    }
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, types.ModuleType):
            summary = (inspect.getdoc(obj) or "").split("\n", 1)[0]
            groups["Modules"] += [f"* :mod:`{obj.__name__}`: {summary}", ""]
        elif inspect.isclass(obj):
            groups["Classes"] += [f".. autoclass:: {name}", "   :members:", ""]
        elif callable(obj):
            group = (
                "pytest fixtures" if type(obj).__name__ == "FixtureFunctionDefinition"
                else "pytest hooks" if name.startswith("pytest_") else "Functions"
            )
            groups[group] += [f".. autofunction:: {name}{_written_signature(obj)}", ""]
        else:
            value = repr(obj)
            value = value if len(value) <= 70 else value[:67] + "..."
            kind = type(obj)
            typename = kind.__qualname__ if kind.__module__ == "builtins" else (
                f"{kind.__module__}.{kind.__qualname__}"
            )
            public = {"bridge.core.dtypes.dtype": "bridge.dtype",
                      "bridge.core.tensor.memory_format": "bridge.memory_format"}
            groups["Data"] += [
                f".. py:data:: {name}",
                f"   :type: {public.get(typename, typename)}",
                f"   :value: {value}",
                "",
            ]
    lines = [f".. automodule:: {modname}", ""]
    for title, body in groups.items():
        if body:
            lines += [f".. rubric:: {title}", "", *body]
    return lines


class _EmptyGlob(logging.Filter):
    """Drops Sphinx's "toctree glob pattern ... didn't match" warning.

    Sphinx logs it without a warning type, so ``suppress_warnings`` cannot
    name it. Only globs: a toctree naming a missing page still fails.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("toctree glob pattern")


def setup(app: Sphinx) -> dict[str, bool]:
    """Register the ``bridge-api`` directive: ``.. bridge-api:: bridge.arrow``."""
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective
    from sphinx.util.nodes import nested_parse_with_titles

    class BridgeApi(SphinxDirective):
        required_arguments = 1

        def run(self) -> list[Node]:
            from docutils import nodes

            source = self.get_source_info()[0]
            content = StringList(_api_rst(self.arguments[0]), source=source)
            holder = nodes.section()
            holder.document = self.state.document
            nested_parse_with_titles(self.state, content, holder)
            return holder.children

    app.add_directive("bridge-api", BridgeApi)
    logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlob())
    return {"parallel_read_safe": True}
