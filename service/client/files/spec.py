"""What a file job is asked to do (`FileJob`) and what it reports when it ends (`JobReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnserve.service.client.files.calls import Retry


@dataclass(frozen=True)
class FileJob:
    input: Path
    output: Path
    text_column: str = "text"
    input_format: str | None = None  # None: from the suffix
    output_format: str | None = None
    rejects: Path | None = None  # None: <output>.rejects.jsonl
    model: str = ""
    version: int = 0
    batch_size: int = 64
    workers: int = 4
    with_attention: bool = False  # add the tokens and each one's pooled attention
    # A text over max_len: "truncate", "reject" or "windows" (read whole; the rows gain `window`
    # and `windows`); "": the server's --long-text.
    long_text: str = ""
    prefix: str = ""  # before the added column names
    resume: bool = False
    overwrite: bool = False
    retry: Retry = field(default_factory=Retry)
    progress_every: float = 5.0  # seconds between progress lines off a terminal
    # Stop, as `stop.set()` does, once this many rows are done in this run (the batches in
    # flight still finish): a file in slices, each carried on with resume=True.
    stop_after: int | None = None

    def rejects_path(self) -> Path:
        return self.rejects or self.output.with_name(self.output.name + ".rejects.jsonl")


@dataclass(frozen=True)
class JobReport:
    rows_done: int  # input rows written or rejected, earlier runs included
    rejected: int
    retries: int  # calls repeated while the server was busy or away
    total: int | None
    stopped: str | None  # None: complete; else why it stopped ("SIGINT", "SIGTERM", a refusal)
    seconds: float
