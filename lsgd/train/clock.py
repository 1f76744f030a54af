"""When a run evaluates, checkpoints and stops: decisions every worker takes alike (none may
be left alone in a collective), from values every worker has. Synchronously: the step count,
and for time budgets rank 0's clock, broadcast as ``"control"`` traffic about once a second of
training (with the steps until the next broadcast, at most ``CLOCK_SYNC_EVERY``, so that slow
steps stop within about a second of the budget) and at every evaluation on a step grid (so
that its row has the time of its own step). Asynchronously (``--async``): the workers' total
step count and latest clock, agreed at each sync point, the only place where they meet.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import lsgd
from lsgd.train.config import TrainConfig

CLOCK_SYNC_EVERY = 10  # most steps between broadcasts of rank 0's clock (time budgets only)
CLOCK_SYNC_SECONDS = 1.0  # the training time aimed at between two broadcasts
STATE = ("shared_seconds", "shared_steps", "next_eval", "next_checkpoint", "next_clock_sync")


class Pace:
    """The budgets of a run and its position against them, as all workers agree on it."""

    def __init__(self, cfg: TrainConfig, steps_per_epoch: int, strategy: lsgd.Strategy,
                 device: torch.device) -> None:
        self.cfg, self.strategy, self.device, self.comm = cfg, strategy, device, strategy.comm
        self.world, self.asynchronous = strategy.world_size, strategy.asynchronous
        budget = cfg.budgets()
        self.max_steps = min(budget.get("steps", math.inf), math.ceil(
            budget["epochs"] * steps_per_epoch) if "epochs" in budget else math.inf)
        self.max_seconds = budget.get("minutes", math.inf) * 60
        kind, every = cfg.eval_interval()
        if kind == "auto":  # ten evaluations per run
            kind, every = (("steps", max(1, int(self.max_steps) // 10)) if self.by_steps
                           else ("seconds", self.max_seconds / 10))
        assert every > 0, "validated: a zero interval would never move past the next evaluation"
        self.eval_kind, self.eval_every = kind, every
        self.uses_clock = (math.isfinite(self.max_seconds) or kind == "seconds"
                           or cfg.optim.schedule == "minutes")
        self.shared_seconds = 0.0  # rank 0's training clock, as last broadcast
        self.shared_steps = 0.0  # steps per worker all agree on (async: the mean)
        self.next_eval = every
        self.next_checkpoint = cfg.faults.checkpoint_every
        self.next_clock_sync = 1  # the step after which rank 0's clock is next broadcast

    @property
    def by_steps(self) -> bool:
        """Whether the budget is in steps (or epochs) rather than minutes."""
        return math.isfinite(self.max_steps)

    def mean_steps(self, steps: int) -> float:
        """Steps per worker: own (sync) or the workers' mean as last seen (async)."""
        return self.strategy.total_steps / self.world if self.asynchronous else steps

    def due(self, steps: int, train_seconds: float) -> tuple[bool, bool, bool]:
        """(evaluate now, checkpoint now, stop now), identical on every worker."""
        if self.asynchronous:
            if not self.strategy.at_sync_point:  # only sync points are common to all
                return False, False, False
            (self.shared_seconds,) = self.strategy.agree(train_seconds)
            self.shared_steps = self.strategy.total_steps / self.world  # exact after agree
        else:
            # An evaluation on the step grid reads the clock of its own step: it is due on
            # every worker alike, so rank 0's clock is broadcast there too.
            on_grid = self.eval_kind == "steps" and steps >= self.next_eval
            if self.uses_clock and (steps >= self.next_clock_sync or on_grid):
                # Rank 0's clock, and (its choice) how many steps until the next broadcast.
                gap = min(CLOCK_SYNC_EVERY, max(1, int(CLOCK_SYNC_SECONDS * steps
                                                       / max(train_seconds, 1e-9))))
                clock = torch.tensor([train_seconds, gap], dtype=torch.float64, device=self.device)
                with self.comm.category("control"):
                    self.comm.broadcast_(clock, src=0)
                self.shared_seconds = float(clock[0])
                self.next_clock_sync = steps + int(clock[1])
            self.shared_steps = steps
        stop = self.shared_steps >= self.max_steps or self.shared_seconds >= self.max_seconds
        position = self.shared_steps if self.eval_kind == "steps" else self.shared_seconds
        evaluate = position >= self.next_eval
        while self.next_eval <= position:
            self.next_eval += self.eval_every
        save = bool(self.cfg.faults.checkpoint_every) and self.shared_steps >= self.next_checkpoint
        if save:
            while self.next_checkpoint <= self.shared_steps:
                self.next_checkpoint += self.cfg.faults.checkpoint_every
        return evaluate, save and not stop, stop

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in STATE:
            if key in state:
                setattr(self, key, state[key])


def time_axis(cfg: TrainConfig, modeled: bool) -> str:
    """What the run's ``time`` column measures (``summary.json``'s ``time_axis``)."""
    if not modeled:
        return "wall-clock seconds of training"
    compute = (f"{cfg.step_seconds:g} s per local step" if cfg.step_seconds is not None
               else "measured compute")
    return f"simulated seconds: {compute} plus modeled transfers"
