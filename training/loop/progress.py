"""Progress within an epoch: steps, texts/s and time left, on a terminal only.

When stderr is not a terminal (a log file, a pipe, CI) nothing is drawn: a redrawn bar
becomes one giant line there. Epoch summaries go to the logger either way.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


def on_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class EpochProgress:
    """One bar per epoch, counting texts; ``update`` after each step."""

    def __init__(self, enabled: bool, epochs: int) -> None:
        self.enabled = enabled and on_terminal()
        self.epochs = epochs
        self._bar: tqdm[None] | None = None

    def start(self, epoch: int, texts: int, steps: int, done_texts: int = 0, done_steps: int = 0) -> None:
        self.close()
        if not self.enabled:
            return
        self._steps = steps
        self._step = done_steps
        self._bar = tqdm(
            total=texts,
            initial=done_texts,
            desc=f"epoch {epoch}/{self.epochs}",
            unit="text",
            leave=False,
            dynamic_ncols=True,
            mininterval=0.5,
            bar_format="{desc} {percentage:3.0f}%|{bar}| {postfix} {rate_fmt} ETA {remaining}",
            postfix=f"step {done_steps}/{steps}",
        )

    def update(self, texts: int, loss: float) -> None:
        if self._bar is None:
            return
        self._step += 1
        self._bar.set_postfix_str(f"step {self._step}/{self._steps} loss {loss:.3f}", refresh=False)
        self._bar.update(texts)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.refresh()  # the last step, even when it came sooner than mininterval
            self._bar.close()
            self._bar = None
