"""The explorer on a cascade (two tiny runs trained in the test) in a real headless Chromium:
each sentence's panel says which member answered it, as the JSON API does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.service.api.http.browser import browser, settled
from tests.support import http
from tests.support.cascades import NAME, STUDENT_FAMILY, export_duo
from tests.support.servers import RunningServer, free_port, make_settings

__all__ = ["browser"]  # the fixture, imported for pytest


# Overrides conftest.py's server: its port fixture then serves this module's cascade.
@pytest.fixture(scope="module")
def server(
    trained_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("cascade-explorer")
    export_duo(trained_run, repository)
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def test_each_panel_names_the_member_that_answered(
    browser: webdriver.Chrome, port: int, trained_run: Callable[[str], Path]
) -> None:
    lines = (trained_run(STUDENT_FAMILY) / "test.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()][:6]
    for text in texts:
        reply = http.classify(port, NAME, {"texts": [text]})
        assert reply.status == 200, reply.body
        member = reply.json()["results"][0]["answered_by"]
        browser.get(f"http://127.0.0.1:{port}/?{urlencode({'model': NAME, 'text': text}, quote_via=quote)}")
        assert settled(browser) == "done"
        shown = browser.find_element(By.ID, "answered-a").text
        assert shown == f"Answered by the cascade's {member}."
