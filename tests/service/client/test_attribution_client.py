"""Attributions through the Python clients and `attnserve-client` (classify, explain) against
a real server serving the shipped car-order bundle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnserve.service.client import AsyncClient, Client, ClientError, build_request
from attnserve.service.client.cli import main as client_main
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import NAME, shipped_repository

SENTENCE = "the white car is left of the black car"  # 9 words, 9 tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with RunningServer(make_settings(shipped_repository(tmp_path_factory.mktemp("shipped")))) as running:
        yield running


def test_client_classify_returns_scores_and_rows(client: Client) -> None:
    reply = client.classify([SENTENCE, "a red car"], model=NAME, attribution="occlusion")
    for result in reply.results:
        assert result.attribution is not None and result.attribution.dtype == np.float32
        assert len(result.attribution) == len(result.tokens)
        assert not result.attribution[np.asarray(result.special)].any()
    assert [r.attribution_rows for r in reply.results] == [9, 3]  # a row per word
    assert reply.timings_us["attribution"] > 0
    plain = client.classify(SENTENCE, model=NAME)
    assert plain.results[0].attribution is None and plain.results[0].attribution_rows == 0


def test_async_client_and_stream_carry_the_budget(server: RunningServer) -> None:
    async def run() -> tuple[int, list[int]]:
        async with AsyncClient(server.target) as client:
            reply = await client.classify(SENTENCE, model=NAME, attribution="shapley", attribution_budget=20)
            requests = [build_request("a red car", NAME, attribution="ATTRIBUTION_METHOD_SHAPLEY")]
            streamed = [r async for r in client.stream(requests)]
        return reply.results[0].attribution_rows, [r.results[0].attribution_rows for r in streamed]

    rows, streamed = asyncio.run(run())
    assert rows == 19 and streamed == [7]  # 3 words: every coalition but the text (the reply)


def test_a_bad_method_is_refused_before_the_call(client: Client) -> None:
    with pytest.raises(ValueError, match="'nope' is not an attribution method; use one of: none, occlusion"):
        client.classify(SENTENCE, model=NAME, attribution="nope")
    with pytest.raises(ClientError) as raised:
        client.classify(SENTENCE, model=NAME, attribution=7)
    assert (
        raised.value.code.name == "INVALID_ARGUMENT"
        and "unknown attribution method 7" in raised.value.details
    )


def test_cli_classify_json_includes_the_scores(
    server: RunningServer, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--target", server.target, "classify", SENTENCE, "--attribution", "occlusion", "--json"]
    assert client_main(args) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    expected = client.classify(SENTENCE, model=NAME, attribution="occlusion").results[0]
    assert expected.attribution is not None
    np.testing.assert_allclose(result["attribution"], expected.attribution, atol=1e-6)
    assert result["attribution_rows"] == 9 and len(result["attribution"]) == len(result["tokens"])


def test_cli_classify_prints_each_token_with_its_score(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--target",
        server.target,
        "classify",
        SENTENCE,
        "--attention",
        "none",
        "--attribution",
        "occlusion",
    ]
    assert client_main(args) == 0
    out = capsys.readouterr().out
    assert "attribution (occlusion: what each word does to p(" in out and "9 forward rows" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and len(line.split()) >= 2]
    scores = [(row[0], float(row[1])) for row in rows if row[1][0] in "+-"]
    assert [token for token, _ in scores] == SENTENCE.split()  # one line a token (no special tokens)
    assert dict(scores)["left"] > 0.05  # the word that decides the order
    assert "attribution" in out.splitlines()[-1]  # the server's attribution time


@pytest.mark.parametrize(
    ("flags", "panels"),
    [([], 1), (["--attention", "all"], 5), (["--rollout", "--merge-pieces"], 2)],
)
def test_explain_draws_the_attribution(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], panels: int
) -> None:
    out = tmp_path / "heat.png"
    args = ["--target", server.target, "explain", SENTENCE, "--attribution", "occlusion", "--out", str(out)]
    assert client_main([*args, *flags]) == 0
    assert f"({panels} panel(s), " in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG" and image.width > 200 and image.height > 100
