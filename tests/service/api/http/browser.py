"""A headless Chromium for the explorer tests (Debian's chromium + chromium-driver, driven by
Selenium), and waits on the page's own state (`body[data-ready]`, `body[data-state]`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

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
