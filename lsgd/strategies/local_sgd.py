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
:class:`~lsgd.strategies.health.DivergedError`; a group average whose whole
group diverged is skipped (``details["skipped_rounds"]``) and the next global
average resets the group. A healthy round costs one finiteness check of the
average (one synchronisation) and nothing else.

With ``asynchronous=True`` the ``r``-th average falls due when all workers
together have taken ``r * W * period`` steps (``r * W * global_period`` for the
global one; see :mod:`lsgd.strategies.schedule`).
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
from lsgd.functional import all_finite
from lsgd.strategies.averaging import AveragingRounds, check_merge, index
from lsgd.strategies.base import Strategy
from lsgd.strategies.pipeline import InFlight, Pipeline, check_options
from lsgd.strategies.schedule import Cadence


class LocalSGD(Strategy):
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
        comm, init, sync_buffers, bn_buffers, asynchronous: see
            :class:`~lsgd.strategies.base.Strategy` (``bn_buffers``: ``"average"``, in the
            round's all-reduce, or ``"local"``).
    """

    name = "local-sgd"
    supports_elastic = True
    supports_hidden_rounds = True
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
        self.overlap, self.fragments, self.compress = check_options(
            "LocalSGD", self.period, overlap, fragments, compress, asynchronous)
        self.merge = check_merge("LocalSGD", merge, self.overlap, "keep")
        pipelined = bool(self.overlap or self.fragments > 1 or self.compress != "none")
        if pipelined and hierarchical:
            raise ValueError("LocalSGD: overlap, fragments and compress work with one level "
                             "of averaging; drop hierarchical=True (--hierarchical) or them")
        if pipelined:  # the state is the parameters; buffers are averaged on their own
            self.rounds_average_state = False
        super().__init__(model, optimizer, comm=comm, init=init, sync_buffers=sync_buffers,
                         bn_buffers=bn_buffers, asynchronous=asynchronous)
        self.hierarchical = bool(hierarchical) and 1 < self.comm.groups
        if self.hierarchical:
            _validate.multiple_of("LocalSGD", "global_period", self.global_period,
                                  "period", self.period)
        self._mean = FlatBuffer(self._state)
        self.skipped_rounds = 0  # group averages skipped: the whole group had diverged
        self._hidden_rounds: AveragingRounds | None = None
        if pipelined:
            self._hidden_rounds = AveragingRounds(
                self.comm, self._state, fragments=self.fragments, overlap=self.overlap,
                compress=self.compress, merge=self.merge, error_feedback=bool(error_feedback))
            # The last average, the same on every worker: what compressed rounds send
            # the difference from (the mean initial state with init="independent").
            self.reference = FlatBuffer(self._state).copy_from(self._state)
            if self.init == "independent" and self.compress != "none":
                with self.comm.category("init"):
                    for buffer in self.reference.buffers:
                        self.comm.all_reduce_(buffer, op="mean")
            self._pipeline = Pipeline()
            self._use_cadences(self._hidden_rounds.fragments.cadences(self.period))
        elif not self.hierarchical:
            self._use_cadences([Cadence("global", self.period, "world")])
        elif self.comm.info.group_size > 1:
            self._use_cadences([Cadence("local", self.period, "group"),
                                Cadence("global", self.global_period, "world")])
        else:  # groups of one: only the global average moves anything
            self._use_cadences([Cadence("global", self.global_period, "world")])

    def _run_rounds(self, names: list[str]) -> None:
        if self._hidden_rounds is not None:  # overlapped, in fragments or compressed
            (fragment,) = (index(n) for n in names)
            self._launch(self._hidden_rounds.start(fragment, self.steps, self.reference))
            self.rounds += 1
            return
        # When both fall due together the global average subsumes the local one.
        among: Among = "world" if "global" in names else "group"
        self._average_into(self._mean, among)
        if all_finite(self._mean.buffers):
            self._mean.copy_to(self._state)
        else:
            self._average_healthy(among)
        self.rounds += 1

    def _apply(self, item: InFlight) -> None:
        """A fragment's average has landed: the worker's slice moves to it (merged with
        the steps taken since the round); compressed, the reference becomes it."""
        assert self._hidden_rounds is not None
        mean = item.tensors["mean"]
        if not all_finite(mean):  # the rare path: every worker to the healthy mean
            self._average_healthy("world")
            self.reference.copy_from(self._state)
            return
        if self.compress != "none":  # the mean of reference - x: the average is their difference
            average = self._hidden_rounds.fragments.of(self.reference, item.info["fragment"])
            torch._foreach_sub_(average, mean)
            mean = average
        self._hidden_rounds.land(item, mean)

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
        if self._hidden_rounds is not None:
            state["reference"] = [b.clone() for b in self.reference.buffers]
            state["rounds_of"] = self._hidden_rounds.state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.skipped_rounds = int(state.get("skipped_rounds", 0))
        if self._hidden_rounds is not None:
            for buffer, value in zip(self.reference.buffers, state["reference"]):
                buffer.copy_(value)
            self._hidden_rounds.load(state["rounds_of"])
