"""Local SGD: periodic model averaging, optionally hierarchical.

Every ``period`` steps ``x <- mean over workers of x`` (one all-reduce of the
state). With ``hierarchical=True`` and several groups, the average every
``period`` steps is taken inside each group and every ``global_period`` steps
across all workers (as PyTorch's ``HierarchicalModelAverager``); when both fall
on one step only the global average is taken, since it subsumes the other.
After an average the replicas of the averaged set are identical.

Diverged workers (a state with a NaN or infinite value): when an average
comes out non-finite (the same on every member, so all agree without a
message), it is redone over the healthy members only: each all-reduces its
state if finite and zeros otherwise, plus the healthy count (one float64,
``"control"`` traffic), and the sum is divided by that count. Every member
then holds the healthy mean; a diverged member's optimizer state is cleared
(``report().resets``). With no healthy worker among all, every worker raises
:class:`~lsgd.strategies.base.DivergedError`; a group average whose whole
group diverged is skipped (``details["skipped_rounds"]``) and the next global
average resets the group. A healthy round costs one finiteness check of the
average (one synchronisation) and nothing else.

With ``asynchronous=True`` the ``r``-th average falls due when all workers
together have taken ``r * W * period`` steps (``r * W * global_period`` for the
global one; see :mod:`lsgd.strategies.rounds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.comm.base import Among
from lsgd.flat import FlatBuffer
from lsgd.strategies.base import Strategy
from lsgd.functional import all_finite
from lsgd.strategies.rounds import Cadence


class LocalSGD(Strategy):
    """Periodic model averaging.

    Args:
        period: tau, steps between averages (inside groups when hierarchical).
        hierarchical: average inside groups every ``period`` and across all
            every ``global_period`` (needs several groups).
        global_period: tau_G, a multiple of ``period`` (default ``4 * period``).
        comm, init, sync_buffers, bn_buffers, asynchronous: see
            :class:`~lsgd.strategies.base.Strategy` (``bn_buffers``: ``"average"``, in the
            round's all-reduce, or ``"local"``).
    """

    name = "local-sgd"
    supports_asynchronous = True
    bn_modes = ("average", "local")
    rounds_average_state = True

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        period: int = 16,
        hierarchical: bool = False,
        global_period: int | None = None,
        comm: Communicator | None = None,
        init: str = "broadcast",
        sync_buffers: bool = True,
        bn_buffers: str | None = None,
        asynchronous: bool = False,
    ) -> None:
        self.period = _validate.positive_int("LocalSGD", "period", period)
        self.global_period = _validate.positive_int(
            "LocalSGD", "global_period", 4 * self.period if global_period is None else global_period
        )
        super().__init__(model, optimizer, comm=comm, init=init, sync_buffers=sync_buffers,
                         bn_buffers=bn_buffers, asynchronous=asynchronous)
        self.hierarchical = bool(hierarchical) and 1 < self.comm.groups
        if self.hierarchical:
            _validate.multiple_of("LocalSGD", "global_period", self.global_period,
                                  "period", self.period)
        self._mean = FlatBuffer(self._state)
        self.skipped_rounds = 0  # group averages skipped: the whole group had diverged
        if not self.hierarchical:
            self._use_cadences([Cadence("global", self.period, "world")])
        elif self.comm.info.group_size > 1:
            self._use_cadences([Cadence("local", self.period, "group"),
                                Cadence("global", self.global_period, "world")])
        else:  # groups of one: only the global average moves anything
            self._use_cadences([Cadence("global", self.global_period, "world")])

    def _round(self, names: list[str]) -> None:
        # When both fall due together the global average subsumes the local one.
        among: Among = "world" if "global" in names else "group"
        self._average_into(self._mean, among)
        if all_finite(self._mean.buffers):
            self._mean.copy_to(self._state)
        else:
            self._average_healthy(among)
        self.rounds += 1

    def _average_healthy(self, among: Among) -> None:
        """The average again over the healthy members; diverged ones are reset to it."""
        healthy, count = self._healthy_sum_into(self._mean, among)
        if count == 0:  # a whole group diverged (a group round): left to the global round
            self.skipped_rounds += 1
            return
        torch._foreach_div_(self._mean.buffers, float(count))
        if healthy:
            self._mean.copy_to(self._state)
        else:
            self._reset_to(self._mean.views)

    def _report_fields(self) -> dict[str, Any]:
        return {"details": {"skipped_rounds": self.skipped_rounds}}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["skipped_rounds"] = self.skipped_rounds
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.skipped_rounds = int(state.get("skipped_rounds", 0))
