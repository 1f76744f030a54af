"""Learning-rate schedules, as pure functions of where the run is.

The learning rate at any moment is ``base * warmup * drop_factor ** drops`` where

* ``warmup`` rises linearly from 0 to 1 over the first ``warmup_epochs``;
* ``drops`` counts the drops passed: epochs in ``drops`` (``step``), minutes in
  ``drops`` (``minutes``), or drops decided on a plateau of the center's test
  loss (``plateau``: ``patience`` evaluations without improvement).

Every worker computes the same value from the same inputs (epochs from its own
step count, minutes and plateau decisions agreed at evaluations), so the
workers' learning rates never diverge.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Schedule:
    """The schedule of a run, and the plateau state it needs."""

    base_lr: float
    kind: str = "constant"
    drops: Sequence[float] = ()
    drop_factor: float = 0.1
    patience: int = 3
    warmup_epochs: float = 0.0
    plateau_drops: int = 0
    best_loss: float = math.inf
    bad_evaluations: int = 0
    history: list[float] = field(default_factory=list)

    def lr(self, epoch: float, minutes: float) -> float:
        """The learning rate at fractional ``epoch`` and wall-clock ``minutes``."""
        warm = 1.0 if self.warmup_epochs <= 0 else min(1.0, epoch / self.warmup_epochs)
        if self.kind == "step":
            passed = bisect.bisect_right(sorted(self.drops), epoch)
        elif self.kind == "minutes":
            passed = bisect.bisect_right(sorted(self.drops), minutes)
        elif self.kind == "plateau":
            passed = self.plateau_drops
        else:
            passed = 0
        return self.base_lr * warm * self.drop_factor**passed

    def observe(self, test_loss: float) -> bool:
        """Record an evaluation's loss (the same on every worker); True if the lr drops."""
        self.history.append(test_loss)
        if self.kind != "plateau":
            return False
        if test_loss < self.best_loss:
            self.best_loss, self.bad_evaluations = test_loss, 0
            return False
        self.bad_evaluations += 1
        if self.bad_evaluations >= self.patience:
            self.plateau_drops += 1
            self.bad_evaluations = 0
            self.best_loss = test_loss
            return True
        return False

    def state_dict(self) -> dict:
        return {"plateau_drops": self.plateau_drops, "best_loss": self.best_loss,
                "bad_evaluations": self.bad_evaluations, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.plateau_drops = state["plateau_drops"]
        self.best_loss = state["best_loss"]
        self.bad_evaluations = state["bad_evaluations"]
        self.history = list(state["history"])
