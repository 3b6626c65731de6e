"""attnserve-client against a real server: classify, explain, models, health."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnserve.service.client import Client
from attnserve.service.client.cli import main as client_main
from tests.support.servers import RunningServer, free_port


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
    # Piped: the attention is written as text, one token a line with its weight and a bar.
    assert "attention (pooling weight of each token):" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and len(line.split()) >= 2]
    weights = {row[0]: float(row[1]) for row in rows if row[0] in ("the", "white", "car")}
    assert set(weights) == {"the", "white", "car"} and abs(sum(float(r[1]) for r in rows) - 1.0) < 0.01
    assert re.search(
        r"server time total \d+\.\d\d ms \(tokenize \d+\.\d\d ms, queue .* ms, inference .* ms\)", out
    )


def test_classify_on_a_terminal_colours_tokens_and_prints_a_legend(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    code = client_main(["--target", server.target, "classify", "a white car", "--model", "pool"])
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b[" in out  # colour escapes
    assert "legend:" in out and "0.00" in out


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
    err = capsys.readouterr().err
    assert err.startswith("attnserve-client: NOT_FOUND: the server has no health status for 'missing'")
    assert err.count("\n") == 1


def test_models_table_is_not_cut_to_80_columns_when_piped(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert client_main(["--target", server.target, "models"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if " car " in line]
    assert len(rows) == 1  # one line per model: no cell folded or cut
    assert "positive" in rows[0] and "negative" in rows[0] and "transformer" in rows[0]
    assert "…" not in out


def test_no_model_name_with_several_models_lists_them(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert client_main(["--target", server.target, "classify", "a white car"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnserve-client: INVALID_ARGUMENT: model: the call names no model")
    assert "(bow, car, pool)" in err and "--default-model" in err


def test_admin_commands_say_how_to_turn_the_admin_api_on(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["reload"], ["unload", "car"]):
        assert client_main(["--target", server.target, *command]) == 1
        err = capsys.readouterr().err
        assert err.startswith("attnserve-client: UNIMPLEMENTED: the admin API is off on this server")
        assert "--admin" in err and "Method not found" not in err


def test_an_unreachable_server_says_what_to_check(capsys: pytest.CaptureFixture[str]) -> None:
    target = f"127.0.0.1:{free_port()}"
    assert client_main(["--target", target, "--timeout", "2", "health"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnserve-client: UNAVAILABLE") and f"is a server listening at {target}?" in err


def test_the_target_comes_from_the_environment(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNSERVE_TARGET", server.target)
    assert client_main(["health"]) == 0
    assert capsys.readouterr().out.strip() == "SERVING"


@pytest.mark.parametrize("command", [[], ["classify"], ["explain"], ["models"], ["health"], ["reload"]])
def test_every_help_shows_its_defaults(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        client_main([*command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--target TARGET server address host:port (default: $ATTNSERVE_TARGET, else 127.0.0.1:50051)" in text
    )
    assert "(default: 30)" in text
    expected = {
        "classify": ["(default: auto)", "model version, 0 = the latest (default: 0)", "(default: off)"],
        "explain": ["(default: attention.png)", "(default: the server's --default-model, or its only model)"],
        "health": ["(default: the whole server)"],
        "reload": ["(default: every model)"],
    }
    for phrase in expected.get(command[0] if command else "", []):
        assert phrase in text


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


def test_explain_figures_have_a_colour_bar_and_query_key_axes(server: RunningServer) -> None:
    from attnserve.service.client.explain import layers_figure, pooled_figure, pyplot

    plt = pyplot()
    with Client(server.target) as client:
        layered = client.classify("a white car", model="car", attention="all").results[0]
        pooled = client.classify("a white car", model="pool", attention="pooled").results[0]
    assert layered.attention is not None and pooled.attention is not None
    figure, panels = layers_figure(plt, layered.tokens, layered.attention)
    assert panels == layered.attention.shape[0] * layered.attention.shape[1]
    panel_axes, bars = figure.axes[:panels], figure.axes[panels:]
    assert len(bars) == 1 and bars[0].get_ylabel().startswith("attention weight")
    assert {axis.get_xlabel() for axis in panel_axes} >= {"key (attended token)"}
    assert {axis.get_ylabel() for axis in panel_axes} >= {"query (attending token)"}
    plt.close(figure)
    figure, panels = pooled_figure(plt, pooled.tokens, pooled.attention)
    assert panels == 1 and len(figure.axes) == 2 and figure.axes[1].get_ylabel() == "pooling weight"
    plt.close(figure)
