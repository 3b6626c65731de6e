"""`attnserve-client explain` picking maps (--layer, --head, --rollout) and merging word
pieces (--merge-pieces), against a real server serving the shipped car-order bundle; the
merging arithmetic itself on word pieces, with and without the reply's offsets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnserve.service.client.cli import main as client_main
from attnserve.service.client.pieces import merge_matrix, merge_vector, word_groups
from tests.support.servers import RunningServer, make_settings
from tests.support.shipped import shipped_repository

SENTENCE = "the white car is left of the black car"  # 9 tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with RunningServer(make_settings(shipped_repository(tmp_path_factory.mktemp("shipped")))) as running:
        yield running


@pytest.mark.parametrize(
    ("flags", "panels"),
    [
        ([], 4),
        (["--layer", "2", "--head", "1"], 1),
        (["--layer", "1"], 2),
        (["--head", "2"], 2),
        (["--rollout"], 1),
    ],
)
def test_explain_draws_the_maps_picked(
    server: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    panels: int,
) -> None:
    out = tmp_path / "attention.png"
    code = client_main(
        ["--target", server.target, "explain", SENTENCE, "--out", str(out), *flags, "--merge-pieces"]
    )
    assert code == 0
    assert f"({panels} panel(s), 9 words, label positive)" in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG" and image.width > 200 and image.height > 200


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--layer", "3"], "--layer must be from 1 to 2"),
        (["--head", "0"], "--head must be from 1 to 2"),
        (["--rollout", "--layer", "1"], "leave out --layer and --head"),
    ],
)
def test_explain_refuses_a_pick_the_model_does_not_have(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], words: str
) -> None:
    code = client_main(
        ["--target", server.target, "explain", SENTENCE, "--out", str(tmp_path / "x.png"), *flags]
    )
    assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


TOKENS = ["[CLS]", "the", "play", "##ing", "cars", "[SEP]"]
TEXT = "the playing cars"


@pytest.mark.parametrize(
    ("offsets", "special"),
    [
        ((), ()),
        ([(0, 0), (0, 3), (4, 8), (8, 11), (12, 16), (0, 0)], [True, False, False, False, False, True]),
    ],
    ids=["from the tokens", "from offsets and flags"],
)
def test_word_pieces_merge_into_words(offsets: list[tuple[int, int]], special: list[bool]) -> None:
    words = word_groups(TOKENS, TEXT, offsets, special)
    assert [w.indices for w in words] == [[0], [1], [2, 3], [4], [5]]
    assert [w.label for w in words] == ["[CLS]", "the", "playing", "cars", "[SEP]"]
    assert [w.special for w in words] == [True, False, False, False, True]
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 6, 6))
    maps /= maps.sum(axis=-1, keepdims=True)
    merged = merge_matrix(maps, words)
    assert merged.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(merged.sum(axis=-1), 1.0)  # rows still sum to 1
    np.testing.assert_allclose(merged[..., 2, 0], maps[..., 2:4, 0].mean(axis=-1))  # rows averaged
    np.testing.assert_allclose(merged[..., 0, 2], maps[..., 0, 2:4].sum(axis=-1))  # columns summed
    np.testing.assert_allclose(merge_vector(maps[0, 0, 0], words).sum(), 1.0)


def test_offsets_join_pieces_without_a_prefix() -> None:
    words = word_groups(["Play", "ing", "!"], "Playing!", [(0, 4), (4, 7), (7, 8)])
    assert [w.label for w in words] == ["Playing", "!"]
