"""The explorer on a pretrained-encoder bundle (a tiny BERT fine-tuned and exported in the
test) in a real headless Chromium: [CLS] and [SEP] drawn apart from the reply's flags, word
pieces merged into words by the reply's offsets, with the same numbers as the client's
merging of the gRPC reply, and one layer and head picked from a link."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, urlencode

import numpy as np
import pytest
from selenium import webdriver

from attnserve.export.writer import export_run
from attnserve.service.client import Client
from attnserve.service.client.pieces import merge_matrix, word_groups
from tests.service.api.http.browser import browser, settled
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import shared_tiny_encoder_run

__all__ = ["browser"]  # the fixture, imported for pytest

MODEL = "bert"
TEXT = "The film was superbly lovely"  # "superbly" is no word of the tiny vocabulary: pieces
TOKENS = (
    "return Array.from(document.querySelectorAll('#tokens-a .token')).map(t => [t.textContent, t.className]);"
)
CELLS = (
    "return Array.from(document.querySelectorAll(arguments[0] + ' tbody td'))"
    ".map(td => Number(td.dataset.value));"
)


# Overrides conftest.py's server: its port and client fixtures then serve this module's models.
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    run = shared_tiny_encoder_run(tmp_path_factory)
    repository = tmp_path_factory.mktemp("encoder-explorer") / "models"
    export_run(run, repository, MODEL)
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def open_link(browser: webdriver.Chrome, port: int, **state: str) -> str:
    browser.get(
        f"http://127.0.0.1:{port}/?{urlencode({'model': MODEL, 'text': TEXT, **state}, quote_via=quote)}"
    )
    return settled(browser)


def test_special_tokens_stand_apart_and_pieces_merge_into_words(
    browser: webdriver.Chrome, port: int, client: Client
) -> None:
    reply = client.classify(TEXT, model=MODEL, attention="all").results[0]
    assert any(token.startswith("##") for token in reply.tokens), reply.tokens  # the test needs pieces
    assert open_link(browser, port) == "done"
    shown = browser.execute_script(TOKENS)
    assert [text for text, _ in shown] == reply.tokens
    assert (
        [cls == "token special" for _, cls in shown]
        == reply.special
        == [True] + [False] * (len(reply.tokens) - 2) + [True]
    )
    assert open_link(browser, port, merge="1", layer="2", head="1") == "done"
    words = word_groups(reply.tokens, TEXT, reply.offsets, reply.special)
    shown = browser.execute_script(TOKENS)
    assert [text for text, _ in shown] == [w.label for w in words]
    assert "superbly" in [text for text, _ in shown] and len(shown) < len(reply.tokens)
    assert reply.attention is not None
    expected = merge_matrix(reply.attention[1, 0], words)
    cells = np.asarray(browser.execute_script(CELLS, "#heatmap-a-l1-h0")).reshape(expected.shape)
    np.testing.assert_allclose(cells, expected, atol=1e-6)  # the page's merging is the client's
