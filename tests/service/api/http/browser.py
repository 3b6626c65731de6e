"""A headless Chromium for the explorer tests (Debian's chromium + chromium-driver, driven by
Selenium), and waits on the page's own state (`body[data-ready]`, `body[data-state]`)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        message = "needs Debian's chromium and chromium-driver (scripts/test-deps.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    chrome.set_page_load_timeout(30)
    yield chrome
    chrome.quit()


def wait(browser: webdriver.Chrome, script: str, timeout: float = 30) -> Any:
    return WebDriverWait(browser, timeout).until(lambda b: b.execute_script(script))


def settled(browser: webdriver.Chrome) -> str:
    """Wait until the page has loaded its models and finished any classification; its state."""
    wait(browser, "return document.body.dataset.ready === 'true';")
    state: str = wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && (s || 'idle');")
    return state


def explorer_link(port: int, **state: str) -> str:
    """The explorer's address on 127.0.0.1:`port` showing `state` (model=, text=, ...)."""
    return f"http://127.0.0.1:{port}/?{urlencode(state, quote_via=quote)}"


def open_link(browser: webdriver.Chrome, address: str) -> str:
    """Open `address` and return the page's state once it has settled."""
    browser.get(address)
    return settled(browser)


def downloaded(folder: Path, name: str) -> bytes:
    """The bytes of a file the browser downloads into `folder`, once it is there."""
    path = folder / name
    for _ in range(200):  # Chromium writes NAME.crdownload, then renames it
        if path.exists():
            return path.read_bytes()
        time.sleep(0.05)
    raise AssertionError(
        f"{name} was not downloaded; the folder holds {sorted(p.name for p in folder.iterdir())}"
    )
