"""attnserve-client against a real server: classify, explain, models, health."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnserve.service.client import Client
from attnserve.service.client.cli import main as client_main
from tests.support.servers import RunningServer


def test_classify_prints_labels_probabilities_and_a_heatmap(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = client_main(
        [
            "--target",
            server.target,
            "classify",
            "the white car is on the left",
            "--model",
            "pool",
            "--top-k",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "probability" in out and "positive" in out and "negative" in out
    assert "white" in out and "top tokens:" in out


def test_classify_json(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = client_main(
        [
            "--target",
            server.target,
            "classify",
            "a white car",
            "a black car",
            "--model",
            "car",
            "--attention",
            "rollout",
            "--json",
        ]
    )
    reply = json.loads(capsys.readouterr().out)
    assert code == 0 and reply["model"] == "car" and len(reply["results"]) == 2
    first = reply["results"][0]
    assert len(first["attention"]) == len(first["tokens"]) == 3


def test_models_and_health(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert client_main(["--target", server.target, "models", "--json"]) == 0
    names = {model["name"] for model in json.loads(capsys.readouterr().out)}
    assert names == {"car", "pool", "bow"}
    assert client_main(["--target", server.target, "health"]) == 0
    assert capsys.readouterr().out.strip() == "SERVING"
    assert client_main(["--target", server.target, "health", "--service", "missing"]) == 1


def test_explain_writes_a_png_of_every_layer_and_head(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "attention.png"
    code = client_main(
        [
            "--target",
            server.target,
            "explain",
            "the white car is left of the black car",
            "--model",
            "car",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Client(server.target) as client:
        info = client.model("car")
    assert f"{info.attention_layers * info.attention_heads} panel(s)" in capsys.readouterr().out


def test_errors_are_reported_without_a_traceback(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = client_main(["--target", server.target, "classify", "a white car", "--model", "nope"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("attnserve-client: NOT_FOUND: model: no model named 'nope'")
