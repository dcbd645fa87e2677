"""The documentation site (``make docs``), opened in a real headless browser.

The site is built here with the same command as ``make docs`` (warnings are
errors), served from 127.0.0.1, and every HTML page of it is loaded in
Debian's Chromium through Selenium and ``/usr/bin/chromedriver``. A page
fails on a request that failed or answered >= 400 (scripts, styles, images,
mermaid's chunks), on a console error, on a mermaid diagram that did not
become an SVG, and on an internal link whose file or ``#anchor`` does not
exist. The API reference must document every public name. The browser may
not leave the machine: every host but 127.0.0.1 resolves to nothing, so a
page that reached for a CDN fails instead of quietly working online.

``make test`` installs Chromium (apt) first when it is missing; run alone,
``apt-get install -y chromium chromium-driver``.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
from browser import headless_chromium
from selenium import webdriver

ROOT = Path(__file__).resolve().parent.parent
# The modules whose __all__ the API reference must cover, and their pages.
API_PAGES = {
    "bridge": "api/bridge.html",
    "bridge.arrow": "api/arrow.html",
    "bridge.dlpack": "api/dlpack.html",
    "bridge.matrix": "api/matrix.html",
    "bridge.conformance": "api/conformance.html",
    "bridge.pytest_plugin": "api/pytest-plugin.html",
}
RENDER_TIMEOUT_S = 30.0

# Waits until every mermaid block has been processed (or the budget is out)
# and reports each block: processed?, has an <svg>?, is it mermaid's error
# picture? The last argument is selenium's callback.
_MERMAID_STATE_JS = """
const done = arguments[arguments.length - 1];
const deadline = Date.now() + arguments[0];
const state = () => [...document.querySelectorAll('.mermaid')].map((el) => ({
  processed: el.getAttribute('data-processed') === 'true',
  svg: el.querySelector('svg') !== null,
  error: el.querySelector('svg[aria-roledescription="error"]') !== null
      || /Syntax error/.test(el.textContent),
}));
const poll = () => {
  const s = state();
  if (s.every((d) => d.processed) || Date.now() > deadline) { done(s); }
  else { setTimeout(poll, 100); }
};
if (document.readyState === 'complete') { poll(); }
else { window.addEventListener('load', poll); }
"""


@dataclass
class PageReport:
    """What loading one page showed."""

    failed_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    diagrams: list[dict[str, bool]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    broken_links: list[str] = field(default_factory=list)


class _Anchors(HTMLParser):
    """The ``id`` and ``<a name>`` values of an HTML file: what a #fragment can land on."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is not None and (key == "id" or (tag == "a" and key == "name")):
                self.anchors.add(value)


@functools.cache
def _anchors_of(path: Path) -> frozenset[str]:
    parser = _Anchors()
    parser.feed(path.read_text(encoding="utf-8"))
    return frozenset(parser.anchors)


def build_site(out: Path) -> Path:
    """Build the site as ``make docs`` does (``-W --keep-going``, fresh) into ``out``; return it."""
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
         str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout}\n{result.stderr}"
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module."""
    return build_site(tmp_path_factory.mktemp("docs") / "html")


def serve(directory: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
    """An HTTP server for ``directory`` on 127.0.0.1 in a daemon thread; its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium, kept off every host but 127.0.0.1."""
    # Nothing but the local server: a CDN request fails the page.
    driver = headless_chromium("the docs browser test", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                               {"browser": "ALL", "performance": "ALL"}, RENDER_TIMEOUT_S)  # fmt: skip
    driver.set_script_timeout(RENDER_TIMEOUT_S + 5)
    try:
        yield driver
    finally:
        driver.quit()


def _network_failures(entries: list[dict[str, object]]) -> list[str]:
    """Failed requests in a performance log: transport failures and HTTP status >= 400."""
    urls: dict[str, str] = {}
    failures = []
    for entry in entries:
        message = json.loads(str(entry["message"]))["message"]
        params = message.get("params", {})
        method = message.get("method")
        if method == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            failures.append(f"{params['response']['status']} {params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = urls.get(params["requestId"], params["requestId"])
            failures.append(f"{params.get('errorText')} {url}")
    return failures


def load_page(driver: webdriver.Chrome, url: str) -> PageReport:
    """Open ``url``, wait for its diagrams, and report what it requested, logged and links to."""
    driver.get_log("browser")  # drop what the previous page left behind
    driver.get_log("performance")
    driver.get(url)
    report = PageReport()
    report.diagrams = driver.execute_async_script(_MERMAID_STATE_JS, RENDER_TIMEOUT_S * 1000)
    report.links = driver.execute_script(
        "return [...document.querySelectorAll('a[href]')].map((a) => a.href)"
    )
    report.ids = set(driver.execute_script(
        "return [...document.querySelectorAll('[id]')].map((e) => e.id)"
    ))
    time.sleep(0.05)  # let the last log entries of the page arrive
    report.console_errors = [
        str(e["message"]) for e in driver.get_log("browser") if e["level"] == "SEVERE"
    ]
    report.failed_requests = _network_failures(driver.get_log("performance"))
    return report


def broken_links(site: Path, base: str, page: str, links: list[str]) -> list[str]:
    """The internal links of ``page`` whose file, or ``#anchor`` in it, does not exist."""
    broken = []
    for link in links:
        target, fragment = urldefrag(link)
        if not target.startswith(base):
            continue  # an external link: not followed, and the browser never loads it
        path = site / unquote(urlsplit(target).path.removeprefix(urlsplit(base).path))
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            broken.append(f"{page}: {link} (no such file)")
        elif fragment and path.suffix == ".html" and unquote(fragment) not in _anchors_of(path):
            broken.append(f"{page}: {link} (no such anchor)")
    return broken


def crawl(driver: webdriver.Chrome, site: Path) -> dict[str, PageReport]:
    """Load every HTML page of ``site`` (and every page one links to) in the browser."""
    base, server = serve(site)
    try:
        pending = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
        reports: dict[str, PageReport] = {}
        while pending:
            page = pending.pop()
            if page in reports:
                continue
            reports[page] = report = load_page(driver, base + page)
            for link in report.links:
                target = urldefrag(link)[0]
                name = unquote(target.removeprefix(base))
                # A link to a missing file is reported by broken_links, not loaded.
                if target.startswith(base) and name.endswith(".html") and (site / name).is_file():
                    pending.append(name)
        for page, report in reports.items():
            report.broken_links = broken_links(site, base, page, report.links)
        return reports
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def pages(browser: webdriver.Chrome, site: Path) -> dict[str, PageReport]:
    """What every page of the site showed in the browser, by path."""
    return crawl(browser, site)


def test_site_has_the_pages(site: Path) -> None:
    sources = {p.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
               for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert sources <= built
    assert (site / "_static" / "mermaid" / "mermaid.esm.min.mjs").is_file()


def test_every_page_loads_without_failed_requests_or_console_errors(
    pages: dict[str, PageReport],
) -> None:
    problems = {page: r.failed_requests + r.console_errors
                for page, r in pages.items() if r.failed_requests or r.console_errors}
    assert problems == {}


def test_every_diagram_renders_to_svg(pages: dict[str, PageReport]) -> None:
    diagrams = {page: r.diagrams for page, r in pages.items() if r.diagrams}
    # Every ```mermaid fence of a page's Markdown is a diagram on its HTML page.
    fences = {}
    for source in (ROOT / "docs").rglob("*.md"):
        count = sum(line.strip() == "```mermaid" for line in source.read_text().splitlines())
        if count:
            fences[source.relative_to(ROOT / "docs").with_suffix(".html").as_posix()] = count
    assert fences.get("architecture.html", 0) >= 3
    assert {page: len(d) for page, d in diagrams.items()} == fences
    bad = {page: d for page, ds in diagrams.items() for d in ds
           if not (d["processed"] and d["svg"]) or d["error"]}
    assert bad == {}


def test_internal_links_resolve(pages: dict[str, PageReport]) -> None:
    assert len(pages) > 20
    assert [link for r in pages.values() for link in r.broken_links] == []


@pytest.mark.parametrize("modname", sorted(API_PAGES))
def test_api_reference_documents_every_public_name(
    pages: dict[str, PageReport], modname: str,
) -> None:
    module = importlib.import_module(modname)
    page = pages[API_PAGES[modname]]
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, types.ModuleType):
            # A submodule has its own page; the entry here links to it.
            target = f"module-{obj.__name__}"
            if not any(link.endswith(f"#{target}") for link in page.links):
                missing.append(name)
        elif f"{modname}.{name}" not in page.ids:
            missing.append(name)
    assert missing == []


def test_crawl_catches_broken_pages(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """The checks above can fail: a broken page is reported on every count."""
    (tmp_path / "index.html").write_text(
        "<html><head><link rel='icon' href='data:,'><script src='missing.js'></script></head>"
        "<body>"
        "<a href='other.html#nowhere'>a</a> <a href='gone.html'>b</a>"
        "<a href='other.html#here'>c</a> <a href='https://example.org/'>d</a>"
        "<script>console.error('boom')</script></body></html>"
    )
    (tmp_path / "other.html").write_text(
        "<html><head><link rel='icon' href='data:,'></head><body><h1 id='here'>x</h1></body></html>"
    )
    reports = crawl(browser, tmp_path)
    assert sorted(reports) == ["index.html", "other.html"]
    index = reports["index.html"]
    assert any("missing.js" in f for f in index.failed_requests)
    assert any("boom" in e for e in index.console_errors)
    assert sorted(link.split("/")[-1] for link in index.broken_links) == [
        "gone.html (no such file)", "other.html#nowhere (no such anchor)",
    ]
    assert reports["other.html"] == PageReport(links=[], ids={"here"})


def test_crawl_catches_a_broken_diagram(
    browser: webdriver.Chrome, site: Path, tmp_path: Path,
) -> None:
    """A mermaid block with a syntax error is reported, drawn with the site's own loader."""
    html = (site / "architecture.html").read_text(encoding="utf-8")
    start = html.index('<script type="module">import mermaid')
    loader = html[start:html.index("</script>", start) + len("</script>")]
    shutil.copytree(site / "_static" / "mermaid", tmp_path / "_static" / "mermaid")
    (tmp_path / "index.html").write_text(
        f"<html><head><link rel='icon' href='data:,'>{loader}</head><body>"
        "<pre class='mermaid'>flowchart LR\n  A --> B</pre>"
        "<pre class='mermaid'>flowchart LR\n  A -->> </pre></body></html>"
    )
    report = crawl(browser, tmp_path)["index.html"]
    good, bad = report.diagrams
    assert good == {"processed": True, "svg": True, "error": False}
    assert bad["error"] or not bad["svg"]
    assert report.console_errors != []


@pytest.fixture(scope="module")
def conf() -> types.ModuleType:
    """docs/conf.py as a module (loading it fetches mermaid.js once, as a build does)."""
    spec = importlib.util.spec_from_file_location("bridge_docs_conf", ROOT / "docs" / "conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_npm(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!/bin/sh\n{body}\n")
    npm.chmod(0o755)


def test_vendoring_without_npm_says_how_to_install_it(
    conf: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match=r"npm is not installed \(apt-get install -y npm"):
        conf.vendor_mermaid(tmp_path / "vendor")


def test_vendoring_reports_a_failed_npm_pack(
    conf: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_npm(tmp_path / "bin", "echo 'npm error 404 Not Found' >&2; exit 1")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(RuntimeError, match=r"npm pack mermaid@[\d.]+ failed \(exit 1\).*404"):
        conf.vendor_mermaid(tmp_path / "vendor")


def test_vendoring_refuses_a_tarball_that_is_not_the_pinned_one(
    conf: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # npm pack's arguments: pack mermaid@VERSION --pack-destination DIR --silent
    _fake_npm(tmp_path / "bin", f'printf other > "$4/mermaid-{conf.MERMAID_VERSION}.tgz"')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(RuntimeError, match="is not the pinned sha512-"):
        conf.vendor_mermaid(tmp_path / "vendor")
    assert not (tmp_path / "vendor" / f"mermaid-{conf.MERMAID_VERSION}").exists()


def test_vendoring_reuses_what_it_fetched(conf: types.ModuleType) -> None:
    folder = conf.vendor_mermaid(conf.VENDOR)
    assert (folder / "mermaid" / "mermaid.esm.min.mjs").is_file()
    assert list(folder.rglob("*.map")) == []
