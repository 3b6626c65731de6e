"""Training on several processes: torchrun's ranks share the batches and rank 0 writes the run.

The end-to-end test starts real processes with the real launcher (``torchrun --nproc-per-node
2`` on 127.0.0.1, gloo), as docs/training.md tells users to, and compares the run with a
one-process run that takes the same steps of the same effective batch (2 x 8 texts against
16).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnserve.training.loop import distributed
from attnserve.training.loop.distributed import Ranks
from tests.support.servers import free_port

VENV_BIN = Path(sys.executable).parent
# One task, small and learnable in seconds; the processes differ only in how many there are.
RUN = ["--task", "greetings-food", "--size", "200", "--model", "attention_pool", "--d-model", "16",
       "--lr", "0.01", "--epochs", "4", "--threads", "1", "--no-progress", "--seed", "0"]  # fmt: skip
# Two processes see other batches in another order (and other dropout draws): on 40 test texts
# accuracies within 0.1 (4 texts) are seed noise; a rank training apart, or weights drifting
# between ranks, is not.
ACCURACY_TOLERANCE = 0.1


def test_each_rank_takes_a_disjoint_equal_share_of_the_batches() -> None:
    batches = [np.array([i]) for i in range(7)]
    shares = [distributed.shard(batches, Ranks(rank, 3)) for rank in range(3)]
    assert [len(s) for s in shares] == [2, 2, 2]  # the 7th waits for another epoch's order
    taken = [int(b[0]) for share in shares for b in share]
    assert len(set(taken)) == len(taken) == 6
    assert distributed.shard(batches, Ranks()) == batches
    with pytest.raises(ValueError, match="cannot be shared by 8 processes"):
        distributed.shard(batches, Ranks(0, 8))


def test_outside_torchrun_a_process_is_rank_0_of_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.launched() and distributed.ranks() == Ranks() and Ranks().main


def run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_two_processes_train_like_one_and_the_run_exports(tmp_path: Path) -> None:
    port = free_port()
    launcher = [str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--nnodes", "1", "--rdzv-backend",
                "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "attnserve.training"]  # fmt: skip
    two = run([*launcher, *RUN, "--batch-size", "8", "--out", str(tmp_path / "two")], tmp_path)
    run([str(VENV_BIN / "attnserve-train"), *RUN, "--batch-size", "16", "--out", str(tmp_path / "one")],
              tmp_path)  # fmt: skip
    assert two.stdout.count("greetings-food") == 1  # rank 0 alone reports
    metrics = {name: json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("one", "two")}
    assert metrics["two"]["processes"] == 2 and metrics["one"]["processes"] == 1
    # The same steps: 320 texts in batches of 8 shared by 2 ranks, or in batches of 16.
    assert [r["step"] for r in metrics["two"]["history"]] == [r["step"] for r in metrics["one"]["history"]]
    assert metrics["one"]["test"]["accuracy"] >= 0.9  # the task is learnt, so the comparison means something
    assert abs(metrics["two"]["test"]["accuracy"] - metrics["one"]["test"]["accuracy"]) <= ACCURACY_TOLERANCE
    assert not (tmp_path / "two" / "resume.pt").exists()  # written by rank 0, removed when complete

    repository = tmp_path / "models"
    exported = [str(VENV_BIN / "attnserve-export"), str(tmp_path / "two"), "--repository", str(repository),
                "--name", "greetings", "--no-latency"]  # fmt: skip
    run(exported, tmp_path)
    assert (repository / "greetings" / "1" / "model.onnx").is_file()
