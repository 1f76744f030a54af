"""DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of
Language Models", 2023): local steps of an inner optimizer, and every
``period`` steps an outer Nesterov step on the averaged pseudo-gradient
(docs/algorithms.md, "DiLoCo").

Every worker holds an identical copy of the global parameters ``θ_g`` (a flat
buffer), which start as the worker's parameters after the initial broadcast
(the mean of the workers' initial parameters with ``init="independent"``).
Each worker runs its own inner optimizer (its state is kept across rounds, as
in DiLoCo). Every ``period`` (H) steps, with ``θ̄`` the mean of the workers'
parameters (one all-reduce of the state)::

    Δ   = θ_g - θ̄                    (the pseudo-gradient)
    v   <- μ v + Δ                     (torch.optim.SGD(nesterov=True) over θ_g,
    θ_g <- θ_g - lr_out (Δ + μ v)       no dampening or weight decay)
    θ   <- θ_g                         (on every worker)

with ``lr_out = outer_lr`` (default 0.7) and ``μ = outer_momentum`` (default
0.9, the paper's values); ``μ = 0`` is plain SGD, and ``outer_lr=1,
outer_momentum=0`` is local SGD. Every worker applies the same step to the
same ``θ̄``, so the copies of ``θ_g`` and ``v`` stay identical. With
``sync_buffers=True`` the floating buffers (BatchNorm statistics) travel in
the same all-reduce and are simply averaged: there is no outer step for
buffers. **Communicated per round:** one all-reduce of the state, the same
bytes as a round of local SGD, and nothing else.

Diverged workers (a state with a NaN or infinite value), as in local SGD:
when ``θ̄`` comes out non-finite (the same on every worker, so all agree
without a message), the mean is redone over the healthy workers only (each
all-reduces its state if finite and zeros otherwise, plus the healthy count,
one float64 of ``"control"`` traffic). The outer step then takes that mean;
healthy workers continue from the new ``θ_g``, and a diverged worker is reset
to it with its inner optimizer state cleared (``report().resets``). With no
healthy worker every worker raises
:class:`~lsgd.strategies.health.DivergedError`. A healthy round costs one
finiteness check of the mean (one synchronisation) and nothing else.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.strategies.averaging import AveragingRounds, check_merge, index
from lsgd.strategies.base import Strategy
from lsgd.strategies.pipeline import InFlight, Pipeline, check_options
from lsgd.strategies.schedule import Cadence


class DiLoCo(Strategy):
    """Inner optimizer steps; every ``period`` steps an outer Nesterov step on the
    mean pseudo-gradient, from which every worker continues.

    Args:
        period: H, inner steps between outer steps.
        outer_lr: the outer optimizer's learning rate (> 0; DiLoCo's 0.7).
        outer_momentum: its Nesterov momentum, in [0, 1) (DiLoCo's 0.9; 0 is
            plain SGD).
        overlap: K, steps between the start of a round's all-reduce and its outer
            step (0: at once, the round blocks); in ``[0, period)``.
        fragments: F, parts of the state sent in turn, one every ``period / F``
            steps (1: the whole state every ``period`` steps).
        compress: ``"none"``, ``"bf16"`` or ``"int8"``: the pseudo-gradients'
            wire format.
        merge: with overlap, how the outer step meets the inner steps taken
            while it was in flight: ``"mix"`` (default: half the new global state,
            half the worker's), ``"keep"`` or ``"replace"``
            (:mod:`lsgd.strategies.averaging`).
        error_feedback: with compression, each worker adds what the codec lost of
            its last pseudo-gradient into its next one.
        comm, init, sync_buffers, bn_buffers: see :class:`~lsgd.strategies.base.Strategy`
            (``bn_buffers``: ``"average"``, in the round's all-reduce, or ``"local"``;
            with any of the options above, in a blocking all-reduce of their own
            at each round).

    ``global_state`` holds ``θ_g``; ``center()`` is the mean of the workers'
    states (one all-reduce, ``"eval"`` traffic), which is ``θ_g`` right after
    a round.
    """

    name = "diloco"
    supports_elastic = True
    supports_hidden_rounds = True
    bn_modes = ("average", "local")
    rounds_average_state = True

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
        comm: Communicator | None = None,
        init: str = "broadcast",
        sync_buffers: bool = True,
        bn_buffers: str | None = None,
    ) -> None:
        self.period = _validate.positive_int("DiLoCo", "period", period)
        if not _validate.is_number(outer_lr, finite=True) or outer_lr <= 0:
            raise ValueError(f"DiLoCo: outer_lr must be a finite number > 0, got {outer_lr!r}")
        self.outer_momentum = _validate.momentum("DiLoCo", "outer_momentum", outer_momentum)
        self.outer_lr = float(outer_lr)
        self.overlap, self.fragments, self.compress = check_options(
            "DiLoCo", self.period, overlap, fragments, compress, False)
        self.merge = check_merge("DiLoCo", merge, self.overlap, "mix")
        pipelined = bool(self.overlap or self.fragments > 1 or self.compress != "none")
        if pipelined:  # the state is the parameters; buffers are averaged on their own
            self.rounds_average_state = False
        super().__init__(model, optimizer, comm=comm, init=init, sync_buffers=sync_buffers,
                         bn_buffers=bn_buffers)
        # The state is the parameters, then the floating buffers: θ_g is its first part.
        self._parameters = len(list(model.parameters()))
        self.global_state = FlatBuffer(self._state[: self._parameters])
        self.global_state.copy_from(self._state[: self._parameters])
        if self.init == "independent":
            with self.comm.category("init"):
                for buffer in self.global_state.buffers:
                    self.comm.all_reduce_(buffer, op="mean")
        self._delta = FlatBuffer(self.global_state.views)  # Δ, the outer optimizer's .grad
        for buffer, grad in zip(self.global_state.buffers, self._delta.buffers):
            buffer.grad = grad
        self._mean = FlatBuffer(self._state)
        self._hidden_rounds: AveragingRounds | None = None
        if not pipelined:
            self.outer_optimizer = self._outer_sgd(self.global_state.buffers)
            self._use_cadences([Cadence("global", self.period, "world")])
            return
        self._hidden_rounds = AveragingRounds(
            self.comm, self._state, fragments=self.fragments, overlap=self.overlap,
            compress=self.compress, merge=self.merge, error_feedback=bool(error_feedback))
        parts = self._hidden_rounds.fragments
        # One outer optimizer per fragment, over its slice of θ_g (Δ's slice its .grad).
        self._outer_parts = []
        for f in range(parts.count):
            pieces = parts.of(self.global_state, f)
            for piece, grad in zip(pieces, parts.of(self._delta, f)):
                piece.grad = grad
            self._outer_parts.append(self._outer_sgd(pieces))
        self.outer_optimizer = self._outer_parts[0]
        self._pipeline = Pipeline()
        self._use_cadences(parts.cadences(self.period))

    def _outer_sgd(self, params: list[torch.Tensor]) -> torch.optim.SGD:
        return torch.optim.SGD(params, lr=self.outer_lr, momentum=self.outer_momentum,
                               nesterov=self.outer_momentum > 0)

    def _run_rounds(self, names: list[str]) -> None:
        if self._hidden_rounds is not None:  # overlapped, in fragments or compressed
            (fragment,) = (index(n) for n in names)
            self._launch(self._hidden_rounds.start(fragment, self.steps, self.global_state))
            self.rounds += 1
            return
        self._average_into(self._mean)
        healthy = all_finite(self._mean.buffers)  # a finite mean: every worker is healthy
        if not healthy:  # the rare path: the mean of the healthy workers instead
            healthy, count = self._healthy_sum_into(self._mean)
            torch._foreach_div_(self._mean.buffers, float(count))
        self._outer_step()
        if healthy:
            self._mean.copy_to(self._state)
        else:
            self._reset_to(self._mean.views)
        self.rounds += 1

    def _outer_step(self) -> None:
        """``Δ = θ_g - θ̄``, the outer optimizer's step on ``θ_g``, and ``θ_g`` written
        over the parameter part of ``self._mean`` (its buffers stay the average)."""
        mean_parameters = self._mean.views[: self._parameters]
        self._delta.copy_from(self.global_state.views)
        torch._foreach_sub_(self._delta.views, mean_parameters)
        self.outer_optimizer.step()
        torch._foreach_copy_(mean_parameters, self.global_state.views)

    def _apply(self, item: InFlight) -> None:
        """A fragment's mean has landed: the outer step on its slice of θ_g, then the
        worker's slice moves to it (merged with the steps taken since the round)."""
        assert self._hidden_rounds is not None
        mean, fragment = item.tensors["mean"], item.info["fragment"]
        if not all_finite(mean):  # the rare path: every worker to the healthy mean
            self._recover()
            return
        parts = self._hidden_rounds.fragments
        theta, delta = parts.of(self.global_state, fragment), parts.of(self._delta, fragment)
        if self.compress == "none":  # the mean of the states: Δ = θ_g - mean
            torch._foreach_copy_(delta, theta)
            torch._foreach_sub_(delta, mean)
        else:  # the mean of θ_g - x, decoded identically on every worker
            torch._foreach_copy_(delta, mean)
        self._outer_parts[fragment].step()
        self._hidden_rounds.land(item, theta)

    def _recover(self) -> None:
        """A round's mean was NaN or infinite: θ_g and every worker go to the mean of the
        healthy workers' states (blocking, uncompressed); diverged workers are reset."""
        healthy, count = self._healthy_sum_into(self._mean)
        torch._foreach_div_(self._mean.buffers, float(count))
        self.global_state.copy_from(self._mean.views)
        if healthy:
            self._mean.copy_to(self._state)
        else:
            self._reset_to(self._mean.views)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["global"] = [b.clone() for b in self.global_state.buffers]
        if self._hidden_rounds is None:
            state["outer"] = copy.deepcopy(self.outer_optimizer.state_dict()["state"])
            return state
        state["outer_parts"] = [copy.deepcopy(o.state_dict()["state"]) for o in self._outer_parts]
        state["rounds_of"] = self._hidden_rounds.state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``θ_g`` and the outer momentum; the outer hyperparameters stay this
        strategy's own (``outer_lr``, ``outer_momentum``)."""
        super().load_state_dict(state)
        for buffer, value in zip(self.global_state.buffers, state["global"]):
            buffer.copy_(value)
        if self._hidden_rounds is None:
            _load_outer(self.outer_optimizer, state["outer"])
            return
        for optimizer, saved in zip(self._outer_parts, state["outer_parts"]):
            _load_outer(optimizer, saved)
        self._hidden_rounds.load(state["rounds_of"])


def _load_outer(optimizer: torch.optim.Optimizer, saved: Mapping[str, Any]) -> None:
    """The outer optimizer's momentum from a checkpoint; its hyperparameters stay."""
    optimizer.load_state_dict({"state": copy.deepcopy(dict(saved)),
                               "param_groups": optimizer.state_dict()["param_groups"]})
