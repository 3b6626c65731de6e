"""The training sections of `python -m bench` at their --tiny size: outputs, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.threads import usable_cores
from bench.cli import main
from bench.training.long_texts import long_texts
from bench.training.speed import VARIANTS, TurnClock


def test_long_texts_are_seeded_long_and_labelled() -> None:
    texts, labels = long_texts(400, seed=3)
    again, _ = long_texts(400, seed=3)
    assert texts == again and texts != long_texts(400, seed=4)[0]
    words = np.array([len(t.split()) for t in texts])
    assert 110 < words.mean() < 160 and words.max() > 256
    assert set(labels) == {0, 1}


def test_turn_clock_runs_only_during_the_variants_own_turns() -> None:
    wall = [100.0]  # the injected wall clock, in seconds
    clock = TurnClock(lambda: wall[0])
    assert clock() == 0.0
    clock.start()
    wall[0] += 5.0  # this variant's turn
    assert clock() == 5.0
    clock.stop()
    wall[0] += 90.0  # another variant's turn: the re-timing minute does not advance
    assert clock() == 5.0
    clock.start()
    wall[0] += 1.5
    assert clock() == 6.5


def test_data_parallel_takes_the_one_process_step_in_two_processes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["data-parallel", "--tiny"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    table = {int(row[1]): row for row in rows[1:]}
    assert set(table) == {1, 2}
    assert float(table[2][3]) > 0 and float(table[2][4].rstrip(" x")) > 0
    # Two processes summing their shares' gradients take the one-process step: the weights
    # agree up to the order of float additions.
    assert float(table[2][5]) < 1e-3


@pytest.mark.slow  # eight variants, each timing its threads' probe step: about 20 s
def test_training_speed_measures_every_variant_and_prints_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"
    assert main(["training-speed", "--tiny", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    variants = {v["name"]: v for v in result["variants"]}
    assert len(variants) == len(VARIANTS) == 8 and all(
        v["texts_per_s"] > 0 and v["texts_per_cpu_s"] > 0 for v in variants.values()
    )
    old, new = result["variants"][0], result["variants"][-1]
    assert old["threads"] == "1" and new["settings"]["threads"] == TrainConfig().threads == 0
    assert set(new["threads"].split("/")) <= {"1", str(usable_cores())}
    assert old["padded_tokens"] == result["max_len"] and old["settings"]["pad_to_max_len"] is True
    assert old["settings"]["fused_attention"] is False and old["settings"]["max_batch_tokens"] == 0
    assert new["settings"]["max_batch_tokens"] == TrainConfig().max_batch_tokens > 0
    table = capsys.readouterr().out
    assert table.count("\n| ") == 1 + 8 and "1.00x" in table


@pytest.mark.slow  # a real training run in a child process: torch's import and a second of training
def test_training_memory_reports_the_peak_of_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    assert main(["training-memory", "--tiny", "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["exit_status"] == 0 and not result["stopped_by_timeout"]
    # The child's own high-water mark: a toy run still imports torch (a few hundred MB).
    assert 100 < result["peak_mb"] < 4096 and result["timeline"]
    assert result["reported_peak_mb"] == pytest.approx(result["peak_mb"], rel=0.05)
    rows, max_len = result["rows"], result["max_len"]
    parts_mb = result["params"] * 16 / 2**20 + rows * max_len * 4 / 2**20 + 300  # model+optimizer, ids, base
    assert result["budget_mb"] == pytest.approx(1.5 * parts_mb)
    assert (tmp_path / "work" / "run" / "checkpoint.pt").is_file()


def test_exporters_compare_graphs_against_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exporters", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert "torch eager" in out and "torchscript opset 18" in out and "dynamo" not in out
    assert "(1.00x)" in out  # the default graph against itself
