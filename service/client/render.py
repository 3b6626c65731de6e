"""What `attnserve-client` prints for people: classifications with their attention and
attribution, server timings with units, and the table of models.

On a terminal the attention is drawn as background colour behind each token with a
legend; when the output is piped (a file, `less`, a test) the same weights are written
as text, one token a line with its weight and a bar, so nothing is lost to missing colour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnserve.service.client.messages import Classification, TextResult
from attnserve.service.client.scores import SINGLE, Scoring, explained, problem_text, scores_view
from attnserve.service.client.windows import policy_text, print_windows
from attnserve.service.common.model_info import ModelInfo, ThreadInfo
from attnserve.service.common.vocabulary import AttentionKind, Attribution
from attnserve.service.common.weights import importance

_LEGEND_STEPS = 5
_BAR_WIDTH = 20
_TITLE_CHARS = 100
# Piped output has no width of its own; rich would assume 80 columns and fold every cell.
_PIPED_WIDTH = 10_000


def console() -> Console:
    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=_PIPED_WIDTH)


def _heat(level: float) -> str:
    red, green, blue = 255, int(255 - 150 * level), int(255 - 255 * level)
    return f"black on rgb({red},{green},{blue})"


def _levels(weights: np.ndarray) -> np.ndarray:
    peak = float(weights.max()) if weights.size else 0.0
    return np.clip(weights / peak, 0.0, 1.0) if peak > 0 else np.zeros_like(weights)


def _attention(out: Console, result: TextResult, mode: str) -> None:
    assert result.attention is not None
    weights = importance(result.attention)
    if result.attention.ndim == 1:
        out.print("attention (pooling weight of each token):")
    else:  # engine/request/attention.py `importance`: the last layer, mean over heads and query rows
        out.print(f"attention ({mode}: the share each token receives, mean over heads and queries):")
    if out.is_terminal:
        line = Text()
        for token, level in zip(result.tokens, _levels(weights).tolist(), strict=True):
            line.append(f" {token} ", style=_heat(level))
            line.append(" ")
        out.print(line)
        peak = float(weights.max())
        legend = Text("legend: ")
        for step in range(_LEGEND_STEPS):
            level = step / (_LEGEND_STEPS - 1)
            legend.append(f" {level * peak:.2f} ", style=_heat(level))
        out.print(legend)
        return
    width = max((len(token) for token in result.tokens), default=0)
    for token, weight, level in zip(result.tokens, weights.tolist(), _levels(weights).tolist(), strict=True):
        out.print(f"  {token:<{width}}  {weight:.3f}  {'#' * round(level * _BAR_WIDTH)}", highlight=False)


def _signed_heat(level: float) -> str:
    """A diverging colour: red for the label (level > 0), blue against it, white at 0."""
    fade = int(255 - 200 * abs(level))
    colour = f"rgb(255,{fade},{fade})" if level > 0 else f"rgb({fade},{fade},255)"
    return f"black on {colour}"


def _attribution(out: Console, result: TextResult, method: str, subject: str) -> None:
    """`subject`: the score explained, e.g. "p(positive)" or "the value"."""
    assert result.attribution is not None
    scores = result.attribution
    peak = float(np.abs(scores).max()) if scores.size else 0.0
    levels = (scores / peak).tolist() if peak > 0 else [0.0] * len(scores)
    out.print(
        f"attribution ({method}: what each word does to {subject}; + for it, - against; "
        f"{result.attribution_rows} forward rows):",
        highlight=False,
    )
    if out.is_terminal:
        line = Text()
        for token, level in zip(result.tokens, levels, strict=True):
            line.append(f" {token} ", style=_signed_heat(level))
            line.append(" ")
        out.print(line)
        legend = Text("legend: ")
        for level in (-1.0, -0.5, 0.0, 0.5, 1.0):
            legend.append(f" {level * peak:+.2f} ", style=_signed_heat(level))
        out.print(legend)
        return
    width = max((len(token) for token in result.tokens), default=0)
    for token, score, level in zip(result.tokens, scores.tolist(), levels, strict=True):
        bar = ("+" if level > 0 else "-") * round(abs(level) * _BAR_WIDTH)
        out.print(f"  {token:<{width}}  {score:+.3f}  {bar}", highlight=False)


def timings_text(timings_us: Mapping[str, int]) -> str:
    """`total 1.23 ms (tokenize 0.05 ms, queue 0.10 ms, inference 1.00 ms)`."""
    parts = ", ".join(
        f"{name} {value / 1000:.2f} ms"
        for name, value in timings_us.items()
        if name != "total" and (value or name != "attribution")  # attribution: only when asked
    )
    return f"total {timings_us.get('total', 0) / 1000:.2f} ms ({parts})"


def print_classification(
    reply: Classification,
    texts: Sequence[str],
    labels: Sequence[str],
    mode: str,
    method: str = Attribution.NONE.word,
    *,
    scoring: Scoring = SINGLE,
    attribution_label: str = "",
    combine: str = "",
) -> None:
    """`scoring`: what the model's scores mean (scores.py); `attribution_label`: the label the
    call asked the attribution to explain ("": each text's own); `combine`: how the model's
    windows decide ("mean" or "max"; windows.py)."""
    out = console()
    for text, result in zip(texts, reply.results, strict=True):
        out.print(text if len(text) <= _TITLE_CHARS else text[: _TITLE_CHARS - 3] + "...", highlight=False)
        for part in scores_view(result, labels, scoring):
            out.print(part, highlight=False)
        print_windows(out, text, result, labels, combine)
        if result.attention is not None:
            _attention(out, result, mode)
        if result.attribution is not None:
            _attribution(out, result, method, explained(result, scoring, attribution_label))
        if result.top_tokens:
            out.print("top tokens: " + ", ".join(f"{t.token} ({t.weight:.3f})" for t in result.top_tokens))
        if result.truncated:
            out.print("[yellow]truncated to the model's max_len[/yellow]")
        if result.answered_by:
            out.print(f"answered by the cascade's {result.answered_by}")
    out.print(f"[dim]{reply.model} v{reply.version}; server time {timings_text(reply.timings_us)}[/dim]")


def print_models(infos: Sequence[ModelInfo]) -> None:
    table = Table(
        "model",
        "version",
        "versions",
        "family",
        "labels",
        "scores",
        "max_len",
        "attention",
        "label graph",
        "long texts",
        "provider",
        "threads",
    )
    for info in infos:
        attention = info.attention_kind
        if attention == AttentionKind.LAYERS:
            attention += f" {info.attention_layers}x{info.attention_heads}"
        table.add_row(
            info.name,
            str(info.version),
            ",".join(map(str, info.versions)),
            info.family,
            ", ".join(info.labels),
            problem_text(info),
            str(info.max_len),
            attention,
            info.label_graph or "-",
            policy_text(info),
            info.provider,
            threads_text(info.threads),
        )
    console().print(table)


def threads_text(threads: ThreadInfo) -> str:
    """A version's intra-op threads and their source: "2 (measured: 4.1 ms at 1, 2.0 ms at 2)"."""
    count = "default" if threads.intra_op == 0 else str(threads.intra_op)
    one, many = threads.one_thread_ms, threads.all_cores_ms
    if threads.source == "measured" and one is not None and many is not None:
        return f"{count} (measured: {one:.1f} ms at 1, {many:.1f} ms at {threads.cores})"
    return f"{count} ({threads.source})"
