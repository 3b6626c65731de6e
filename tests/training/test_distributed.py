"""Training on several processes: torchrun's ranks share the batches and rank 0 writes the run.

The end-to-end tests start real processes with the real launcher (``torchrun --nproc-per-node
2`` on 127.0.0.1, gloo), as docs/training.md tells users to, and compare the run with a
one-process run that takes the same steps of the same effective batch (2 x 8 texts against
16). The step test runs two gloo processes of its own; tests/training/test_distributed_machines.py
runs processes as on machines that share no disk.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from attnserve.training.loop import distributed
from attnserve.training.loop.config import TrainConfig
from attnserve.training.loop.distributed import Ranks
from attnserve.training.loop.replicated import Replicated
from attnserve.training.loop.step import step_plan, train_step
from attnserve.training.models import Classifier, build_model
from tests.support.servers import free_port

VENV_BIN = Path(sys.executable).parent
# One task, small and learnable in seconds; the processes differ only in how many there are.
RUN = ["--task", "greetings-food", "--size", "200", "--model", "attention_pool", "--d-model", "16",
       "--lr", "0.01", "--epochs", "4", "--threads", "1", "--no-progress", "--seed", "0"]  # fmt: skip
# Two processes see other batches in another order (and other dropout draws): on 40 test texts
# accuracies within 0.1 (4 texts) are seed noise; a rank training apart, or weights drifting
# between ranks, is not.
ACCURACY_TOLERANCE = 0.1


def test_each_rank_takes_a_disjoint_slice_of_every_batch() -> None:
    batches = [np.arange(9), np.arange(9, 15), np.array([15, 16])]  # drawn 3 x 3 rows a step
    shares = [distributed.shard(batches, Ranks(rank, 3)) for rank in range(3)]
    assert [len(s) for s in shares] == [2, 2, 2]  # 2 rows cannot make 3 slices: that batch waits
    for step in range(2):
        rows = np.concatenate([share[step] for share in shares])
        assert sorted(rows.tolist()) == batches[step].tolist()
    assert [len(b) for b in shares[0]] == [3, 2]
    assert distributed.shard(batches, Ranks()) == batches
    with pytest.raises(ValueError, match="no batch of 10 or more rows"):
        distributed.shard(batches, Ranks(0, 10))


# Six short rows (2 tokens) and six long ones (8): at 16 tokens a micro-batch, the short rows
# run whole and the long ones in 3 pieces; class 1 weighs 3 times class 0. Plain SGD, whose
# step is as large as the gradient: AdamW would hide a gradient scaled by a constant.
LENGTHS = np.array([2] * 6 + [8] * 6)
LABELS = np.array([0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0])
STEP = TrainConfig(lr=0.5, max_batch_tokens=16, seed=0)
STEPS = 3


def step_model() -> Classifier:
    torch.manual_seed(0)
    return build_model(
        "mean_pool", {"vocab_size": 20, "num_classes": 2, "max_len": 8, "d_model": 8, "dropout": 0.0}
    )


def step_batch(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(np.random.default_rng(1).integers(2, 20, size=(12, 8)))[rows]
    mask = (torch.arange(8)[None, :] < torch.from_numpy(LENGTHS[rows])[:, None]).long()
    width = int(LENGTHS[rows].max())
    return ids[:, :width] * mask[:, :width], mask[:, :width], torch.from_numpy(LABELS[rows])


def trained_alone() -> dict[str, torch.Tensor]:
    model = step_model()
    opt = torch.optim.SGD(model.parameters(), lr=STEP.lr)
    for _ in range(STEPS):
        train_step(model, opt, step_batch(np.arange(12)), STEP, torch.tensor([1.0, 3.0]))
    return model.state_dict()


def step_worker(rank: int, port: int, out: str) -> None:
    """One of two ranks: rank 0 takes the short rows, rank 1 the long ones, for STEPS steps."""
    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    at = distributed.ranks()
    model = step_model()
    stepper = Replicated(model, torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=STEP.lr)
    weights = torch.tensor([1.0, 3.0])
    batch = step_batch(np.arange(6) + 6 * rank)
    for _ in range(STEPS):
        parts, total = step_plan(batch, STEP, weights, distilled=False)
        shared = distributed.agree(parts, total, 6, False, at)
        train_step(stepper, opt, batch, STEP, weights, shared=shared)
    torch.save(
        {"parts": parts, "agreed": shared.parts, "weights": model.state_dict()}, f"{out}/rank{rank}.pt"
    )
    dist.barrier()
    dist.destroy_process_group()
    # The rank's work is saved: end it here. A spawned process that exits through interpreter
    # teardown aborted about one run in ten ("terminate called without an active exception",
    # exit -6) as libtorch's static destructors met a gloo thread still joinable.
    os._exit(0)


@pytest.mark.slow  # two processes that import torch: about 20 s
def test_ranks_of_uneven_micro_batches_take_the_step_of_one_process_over_their_rows(tmp_path: Path) -> None:
    port, spawn = free_port(), multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=step_worker, args=(rank, port, str(tmp_path))) for rank in range(2)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + 120
    for proc in procs:
        proc.join(timeout=max(deadline - time.monotonic(), 0))
    stalled = [proc for proc in procs if proc.is_alive()]
    for proc in stalled:
        proc.kill()
        proc.join()
    assert not stalled, "the two ranks were still stepping after 120 s"
    assert [proc.exitcode for proc in procs] == [0, 0]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert [r["parts"] for r in ranks] == [1, 3] and [r["agreed"] for r in ranks] == [3, 3]
    alone = trained_alone()
    for name, value in alone.items():
        torch.testing.assert_close(ranks[0]["weights"][name], ranks[1]["weights"][name], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0]["weights"][name], value, rtol=1e-5, atol=1e-6)


def test_outside_torchrun_a_process_is_rank_0_of_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.launched() and distributed.ranks() == Ranks() and Ranks().main


EXITING = """
import logging, sys
from attnserve.training.loop.distributed import exit_process
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
print("summary", end="")  # buffered: a pipe, no newline
logging.getLogger("attnserve.training").info("logged")
exit_process(int(sys.argv[1]))
"""


@pytest.mark.parametrize("world", ["1", "2"])
def test_a_process_ends_with_its_status_and_its_output_written(world: str) -> None:
    # Under torchrun (WORLD_SIZE 2) the process skips the interpreter's teardown: what it
    # printed and logged must still reach the pipes, and its status the launcher.
    # PYTHONUNBUFFERED would write every print at once and hide a missing flush.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env["WORLD_SIZE"] = world
    done = subprocess.run([sys.executable, "-c", EXITING, "3"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "summary"), done.stderr[-2000:]
    assert "logged" in done.stderr


def test_outside_torchrun_exit_process_raises_system_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit) as ended:
        distributed.exit_process(0)
    assert ended.value.code == 0


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


@pytest.mark.slow
def test_a_run_stopped_on_one_process_is_not_resumed_on_two(tmp_path: Path) -> None:
    out = ["--batch-size", "8", "--out", str(tmp_path / "run")]
    run([str(VENV_BIN / "attnserve-train"), *RUN, *out, "--max-seconds", "1e-9"], tmp_path)
    assert (tmp_path / "run" / "resume.pt").is_file()
    port = free_port()
    launcher = [str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--nnodes", "1", "--rdzv-backend",
                "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "attnserve.training"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    resumed = subprocess.run([*launcher, *RUN, *out, "--resume"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    # Two processes draw twice the rows a step: the saved schedule would end at the wrong step.
    assert resumed.returncode != 0, resumed.stderr[-3000:]
    refusals = [line for line in resumed.stderr.splitlines() if "attnserve-train: error:" in line]
    assert refusals, resumed.stderr[-3000:]  # each rank refuses in one line (torchrun adds its own report)
    assert all("saved by a run on 1 process, and this one runs on 2 processes" in line for line in refusals)


@pytest.mark.slow
def test_the_documented_car_order_command_completes_on_two_processes(tmp_path: Path) -> None:
    command = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m",
               "attnserve.training", "--task", "car-order", "--model", "attention_pool", "--seed", "0",
               "--max-seconds", "10", "--no-progress", "--out", str(tmp_path / "run")]  # fmt: skip
    done = run(command, tmp_path)
    every = re.findall(r"sha256 by process: ([0-9a-f, ]+)", done.stderr)
    assert every and len(set(every[-1].split(", "))) == 1
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["processes"] == 2
