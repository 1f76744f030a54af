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

with ``lr_out = outer_lr`` (0.7) and ``μ = outer_momentum`` (0.9, the paper's
values). Communicated per round: one all-reduce of the state. Hidden rounds:
:mod:`lsgd.strategies.averaging`; eager outer steps: :mod:`lsgd.strategies.eager`.
Diverged workers: the mean is redone over the healthy workers, and a diverged
worker is reset to the new ``θ_g``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.base import Among
from lsgd.flat import FlatBuffer
from lsgd.strategies import leader_force
from lsgd.strategies.averaging import Averaging, part_of
from lsgd.strategies.base import Options
from lsgd.strategies.eager import EagerOuter, check_outer
from lsgd.strategies.pipeline import InFlight


class DiLoCo(Averaging):
    """Inner optimizer steps; every ``period`` steps an outer Nesterov step on the
    mean pseudo-gradient, from which every worker continues.

    Args:
        period: H, inner steps between outer steps.
        outer_lr: the outer learning rate (> 0; DiLoCo's 0.7).
        outer_momentum: its Nesterov momentum in [0, 1) (DiLoCo's 0.9; 0: plain SGD).
        overlap: K in ``[0, period)``, steps between a round's all-reduce and its outer step.
        fragments: F, parts of the state sent in turn, one every ``period / F`` steps.
        compress: ``"none"``, ``"bf16"`` or ``"int8"``: the pseudo-gradients' wire format.
        merge: with overlap, how the outer step meets the steps taken meanwhile:
            ``"mix"`` (default), ``"keep"`` or ``"replace"`` (:mod:`lsgd.strategies.averaging`).
        error_feedback: with compression, add what the codec lost of the last
            pseudo-gradient into the next one.
        leader: ``"none"`` (default), ``"weights"`` or ``"pull"``: the leader's force,
            the worker of the lowest recent training loss elected at every round
            (:mod:`lsgd.strategies.leader_force`). ``"weights"``: ``θ̄ = (Σ_m x_m + c x_L)
            / (M + c)``; ``"pull"``: after the outer step ``θ_g <- θ_g + λ (x_L - θ_g)``
            (one broadcast of the leader's state per round). ``step(loss)`` then
            needs the loss.
        leader_weight: c >= 0 of ``"weights"`` (default 1.0).
        leader_pull: λ in [0, 1] of ``"pull"`` (default 0.5).
        outer: ``"standard"`` (default) or ``"eager"``: each worker steps at once on
            ``Δ̄_{t-1} + (Δ_t^m - Δ_{t-1}^m) / M`` while the mean of its own ``Δ_t^m``
            travels for a whole period (:mod:`lsgd.strategies.eager`); takes no
            ``overlap`` or ``merge``.
        comm, init, bn_buffers: see :class:`~lsgd.strategies.base.Strategy`
            (``bn_buffers``: ``"average"`` or ``"local"``).

    ``global_state`` holds ``θ_g`` and ``outer_optimizers`` its outer SGD (one per
    region of the state this process updates: one, or one per fragment);
    ``center()`` is the mean of the workers' states (one all-reduce, ``"eval"`` traffic).
    """

    name = "diloco"
    bn_modes = ("average", "local")
    rounds_average_state = True
    default_merge = "mix"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        period: int = 16,
        outer_lr: float = 0.7,
        outer_momentum: float = 0.9,
        overlap: int = 0,
        fragments: int = 1,
        compress: str = "none",
        merge: str | None = None,
        error_feedback: bool = False,
        leader: str = "none",
        leader_weight: float | None = None,
        leader_pull: float | None = None,
        outer: str = "standard",
        **options: Unpack[Options],
    ) -> None:
        self.outer = check_outer("DiLoCo", outer, overlap, merge)
        eager = self.outer == "eager"
        self.period = _validate.positive_int("DiLoCo", "period", period)
        if not _validate.is_number(outer_lr, finite=True) or outer_lr <= 0:
            raise ValueError(f"DiLoCo: outer_lr must be a finite number > 0, got {outer_lr!r}")
        self.outer_momentum = _validate.momentum("DiLoCo", "outer_momentum", outer_momentum)
        self.outer_lr = float(outer_lr)
        self._hidden("DiLoCo", self.period, overlap, fragments, compress, merge, eager=eager)
        self._force = leader_force.make("DiLoCo", leader, leader_weight, leader_pull)
        if eager and leader != "none":
            raise ValueError(f"DiLoCo: leader={leader!r} takes the standard outer step; "
                             "give outer='standard' or leader='none'")
        super().__init__(model, optimizer, **options)
        # θ_g, laid out like the state: the parameters, then (blocking rounds) the buffers.
        self.global_state = self._shared_copy()
        self._delta = FlatBuffer(self._state)  # Δ, the outer optimizer's .grad
        self._setup_rounds(error_feedback, eager=eager)
        self._parameters = len(list(model.parameters()))
        parts = self._averaging.fragments
        # One outer optimizer per part, over its slice of θ_g (Δ's slice its .grad), this
        # process's share of it with replicas; with the buffers in the state (one part),
        # over the parameters only: their views, or their region of the share.
        self._buffer_regions: list[tuple[int, int]] = []  # per flat buffer, of the share
        if self._buffers_in_state and self.comm.share[1] == 1:
            pieces = [(self.global_state.views[: self._parameters],
                       self._delta.views[: self._parameters])]
        elif self._buffers_in_state:
            pieces, self._buffer_regions = self._parameter_regions()
        else:
            pieces = [(parts.of(self.global_state, f), parts.of(self._delta, f))
                      for f in range(parts.count)]
        self.outer_optimizers: list[torch.optim.Optimizer] = []
        for params, grads in pieces:
            for param, grad in zip(params, grads):
                param.grad = grad
            self.outer_optimizers.append(torch.optim.SGD(
                params, lr=self.outer_lr, momentum=self.outer_momentum,
                nesterov=self.outer_momentum > 0))
        self._eager = EagerOuter("DiLoCo", self.comm, self._state, self._averaging,
                                 self.global_state, self.outer_optimizers) if eager else None

    def _reference(self) -> FlatBuffer:
        return self.global_state

    def _parameter_regions(self) -> tuple[list[tuple[list[torch.Tensor], list[torch.Tensor]]],
                                          list[tuple[int, int]]]:
        """This process's share of θ_g (and Δ) where it holds parameters, and the region
        of the share (offsets into it, per flat buffer) that holds buffers."""
        ends = [0] * len(self.global_state.buffers)  # where each buffer's parameters end
        for index, offset, shape in self.global_state._layout[: self._parameters]:
            ends[index] = max(ends[index], offset + shape.numel())
        params, grads, regions = [], [], []
        for (lo, hi), end, theta, delta in zip(self._averaging.fragments.bounds[0], ends,
                                               self.global_state.buffers,
                                               self._delta.buffers):
            if lo < end:
                params.append(theta[lo:min(hi, end)])
                grads.append(delta[lo:min(hi, end)])
            regions.append((max(lo, end) - lo, hi - lo))
        return [(params, grads)], regions

    def _run_rounds(self, names: list[str]) -> None:
        if self._eager is None:
            return super()._run_rounds(names)
        part = part_of(names[-1])  # eager: the all-reduce starts, the outer step at once
        item, direction = self._eager.start(part, self.steps)
        self._launch(item)
        self.rounds += 1
        self._rule(part, direction, True, None)

    def _apply(self, item: InFlight) -> None:
        if self._eager is None:
            return super()._apply(item)
        if self._eager.land(item):  # eager: the mean lands, for the next round's step
            return
        healthy, count = self._eager.recover(int(item.info["fragment"]), "world",
                                             self._device())
        if count == 0:
            raise self._diverged_error()
        if not healthy:
            self._reset_to(self.global_state.views)

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """DiLoCo's round: the outer step on the part of θ_g, then the worker's part
        moves to it (merged with the steps taken since the round)."""
        theta = self._outer_step(part, mean, encoded)
        self._averaging.land(part, theta, start)

    def _outer_step(self, part: int, mean: list[torch.Tensor], encoded: bool
                    ) -> list[torch.Tensor]:
        """``Δ = θ_g - θ̄`` on ``part`` (``encoded``: Δ is the mean received), the outer
        optimizer's step; the buffers of θ_g take the mean. Returns the part of θ_g."""
        parts = self._averaging.fragments
        theta, delta = parts.of(self.global_state, part), parts.of(self._delta, part)
        if encoded:  # the mean of θ_g - x, decoded identically on every worker
            torch._foreach_copy_(delta, mean)
        else:
            torch._foreach_copy_(delta, theta)
            torch._foreach_sub_(delta, mean)
        self.outer_optimizers[part].step()
        n = self._parameters
        if self._buffer_regions:  # a share: its buffers' region takes the mean
            for t, m, (lo, hi) in zip(theta, mean, self._buffer_regions):
                t[lo:hi].copy_(m[lo:hi])
        elif self._buffers_in_state and len(self._state) > n:  # averaged, no outer step
            torch._foreach_copy_(self.global_state.views[n:],
                                 self.global_state.views_of(mean)[n:])
        self._pull_to_leader(theta)  # leader="pull": θ_g <- θ_g + λ (x_L - θ_g)
        self._averaging.put_together(self.global_state, part)
        return theta

    def _recover(self, part: int, healthy: bool, count: int, among: Among) -> None:
        """The outer step on the healthy workers' mean; a diverged worker is reset to θ_g."""
        torch._foreach_div_(self._mean.buffers, float(count))
        theta = self._outer_step(part, self._averaging.fragments.of(self._mean, part), False)
        if healthy:
            self._averaging.land(part, theta)
        else:
            self._reset_to(self.global_state.views)

    def reset_target(self) -> list[torch.Tensor]:
        return self.global_state.views

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["global"] = [b.clone() for b in self.global_state.buffers]
        state["outer_parts"] = [copy.deepcopy(o.state_dict()["state"]) for o in self.outer_optimizers]
        if self._eager is not None:
            state["eager"] = self._eager.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``θ_g`` and the outer momentum; the outer hyperparameters stay this
        strategy's own (``outer_lr``, ``outer_momentum``)."""
        if "outer_parts" not in state:
            raise ValueError("DiLoCo.load_state_dict: this state was saved by lsgd 0.6 or "
                             "earlier; resume it with lsgd 0.10 and save it again")
        saved_global = list(state["global"])
        if [t.shape for t in saved_global] != [b.shape for b in self.global_state.buffers]:
            raise ValueError("DiLoCo.load_state_dict: the saved global parameters have other "
                             "shapes than this model's (another model, or bn_buffers)")
        if ("eager" in state) != (self._eager is not None):
            saved = "eager" if "eager" in state else "standard"
            raise ValueError(f"DiLoCo.load_state_dict: the state was saved with "
                             f"outer={saved!r}, this strategy has outer={self.outer!r}; "
                             f"resume with outer={saved!r}")
        super().load_state_dict(state)
        if self._eager is not None:
            self._eager.load_state_dict(state["eager"])
        for buffer, value in zip(self.global_state.buffers, saved_global):
            buffer.copy_(value)
        for optimizer, saved in zip(self.outer_optimizers, state["outer_parts"]):
            optimizer.load_state_dict({"state": copy.deepcopy(dict(saved)),
                                       "param_groups": optimizer.state_dict()["param_groups"]})
