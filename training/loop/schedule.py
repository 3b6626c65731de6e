"""The learning rate over a run: a linear warmup, then a cosine or linear decay to 0 at the
planned end, and a plan that can shrink to fit a wall-clock budget."""

from __future__ import annotations

import math

from attnserve.training.loop.config import TrainConfig

# Share of the budget left that further steps may take: the rest is for the last
# validation and for writing the run directory.
BUDGET_SHARE = 0.95
PLAN_AFTER_STEPS = 10  # steps taken before the first plan from the budget
# The first steps of a session pay for start-up (allocations, kernel choices, threads; on a
# GPU the first step took 10x a later one): they are not timed.
WARM_STEPS = 2


class LearningRate:
    """The factor of ``cfg.lr`` at each step (a ``LambdaLR`` lambda).

    A callable object rather than a closure: ``LambdaLR.state_dict`` saves its attributes, so a
    resumed run continues the same plan.
    """

    def __init__(self, cfg: TrainConfig, steps: int) -> None:
        self.kind = cfg.schedule
        self.warmup_fraction = cfg.warmup_fraction
        self.planned = max(steps, 1)  # the plan before any budget shortened it
        self.plan(steps)

    def plan(self, steps: int) -> None:
        """End the decay after ``steps`` steps (the warmup is its share of them)."""
        self.total = max(steps, 1)
        self.warmup = max(int(self.warmup_fraction * self.total), 1)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        done = min((step - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        if self.kind == "linear":
            return 1.0 - done
        return 0.5 * (1.0 + math.cos(math.pi * done))


def budget_steps(steps_done: int, pace: float, seconds: float, budget: float) -> int:
    """The run's steps when what is left of ``budget`` goes at ``pace`` seconds a step.

    ``seconds`` of the budget are spent; ``steps_done`` counts the run's steps over every
    session. The pace after a validation includes the validations' share.
    """
    return steps_done + int(max(budget - seconds, 0.0) * BUDGET_SHARE / max(pace, 1e-9))
