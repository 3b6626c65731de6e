"""Two training processes as two machines: each its own working folder, data and run folder.

Each process is started as torchrun starts one on each of two machines (RANK, WORLD_SIZE,
MASTER_ADDR/PORT; gloo on 127.0.0.1), with the same relative paths resolving to its own
copies: nothing one writes is on the other's disk. Each runs under a timeout, so processes
that wait for each other forever fail the test instead of stalling it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.support.servers import free_port
from tests.support.tiny_bert import make_tiny_bert, write_reviews

MACHINES = 2
TIMEOUT_S = 300
COMMON = ["--data", "reviews.csv", "--threads", "1", "--no-progress", "--seed", "0"]
# A small model that learns nothing by chance: no dropout of either kind, so one process and
# two differ only in the order their sums are added.
SMALL = [
    "--model",
    "attention_pool",
    "--d-model",
    "16",
    "--dropout",
    "0",
    "--word-dropout",
    "0",
    "--lr",
    "0.01",
]


def machines(tmp_path: Path, reviews: int = 120) -> list[Path]:
    """One folder per machine, each with its own copy of the data."""
    homes = [tmp_path / f"machine{rank}" for rank in range(MACHINES)]
    for home in homes:
        home.mkdir()
        write_reviews(home / "reviews.csv", reviews)
    return homes


def run_on(homes: list[Path], args: Callable[[int], list[str]], log: str = "log") -> list[str]:
    """Start one training process per machine and wait for all; returns each one's stderr.

    A process that fails, or that is still running after TIMEOUT_S, fails the test.
    """
    port = free_port()
    procs, logs = [], []
    for rank, home in enumerate(homes):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "WORLD_SIZE": str(len(homes)),
               "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}  # fmt: skip
        logs.append(home / f"{log}.txt")
        with open(logs[-1], "w") as out:
            command = [sys.executable, "-m", "attnserve.training", *args(rank)]
            procs.append(subprocess.Popen(command, cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        codes = [proc.wait(timeout=TIMEOUT_S) for proc in procs]
    except subprocess.TimeoutExpired:
        codes = []
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    texts = [path.read_text() for path in logs]
    if not codes:
        pytest.fail(
            f"the processes were still running after {TIMEOUT_S} s:\n" + "\n".join(t[-2000:] for t in texts)
        )
    for rank, (code, text) in enumerate(zip(codes, texts, strict=True)):
        assert code == 0, f"process {rank} exited with {code}:\n{text[-3000:]}"
    return texts


def digests(rank_0_log: str) -> list[str]:
    """The weight digests rank 0 reports for every process after training."""
    found = re.findall(r"sha256 by process: ([0-9a-f, ]+)", rank_0_log)
    assert found, rank_0_log[-3000:]
    return str(found[-1]).split(", ")


def written(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home / "run")) for p in (home / "run").rglob("*"))


def state_dict(run: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    return dict(checkpoint["state_dict"])


@pytest.mark.slow
def test_ranks_cutting_their_rows_into_different_micro_batch_counts_stay_identical(tmp_path: Path) -> None:
    # Texts of 7 or about 17 tokens, 4 random rows a process: a process whose 4 are short pads
    # them to 28 tokens and runs them whole, the other cuts its 68 into 2 micro-batches.
    homes = machines(tmp_path)
    for home in homes:
        make_tiny_bert(home)
    flags = ["--model", "encoder", "--pretrained", "tiny-bert", "--batch-size", "4", "--no-group-by-length",
             "--max-batch-tokens", "40", "--epochs", "2", "--lr", "0.003", "--out", "run",
             *COMMON]  # fmt: skip
    logs = run_on(homes, lambda rank: flags)
    every = digests(logs[0])
    assert len(every) == MACHINES and len(set(every)) == 1
    assert (homes[0] / "run" / "checkpoint.pt").is_file()
    assert written(homes[1]) == []  # rank 0 alone writes the run


@pytest.mark.slow
def test_two_processes_reach_the_weights_of_one_that_takes_their_rows_together(tmp_path: Path) -> None:
    # The same 16 rows a step: one process takes them all, two take 8 each. The rows'
    # lengths differ, so at 60 tokens a batch runs in 1 to 4 micro-batches.
    homes = machines(tmp_path)
    args = [*SMALL, "--epochs", "2", "--max-batch-tokens", "60", *COMMON]
    run_on(homes, lambda rank: [*args, "--batch-size", "8", "--out", "run"])
    run_on(homes[:1], lambda rank: [*args, "--batch-size", "16", "--out", "alone"], log="alone")
    assert written(homes[1]) == []  # no tokenizer.json either: rank 0 sent it
    two, one = state_dict(homes[0] / "run"), state_dict(homes[0] / "alone")
    assert two.keys() == one.keys()
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_a_run_out_of_time_resumes_on_machines_that_hold_no_copy_of_its_state(tmp_path: Path) -> None:
    homes = machines(tmp_path)
    args = [*SMALL, "--epochs", "2", "--batch-size", "8", "--out", "run", *COMMON]
    run_on(homes, lambda rank: [*args, "--max-seconds", "0.01"])  # out of time after a step
    assert (homes[0] / "run" / "resume.pt").is_file() and written(homes[1]) == []
    # A budget again (any): with --data a budget is part of the plan the state was saved under.
    again = run_on(homes, lambda rank: [*args, "--max-seconds", "600", "--resume"], log="again")
    assert not (homes[0] / "run" / "resume.pt").exists()  # complete: nothing left to resume
    assert written(homes[1]) == []
    every = digests(again[0])
    assert len(every) == MACHINES and len(set(every)) == 1


@pytest.mark.slow
def test_a_student_on_two_machines_has_the_teacher_score_its_texts_once(tmp_path: Path) -> None:
    homes = machines(tmp_path)
    teacher = [*SMALL, "--epochs", "1", "--batch-size", "16", "--out", "teacher", *COMMON]
    run_on(homes[:1], lambda rank: teacher, log="teacher")
    shutil.copytree(homes[0] / "teacher", homes[1] / "teacher")  # every machine reads the teacher
    student = ["distill", "--teacher", "teacher", "--augment", "1", *SMALL, "--epochs", "1",
               "--batch-size", "8", "--out", "run", *COMMON]  # fmt: skip
    logs = run_on(homes, lambda rank: student)
    assert len(list((homes[0] / "run" / "teacher").glob("logits-*.npz"))) == 1  # written once, by rank 0
    assert written(homes[1]) == []
    every = digests(logs[0])
    assert len(every) == MACHINES and len(set(every)) == 1
