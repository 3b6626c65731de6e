"""Training on several processes or machines: PyTorch DistributedDataParallel under ``torchrun``.

``torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] -m attnserve.training ...``
starts one process per device with RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT set; a
run reads them here and nowhere else. Every rank loads and encodes the same data and draws
the same batch order from the same seed; a step's batch holds N x batch_size rows and each
rank takes its own slice of it, so N processes take the steps one process takes with N times
the batch. Rank 0 alone validates, prints and writes the run directory; what the others need
of its disk (the tokenizer it built, the state it resumes from, a teacher's logits) it sends
over the process group, and what one rank decides alone (stop for time, stop early) reaches
the others through the collectives every rank runs at the same points.
Gloo on CPUs, NCCL on CUDA devices.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int = 0  # this process among all
    world: int = 1  # processes in the run
    local_rank: int = 0  # this process among those of its machine
    local_world: int = 1

    @property
    def main(self) -> bool:
        """The process that validates, prints and writes the run directory."""
        return self.rank == 0


def launched() -> bool:
    """Whether torchrun (or another launcher with its variables) started this process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def start(device: torch.device) -> Ranks:
    """Join the process group torchrun describes (once per process); outside torchrun, rank 0 of 1."""
    if not launched():
        return Ranks()
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
        log.debug("rank %d of %d joined (%s)", dist.get_rank(), dist.get_world_size(), backend)
    return ranks()


def ranks() -> Ranks:
    """This process's place in the running process group (rank 0 of 1 when there is none)."""
    if not dist.is_available() or not dist.is_initialized():
        return Ranks()
    return Ranks(
        dist.get_rank(),
        dist.get_world_size(),
        int(os.environ.get("LOCAL_RANK", "0")),
        int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )


def local_device(device: torch.device) -> torch.device:
    """This rank's own CUDA device (LOCAL_RANK) when training on CUDA, else ``device``."""
    if device.type == "cuda" and device.index is None and dist.is_initialized():
        return torch.device("cuda", ranks().local_rank)
    return device


def shard(batches: list[np.ndarray], at: Ranks) -> list[np.ndarray]:
    """This rank's rows of each batch: the ``rank``-th of ``world`` near-equal consecutive slices.

    The trainer draws batches of ``world`` x batch_size rows, so a step holds the rows one
    process would take in a batch that size. A batch with fewer rows than processes (an
    epoch's last) is left out: every rank takes the same number of steps.
    """
    if at.world == 1:
        return batches
    kept = [b for b in batches if len(b) >= at.world]
    if not kept:
        raise ValueError(
            f"no batch of {at.world} or more rows to share among {at.world} processes: "
            "use more data or fewer processes"
        )
    return [np.array_split(b, at.world)[at.rank] for b in kept]


@dataclass(frozen=True)
class Shared:
    """What every rank agreed on before a step: the same figures on every rank."""

    parts: int  # micro-batches each rank runs: the most any rank's rows need
    total: float  # what the step's mean loss divides by, over every rank's rows
    rows: int  # the step's rows over every rank
    world: int  # DistributedDataParallel averages over this many ranks
    stop: bool  # rank 0's clock says the time budget is spent: no rank takes the step


def agree(parts: int, total: float, rows: int, late: bool, at: Ranks) -> Shared:
    """One all-gather before every step: the micro-batch count, the loss's divisor, and rank 0's
    word on the time budget (the ranks' clocks differ; one rank must decide for all)."""
    if at.world == 1:
        return Shared(parts, total, rows, 1, late)
    mine = _on_backend(torch.tensor([parts, total, rows, 1.0 if late else 0.0], dtype=torch.float64))
    every = [torch.empty_like(mine) for _ in range(at.world)]
    dist.all_gather(every, mine)
    table = torch.stack(every).cpu()  # [world, 4]
    return Shared(
        int(table[:, 0].max()), float(table[:, 1].sum()), int(table[:, 2].sum()), at.world, bool(table[0, 3])
    )


def summed(values: list[float], at: Ranks) -> list[float]:
    """Each of ``values`` summed over the ranks (running loss, right and seen rows)."""
    if at.world == 1:
        return values
    tensor = _on_backend(torch.tensor(values, dtype=torch.float64))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.cpu()]


def from_rank_0(make: Callable[[], T], at: Ranks) -> T:
    """``make()`` run on rank 0 alone and its result sent to every rank (what rank 0 read or
    wrote on its own disk); when it raises, every rank raises, so none waits for the rest."""
    if at.world == 1:
        return make()
    box: list[Any] = [None, None]
    failure: Exception | None = None
    if at.main:
        try:
            box[0] = make()
        except Exception as exc:
            failure = exc
            box[1] = exc if _picklable(exc) else RuntimeError(f"{type(exc).__name__}: {exc}")
    dist.broadcast_object_list(box, src=0)
    if failure is not None:
        raise failure
    if box[1] is not None:
        raise box[1]
    return cast(T, box[0])


def gathered(value: T, at: Ranks) -> list[T]:
    """Every rank's ``value``, in rank order, on every rank."""
    if at.world == 1:
        return [value]
    every: list[Any] = [None] * at.world
    dist.all_gather_object(every, value)
    return every


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def same_weights(model: torch.nn.Module, at: Ranks, step: int) -> list[str]:
    """Every rank's sha256 of its parameters (16 digits, in rank order), the same on every rank
    when the replicas kept in step; when they drifted apart every rank raises."""
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    every = [str(d) for d in gathered(digest.hexdigest()[:16], at)]
    if len(set(every)) > 1:
        raise RuntimeError(
            f"after step {step} the processes' weights differ (sha256 by process: {', '.join(every)}); "
            "their gradients were not averaged alike"
        )
    return every


def least(value: int, at: Ranks) -> int:
    """The smallest of every rank's ``value`` (the step plan the slowest rank can keep)."""
    if at.world == 1:
        return value
    tensor = _on_backend(torch.tensor([value], dtype=torch.int64))
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


def from_main(flag: bool, at: Ranks) -> bool:
    """Rank 0's ``flag`` on every rank (its validation decides when to stop)."""
    if at.world == 1:
        return flag
    tensor = _on_backend(torch.tensor([1 if flag else 0], dtype=torch.int64))
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def finish() -> None:
    """Wait for every rank, then leave the process group (before the process exits)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End this process with `code`: a torchrun rank without the interpreter's teardown.

    There libtorch's static destructors can meet a gloo thread still joinable and abort a rank
    whose work is done and written ("terminate called without an active exception", exit -6:
    once in a test suite's two-rank run, and in about one spawned gloo process in ten), and
    torchrun then reports the whole run as failed."""
    if not launched():
        raise SystemExit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _on_backend(tensor: Tensor) -> Tensor:
    """NCCL reduces CUDA tensors only; gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return tensor.cuda()
    return tensor
