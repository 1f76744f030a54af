"""Learning-rate schedules on torch's schedulers, as functions of where the run is.

The learning rate is ``base * warmup * drop_factor ** drops``: ``warmup`` rises linearly from
0 to 1 over the first ``warmup_epochs``; ``drops`` counts the drops passed, at epochs
(``step``) or minutes (``minutes``) in ``drops``, or decided by ``ReduceLROnPlateau`` on the
center's test loss (``plateau``). ``cosine`` multiplies by ``f + (1 - f) (1 + cos(pi p)) / 2``
instead (``f = COSINE_FLOOR``), ``p`` in [0, 1] the larger of the run's fractions of its epoch
and minute budgets. ``LambdaLR`` applies the product, since the run's position is a fractional
epoch (the workers' mean, asynchronously) or minutes, not a count of ``scheduler.step()``
calls; every worker computes it from the same agreed inputs, so their rates never diverge.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

from lsgd.train.settings import SCHEDULES

#: Where ``cosine`` ends, as a multiple of the base learning rate.
COSINE_FLOOR = 0.1


class Schedule:
    """The learning rate of a run: :meth:`at` before every step with the run's
    position, :meth:`observe` with the center's test loss at every evaluation."""

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str = "constant",
                 drops: Sequence[float] = (), drop_factor: float = 0.1, patience: int = 3,
                 warmup_epochs: float = 0.0, horizon_epochs: float = math.inf,
                 horizon_minutes: float = math.inf) -> None:
        if kind not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {kind!r}")
        self.kind, self.drops = kind, sorted(drops)
        self.drop_factor, self.warmup_epochs = drop_factor, warmup_epochs
        self.horizon_epochs, self.horizon_minutes = horizon_epochs, horizon_minutes
        self.epoch = self.minutes = 0.0
        # The plateau factor: the lr of a one-parameter optimizer that ReduceLROnPlateau drops.
        self._plateau_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        # torch drops once the bad evaluations exceed its patience; ours once they reach it.
        self.plateau = ReduceLROnPlateau(self._plateau_opt, factor=drop_factor,
                                         patience=max(0, patience - 1), threshold=0.0)
        self.lambda_lr = LambdaLR(optimizer, lambda _: self.factor())

    def factor(self) -> float:
        """The multiple of the base learning rate at the current position."""
        warm = 1.0 if self.warmup_epochs <= 0 else min(1.0, self.epoch / self.warmup_epochs)
        if self.kind == "plateau":
            return warm * self._plateau_opt.param_groups[0]["lr"]
        if self.kind == "cosine":
            done = min(1.0, max(self.epoch / self.horizon_epochs,
                                self.minutes / self.horizon_minutes))
            return warm * (COSINE_FLOOR + (1 - COSINE_FLOOR) * (1 + math.cos(math.pi * done)) / 2)
        position = {"step": self.epoch, "minutes": self.minutes}.get(self.kind)
        passed = 0 if position is None else bisect.bisect_right(self.drops, position)
        return warm * self.drop_factor**passed

    def at(self, epoch: float, minutes: float) -> float:
        """Set the optimizer's learning rate for fractional ``epoch`` and ``minutes``; return it."""
        self.epoch, self.minutes = epoch, minutes
        with warnings.catch_warnings():
            # The rate is set before each step, for that step: not the order torch expects.
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.lambda_lr.step()
        return self.lambda_lr.get_last_lr()[0]

    def observe(self, test_loss: float) -> bool:
        """Record an evaluation's loss (the same on every worker); True if the lr drops."""
        if self.kind != "plateau":
            return False
        before = self._plateau_opt.param_groups[0]["lr"]
        self.plateau.step(test_loss)
        return self._plateau_opt.param_groups[0]["lr"] < before

    def state_dict(self) -> dict[str, Any]:
        return {"lambda": self.lambda_lr.state_dict(), "plateau": self.plateau.state_dict(),
                "plateau_factor": self._plateau_opt.param_groups[0]["lr"],
                "epoch": self.epoch, "minutes": self.minutes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lambda_lr.load_state_dict(state["lambda"])
        self.plateau.load_state_dict(state["plateau"])
        self._plateau_opt.param_groups[0]["lr"] = state["plateau_factor"]
        self.epoch, self.minutes = state["epoch"], state["minutes"]
