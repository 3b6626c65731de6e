"""What the loss curves say about a run, and the advice that follows from it.

More steps help a model that is still learning and hurt one that overfits: validation loss
rising while training loss keeps falling calls for regularisation or an earlier stop, never
for a longer run. The advice attached to a warning follows this diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

OVERFIT, UNDERTRAINED, PLATEAU = "overfit", "undertrained", "plateau"
RISE = 0.02  # validation loss this far (relative) above its minimum counts as rising


def diagnose(history: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(kind, sentence): overfit, undertrained (validation loss still falling) or plateau."""
    rows = [r for r in history if "val_loss" in r and "train_loss" in r]
    if len(rows) < 2:
        return UNDERTRAINED, "only one epoch ran"
    best = min(range(len(rows)), key=lambda i: rows[i]["val_loss"])
    last = rows[-1]
    rising = last["val_loss"] > rows[best]["val_loss"] * (1 + RISE)
    if rising and best < len(rows) - 1 and last["train_loss"] < rows[best]["train_loss"]:
        return OVERFIT, (
            f"validation loss rose from {rows[best]['val_loss']:.3f} (epoch {rows[best]['epoch']}) to "
            f"{last['val_loss']:.3f} while training loss fell from {rows[best]['train_loss']:.3f} to "
            f"{last['train_loss']:.3f}"
        )
    if best == len(rows) - 1:
        return UNDERTRAINED, f"validation loss was still falling at the last epoch ({last['val_loss']:.3f})"
    return PLATEAU, f"validation loss levelled off at {rows[best]['val_loss']:.3f}"


def advice(history: Sequence[dict[str, Any]]) -> str:
    """What to change next, from the loss curves (no history: the undiagnosed default)."""
    kind, why = diagnose(history) if history else (UNDERTRAINED, "no epoch history")
    if kind == OVERFIT:
        return (
            f"the model overfits ({why}): regularise (--dropout, --word-dropout, --weight-decay), stop "
            "earlier (--patience, --select-by loss) or use a smaller model; more steps make it worse"
        )
    if kind == UNDERTRAINED:
        return f"the model is still learning ({why}): train for more steps (--min-steps, --epochs)"
    return f"{why}: more data, or another family or its settings (attnserve-train tune)"
