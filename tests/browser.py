"""Headless Chromium for the browser tests (the docs site, the matrix's HTML report)."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def headless_chromium(purpose: str, host_rules: str, logs: dict[str, str], page_load_timeout: float):
    """A selenium driver for Debian's headless Chromium (``make test`` installs
    it), with ``host_rules`` as its host resolver rules (which hosts it may
    reach), the ``logs`` it keeps and its page-load timeout; the caller quits
    it. ``purpose`` names the test in the message when Chromium is missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        f"{purpose} needs Debian's Chromium: apt-get install -y chromium chromium-driver"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900",
                 f"--host-resolver-rules={host_rules}"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", logs)
    # A fresh profile in a temporary folder: chromedriver makes one per session.
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(page_load_timeout)
    return driver
