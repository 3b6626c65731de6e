"""How a model reads a text longer than its `max_len`: as overlapping windows.

A bundle may carry a long-text policy (`bundle.json`'s optional `long_texts`, written by
`attnserve-export ... --long-texts windows`): the window length in tokens (special tokens
included, at most `max_len`), the stride (the tokens two neighbouring windows share), the
most windows one text may have, and how the windows' answers are combined. A server started
with `--long-text windows` serves every version with its policy, or with `DEFAULT` sized to
the version's `max_len` where the bundle has none.

Standard library, pydantic and numpy only: part of the torch-free serving install.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

# mean: the mean of the windows' logits, each window weighing 1/W; max: the window whose top
# probability is largest decides alone (weight 1, the others 0); head: a document head learned
# on long texts weighs the windows (attention over windows, `DocumentHead`).
Combine = Literal["mean", "max", "head"]
COMBINES: tuple[Combine, ...] = ("mean", "max", "head")
MAX_WINDOWS = 16  # the most windows of one text when a policy names no limit


# What a document head scores a window from: its logits z_w [C], or its pooled vector v_w [D]
# (the graph's `vector` output, the final layer's input) followed by its logits.
HeadInput = Literal["logits", "vectors"]
HEAD_INPUTS: tuple[HeadInput, ...] = ("vectors", "logits")


class DocumentHead(BaseModel):
    """Attention over a text's windows, learned on long texts (`attnserve-train document`):
    window w scores s_w = query · tanh(weights @ x_w + bias), x_w its logits z_w [C] (`reads`
    logits) or [v_w; z_w], its pooled vector then its logits (`reads` vectors); the text's
    logits are the windows' logits weighed by softmax(s) over its windows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: list[list[float]] = Field(min_length=1)  # [H, C] or [H, D + C]
    bias: list[float]  # [H]
    query: list[float]  # [H]
    reads: HeadInput = "logits"

    @model_validator(mode="after")
    def _shapes(self) -> DocumentHead:
        hidden, width = len(self.weights), len(self.weights[0])
        if (
            any(len(row) != width for row in self.weights)
            or len(self.bias) != hidden
            or len(self.query) != hidden
        ):
            raise ValueError(
                f"document head: weights [{hidden}, {width}], bias and query [{hidden}] must agree"
            )
        return self

    @property
    def width(self) -> int:
        return len(self.weights[0])

    def scores(
        self, logits: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32] | None = None
    ) -> npt.NDArray[np.float32]:
        """[W] the windows' attention weights (summing to 1) from their logits [W, C] and, for a
        head that reads them, their vectors [W, D]."""
        x = logits
        if self.reads == "vectors":
            if vectors is None:
                raise ValueError("this document head reads the windows' vectors; none were given")
            x = np.concatenate([vectors, logits], axis=1)
        hidden = np.tanh(x @ np.asarray(self.weights, np.float32).T + np.asarray(self.bias, np.float32))
        s = hidden @ np.asarray(self.query, np.float32)
        e = np.exp(s - s.max())
        return np.asarray(e / e.sum(), np.float32)


class LongTexts(BaseModel):
    """A model's long-text policy: windows of `window` tokens, neighbours sharing `stride`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int = Field(ge=3)  # tokens per window, the tokenizer's special tokens included
    stride: int = Field(ge=0)  # tokens two neighbouring windows share
    combine: Combine = "mean"
    max_windows: int = Field(MAX_WINDOWS, ge=1, le=4096)
    head: DocumentHead | None = None  # combine "head" only
    chosen: dict[str, float] | None = None  # validation figures per combination, where training chose

    @model_validator(mode="after")
    def _stride_fits(self) -> LongTexts:
        # Each window moves on by its text tokens less the stride (tokenizers' overflow), and a
        # window keeps up to two tokens for the tokenizer's [CLS] and [SEP].
        if (self.combine == "head") != (self.head is not None):
            raise ValueError('combine "head" and a document head go together')
        if self.stride >= self.window - 2:
            raise ValueError(
                f"stride {self.stride} must be under the window's text tokens ({self.window - 2})"
            )
        return self

    @property
    def reads_vectors(self) -> bool:
        """The head scores windows from the graph's `vector` output."""
        return self.head is not None and self.head.reads == "vectors"

    def check(self, max_len: int, classes: int | None = None, vector: int | None = None) -> None:
        """ValueError where the windows do not fit the model (or its head, its labels and the
        size of its `vector` output, None where it has none)."""
        if self.window > max_len:
            raise ValueError(f"long_texts.window {self.window} is over the model's max_len {max_len}")
        head = self.head
        if head is None or classes is None:
            return
        if head.reads == "logits" and head.width != classes:
            raise ValueError(f"the document head reads {head.width} logits; the model has {classes}")
        if head.reads == "vectors" and (vector is None or head.width != vector + classes):
            has = "no 'vector' output" if vector is None else f"a 'vector' output of {vector}"
            raise ValueError(
                f"the document head reads [vector; logits] of {head.width} values; the model has {has} "
                f"and {classes} logits"
            )

    @classmethod
    def default(cls, max_len: int) -> LongTexts:
        """Windows of the model's length, sharing about a quarter of their text tokens."""
        window = max(max_len, 3)
        stride = (window - 2) // 4
        return cls(window=window, stride=stride, max_windows=MAX_WINDOWS)
