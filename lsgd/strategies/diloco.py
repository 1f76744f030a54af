"""DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of
Language Models", 2023, https://arxiv.org/abs/2311.08105): local steps of an
inner optimizer, and every ``period`` steps an outer Nesterov step on the
averaged pseudo-gradient (docs/algorithms.md, "DiLoCo").

Every worker holds an identical copy of the global parameters ``θ_g``. Every
``period`` (H) steps, with ``θ̄`` the mean of the workers' parameters::

    Δ   = θ_g - θ̄                    (the pseudo-gradient)
    v   <- μ v + Δ                     (torch.optim.SGD(nesterov=True) over θ_g,
    θ_g <- θ_g - lr_out (Δ + μ v)       no dampening or weight decay)
    θ   <- θ_g                         (on every worker)

with ``lr_out = outer_lr`` (0.7) and ``μ = outer_momentum`` (0.9, the paper's values).
Communicated per round: one all-reduce of the state (the round's options:
:mod:`lsgd.strategies.stages`). A non-finite mean is redone over the healthy workers,
and a diverged worker is reset to the new ``θ_g``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.flat import FlatBuffer
from lsgd.strategies.averaging import Averaging, AveragingOptions
from lsgd.strategies.stages.eager import check_outer, outer_round


class DiLoCo(Averaging):
    """Inner optimizer steps; every ``period`` steps an outer Nesterov step on the
    mean pseudo-gradient, from which every worker continues.

    Args:
        period: H, inner steps between outer steps.
        outer_lr: the outer learning rate (> 0; DiLoCo's 0.7).
        outer_momentum: its Nesterov momentum in [0, 1) (DiLoCo's 0.9; 0: plain SGD).
        outer: ``"standard"`` or ``"eager"`` (:mod:`lsgd.strategies.stages.eager`: the
            outer step at once while the round's mean travels for a whole period).
        options: the round's (:class:`~lsgd.strategies.stages.options.RoundOptions`;
            ``merge`` defaults to ``"mix"``) and the strategy's (``bn_buffers``:
            ``"average"`` or ``"local"``).

    ``global_state`` holds ``θ_g`` and ``outer_optimizers`` its outer SGD (one per
    fragment); ``center()`` is the mean of the workers' states.
    """

    name = "diloco"
    bn_modes = ("average", "local")
    rounds_average_state = True
    default_merge = "mix"
    round_takes = ("merge", "leader")
    reference_key = "global"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 period: int = 16, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 outer: str = "standard", **options: Unpack[AveragingOptions]) -> None:
        owner = type(self).__name__
        self.outer = check_outer(owner, outer, options.get("overlap", 0), options.get("merge"))
        if not _validate.is_number(outer_lr, finite=True) or outer_lr <= 0:
            raise ValueError(f"{owner}: outer_lr must be a finite number > 0, got {outer_lr!r}")
        self.outer_momentum = _validate.momentum(owner, "outer_momentum", outer_momentum)
        self.outer_lr = float(outer_lr)
        super().__init__(model, optimizer, period=period, **options)
        # θ_g, laid out like the state: the parameters, then (blocking rounds) the buffers.
        self.global_state = self._shared_copy()
        self._delta = FlatBuffer(self._state)  # Δ, the outer optimizer's .grad
        self._setup_round(reference=self.global_state)
        parts = self._round.parts
        # One outer optimizer per part, over its slice of θ_g (Δ's slice its .grad); with
        # the buffers in the state (one part), over the parameters only.
        self._buffer_regions: list[tuple[int, int]] = []  # the buffers' region of a slice
        if self._buffers_in_state:
            pieces, self._buffer_regions = parts.leading(self.global_state, self._delta,
                                                         len(list(model.parameters())))
        else:
            pieces = [(parts.of(self.global_state, f), parts.of(self._delta, f))
                      for f in range(parts.fragments.count)]
        self.outer_optimizers: list[torch.optim.Optimizer] = []
        for params, grads in pieces:
            for param, grad in zip(params, grads):
                param.grad = grad
            self.outer_optimizers.append(torch.optim.SGD(
                params, lr=self.outer_lr, momentum=self.outer_momentum,
                nesterov=self.outer_momentum > 0))
        self._round.attach(self.outer_optimizers)

    def _round_kind(self, owner: str) -> dict[str, Any]:
        return outer_round(owner, self.outer, self.period, self.plan)

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """The outer step on the part of θ_g, then the worker's part moves to it."""
        self._round.land(part, self._outer_step(part, mean, encoded), start)

    def _outer_step(self, part: int, mean: list[torch.Tensor], encoded: bool) -> list[torch.Tensor]:
        """``Δ = θ_g - θ̄`` on ``part`` (``encoded``: the mean received), the outer step;
        the buffers of θ_g take the mean. Returns the part of θ_g."""
        parts = self._round.parts
        theta, delta = parts.of(self.global_state, part), parts.of(self._delta, part)
        if encoded:  # the mean of θ_g - x, decoded identically on every worker
            torch._foreach_copy_(delta, mean)
        else:
            torch._foreach_copy_(delta, theta)
            torch._foreach_sub_(delta, mean)
        self.outer_optimizers[part].step()
        for t, m, (lo, hi) in zip(theta, mean, self._buffer_regions):
            t[lo:hi].copy_(m[lo:hi])  # the buffers: averaged, no outer step
        return theta

    def _recover(self, part: int, healthy: bool, count: int) -> list[torch.Tensor]:
        """The outer step on the healthy workers' mean; a diverged worker is reset to θ_g."""
        torch._foreach_div_(self._mean.buffers, float(count))
        theta = self._outer_step(part, self._round.parts.of(self._mean, part), False)
        if healthy:
            self._round.land(part, theta)
        return self.global_state.views

    def reset_target(self) -> list[torch.Tensor]:
        return self.global_state.views

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"outer_parts": [copy.deepcopy(o.state_dict()["state"])
                                                       for o in self.outer_optimizers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``θ_g`` and the outer momentum (``outer_lr`` stays this strategy's)."""
        if "outer_parts" not in state:
            raise ValueError(f"{self.name}.load_state_dict: this state was saved by lsgd 0.6 "
                             "or earlier; resume it with lsgd 0.10 and save it again")
        if [t.shape for t in state["global"]] != [b.shape for b in self.global_state.buffers]:
            raise ValueError(f"{self.name}.load_state_dict: the saved global parameters have "
                             "other shapes than this model's (another model, or bn_buffers)")
        saved = "eager" if "eager" in state else "standard"
        if saved != self.outer:
            raise ValueError(f"{self.name}.load_state_dict: the state was saved with "
                             f"outer={saved!r}, this strategy has outer={self.outer!r}; "
                             f"resume with outer={saved!r}")
        super().load_state_dict(state)
        for optimizer, saved_state in zip(self.outer_optimizers, state["outer_parts"]):
            optimizer.load_state_dict({"state": copy.deepcopy(dict(saved_state)),
                                       "param_groups": optimizer.state_dict()["param_groups"]})
