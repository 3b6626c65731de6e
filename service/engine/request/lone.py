"""When a lone call runs on the event loop rather than on a batcher thread.

A lone caller's call would otherwise cross two threads: the loop queues its row and wakes a
batcher thread, which runs the model and hands the call back (a self-pipe write and one more
loop iteration). With nothing else in flight the loop has nothing to do meanwhile, so the
batcher lets it run the call itself when `LonePolicy.decide` says so:

- a one-text call, while the server has no other call in flight (`alone`, from the gate's
  count as the engine took the call: calls count from their arrival), nothing is queued and
  no batch runs;
- when this call's own predicted run time is at most `LONE_MAX_RUN_S`: a slow call would
  hold up everything else the loop serves (health, metadata, the HTTP explorer, the next
  call's bytes). The prediction is the version's measured cost at the call's token count
  and attention mode (cost.py), plus how much longer than predicted the last one-text batch
  ran (the runner's own work, a busier machine); a quick call never vouches for a long one;
- not within `LONE_WINDOW_S` of calls last seen to overlap, and never for every
  `PROBE_EVERY`th lone call. grpc hands the loop one call at a time, and calls run on the
  loop one by one never overlap, so a burst would look like a string of lone calls; the
  probe goes to a thread, the loop reads what waits meanwhile, and the overlap it sees
  sends the burst back to the threads for as long as the load lasts.

Measured: docs/results/cost.md, "A lone call on the event loop".
"""

from __future__ import annotations

import math

LONE_WINDOW_S = 0.1  # after calls were last seen to overlap, none runs on the loop for this long
PROBE_EVERY = 8  # every 8th lone call runs on a thread, so that overlapping calls can be seen
LONE_MAX_RUN_S = 0.002  # the longest predicted run time of a call run on the loop


class LonePolicy:
    """One batcher's view of whether its calls come alone (called under the batcher's lock)."""

    __slots__ = ("_calls", "_excess_s", "_overlap_at")

    def __init__(self) -> None:
        self._overlap_at = -math.inf  # time.monotonic() when calls were last seen to overlap
        self._calls = 0  # lone calls so far (every PROBE_EVERY-th goes to a thread)
        # How much longer than predicted the last one-text batch ran (unknown until one ran).
        self._excess_s = math.inf

    def decide(self, now: float, count: int, busy: bool, predicted: float, alone: bool) -> bool:
        """Whether a call of `count` texts arriving at `now`, predicted to run `predicted`
        seconds (inf: unknown), runs on the loop (`busy`: rows are queued or a batch runs;
        `alone`: no other call was in the server when the engine took this one)."""
        if count != 1 or not predicted + self._excess_s <= LONE_MAX_RUN_S:
            return False
        if busy or not alone:
            self._overlap_at = now
            return False
        if now - self._overlap_at < LONE_WINDOW_S:
            return False
        self._calls += 1
        return self._calls % PROBE_EVERY != 0

    def ran(self, rows: int, seconds: float, predicted: float, overlapped: bool, ended: float) -> None:
        """A batch of `rows` ran for `seconds` (`predicted`: of one row) until `ended`;
        `overlapped`: rows arrived meanwhile."""
        if overlapped:
            self._overlap_at = ended
        if rows == 1 and predicted < math.inf:
            self._excess_s = max(0.0, seconds - predicted)
