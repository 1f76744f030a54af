"""DiLoCo's eager outer steps (Kale et al. 2025, "Eager Updates For Overlapped
Communication and Computation in DiLoCo", https://arxiv.org/abs/2502.12996;
docs/algorithms.md, "DiLoCo with eager outer steps").

The all-reduce of round ``t`` runs behind the whole next inner phase. At round ``t``
worker ``m`` of ``M``, with ``θ_g^m`` its own copy of the global parameters::

    Δ_t^m = θ_g^m - x^m                              its own pseudo-gradient
    start the all-reduce (mean) of Δ_t^m             lands at round t + 1 as Δ̄_t
    Δ̂     = Δ̄_{t-1} + (Δ_t^m - Δ_{t-1}^m) / M       Δ̄_{t-1} landed just now
    θ_g^m <- OuterNesterov(θ_g^m, grad = Δ̂)           torch.optim.SGD(nesterov)
    x^m   <- θ_g^m

Communicated per round: the all-reduce of ``Δ_t^m`` (the parameters; the BatchNorm
statistics are averaged apart). A landed mean that is not finite is redone over the
healthy workers, and a diverged worker takes their mean ``θ_g``, ``Δ_{t-1}`` and outer
momentum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm.communicator import Among
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.names import OUTERS
from lsgd.strategies.health import sum_healthy_
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.stages.options import RoundPlan
from lsgd.strategies.stages.round import Healing, Round


def check_outer(owner: str, outer: Any, overlap: Any, merge: str | None) -> str:
    """``outer``, one of :data:`OUTERS`; eager takes no ``overlap`` or ``merge``."""
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


class EagerRound(Round):
    """One worker's eager rounds: its last pseudo-gradient ``Δ_{t-1}^m`` (:attr:`own`)
    and the last mean that landed, ``Δ̄_{t-1}`` (:attr:`mean`). Its rounds send
    ``θ_g^m - x`` (``θ_g^m``: the reference) and land a period later; :meth:`attach`
    gives it the outer optimizers, one per part.
    """

    def __init__(self, owner: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(owner, *args, **kwargs)
        if getattr(self.comm, "elastic", False):
            raise ValueError(f"{owner}: outer='eager' keeps each all-reduce in flight for a "
                             "whole period, and an elastic round lands before the next one "
                             "starts: use outer='standard' for elastic training")
        self.own = FlatBuffer(self.parts.tensors)  # Δ_{t-1}^m, 0 before the first round
        self.mean = FlatBuffer(self.parts.tensors)  # Δ̄_{t-1}, 0 before the first round
        self.outer_parts: list[torch.optim.Optimizer] = []

    def attach(self, outer_parts: list[torch.optim.Optimizer]) -> None:
        self.outer_parts = outer_parts

    def begin(self, part: int, steps: int, among: Among) -> tuple[InFlight, list[torch.Tensor]]:
        """Start the all-reduce of ``Δ_t^m = θ_g^m - x^m``; returns it and ``Δ̂``."""
        assert self.reference is not None
        parts = self.parts
        fresh = torch._foreach_sub(parts.of(self.reference, part), parts.current(part))
        item = self.start(part, steps, among)
        own = parts.of(self.own, part)
        direction = torch._foreach_sub(fresh, own)
        torch._foreach_div_(direction, float(self.comm.world_size))
        torch._foreach_add_(direction, parts.of(self.mean, part))
        torch._foreach_copy_(own, fresh)
        return item, direction

    def arrive(self, item: InFlight) -> tuple[bool, list[torch.Tensor] | None]:
        """The landed mean becomes ``Δ̄`` of its part (nothing for the rule now)."""
        mean, _ = self.move.finish(item.tensors, None, None)
        if not self.comm.all_agree(all_finite(mean)):
            return False, None
        torch._foreach_copy_(self.parts.of(self.mean, int(item.info["fragment"])), mean)
        return True, None

    def heal(self, part: int, among: Among, plain: Callable[[int, Among], Healing],
             diverged: Callable[[], Exception]) -> Healing:
        """The rare path of a mean that is not finite: ``Δ̄`` of ``part`` from the healthy
        workers' ``Δ_{t-1}``; a diverged worker takes their mean ``θ_g``, ``Δ_{t-1}`` and
        outer momentum (every part), and is reset to ``θ_g``; none healthy raises."""
        assert self.reference is not None
        fragments = self.parts.fragments
        thetas = [t for f in range(fragments.count) for t in fragments.of(self.reference, f)]
        owns = [t for f in range(fragments.count) for t in fragments.of(self.own, f)]
        momenta = [o.state[p]["momentum_buffer"] for o in self.outer_parts
                   for group in o.param_groups for p in group["params"]
                   if "momentum_buffer" in o.state.get(p, {})]
        held = thetas + owns + momenta
        healthy = self.comm.all_agree(all_finite(held) and all_finite(self.parts.tensors))
        sums = [t.clone() for t in held]
        count = sum_healthy_(self.comm.across, sums, healthy, among, self.device)
        if count == 0:
            raise diverged()
        torch._foreach_div_(sums, float(count))
        width = len(self.own.buffers)
        first = len(thetas) + part * width  # the part's Δ_{t-1} sums, after the θ_g ones
        torch._foreach_copy_(fragments.of(self.mean, part), sums[first:first + width])
        if not healthy:
            torch._foreach_copy_(held, sums)
            for f in range(fragments.count):
                self.parts.put_together(self.reference, f)
        return healthy, count, self.reference.views

    def state(self) -> dict[str, Any]:
        """``Δ_{t-1}^m`` and ``Δ̄_{t-1}`` (the transfers in flight are the strategy's)."""
        state = super().state()
        state["eager"] = {"own": [b.clone() for b in self.own.buffers],
                          "mean": [b.clone() for b in self.mean.buffers]}
        return state

    def load(self, state: Mapping[str, Any], owner: str) -> None:
        super().load(state, owner)
        for key, flat in (("own", self.own), ("mean", self.mean)):
            torch._foreach_copy_(flat.buffers, list(state["eager"][key]))


def outer_round(owner: str, outer: str, period: int, plan: RoundPlan) -> dict[str, Any]:
    """The round options of DiLoCo's ``outer`` step: none for the standard step; eager:
    its kind of round, sending ``θ_g - x`` and landing a period later."""
    if outer != "eager":
        return {}
    if plan.leader != "none":
        raise ValueError(f"{owner}: leader={plan.leader!r} takes the standard outer step; "
                         "give outer='standard' or leader='none'")
    return {"kind": EagerRound, "difference": True, "overlap": period, "merge": "replace"}
