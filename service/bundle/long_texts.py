"""How a model reads a text longer than its `max_len`: as overlapping windows.

A bundle may carry a long-text policy (`bundle.json`'s optional `long_texts`, written by
`attnserve-export ... --long-texts windows`): the window length in tokens (special tokens
included, at most `max_len`), the stride (the tokens two neighbouring windows share), the
most windows one text may have, and how the windows' answers are combined. A server started
with `--long-text windows` serves every version with its policy, or with `DEFAULT` sized to
the version's `max_len` where the bundle has none.

Standard library and pydantic only: part of the torch-free serving install.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# mean: the mean of the windows' logits, each window weighing 1/W; max: the window whose top
# probability is largest decides alone (weight 1, the others 0).
Combine = Literal["mean", "max"]
COMBINES: tuple[Combine, ...] = ("mean", "max")
MAX_WINDOWS = 16  # the most windows of one text when a policy names no limit


class LongTexts(BaseModel):
    """A model's long-text policy: windows of `window` tokens, neighbours sharing `stride`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int = Field(ge=3)  # tokens per window, the tokenizer's special tokens included
    stride: int = Field(ge=0)  # tokens two neighbouring windows share
    combine: Combine = "mean"
    max_windows: int = Field(MAX_WINDOWS, ge=1, le=4096)

    @model_validator(mode="after")
    def _stride_fits(self) -> LongTexts:
        # Each window moves on by its text tokens less the stride (tokenizers' overflow), and a
        # window keeps up to two tokens for the tokenizer's [CLS] and [SEP].
        if self.stride >= self.window - 2:
            raise ValueError(
                f"stride {self.stride} must be under the window's text tokens ({self.window - 2})"
            )
        return self

    def check(self, max_len: int) -> None:
        """ValueError where the windows do not fit the model."""
        if self.window > max_len:
            raise ValueError(f"long_texts.window {self.window} is over the model's max_len {max_len}")

    @classmethod
    def default(cls, max_len: int) -> LongTexts:
        """Windows of the model's length, sharing about a quarter of their text tokens."""
        window = max(max_len, 3)
        stride = (window - 2) // 4
        return cls(window=window, stride=stride, max_windows=MAX_WINDOWS)
