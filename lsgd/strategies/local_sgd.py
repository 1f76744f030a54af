"""Local SGD: periodic model averaging, optionally hierarchical (Lin et al., "Don't
Use Large Mini-Batches, Use Local SGD", 2018, https://arxiv.org/abs/1808.07217).

Every ``period`` steps ``x <- mean over workers of x`` (one all-reduce of the state):
DiLoCo's round with the plain average as its outer step. With ``hierarchical=True``
and several groups, the average every ``period`` steps is taken inside each group and
every ``global_period`` steps across all workers (only the global one when both fall
due; docs/algorithms.md, "Local SGD"). A non-finite average is redone over the healthy
members, and a diverged member takes it; a group whose members all diverged waits for
the next global average.
"""

from __future__ import annotations

from typing import Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.strategies.averaging import Averaging, AveragingOptions
from lsgd.strategies.cadence import Cadence


class LocalSGD(Averaging):
    """Periodic model averaging.

    Args:
        period: tau, steps between averages (inside groups when hierarchical).
        hierarchical: average inside groups every ``period`` and across all
            every ``global_period`` (needs several groups).
        global_period: tau_G, a multiple of ``period`` (default ``4 * period``).
        options: the round's (:class:`~lsgd.strategies.stages.options.RoundOptions`, one
            level of averaging only; compressed, a worker sends ``r - x`` for ``r`` the
            last average) and the strategy's (``bn_buffers``: ``"average"`` or ``"local"``).
    """

    name = "local-sgd"
    supports_asynchronous = True
    bn_modes = ("average", "local")
    rounds_average_state = True
    round_takes = ("merge", "leader")
    counters = ("skipped_rounds",)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 period: int = 16, hierarchical: bool = False, global_period: int | None = None,
                 **options: Unpack[AveragingOptions]) -> None:
        super().__init__(model, optimizer, period=period, **options)
        global_period = 4 * self.period if global_period is None else global_period
        self.global_period = _validate.positive_int("LocalSGD", "global_period", global_period)
        if self.hides_rounds and hierarchical:
            raise ValueError("LocalSGD: overlap, fragments and compress work with one level "
                             "of averaging; drop hierarchical=True or them")
        self.hierarchical = bool(hierarchical) and 1 < self.comm.groups
        levels = None
        if self.hierarchical:
            _validate.multiple_of("LocalSGD", "global_period", self.global_period,
                                  "period", self.period)
            levels = [Cadence("global", self.global_period, "world")]
            if self.comm.info.group_size > 1:  # groups of one: only the global average
                levels.insert(0, Cadence("local", self.period, "group"))
        self.skipped_rounds = 0  # group averages skipped: the whole group had diverged
        # Compressed: the last average, the same on every worker, what rounds send the
        # difference from (the mean initial state with init="independent").
        self.reference = self._shared_copy() if self.compress != "none" else None
        self._setup_round(levels, reference=self.reference)

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """The part moves to the average (compressed: ``reference - mean``, the new reference)."""
        if encoded:
            assert self.reference is not None
            average = self._round.parts.of(self.reference, part)
            torch._foreach_sub_(average, mean)
            mean = average
        self._round.land(part, mean, start)

    def _recover(self, part: int, healthy: bool, count: int) -> list[torch.Tensor] | None:
        """Every healthy member takes the healthy mean, a diverged one is reset to it."""
        if count == 0:
            self.skipped_rounds += 1
            return None
        torch._foreach_div_(self._mean.buffers, float(count))
        if self.reference is not None:  # the new reference: the healthy mean
            self.reference.copy_from(self._mean.views)
        if healthy:
            self._mean.copy_to(self._state)
            return None
        return self._mean.views

