"""Long texts read whole, as the client's people-facing tools show them: `attnserve-client
classify --long-text windows` (the strip of window weights, `--json`'s windows), the models
table's policy, the file tool's `window` and `windows` columns, `--long-text reject`, and the
explorer's windows view. A tiny BERT made with transformers, imported with `--max-len 16` so
that a sentence of a few dozen words needs several windows (as tests/service/api/test_windows.py),
served on 127.0.0.1 with the server's default, truncate."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from attnserve.export.cli import main as export_main
from attnserve.service.client import Client, TextResult
from attnserve.service.client.cli import main as client_main
from tests.export.hf_classifiers import ARCHITECTURES, save_classifier, texts
from tests.service.api.http.browser import browser, explorer_link, open_link, wait
from tests.support.servers import RunningServer, free_port, make_settings

__all__ = ["browser"]  # the fixture, imported for pytest

MEAN, MAX = "mean-model", "max-model"
WINDOW, STRIDE = 16, 4
LONG = " ".join(texts(8, seed=11))  # several windows of 16 tokens
SHORT = "the film was good"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = save_classifier(ARCHITECTURES["bert"], tmp_path_factory.mktemp("windows") / "hf", seed=2)
    repository = tmp_path_factory.mktemp("windows-models")
    for name, combine in ((MEAN, "mean"), (MAX, "max")):
        argv = [str(folder), "--repository", str(repository), "--name", name, "--max-len", str(WINDOW),
                "--no-latency", "--long-texts", "windows", "--stride", str(STRIDE),
                "--combine", combine]  # fmt: skip
        assert export_main(argv) == 0
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def _cli(server: RunningServer, *argv: str) -> int:
    """`attnserve-client --target SERVER ARGV...`'s exit status."""
    return client_main(["--target", server.target, *argv])


def _whole(server: RunningServer, text: str, model: str = MEAN) -> TextResult:
    with Client(server.target, timeout=30) as client:
        return client.classify(text, model=model, long_text="windows", attention="pooled").results[0]


def _decisive(result: TextResult) -> str:
    top = max(result.windows, key=lambda w: w.weight)
    return f"{top.start}:{top.end}"


def test_classify_draws_a_strip_of_window_weights_under_a_long_text(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _whole(server, LONG, MAX)
    count = len(result.windows)
    assert count >= 3
    assert _cli(server, "classify", LONG, "--model", MAX, "--long-text", "windows") == 0
    out = capsys.readouterr().out
    assert f"read as {count} windows (the most confident window decides); weight of each window:" in out
    # Piped: one block character per window, full for the one that decides, blank for the others.
    strip = next(line.strip() for line in out.splitlines() if line.strip().startswith("|"))
    best = max(range(count), key=lambda i: result.windows[i].weight)
    assert strip == "|" + "".join("█" if i == best else " " for i in range(count)) + "|"
    lines = [line.split() for line in out.splitlines() if re.match(r"  #\d+ ", line)]
    assert [row[1] for row in lines] == [f"{w.start}:{w.end}" for w in result.windows]
    assert [float(row[2]) for row in lines] == [round(w.weight, 3) for w in result.windows]
    decides = [line for line in out.splitlines() if line.endswith("<- decides")]
    assert len(decides) == 1 and f" {_decisive(result)} " in decides[0]
    assert "attention (pooling weight of each token):" in out  # the whole text's pooled attention
    # A text that fits is one window: no strip.
    assert _cli(server, "classify", SHORT, "--model", MAX, "--long-text", "windows") == 0
    assert "read as" not in capsys.readouterr().out


def test_classify_json_carries_the_windows(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(server, "classify", LONG, SHORT, "--model", MEAN, "--long-text", "windows", "--json") == 0
    long, short = json.loads(capsys.readouterr().out)["results"]
    want = _whole(server, LONG)
    assert [(w["start"], w["end"]) for w in long["windows"]] == [(w.start, w.end) for w in want.windows]
    assert sum(w["weight"] for w in long["windows"]) == pytest.approx(1.0)
    assert len(long["windows"][0]["probabilities"]) == 2
    assert [(w["start"], w["end"], w["weight"]) for w in short["windows"]] == [(0, len(SHORT), 1.0)]
    assert _cli(server, "classify", SHORT, "--model", MEAN, "--json") == 0
    assert "windows" not in json.loads(capsys.readouterr().out)["results"][0]  # not asked: not there
    # An occlusion over windows: each window's drop, in the strip's lines and in the JSON.
    occlusion = ["classify", LONG, "--model", MEAN, "--long-text", "windows", "--attribution", "occlusion"]
    assert _cli(server, *occlusion, "--json") == 0
    drops = [w["attribution"] for w in json.loads(capsys.readouterr().out)["results"][0]["windows"]]
    assert len(drops) == len(want.windows) and all(isinstance(d, float) for d in drops)
    assert _cli(server, *occlusion) == 0
    out = capsys.readouterr().out
    assert [line.split("drop ")[1].split()[0] for line in out.splitlines() if re.match(r"  #\d+ ", line)] == [
        f"{d:+.4f}" for d in drops
    ]


def test_models_show_the_long_text_policy(server: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(server, "models") == 0
    out = capsys.readouterr().out
    assert "long texts" in out
    assert f"truncate; windows of {WINDOW} (stride {STRIDE}, max, at most 16)" in out
    assert _cli(server, "models", "--json") == 0
    listed = {m["name"]: m["windows"] for m in json.loads(capsys.readouterr().out)}
    assert listed[MEAN] == {"window": WINDOW, "stride": STRIDE, "combine": "mean", "max_windows": 16}


def _write_csv(path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "text"])
        writer.writeheader()
        writer.writerows([{"id": "long", "text": LONG}, {"id": "short", "text": SHORT}])


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def test_the_file_tool_reads_rows_whole_and_names_the_decisive_window(
    server: RunningServer, tmp_path: Path
) -> None:
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _write_csv(source)
    files = ["classify", "--model", MAX, "--input", str(source), "--output", str(out)]
    assert _cli(server, *files, "--long-text", "windows") == 0
    columns, rows = _read_csv(out)
    assert columns == ["id", "text", "label", "p_negative", "p_positive", "window", "windows"]
    long, short = _whole(server, LONG, MAX), _whole(server, SHORT, MAX)
    assert rows[0]["window"] == _decisive(long) and int(rows[0]["windows"]) == len(long.windows) >= 3
    assert rows[0]["label"] == long.label
    assert float(rows[0][f"p_{long.label}"]) == pytest.approx(float(long.probabilities.max()), abs=1e-6)
    assert (
        rows[1]["window"] == f"0:{len(SHORT)}"
        and rows[1]["windows"] == "1"
        and rows[1]["label"] == short.label
    )
    # The server's default (truncate): the rows keep the columns they always had.
    assert _cli(server, *files, "--overwrite") == 0
    columns, rows = _read_csv(out)
    assert "window" not in columns and "windows" not in columns and len(rows) == 2


def test_reject_refuses_a_long_text_naming_the_way_out(
    server: RunningServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert _cli(server, "classify", LONG, "--model", MEAN, "--long-text", "reject") == 1
    err = capsys.readouterr().err
    assert err.startswith("attnserve-client: INVALID_ARGUMENT: ") and f"max_len of {WINDOW} tokens" in err
    assert "(--long-text windows reads it whole, --long-text truncate cuts it)" in err
    # The file tool rejects the long row with the server's reason and classifies the other.
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _write_csv(source)
    files = ["classify", "--model", MEAN, "--input", str(source), "--output", str(out)]
    assert _cli(server, *files, "--long-text", "reject") == 0
    _, rows = _read_csv(out)
    assert [row["id"] for row in rows] == ["short"]
    rejected = [json.loads(line) for line in out.with_name("out.csv.rejects.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rejected] == [0] and f"max_len of {WINDOW} tokens" in rejected[0]["reason"]


def test_the_explorer_marks_the_windows_and_opens_one(
    server: RunningServer, browser: webdriver.Chrome
) -> None:
    port = server.server.http_port if server.server else 0
    want = _whole(server, LONG, MAX)
    with Client(server.target, timeout=30) as client:
        occluded = client.classify(LONG, model=MAX, long_text="windows", attribution="occlusion").results[0]
    assert open_link(browser, explorer_link(port, model=MAX, text=LONG, windows="1")) == "done"
    cells = browser.find_elements(By.CSS_SELECTOR, "#windows-a .window-cell")
    assert [
        (int(c.get_attribute("data-start") or -1), int(c.get_attribute("data-end") or -1)) for c in cells
    ] == [(w.start, w.end) for w in want.windows]
    marks = browser.find_elements(By.CSS_SELECTOR, "#document-a .window-mark")
    assert len(marks) == len(want.windows)
    segments = browser.find_elements(By.CSS_SELECTOR, "#document-a .segment")
    assert "".join(s.get_attribute("textContent") or "" for s in segments) == LONG
    best = max(range(len(want.windows)), key=lambda i: want.windows[i].weight)
    assert browser.find_element(By.ID, "window-detail-a").get_attribute("data-window") == str(best)
    # Another window: its attention is the whole text's pooled weights on that window's tokens.
    other = (best + 1) % len(cells)
    cells[other].click()
    wait(browser, f"return document.getElementById('window-detail-a').dataset.window === '{other}';")
    w = want.windows[other]
    inside = [
        i
        for i, (start, end) in enumerate(want.offsets)
        if not want.special[i] and start >= w.start and end <= w.end
    ]
    shown = browser.find_elements(By.CSS_SELECTOR, "#tokens-window-a .token")
    assert [s.text for s in shown] == [want.tokens[i] for i in inside]
    assert want.attention is not None
    weights = [float(s.get_attribute("data-weight") or "nan") for s in shown]
    assert weights == pytest.approx([float(want.attention[i]) for i in inside], abs=1e-6)
    assert browser.find_elements(By.ID, "windowed-a")  # no layer x head maps over windows
    # The explorer's default attribution, occlusion: each window's drop, the words of the decisive one.
    drop = browser.find_element(By.ID, "window-drop-a").get_attribute("data-attribution")
    assert drop is not None and float(drop) == pytest.approx(
        occluded.windows[other].attribution or 0.0, abs=1e-6
    )
    scores = browser.find_elements(By.CSS_SELECTOR, "#attribution-a .token")
    assert len(scores) == len(want.tokens)
    # A short text with the box ticked is drawn as ever: its maps, no windows.
    assert open_link(browser, explorer_link(port, model=MAX, text=SHORT, windows="1")) == "done"
    assert not browser.find_elements(By.ID, "windows-box-a")
    assert browser.find_elements(By.CSS_SELECTOR, "#panel-a canvas.thumb, #panel-a table.heatmap")
