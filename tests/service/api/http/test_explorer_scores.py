"""The explorer on multi-label and regression models (the shipped car-order bundle with its
scoring edited in, or its graph cut to one output) in a real headless Chromium: every label's
probability beside its threshold with the assigned labels marked, a regression's value, and
the model's problem type and thresholds under the picker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from attnserve.service.client import Client
from tests.service.api.http.browser import browser, explorer_link, open_link
from tests.support.scoring_bundles import (
    MULTI,
    REGRESSION,
    golden_texts,
    multi_label_bundle,
    regression_bundle,
)
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.shipped import SHIPPED

__all__ = ["browser"]  # the fixture, imported for pytest

THRESHOLDS = [0.99, 0.5]  # golden text 3 gets no label, the others one each
TEXTS = golden_texts(SHIPPED / "1")


# Overrides conftest.py's server: its port and client fixtures then serve these models.
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("scores-explorer") / "models"
    multi_label_bundle(repository, THRESHOLDS)
    regression_bundle(repository)
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def test_multi_label_bars_mark_the_assigned_labels(
    browser: webdriver.Chrome, port: int, client: Client
) -> None:
    for text, result in zip(TEXTS, client.classify(TEXTS, model=MULTI).results, strict=True):
        assert open_link(browser, explorer_link(port, model=MULTI, text=text, attribution="none")) == "done"
        head = browser.find_element(By.ID, "label-a").text
        assert head == (", ".join(result.assigned) if result.assigned else "no label over its threshold")
        names = browser.find_elements(By.CSS_SELECTOR, "#bars-a > span[data-assigned]")
        assert [n.text for n in names] == ["negative", "positive"]  # label order
        marked = [n.text for n in names if n.get_attribute("data-assigned") == "1"]
        assert marked == result.assigned
        bars = browser.find_elements(By.CSS_SELECTOR, "#bars-a .bar")
        assert all("threshold" in (bar.get_attribute("aria-label") or "") for bar in bars)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#bars-a .bar > .cut")) == 2
    scoring = browser.find_element(By.ID, "scoring").text
    assert scoring.startswith("Multi-label") and "negative ≥ 0.99" in scoring and "positive ≥ 0.5" in scoring


def test_regression_shows_its_value(browser: webdriver.Chrome, port: int, client: Client) -> None:
    value = client.classify(TEXTS[0], model=REGRESSION).results[0].value
    assert value is not None
    assert open_link(browser, explorer_link(port, model=REGRESSION, text=TEXTS[0])) == "done"
    assert browser.find_element(By.ID, "label-a").text == f"value {value:.4f}"
    assert not browser.find_elements(By.CSS_SELECTOR, "#panel-a .bars")
    assert browser.find_element(By.ID, "scoring").text.startswith("Regression")
    assert "the value" in browser.find_element(By.ID, "attribution-box-a").text
