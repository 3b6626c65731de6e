"""What one text costs a model version, measured once when the version starts serving.

The lone path (lone.py) runs a call on the event loop only when that call is quick, and a
call's run time depends on the call itself: its token count and what it asks of the
attention output (none, one map, every layer's maps, a rollout that multiplies them). So
each served version is timed on one padded text at a short and at its longest length, per
`CostClass`, the model run and the attention extraction together, and `TextCost.seconds`
holds the chord between the two points at every length, per request: the predictor reads a
one-text call's entry itself. Run time grows with length at least linearly (attention maps
and rollout faster than that), so the chord lies above the curve: the prediction errs on the
slow side. Until the measurement is done every call is unknown (inf).
"""

from __future__ import annotations

import enum
import time

import numpy as np

from attnserve.service.bundle import AttentionKind
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attention import SUPPORTED, as_layers, extract

SHORT_TOKENS = 8  # the short length measured (shorter texts are predicted at this cost)
REPEATS = 2  # runs per point; the quickest counts (the first may still allocate)


class CostClass(enum.IntEnum):
    """What a text asks the model for, from cheapest to dearest."""

    LOGITS = 0  # no attention output
    MAP = 1  # the attention output and one [n, n] or [H, n, n] map out of it
    ALL = 2  # every layer's maps
    ROLLOUT = 3  # every layer's maps multiplied


def cost_class(mode: AttentionMode, top_k: int) -> CostClass:
    """The class of a text in `mode` (top_k alone ranks tokens by the pooled map)."""
    if mode == AttentionMode.ALL:
        return CostClass.ALL
    if mode == AttentionMode.ROLLOUT:
        return CostClass.ROLLOUT
    if mode == AttentionMode.NONE and top_k == 0:
        return CostClass.LOGITS
    return CostClass.MAP


_PROBES = {  # the mode each class is timed with
    CostClass.MAP: AttentionMode.LAST_LAYER,
    CostClass.ALL: AttentionMode.ALL,
    CostClass.ROLLOUT: AttentionMode.ROLLOUT,
}


class TextCost:
    """Predicted seconds of a one-text batch, per request and length (inf until measured)."""

    def __init__(self) -> None:
        self.short = SHORT_TOKENS
        self.longest = SHORT_TOKENS
        # per class: (seconds at `short`, seconds at `longest`); a class missing is unknown
        self._points: dict[CostClass, tuple[float, float]] = {}
        # Per (mode, whether top tokens are asked), the seconds at each length 0..longest: the
        # predictor reads a one-text call's entry itself. A request missing is unknown (inf).
        self.seconds: dict[tuple[AttentionMode, bool], list[float]] = {}

    def describe(self) -> str:
        """The measured points, for the log: "logits 0.3/4.1 ms, ..." at short/longest tokens."""
        points = ", ".join(
            f"{cost.name.lower()} {short * 1000:.2f}/{longest * 1000:.2f} ms"
            for cost, (short, longest) in sorted(self._points.items())
        )
        return f"{points} at {self.short}/{self.longest} tokens"

    def measure(self, model: LoadedModel) -> None:
        """Time the version's one-text batches (blocking: seconds for a large model at 512
        tokens; run it off the event loop). Calls may be served meanwhile."""
        longest = model.manifest.max_len
        short = min(SHORT_TOKENS, longest)
        kind = model.attention_kind
        probes: dict[CostClass, AttentionMode | None] = {CostClass.LOGITS: None}
        if kind == AttentionKind.POOL:  # one map only: every attention class costs what it costs
            probes.update(dict.fromkeys(_PROBES, AttentionMode.POOLED))
        else:
            probes.update({c: mode for c, mode in _PROBES.items() if mode in SUPPORTED[kind]})
        points: dict[CostClass, tuple[float, float]] = {}
        for cost, mode in probes.items():
            at = [min(_time(model, mode, length) for _ in range(REPEATS)) for length in (short, longest)]
            points[cost] = (at[0], at[1])
        lines = {cost: _chord(*at, short, longest) for cost, at in points.items()}
        self.short, self.longest = short, longest
        self._points = points
        self.seconds = {
            (mode, top): lines[cost_class(mode, top)]
            for mode in AttentionMode
            for top in (False, True)
            if cost_class(mode, top) in lines
        }


def _chord(at_short: float, at_longest: float, short: int, longest: int) -> list[float]:
    """Seconds at each length 0..longest on the line through the two points measured (at
    `short` tokens and below: the short point's)."""
    slope = (at_longest - at_short) / (longest - short) if longest > short else 0.0
    return [at_short + max(0, length - short) * slope for length in range(longest + 1)]


def _time(model: LoadedModel, mode: AttentionMode | None, length: int) -> float:
    """Seconds of one text of `length` tokens: the run, and the extraction of `mode` (None: none)."""
    ids = np.ones((1, length), dtype=np.int64)  # any id in the vocabulary: the time is the same
    kind = model.attention_kind
    started = time.perf_counter()
    outputs = model.session_for(mode is not None).run(ids, np.ones_like(ids), mode is not None)
    if mode is not None:
        layers = outputs[1] if kind == AttentionKind.POOL else as_layers(outputs[1], kind)
        np.asarray(extract(layers, kind, 0, length, mode))
    return time.perf_counter() - started
