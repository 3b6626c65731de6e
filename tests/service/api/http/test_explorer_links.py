"""The explorer's links, pickers and downloads in a real headless Chromium, against a real
server serving the car-order bundle shipped in the repository (a 2 layer x 2 head transformer).

A link carries the page's state (model, version, text, compare, attention, layer, head,
merge); opening it draws at once; what it draws equals the service's reply for the same text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from attnserve.service.client import Client
from tests.service.api.http.browser import browser, downloaded, explorer_link, open_link, settled, wait
from tests.support.http import classify as http_classify
from tests.support.servers import RunningServer
from tests.support.shipped import NAME, serving_shipped

__all__ = ["browser"]  # the fixture, imported for pytest

SENTENCE_A = "the white car is on the left of the black car"
SENTENCE_B = "the black car is on the left of the white car"
CELLS = (
    "return Array.from(document.querySelectorAll(arguments[0] + ' tbody td')).map(td => td.dataset.value);"
)
MAPS = "return Array.from(document.querySelectorAll('#results table.heatmap')).map(t => t.id);"


# Overrides conftest.py's server: its port and client fixtures then serve this module's models.
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serving_shipped(tmp_path_factory.mktemp("shipped")) as running:
        yield running


link = explorer_link


def text(browser: webdriver.Chrome, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def values(browser: webdriver.Chrome, selector: str, n: int) -> np.ndarray:
    cells = browser.execute_script(CELLS, selector)
    return np.asarray([float(v) for v in cells], dtype=np.float32).reshape(n, n)


def message(browser: webdriver.Chrome) -> str:
    box = browser.find_element(By.ID, "message")
    return str(box.text) if box.is_displayed() else ""


def test_a_link_with_two_sentences_draws_both(browser: webdriver.Chrome, port: int, client: Client) -> None:
    assert open_link(browser, link(port, model=NAME, text=SENTENCE_A, compare=SENTENCE_B)) == "done"
    replies = client.classify([SENTENCE_A, SENTENCE_B], model=NAME).results
    assert [text(browser, "label-a"), text(browser, "label-b")] == [r.label for r in replies]
    assert [replies[0].label, replies[1].label] == ["positive", "negative"]
    assert browser.find_element(By.ID, "text-b").get_attribute("value") == SENTENCE_B
    # 2 x 2 maps: the model view's thumbnails by default, then the rollout, for both sentences.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results canvas.thumb")) == 8
    assert browser.execute_script(MAPS) == ["rollout-a", "rollout-b"]
    assert message(browser) == ""


def test_one_layer_and_head_from_a_link_equals_the_reply(
    browser: webdriver.Chrome, port: int, client: Client
) -> None:
    assert open_link(browser, link(port, model=NAME, text=SENTENCE_A, layer="2", head="1")) == "done"
    assert browser.execute_script(MAPS) == ["heatmap-a-l1-h0"]
    every = client.classify([SENTENCE_A], model=NAME, attention="all").results[0]
    assert every.attention is not None
    n = len(every.tokens)
    np.testing.assert_array_equal(values(browser, "#heatmap-a-l1-h0", n), every.attention[1, 0])
    assert (
        Select(browser.find_element(By.ID, "attention")).first_selected_option.get_attribute("value")
        == "head"
    )
    assert browser.find_element(By.ID, "layer").get_attribute("value") == "2"
    # The picker redraws without a new call and keeps the address in step.
    Select(browser.find_element(By.ID, "head")).select_by_value("2")
    assert browser.execute_script(MAPS) == ["heatmap-a-l1-h1"]
    np.testing.assert_array_equal(values(browser, "#heatmap-a-l1-h1", n), every.attention[1, 1])
    assert parse_qs(urlsplit(browser.current_url).query)["head"] == ["2"]
    Select(browser.find_element(By.ID, "attention")).select_by_value("rollout")
    assert browser.execute_script(MAPS) == ["rollout-a"]
    rollout = client.classify([SENTENCE_A], model=NAME, attention="rollout").results[0].attention
    np.testing.assert_array_equal(values(browser, "#rollout-a", n), rollout)


def test_copy_link_round_trips_the_state(browser: webdriver.Chrome, port: int) -> None:
    open_link(browser, link(port, model=NAME, text=SENTENCE_A, compare=SENTENCE_B))
    Select(browser.find_element(By.ID, "attention")).select_by_value("head")
    Select(browser.find_element(By.ID, "layer")).select_by_value("1")
    Select(browser.find_element(By.ID, "head")).select_by_value("2")
    browser.find_element(By.ID, "merge").click()
    browser.find_element(By.ID, "copy-link").click()
    wait(browser, "return document.getElementById('copied').textContent !== '';")
    shared = str(browser.find_element(By.ID, "link").get_attribute("value"))
    before = (browser.execute_script(MAPS), values(browser, "#heatmap-a-l0-h1", 11))
    browser.get(f"http://127.0.0.1:{port}/")  # somewhere else first, then the link
    settled(browser)
    assert open_link(browser, shared) == "done"
    assert browser.execute_script(MAPS) == before[0] == ["heatmap-a-l0-h1", "heatmap-b-l0-h1"]
    np.testing.assert_array_equal(values(browser, "#heatmap-a-l0-h1", 11), before[1])
    assert browser.find_element(By.ID, "merge").is_selected()
    assert browser.find_element(By.ID, "text-a").get_attribute("value") == SENTENCE_A
    assert browser.find_element(By.ID, "text-b").get_attribute("value") == SENTENCE_B


def test_back_and_forward_move_between_sentences(browser: webdriver.Chrome, port: int) -> None:
    open_link(browser, f"http://127.0.0.1:{port}/")
    for sentence in (SENTENCE_A, SENTENCE_B):
        browser.execute_script("document.getElementById('text-a').value = arguments[0];", sentence)
        browser.execute_script("document.body.dataset.state = 'stale';")
        browser.find_element(By.ID, "classify").click()
        wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && s !== 'stale';")
    labels = {SENTENCE_A: "positive", SENTENCE_B: "negative"}
    for step, sentence in (("back", SENTENCE_A), ("forward", SENTENCE_B)):
        browser.execute_script("document.body.dataset.state = 'stale';")
        browser.execute_script(f"history.{step}();")
        wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && s !== 'stale';")
        assert parse_qs(urlsplit(browser.current_url).query)["text"] == [sentence]
        assert browser.find_element(By.ID, "text-a").get_attribute("value") == sentence
        assert text(browser, "label-a") == labels[sentence]


def test_downloads_are_the_files_they_claim(browser: webdriver.Chrome, port: int, tmp_path: Path) -> None:
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    open_link(browser, link(port, model=NAME, text=SENTENCE_A, layer="1", head="1"))
    browser.find_element(By.ID, "download-json-a").click()
    browser.find_element(By.ID, "download-png-a").click()
    reply = json.loads(downloaded(tmp_path, "reply-a.json"))
    fresh = http_classify(
        port, NAME, {"texts": [SENTENCE_A], "attention": "all", "top_k": 5, "attribution": "occlusion"}
    ).json()
    for volatile in ("timings", "request_id"):
        reply.pop(volatile, None)
        fresh.pop(volatile, None)
    assert reply == fresh
    picture = downloaded(tmp_path, "attention-a.png")
    assert picture[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(BytesIO(picture))
    image.load()
    n = len(fresh["results"][0]["tokens"])
    assert image.width >= 18 * n and image.height >= 2 * 18 * n
    # The heatmap as drawn: its cells carry the page's viridis colours, not a blank canvas.
    assert len(image.convert("RGB").getcolors(maxcolors=100_000) or []) > 20


HOSTILE = '<img src=x onerror="window.__pwned=1;alert(1)"><script>window.__pwned=1</script>'


@pytest.mark.parametrize("field", ["model", "text", "compare", "layer", "attention", "attribution"])
def test_hostile_links_run_nothing(browser: webdriver.Chrome, port: int, field: str) -> None:
    state = {"model": NAME, "text": SENTENCE_A, field: HOSTILE}
    open_link(browser, link(port, **state))
    assert browser.execute_script("return typeof window.__pwned;") == "undefined"
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.accept()
    assert (
        browser.execute_script("return document.querySelectorAll('img, script:not([src]), svg').length;") == 0
    )
    if field in ("model", "layer", "attention", "attribution"):
        assert "<script>" in message(browser)  # the value is shown as text, markup and all
    else:
        assert (
            browser.find_element(By.ID, f"text-{'a' if field == 'text' else 'b'}").get_attribute("value")
            == HOSTILE
        )


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"model": "no-such-model", "text": SENTENCE_A}, 'serves no model called "no-such-model"'),
        ({"text": SENTENCE_A, "layer": "9"}, "layer must be a whole number from 1 to 2"),
        ({"text": SENTENCE_A, "head": "-1"}, "head must be a whole number from 1 to 2"),
        ({"text": SENTENCE_A, "attention": "everything"}, 'Unknown attention view "everything"'),
        ({"text": SENTENCE_A, "version": "7"}, "has no version 7"),
        ({"text": SENTENCE_A, "merge": "yes"}, "merge must be 0 or 1"),
    ],
)
def test_bad_values_show_a_message(
    browser: webdriver.Chrome, port: int, state: dict[str, str], words: str
) -> None:
    assert open_link(browser, link(port, **{"model": NAME, **state})) == "error"
    assert words in message(browser)
    assert browser.execute_script("return document.getElementById('results').children.length;") == 0
    assert browser.find_element(By.ID, "model").is_displayed()  # the page itself still works


def run_js(browser: webdriver.Chrome, script: str, *args: Any) -> Any:
    return browser.execute_script(script, *args)


def test_word_pieces_merge_into_words_and_special_tokens_stand_apart(
    browser: webdriver.Chrome, port: int
) -> None:
    open_link(browser, f"http://127.0.0.1:{port}/")
    tokens = ["[CLS]", "the", "play", "##ing", "cars", "[SEP]"]
    text_ = "the playing cars"
    offsets = [[0, 0], [0, 3], [4, 8], [8, 11], [12, 16], [0, 0]]
    special = [True, False, False, False, False, True]
    rng = np.random.default_rng(0)
    matrix = rng.random((6, 6))
    matrix /= matrix.sum(axis=1, keepdims=True)
    for result in (
        {"tokens": tokens},  # no offsets, no flags: the "##" prefix and the token strings
        {"tokens": tokens, "offsets": offsets, "special": special},
    ):
        groups = run_js(browser, "return wordGroups(arguments[0], arguments[1]);", result, text_)
        assert [g["indices"] for g in groups] == [[0], [1], [2, 3], [4], [5]]
        assert [g["special"] for g in groups] == special[:3] + special[4:]
        # A word of pieces reads as the text it covers (or its pieces joined); a lone token as itself.
        assert [g["label"] for g in groups] == ["[CLS]", "the", "playing", "cars", "[SEP]"]
        merged = np.asarray(
            run_js(browser, "return mergeMatrix(arguments[0], arguments[1]);", matrix.tolist(), groups)
        )
        np.testing.assert_allclose(merged.sum(axis=1), 1.0, atol=1e-9)  # rows still sum to 1
        np.testing.assert_allclose(merged[2, 0], matrix[2:4, 0].mean(), atol=1e-12)  # rows averaged
        np.testing.assert_allclose(merged[0, 2], matrix[0, 2:4].sum(), atol=1e-12)  # columns summed
    # Offsets that join word characters merge pieces without a "##" (BPE-like tokenizers).
    joined = run_js(
        browser,
        "return wordGroups(arguments[0], arguments[1]);",
        {"tokens": ["play", "ing", "!"], "offsets": [[0, 4], [4, 7], [7, 8]]},
        "playing!",
    )
    assert [g["label"] for g in joined] == ["playing", "!"]
    classes = run_js(
        browser,
        "const row = tokens('x', arguments[0], [0.2, 0.3, 0.5], arguments[1]);"
        "return Array.from(row.querySelectorAll('.token')).map(t => t.className);",
        ["[CLS]", "car", "[SEP]"],
        [True, False, True],
    )
    assert classes == ["token special", "token", "token special"]


def test_merging_on_a_word_level_model_keeps_every_token(browser: webdriver.Chrome, port: int) -> None:
    assert open_link(browser, link(port, model=NAME, text=SENTENCE_A, merge="1")) == "done"
    words = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tokens-a .token')).map(t => t.textContent);"
    )
    assert words == SENTENCE_A.split()
