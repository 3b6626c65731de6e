"""The load test's own command-line options, added to Locust's parser.

Every option also reads an environment variable (`LOADTEST_<NAME>`), so docker-compose and
Kubernetes jobs can set them without touching the command.
"""

from __future__ import annotations

from typing import Any

from attnserve.service.common.vocabulary import AttentionMode
from loadtest.session import MODES


def add_options(parser: Any) -> None:
    """Register the load test's options on Locust's parser (each also reads LOADTEST_<NAME>)."""
    group = parser.add_argument_group("attnserve load test")
    add = group.add_argument
    add("--model", default="", env_var="LOADTEST_MODEL", help="model name (empty: the server's only model)")
    add(
        "--loop",
        choices=("closed", "open"),
        default="closed",
        env_var="LOADTEST_LOOP",
        help="closed: each user waits for its reply; open: constant arrival rate (--rate)",
    )
    add(
        "--rate",
        type=float,
        default=100.0,
        env_var="LOADTEST_RATE",
        help="open loop: calls per second, all users",
    )
    add(
        "--max-inflight",
        type=int,
        default=1024,
        env_var="LOADTEST_MAX_INFLIGHT",
        help="open loop: most calls in flight (over it an arrival is dropped and counted as not sent)",
    )
    add(
        "--think-time",
        type=float,
        default=0.0,
        env_var="LOADTEST_THINK_TIME",
        help="closed loop: seconds a user waits between calls",
    )
    add(
        "--lengths",
        default="0.4,0.35,0.2,0.05",
        env_var="LOADTEST_LENGTHS",
        help="weights of short, medium, long and over-length texts",
    )
    add("--attention-share", type=float, default=0.3, env_var="LOADTEST_ATTENTION_SHARE",
        help="share of calls asking for attention")  # fmt: skip
    add("--attention-mode", choices=sorted(MODES), default=AttentionMode.POOLED.word,
        env_var="LOADTEST_ATTENTION_MODE", help="attention mode of native calls that ask for it")  # fmt: skip
    add(
        "--batch-share",
        type=float,
        default=0.2,
        env_var="LOADTEST_BATCH_SHARE",
        help="share of calls carrying several texts",
    )
    add(
        "--max-batch", type=int, default=32, env_var="LOADTEST_MAX_BATCH", help="most texts in a batched call"
    )
    add("--deadline-share", type=float, default=0.1, env_var="LOADTEST_DEADLINE_SHARE",
        help="share of calls with a short deadline (--deadline-ms)")  # fmt: skip
    add("--deadline-ms", type=float, default=250.0, env_var="LOADTEST_DEADLINE_MS",
        help="the short deadline, in milliseconds")  # fmt: skip
    add(
        "--timeout",
        type=float,
        default=30.0,
        env_var="LOADTEST_TIMEOUT",
        help="deadline (s) of calls drawn without one",
    )
    add(
        "--bad-share",
        type=float,
        default=0.05,
        env_var="LOADTEST_BAD_SHARE",
        help="share of deliberately invalid requests (expected errors)",
    )
    add("--texts-file", default="", env_var="LOADTEST_TEXTS_FILE", help="sentences to draw from, one a line")
    add("--seed", type=int, default=0, env_var="LOADTEST_SEED", help="seed of the request mix")
    add(
        "--channels",
        type=int,
        default=4,
        env_var="LOADTEST_CHANNELS",
        help="gRPC connections shared by the users (more spread over --workers and replicas)",
    )
    add(
        "--metrics",
        default="",
        env_var="LOADTEST_METRICS",
        help="server /metrics to reconcile with: HOST:PORT (every address of HOST) or URLs, comma-separated",
    )
    add(
        "--settle-timeout",
        type=float,
        default=15.0,
        env_var="LOADTEST_SETTLE_TIMEOUT",
        help="seconds to wait for the server's counters to catch up after the run",
    )


class _Recorder:
    """Stands in for Locust's parser to list the options (for `python -m loadtest --help`)."""

    def __init__(self) -> None:
        self.options: list[tuple[str, dict[str, Any]]] = []

    def add_argument_group(self, title: str) -> _Recorder:
        return self

    def add_argument(self, flag: str, **kwargs: Any) -> None:
        self.options.append((flag, kwargs))


def describe() -> str:
    """One line per option: flag, environment variable, default and help."""
    recorder = _Recorder()
    add_options(recorder)
    lines = []
    for flag, kwargs in recorder.options:
        text = kwargs.get("help", "")
        choices = kwargs.get("choices")
        if choices:
            text = f"{text} ({'|'.join(choices)})".strip()
        lines.append(f"  {flag} (env {kwargs['env_var']}, default {kwargs['default']!r}) {text}".rstrip())
    return "\n".join(lines)
