"""The attention explorer in a real headless Chromium (Debian's chromium + chromium-driver,
driven by Selenium): what the page shows equals the gRPC reply for the same text.

Set ATTNSERVE_SCREENSHOTS=<folder> to keep screenshots of the page (docs/img/ holds them).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import cast

import numpy as np
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from attnserve.service.client import Client
from attnserve.service.common.weights import importance
from tests.service.api.http.browser import browser, wait
from tests.support.servers import RunningServer, free_port, make_settings

__all__ = ["browser"]  # the fixture, imported for pytest

SENTENCE_A = "the white car is on the left of the black car"
SENTENCE_B = "the black car is on the left of the white car"
TOKEN = "explorer-token-0123456789"
CELLS = (
    "return Array.from(document.querySelectorAll(arguments[0] + ' tbody td')).map(td => td.dataset.value);"
)


def open_page(browser: webdriver.Chrome, port: int) -> None:
    browser.get(f"http://127.0.0.1:{port}/")
    wait(browser, "return document.body.dataset.ready === 'true';")


def classify(browser: webdriver.Chrome, text: str, *, model: str = "car") -> str:
    Select(browser.find_element(By.ID, "model")).select_by_value(model)
    box = browser.find_element(By.ID, "text-a")
    box.clear()
    box.send_keys(text)
    box.send_keys(Keys.CONTROL, Keys.ENTER)  # the keyboard path: no mouse click
    state: str = wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && s;")
    return state


def screenshot(browser: webdriver.Chrome, name: str) -> None:
    """The whole page (not only the window), through the DevTools protocol."""
    folder = os.environ.get("ATTNSERVE_SCREENSHOTS")
    if not folder:
        return
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    metrics = {"width": 1400, "height": int(size["height"]), "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        shot = browser.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / name).write_bytes(base64.b64decode(shot["data"]))


def values(browser: webdriver.Chrome, selector: str, n: int) -> np.ndarray:
    cells = browser.execute_script(CELLS, selector)
    return np.asarray([float(v) for v in cells], dtype=np.float32).reshape(n, n)


def test_label_and_heatmaps_equal_the_grpc_reply(
    browser: webdriver.Chrome, port: int, client: Client
) -> None:
    open_page(browser, port)
    options = cast(
        list[str], [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "model")).options]
    )
    assert sorted(options) == ["bow", "car", "pool"]
    assert classify(browser, SENTENCE_A) == "done"
    every = client.classify([SENTENCE_A], model="car", attention="all", top_k=5).results[0]
    rollout = client.classify([SENTENCE_A], model="car", attention="rollout").results[0]
    pooled = client.classify([SENTENCE_A], model="car", attention="pooled").results[0]
    assert browser.find_element(By.ID, "label-a").text == every.label
    assert every.attention is not None and rollout.attention is not None and pooled.attention is not None
    layers, heads, n, _ = every.attention.shape
    # The model view: a thumbnail per layer × head; each opens its full map.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid-a canvas.thumb")) == layers * heads
    for layer in range(layers):
        for head in range(heads):
            browser.find_element(By.ID, f"thumb-a-l{layer}-h{head}").click()
            shown = values(browser, f"#heatmap-a-l{layer}-h{head}", n)
            np.testing.assert_array_equal(shown, every.attention[layer, head])
            labels = browser.execute_script(
                "return Array.from(document.querySelectorAll(arguments[0] + ' thead th[scope=col]'))"
                ".map(th => th.textContent);",
                f"#heatmap-a-l{layer}-h{head}",
            )
            assert labels == list(every.tokens)
            Select(browser.find_element(By.ID, "attention")).select_by_value("all")  # back to the grid
    np.testing.assert_array_equal(values(browser, "#rollout-a", n), rollout.attention)
    weights = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tokens-a .token')).map(t => Number(t.dataset.weight));"
    )
    np.testing.assert_allclose(weights, importance(pooled.attention), atol=1e-6)
    top = browser.find_elements(By.CSS_SELECTOR, "#top-a li")
    assert [t.text.split(" ")[0] for t in top] == [t.token for t in every.top_tokens]
    assert browser.find_element(By.ID, "colour-bar").is_displayed()
    screenshot(browser, "explorer.png")


def test_keyboard_moves_through_a_heatmap_and_reads_values(browser: webdriver.Chrome, port: int) -> None:
    browser.find_element(By.ID, "thumb-a-l0-h0").click()
    table = browser.find_element(By.ID, "heatmap-a-l0-h0")
    table.send_keys(Keys.ARROW_RIGHT)
    table.send_keys(Keys.ARROW_DOWN)
    readout = browser.find_element(By.ID, "readout").text
    cell = browser.find_element(By.CSS_SELECTOR, "#heatmap-a-l0-h0 td.cursor")
    assert (cell.get_attribute("data-row"), cell.get_attribute("data-col")) == ("1", "1")
    assert readout == cell.get_attribute("title") and "layer 1 · head 1" in readout


def test_two_sentences_side_by_side(browser: webdriver.Chrome, port: int, client: Client) -> None:
    open_page(browser, port)
    browser.find_element(By.ID, "compare").click()
    box = browser.find_element(By.ID, "text-b")
    box.clear()
    box.send_keys(SENTENCE_B)
    assert classify(browser, SENTENCE_A) == "done"
    replies = client.classify([SENTENCE_A, SENTENCE_B], model="car").results
    assert browser.find_element(By.ID, "label-a").text == replies[0].label
    assert browser.find_element(By.ID, "label-b").text == replies[1].label
    assert len(browser.find_elements(By.CSS_SELECTOR, "#panel-b canvas.thumb")) == 4  # 2 x 2 thumbnails
    assert len(browser.find_elements(By.CSS_SELECTOR, "#panel-b table.heatmap")) == 1  # and the rollout
    screenshot(browser, "explorer-compare.png")


def test_pooling_and_bag_of_words_models(browser: webdriver.Chrome, port: int, client: Client) -> None:
    open_page(browser, port)
    assert classify(browser, SENTENCE_A, model="pool") == "done"
    pooled = client.classify([SENTENCE_A], model="pool", attention="pooled").results[0]
    assert browser.find_element(By.ID, "label-a").text == pooled.label
    weights = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tokens-a .token')).map(t => Number(t.dataset.weight));"
    )
    np.testing.assert_array_equal(np.float32(weights), pooled.attention)
    assert classify(browser, SENTENCE_A, model="bow") == "done"
    assert (
        browser.find_element(By.ID, "label-a").text
        == client.classify([SENTENCE_A], model="bow").results[0].label
    )


def test_a_refusal_is_shown_in_plain_words(
    browser: webdriver.Chrome, port: int, server: RunningServer
) -> None:
    open_page(browser, port)
    browser.execute_script("document.getElementById('text-a').value = 'car '.repeat(3000);")
    browser.find_element(By.ID, "classify").click()
    assert wait(browser, "return document.body.dataset.state === 'error';")
    message = browser.find_element(By.ID, "message")
    limit = server.settings.max_text_chars
    assert message.is_displayed() and "INVALID_ARGUMENT" in message.text and str(limit) in message.text


def test_a_missing_token_is_explained_and_a_token_unlocks_the_page(
    browser: webdriver.Chrome, model_repository: Path, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"inference {TOKEN}\n")
    settings = make_settings(model_repository, http_port=free_port(), auth=True, auth_tokens_file=tokens)
    with RunningServer(settings) as server:
        browser.get(f"http://127.0.0.1:{server.server.http_port}/")  # type: ignore[union-attr]
        wait(browser, "return document.body.dataset.ready === 'true';")
        message = browser.find_element(By.ID, "message")
        assert "UNAUTHENTICATED" in message.text and "Token field" in message.text
        browser.find_element(By.ID, "token").send_keys(TOKEN, Keys.TAB)
        wait(browser, "return document.getElementById('model').options.length === 3;")
        assert classify(browser, SENTENCE_A) == "done"
        assert browser.find_element(By.ID, "message").is_displayed() is False
