"""Progress within an epoch: steps, texts/s and time left, as a bar on a terminal.

When stderr is not a terminal (a log file, a pipe, CI) nothing is drawn: a redrawn bar
becomes one giant line there. Instead a line goes to the logger every ``log_every`` steps
(0: none). Validation summaries go to the logger either way.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from tqdm import tqdm

log = logging.getLogger(__name__)


def on_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class EpochProgress:
    """One bar per epoch, counting texts; ``update`` after each step."""

    def __init__(self, enabled: bool, epochs: int, *, log_every: int = 0) -> None:
        self.enabled = enabled and on_terminal()
        self.epochs = epochs
        self.log_every = 0 if self.enabled else log_every
        self._bar: tqdm[None] | None = None
        self._epoch = self._steps = self._step = self._texts = self._taken = 0
        self._started = time.perf_counter()

    def start(self, epoch: int, texts: int, steps: int, done_texts: int = 0, done_steps: int = 0) -> None:
        self.close()
        self._epoch, self._steps, self._step, self._texts, self._taken = epoch, steps, done_steps, 0, 0
        self._started = time.perf_counter()
        if not self.enabled:
            return
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
            self._step, self._texts, self._taken = self._step + 1, self._texts + texts, self._taken + 1
            if self.log_every and self._step % self.log_every == 0:
                self._line(loss)
            return
        self._step += 1
        self._bar.set_postfix_str(f"step {self._step}/{self._steps} loss {loss:.3f}", refresh=False)
        self._bar.update(texts)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.refresh()  # the last step, even when it came sooner than mininterval
            self._bar.close()
            self._bar = None

    def _line(self, loss: float) -> None:
        seconds = time.perf_counter() - self._started
        rate = self._texts / max(seconds, 1e-9)
        left = (self._steps - self._step) * seconds / max(self._taken, 1)
        log.info("epoch %d/%d  step %d/%d  loss %.4f  %.1f texts/s  epoch ETA %.0f s",
                 self._epoch, self.epochs, self._step, self._steps, loss, rate, left)  # fmt: skip
