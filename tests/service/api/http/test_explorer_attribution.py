"""Attributions in the explorer, in a real headless Chromium against a real server serving the
car-order bundle shipped in the repository: the tokens coloured by attribution beside attention
(one cell per token, red for, blue against), the method picker that asks again, the method in
links, the attribution in every download, and the rank agreement of attribution and attention
(Spearman's rho, equal to scipy's for the same reply)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from PIL import Image
from scipy.stats import spearmanr
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from attnserve.service.common.weights import importance
from tests.service.api.http.browser import browser, downloaded, explorer_link, open_link, wait
from tests.support.http import classify as http_classify
from tests.support.servers import RunningServer
from tests.support.shipped import NAME, serving_shipped

__all__ = ["browser"]  # the fixture, imported for pytest

SENTENCE = "the white car is on the left of the black car"
OTHER = "the black car is on the left of the white car"
ROW = (
    "return Array.from(document.querySelectorAll(arguments[0] + ' .token')).map(t => "
    "[t.textContent, Number(t.dataset.attribution), getComputedStyle(t).backgroundColor]);"
)


# Overrides conftest.py's server: its port fixture then serves this module's model.
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with serving_shipped(tmp_path_factory.mktemp("shipped-attribution")) as running:
        yield running


def link(port: int, **state: str) -> str:
    return explorer_link(port, model=NAME, **state)


def reply(port: int, text: str, **fields: Any) -> dict[str, Any]:
    answer = http_classify(port, NAME, {"texts": [text], **fields})
    assert answer.status == 200, answer.body
    document: dict[str, Any] = answer.json()
    return document


def rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(float(v)) for v in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
    return r, g, b


def row(browser: webdriver.Chrome, side: str = "a") -> list[tuple[str, float, tuple[int, int, int]]]:
    return [
        (text, value, rgb(colour))
        for text, value, colour in browser.execute_script(ROW, f"#attribution-{side}")
    ]


def signs_drawn(cells: list[tuple[str, float, tuple[int, int, int]]]) -> dict[int, int]:
    """Check each cell's hue against its score's sign; count per sign the cells over a tenth of
    the scale."""
    high = max(abs(v) for _, v, _ in cells)
    clear = {1: 0, -1: 0}
    for _, value, (r, g, b) in cells:
        if abs(value) < 0.01 * high:  # within a hundredth of the scale: white, or nearly
            assert min(r, g, b) >= 245 and (
                r >= b if value > 0 else b >= r if value < 0 else r == g == b == 255
            )
        elif value > 0:
            assert r > b  # red: supports the label
            clear[1] += abs(value) >= 0.1 * high
        else:
            assert b > r  # blue: works against it
            clear[-1] += abs(value) >= 0.1 * high
    return clear


def test_tokens_coloured_by_attribution_beside_attention(browser: webdriver.Chrome, port: int) -> None:
    assert open_link(browser, link(port, text=SENTENCE)) == "done"  # occlusion by default
    expected = reply(port, SENTENCE, attention="all", attribution="occlusion")["results"][0]
    cells = row(browser)
    assert [text for text, _, _ in cells] == expected["tokens"]  # one cell per token
    np.testing.assert_allclose([v for _, v, _ in cells], expected["attribution"], atol=1e-6)
    assert signs_drawn(cells)[1] >= 2  # occlusion on this model: mostly for the label
    strongest = max(cells, key=lambda c: abs(c[1]))
    assert max(strongest[2]) - min(strongest[2]) > 100  # the scale's end is a deep colour, not white
    # The attention row is still there, above it, and the cost is the reply's.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens-a .token")) == len(expected["tokens"])
    cost = browser.find_element(By.ID, "attribution-cost-a")
    assert (
        cost.get_attribute("data-rows") == str(expected["attribution_rows"]) == str(len(SENTENCE.split()))
    )
    assert f"{expected['attribution_rows']} forward rows" in cost.text and " ms" in cost.text
    assert "(occlusion)" in browser.find_element(By.CSS_SELECTOR, "#attribution-box-a h3").text
    assert "attribution" not in parse_qs(urlsplit(browser.current_url).query)  # the default is left out


def test_the_method_picker_asks_again_and_redraws(browser: webdriver.Chrome, port: int) -> None:
    assert open_link(browser, link(port, text=SENTENCE)) == "done"
    before = row(browser)
    browser.execute_script("document.body.dataset.state = 'stale';")
    Select(browser.find_element(By.ID, "attribution")).select_by_value("shapley")
    wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && s !== 'stale';")
    assert parse_qs(urlsplit(browser.current_url).query)["attribution"] == ["shapley"]
    expected = reply(port, SENTENCE, attention="all", attribution="shapley")["results"][0]
    after = row(browser)
    np.testing.assert_allclose([v for _, v, _ in after], expected["attribution"], atol=1e-5)
    assert [v for _, v, _ in after] != [v for _, v, _ in before]
    clear = signs_drawn(after)
    assert clear[1] and clear[-1], after  # shapley on this sentence: words for and against
    # 64 coalitions, less the text itself (its value is the reply's)
    assert browser.find_element(By.ID, "attribution-cost-a").get_attribute("data-rows") == "63"
    assert "(shapley)" in browser.find_element(By.CSS_SELECTOR, "#attribution-box-a h3").text
    # "none": no attribution row, no agreement, and the address says so.
    browser.execute_script("document.body.dataset.state = 'stale';")
    Select(browser.find_element(By.ID, "attribution")).select_by_value("none")
    wait(browser, "const s = document.body.dataset.state; return s !== 'busy' && s !== 'stale';")
    assert browser.find_elements(By.ID, "attribution-a") == []
    assert browser.find_elements(By.ID, "agreement-a") == []
    assert parse_qs(urlsplit(browser.current_url).query)["attribution"] == ["none"]


def test_a_link_with_shapley_opens_with_shapley(browser: webdriver.Chrome, port: int) -> None:
    assert open_link(browser, link(port, text=SENTENCE, compare=OTHER, attribution="shapley")) == "done"
    assert (
        Select(browser.find_element(By.ID, "attribution")).first_selected_option.get_attribute("value")
        == "shapley"
    )
    for side, text in (("a", SENTENCE), ("b", OTHER)):
        expected = reply(port, text, attention="all", attribution="shapley")["results"][0]
        np.testing.assert_allclose([v for _, v, _ in row(browser, side)], expected["attribution"], atol=1e-5)
        assert browser.find_element(By.ID, f"attribution-cost-{side}").get_attribute("data-rows") == "63"
    shared = str(browser.find_element(By.ID, "link").get_attribute("value"))
    assert parse_qs(urlsplit(shared).query)["attribution"] == ["shapley"]


@pytest.mark.parametrize(
    ("value", "words"), [("lime", 'Unknown attribution "lime"'), ("<b>x</b>", "<b>x</b>")]
)
def test_a_bad_method_in_a_link_shows_a_message(
    browser: webdriver.Chrome, port: int, value: str, words: str
) -> None:
    assert open_link(browser, link(port, text=SENTENCE, attribution=value)) == "error"
    message = browser.find_element(By.ID, "message").text
    assert words in message and "occlusion, shapley, none" in message
    assert browser.execute_script("return document.getElementById('results').children.length;") == 0


def test_rank_agreement_equals_scipy(browser: webdriver.Chrome, port: int) -> None:
    for text in (SENTENCE, OTHER):
        assert open_link(browser, link(port, text=text)) == "done"
        expected = reply(port, text, attention="pooled", attribution="occlusion")["results"][0]
        keep = [i for i, special in enumerate(expected["special"]) if not special]
        weights = importance(np.asarray(expected["attention"], dtype=np.float32))
        rho = spearmanr(np.asarray(expected["attribution"])[keep], weights[keep]).statistic
        line = browser.find_element(By.ID, "agreement-a")
        assert float(str(line.get_attribute("data-rho"))) == pytest.approx(rho, abs=1e-9)
        assert f"ρ = {rho:.3f}" in line.text and "Spearman" in str(line.get_attribute("title"))
    # The page's own Spearman, with ties (mean ranks) and a constant, against scipy's.
    rng = np.random.default_rng(0)
    for a, b in (
        (rng.normal(size=12), rng.normal(size=12)),
        ([1.0, 2.0, 2.0, 3.0, 0.5, 2.0], [0.1, 0.1, 0.3, 0.2, 0.2, 0.9]),
        ([-0.2, 0.0, 0.0, 0.4], [3.0, 1.0, 2.0, 2.0]),
    ):
        shown = browser.execute_script("return spearman(arguments[0], arguments[1]);", list(a), list(b))
        assert shown == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert browser.execute_script("return Number.isNaN(spearman([1, 1, 1], [1, 2, 3]));")
    agreement = browser.execute_script(
        "return rankAgreement([0.5, 0.1, -0.2, 0.3, 0.0], [0.9, 0.2, 0.1, 0.4, 0.8],"
        " [true, false, false, false, true]);"
    )
    assert agreement["n"] == 3 and agreement["rho"] == pytest.approx(1.0)  # the special tokens are left out


def test_downloads_carry_the_attribution(browser: webdriver.Chrome, port: int, tmp_path: Path) -> None:
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    assert open_link(browser, link(port, text=SENTENCE, layer="1", head="1")) == "done"
    for kind in ("json", "csv", "png"):
        browser.find_element(By.ID, f"download-{kind}-a").click()
    saved = json.loads(downloaded(tmp_path, "reply-a.json"))
    expected = reply(port, SENTENCE, attention="all", attribution="occlusion", top_k=5)
    assert saved["attribution"] == "occlusion"
    np.testing.assert_allclose(
        saved["results"][0]["attribution"], expected["results"][0]["attribution"], atol=1e-6
    )
    assert saved["results"][0]["attribution_rows"] == expected["results"][0]["attribution_rows"]
    table = list(csv.DictReader(io.StringIO(downloaded(tmp_path, "tokens-a.csv").decode())))
    assert [r["token"] for r in table] == expected["results"][0]["tokens"]
    np.testing.assert_allclose(
        [float(r["attribution"]) for r in table], expected["results"][0]["attribution"], atol=1e-6
    )
    weights = importance(np.asarray(expected["results"][0]["attention"], dtype=np.float32))
    np.testing.assert_allclose([float(r["attention"]) for r in table], weights, atol=1e-6)
    # The picture holds the attribution row: the strongest token's deep colour, as the page draws it.
    image = Image.open(BytesIO(downloaded(tmp_path, "attention-a.png"))).convert("RGB")
    colours = {colour for _, colour in image.getcolors(maxcolors=1_000_000) or []}
    cells = row(browser)
    strongest = max(cells, key=lambda c: abs(c[1]))
    assert strongest[2] in colours
    assert sum(1 for _, _, colour in cells if colour in colours) >= len(cells) - 1
