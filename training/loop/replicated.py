"""The classifier as DistributedDataParallel trains it under torchrun (training/loop/distributed.py)."""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from attnserve.training.models.base import Classifier
from attnserve.training.models.config import ModelConfig


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

    def no_sync(self) -> AbstractContextManager[None]:
        """Backward passes that keep their gradients on this rank until the next synced one."""
        return self.ddp.no_sync()
