"""DiLoCo's eager outer steps (Kale et al. 2025, "Eager Updates For Overlapped
Communication and Computation in DiLoCo", https://arxiv.org/abs/2502.12996;
docs/algorithms.md, "DiLoCo with eager outer steps", gives the rule in full).

With ``outer="eager"`` the all-reduce of round ``t`` runs behind the whole next
inner phase. At round ``t`` worker ``m`` of ``M``, with ``θ_g^m`` its own copy of the
global parameters and ``x^m`` its state::

    Δ_t^m = θ_g^m - x^m                              its own pseudo-gradient
    start the all-reduce (mean) of Δ_t^m             lands at round t + 1 as Δ̄_t
    Δ̂     = Δ̄_{t-1} + (Δ_t^m - Δ_{t-1}^m) / M       Δ̄_{t-1} landed just now
    θ_g^m <- OuterNesterov(θ_g^m, grad = Δ̂)           torch.optim.SGD(nesterov)
    x^m   <- θ_g^m

Communicated per round: the all-reduce of ``Δ_t^m`` (the parameters' size; the
BatchNorm statistics are averaged apart, blocking), sent as it is when compressed.
A landed mean that is not finite is redone over the healthy workers, and a
diverged worker takes their mean ``θ_g``, ``Δ_{t-1}`` and outer momentum.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.comm.base import Among
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.strategies.averaging import AveragingRounds
from lsgd.strategies.health import sum_healthy_
from lsgd.strategies.pipeline import InFlight
from lsgd.names import OUTERS


def check_outer(owner: str, outer: Any, overlap: Any, merge: str | None) -> str:
    """``outer``, one of :data:`OUTERS`; eager takes no ``overlap`` (its transfer always
    spans the period) and no ``merge`` (its outer step is taken at once)."""
    _validate.choice(owner, "outer", outer, OUTERS)
    if outer == "eager" and overlap != 0:
        raise ValueError(f"{owner}: outer='eager' runs each round's all-reduce behind the "
                         "whole next period (it lands right before the next outer step), "
                         f"so it takes no overlap; got overlap={overlap!r}: leave it at 0 "
                         "or use outer='standard'")
    if outer == "eager" and merge is not None:
        raise ValueError(f"{owner}: merge={merge!r} says how a delayed outer step meets the "
                         "steps taken meanwhile; outer='eager' steps at once: drop merge")
    return str(outer)


class EagerOuter:
    """One worker's eager rounds: its last pseudo-gradient ``Δ_{t-1}^m`` (:attr:`own`)
    and the last mean that landed, ``Δ̄_{t-1}`` (:attr:`mean`), laid out like the state.

    ``rounds`` are the method's rounds (made with ``eager=True``: they send ``θ_g^m - x``
    and land a period later); ``global_state`` is ``θ_g^m``, ``outer_parts`` its outer
    optimizers, one per part.
    """

    def __init__(self, owner: str, comm: Communicator, state: list[torch.Tensor],
                 rounds: AveragingRounds, global_state: FlatBuffer,
                 outer_parts: list[torch.optim.Optimizer]) -> None:
        if getattr(comm, "elastic", False):
            raise ValueError(f"{owner}: outer='eager' keeps each all-reduce in flight for a "
                             "whole period, and an elastic round lands before the next one "
                             "starts: use outer='standard' for elastic training")
        self.comm = comm
        self.state = state
        self.rounds = rounds
        self.global_state = global_state
        self.outer_parts = outer_parts
        self.own = FlatBuffer(state)  # Δ_{t-1}^m, 0 before the first round
        self.mean = FlatBuffer(state)  # Δ̄_{t-1}, 0 before the first round

    def start(self, part: int, steps: int, among: Among = "world"
              ) -> tuple[InFlight, list[torch.Tensor]]:
        """Round ``t`` of ``part``: start the all-reduce of ``Δ_t^m = θ_g^m - x^m``, keep
        ``Δ_t^m``; returns the transfer and ``Δ̂``, the outer step's gradient."""
        parts = self.rounds.fragments
        now = self.rounds.current(part)
        fresh = torch._foreach_sub(parts.of(self.global_state, part), now)  # Δ_t^m
        item = self.rounds.start(part, steps, self.global_state, among)
        own = parts.of(self.own, part)
        direction = torch._foreach_sub(fresh, own)
        torch._foreach_div_(direction, float(self.comm.world_size))
        torch._foreach_add_(direction, parts.of(self.mean, part))
        torch._foreach_copy_(own, fresh)
        return item, direction

    def land(self, item: InFlight) -> bool:
        """The mean of a round has landed: it becomes ``Δ̄`` of its part; False (nothing
        kept) when it is not finite on some share."""
        mean = item.tensors["mean"]
        if not self.comm.all_agree(all_finite(mean)):
            return False
        torch._foreach_copy_(self.rounds.fragments.of(self.mean, int(item.info["fragment"])),
                             mean)
        return True

    def recover(self, part: int, among: Among, device: torch.device) -> tuple[bool, int]:
        """The rare path of a mean that is not finite: ``Δ̄`` of ``part`` from the healthy
        workers' ``Δ_{t-1}``; a diverged worker takes their mean ``θ_g``, ``Δ_{t-1}`` and
        outer momentum (every part). Returns (this worker healthy, healthy count): the
        caller resets a diverged worker to ``θ_g`` and raises when none is healthy."""
        parts = self.rounds.fragments
        thetas = [t for f in range(parts.count) for t in parts.of(self.global_state, f)]
        owns = [t for f in range(parts.count) for t in parts.of(self.own, f)]
        momenta = [o.state[p]["momentum_buffer"] for o in self.outer_parts
                   for group in o.param_groups for p in group["params"]
                   if "momentum_buffer" in o.state.get(p, {})]
        held = thetas + owns + momenta
        healthy = self.comm.all_agree(all_finite(held) and all_finite(self.state))
        sums = [t.clone() for t in held]
        count = sum_healthy_(self.comm.across, sums, healthy, among, device)
        if count == 0:
            return healthy, 0
        torch._foreach_div_(sums, float(count))
        width = len(self.own.buffers)
        own_sums = sums[len(thetas):len(thetas) + len(owns)]
        torch._foreach_copy_(parts.of(self.mean, part), own_sums[part * width:(part + 1) * width])
        if not healthy:
            torch._foreach_copy_(held, sums)
            for f in range(parts.count):
                self.rounds.put_together(self.global_state, f)
        return healthy, count

    def state_dict(self) -> dict[str, Any]:
        """``Δ_{t-1}^m`` and ``Δ̄_{t-1}`` (the transfers in flight are the strategy's)."""
        return {"own": [b.clone() for b in self.own.buffers],
                "mean": [b.clone() for b in self.mean.buffers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, flat in (("own", self.own), ("mean", self.mean)):
            for buffer, value in zip(flat.buffers, state[key]):
                buffer.copy_(value)
