"""The student's loss: the teacher's soft targets, mixed with the gold label by ``alpha``.

Per row, ``alpha * soft + (1 - alpha) * cross-entropy`` where the row has a gold label, and
the soft loss alone for a text augmentation made (it has none). ``mse`` regresses the
teacher's logits (Tang et al. 2019, "Distilling Task-Specific Knowledge from BERT into
Simple Neural Networks": the logits keep what a softmax squashes); ``kl`` is Hinton et al.'s
temperature-scaled KL divergence, times T^2 so its gradients keep their size as T changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DISTILL_LOSSES = ("mse", "kl")
NO_LABEL = -100  # no gold label (an augmented text): cross_entropy's ignore_index, so plain CE skips it


@dataclass(frozen=True)
class DistillLoss:
    kind: str = "mse"  # mse | kl
    temperature: float = 2.0  # kl only: softens both distributions
    alpha: float = 0.5  # weight of the soft loss on rows with a gold label

    def __post_init__(self) -> None:
        if self.kind not in DISTILL_LOSSES:
            raise ValueError(f"distill loss must be one of {', '.join(DISTILL_LOSSES)}, got {self.kind!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")

    def soft_rows(self, logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        """Soft loss per row [B] of student ``logits`` [B, C] against ``teacher`` logits [B, C]."""
        if self.kind == "mse":
            return ((logits.float() - teacher) ** 2).mean(dim=-1)
        t = self.temperature
        target = F.log_softmax(teacher / t, dim=-1)  # [B, C]
        student = F.log_softmax(logits.float() / t, dim=-1)  # [B, C]
        return F.kl_div(student, target, reduction="none", log_target=True).sum(dim=-1) * t * t

    def rows(
        self,
        logits: torch.Tensor,
        teacher: torch.Tensor,
        labels: torch.Tensor,
        class_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The loss of each row [B]: soft and gold mixed, soft alone where the label is NO_LABEL.

        Class weights scale the gold term of a row by its class's weight (mean 1 over classes).
        """
        soft = self.soft_rows(logits, teacher)  # [B]
        gold = labels >= 0  # [B]
        ce = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")  # [B]
        if class_weights is not None:
            ce = ce * class_weights[labels.clamp(min=0)]
        mixed = self.alpha * soft + (1.0 - self.alpha) * ce
        return torch.where(gold, mixed, soft)

    def record(self) -> dict[str, float | str]:
        return {"loss": self.kind, "temperature": self.temperature, "alpha": self.alpha}
