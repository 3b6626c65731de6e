"""How far a file job is: a bar on a terminal (rich), a line every few seconds elsewhere
(a log, a pipe, CI), both with rows/s, rows left and errors."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def on_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class JobProgress:
    """`advance(rows, rejected)` after each batch written; a context manager."""

    def __init__(
        self, total: int | None, done: int, *, every: float = 5.0, stream: TextIO | None = None
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.total, self.done, self.rejected, self.every = total, done, 0, every
        self._start_done = done
        self._start = self._last = time.monotonic()
        self._bar: Progress | None = None
        if on_terminal(self.stream):
            self._bar = Progress(
                TextColumn("classifying"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} rows/s, {task.fields[rejected]} rejected"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task("rows", total=total, completed=done, rate="-", rejected=0)

    def __enter__(self) -> JobProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def rate(self) -> float:
        seconds = time.monotonic() - self._start
        return (self.done - self._start_done) / seconds if seconds > 0 else 0.0

    def line(self) -> str:
        left = "?" if self.total is None else str(max(0, self.total - self.done))
        of = "" if self.total is None else f"/{self.total}"
        return f"{self.done}{of} rows, {self.rate():.1f} rows/s, {left} left, {self.rejected} rejected"

    def advance(self, rows: int, rejected: int) -> None:
        self.done += rows
        self.rejected += rejected
        if self._bar is not None:
            self._bar.update(
                self._task, completed=self.done, rate=f"{self.rate():.1f}", rejected=self.rejected
            )
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            print(self.line(), file=self.stream, flush=True)
