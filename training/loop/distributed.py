"""Training on several processes or machines: PyTorch DistributedDataParallel under ``torchrun``.

``torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] -m attnserve.training ...``
starts one process per device with RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT set; a
run reads them here and nowhere else. Every rank loads and encodes the same data and draws
the same batch order from the same seed, then takes its own share of the batches (disjoint,
the same number each, as DistributedSampler does), so no rank waits for data and none takes
an extra step. DistributedDataParallel averages the gradients, so one step learns from
N x batch_size texts. Rank 0 alone validates, prints and writes the run directory; the
others follow its decisions (stop early, stop for time) through small collectives.
Gloo on CPUs, NCCL on CUDA devices.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from attnserve.training.models.base import Classifier
from attnserve.training.models.config import ModelConfig

log = logging.getLogger(__name__)


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
    """This rank's batches: every ``world``-th from ``rank``, as many on every rank.

    The last ``len % world`` batches of an epoch's random order are left out (a different few
    each epoch), so every rank takes the same number of steps.
    """
    if at.world == 1:
        return batches
    each = len(batches) // at.world
    if each == 0:
        raise ValueError(
            f"{len(batches)} batch(es) an epoch cannot be shared by {at.world} processes: "
            "lower --batch-size or use fewer processes"
        )
    return batches[at.rank :: at.world][:each]


def any_rank(flag: bool, at: Ranks) -> bool:
    """True on every rank when it is true on one (stop for time: the ranks' clocks differ)."""
    if at.world == 1:
        return flag
    tensor = _on_backend(torch.tensor([1 if flag else 0], dtype=torch.int64))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


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


def _on_backend(tensor: Tensor) -> Tensor:
    """NCCL reduces CUDA tensors only; gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return tensor.cuda()
    return tensor


class _Logits(torch.nn.Module):
    """The classifier's logits as a module's forward: what DistributedDataParallel wraps."""

    def __init__(self, model: Classifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, with_attention: bool) -> Tensor:
        return self.model.classify(input_ids, attention_mask, with_attention=with_attention)[0]


class Replicated(Classifier):
    """A classifier whose every training forward goes through DistributedDataParallel.

    The optimisation step sees it in place of the model (same parameters): its backward
    averages the gradients over the ranks. Validation, export and checkpoints use the model.
    """

    family = "replicated"
    attention_kind = "none"
    config_cls = ModelConfig

    def __init__(self, model: Classifier, device: torch.device) -> None:
        super().__init__(model.config)
        ids = [device.index if device.index is not None else 0] if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(_Logits(model), device_ids=ids)

    def classify(
        self, input_ids: Tensor, attention_mask: Tensor, *, with_attention: bool
    ) -> tuple[Tensor, Tensor | None]:
        return self.ddp(input_ids, attention_mask, with_attention), None
