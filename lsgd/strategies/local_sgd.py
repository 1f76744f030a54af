"""Local SGD: periodic model averaging, optionally hierarchical (Lin et al., "Don't
Use Large Mini-Batches, Use Local SGD", 2018, https://arxiv.org/abs/1808.07217).

Every ``period`` steps ``x <- mean over workers of x`` (one all-reduce of the
state). With ``hierarchical=True`` and several groups, the average every
``period`` steps is taken inside each group and every ``global_period`` steps
across all workers; when both fall on one step only the global one is taken
(docs/algorithms.md, "Local SGD"). Overlapped, fragmented and compressed
averages: :mod:`lsgd.strategies.averaging`. Diverged workers: a non-finite
average is redone over the healthy members, and a diverged member takes it;
a group average whose whole group diverged is skipped until the next global one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.base import Among
from lsgd.flat import FlatBuffer
from lsgd.strategies import leader_force
from lsgd.strategies.averaging import Averaging
from lsgd.strategies.base import Options
from lsgd.strategies.cadence import Cadence


class LocalSGD(Averaging):
    """Periodic model averaging.

    Args:
        period: tau, steps between averages (inside groups when hierarchical).
        hierarchical: average inside groups every ``period`` and across all
            every ``global_period`` (needs several groups).
        global_period: tau_G, a multiple of ``period`` (default ``4 * period``).
        overlap, fragments, compress, merge, error_feedback: overlapped,
            fragmented and compressed averages, as :class:`~lsgd.strategies.diloco.DiLoCo`
            with outer learning rate 1 and no momentum (not hierarchical; see
            :mod:`lsgd.strategies.averaging`); ``merge`` defaults to ``"keep"``.
        leader, leader_weight, leader_pull: the leader's force, as
            :class:`~lsgd.strategies.diloco.DiLoCo`'s (not hierarchical or asynchronous):
            ``"weights"`` averages ``(Σ_m x_m + c x_L) / (M + c)``, ``"pull"`` moves the
            average ``x̄ <- x̄ + λ (x_L - x̄)`` (:mod:`lsgd.strategies.leader_force`).
        comm, init, bn_buffers, asynchronous: see
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
        overlap: int = 0,
        fragments: int = 1,
        compress: str = "none",
        merge: str | None = None,
        error_feedback: bool = False,
        leader: str = "none",
        leader_weight: float | None = None,
        leader_pull: float | None = None,
        **options: Unpack[Options],
    ) -> None:
        self.period = _validate.positive_int("LocalSGD", "period", period)
        self.global_period = _validate.positive_int(
            "LocalSGD", "global_period", 4 * self.period if global_period is None else global_period
        )
        hidden = self._hidden("LocalSGD", self.period, overlap, fragments, compress, merge,
                              options.get("asynchronous", False))
        self._force = leader_force.make("LocalSGD", leader, leader_weight, leader_pull)
        if hidden and hierarchical:
            raise ValueError("LocalSGD: overlap, fragments and compress work with one level "
                             "of averaging; drop hierarchical=True or them")
        super().__init__(model, optimizer, **options)
        self.hierarchical = bool(hierarchical) and 1 < self.comm.groups
        if self.hierarchical:
            _validate.multiple_of("LocalSGD", "global_period", self.global_period,
                                  "period", self.period)
        self.skipped_rounds = 0  # group averages skipped: the whole group had diverged
        # Compressed: the last average, the same on every worker, what rounds send the
        # difference from (the mean initial state with init="independent").
        self.reference: FlatBuffer | None = None
        if self.compress != "none":
            self.reference = self._shared_copy()
        levels = None
        if self.hierarchical and self.comm.info.group_size > 1:
            levels = [Cadence("local", self.period, "group"),
                      Cadence("global", self.global_period, "world")]
        elif self.hierarchical:  # groups of one: only the global average moves anything
            levels = [Cadence("global", self.global_period, "world")]
        self._setup_rounds(error_feedback, levels)

    def _reference(self) -> FlatBuffer | None:
        return self.reference

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """The worker's part moves to the average (merged with the steps since the
        round); compressed, the reference becomes it (the mean received is that of
        ``reference - x``)."""
        if encoded:
            assert self.reference is not None
            average = self._averaging.fragments.of(self.reference, part)
            torch._foreach_sub_(average, mean)
            mean = average
        self._pull_to_leader(mean)  # leader="pull": x̄ <- x̄ + λ (x_L - x̄)
        self._averaging.land(part, mean, start)
        if self.reference is not None:
            self._averaging.put_together(self.reference, part)

    def _recover(self, part: int, healthy: bool, count: int, among: Among) -> None:
        """Every healthy member takes the healthy mean, a diverged one is reset to it; a
        group whose members all diverged waits for the global average."""
        if count == 0:
            self.skipped_rounds += 1
            return
        torch._foreach_div_(self._mean.buffers, float(count))
        if healthy:
            self._mean.copy_to(self._state)
        else:
            self._reset_to(self._mean.views)
        if self.reference is not None:
            self.reference.copy_from(self._state)

    def _report_fields(self) -> dict[str, Any]:
        return {"details": {"skipped_rounds": self.skipped_rounds}}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["skipped_rounds"] = self.skipped_rounds
        if self.reference is not None:
            state["reference"] = [b.clone() for b in self.reference.buffers]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.skipped_rounds = int(state.get("skipped_rounds", 0))
        if self.reference is not None:
            for buffer, value in zip(self.reference.buffers, state["reference"]):
                buffer.copy_(value)
