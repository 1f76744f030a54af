"""Elastic Averaging SGD (Zhang, Choromanska, LeCun, "Deep learning with Elastic
Averaging SGD", NeurIPS 2015, https://arxiv.org/abs/1412.6651), synchronous,
without a parameter server (docs/algorithms.md, "EASGD").

Every worker holds an identical copy of the center ``c``, which starts as the average
of the workers' initial states. Every ``period`` steps, with ``x_bar`` the mean of the
workers' states and ``alpha = moving_rate / W``::

    x <- x - alpha (x - c)             (c before its update)
    c <- c + moving_rate (x_bar - c)   (= c + alpha * sum_i (x_i - c))

Communicated per round: one all-reduce of the state. Diverged workers, and workers
absent from an elastic round, count as sitting at the center,
``x_bar' = (sum_{i healthy} x_i + (W - H) c) / W`` (one more state all-reduce and a
count ``H``); a diverged worker is reset to the new center.
"""

from __future__ import annotations

import copy
from typing import Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.functional import elastic_step_, pull_
from lsgd.strategies.averaging import Averaging, AveragingOptions
from lsgd.strategies.state import state_tensors


class EASGD(Averaging):
    """Synchronous EASGD with the center held identically by every worker.

    Args:
        moving_rate: beta in [0, 1] (default 0.43, the LSGD paper's); each
            worker's elastic pull is ``alpha = beta / W``.
        period: tau, local steps between rounds.
        options: the round's (:class:`~lsgd.strategies.stages.options.RoundOptions` but
            ``merge``; compressed, the workers send ``c - x``) and the strategy's.
    """

    name = "easgd"
    supports_asynchronous = True
    bn_modes = ("average", "pull", "local")
    default_merge = "replace"
    round_takes = ()
    reference_key = "center"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 moving_rate: float = 0.43, period: int = 16,
                 **options: Unpack[AveragingOptions]) -> None:
        self.moving_rate = _validate.fraction("EASGD", "moving_rate", moving_rate)
        super().__init__(model, optimizer, period=period, **options)
        self.alpha = self.moving_rate / self.world_size
        self.center_state = self._shared_copy()
        self._setup_round(reference=self.center_state)

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """The worker's part steps toward the center's, which moves toward ``x̄``."""
        center = self._round.parts.of(self.center_state, part)
        if encoded:  # the mean of c - x: x̄ = c - mean
            torch._foreach_neg_(mean)
            torch._foreach_add_(mean, center)
        members = self.comm.among_size("world")
        if members < self.world_size:
            torch._foreach_mul_(mean, members / self.world_size)
            torch._foreach_add_(mean, center, alpha=1 - members / self.world_size)
        self._round.land(part, center, weight=self.alpha)  # x <- x - α (x - c)
        pull_(center, mean, self.moving_rate)  # c <- c + β (x̄ - c)

    def _recover(self, part: int, healthy: bool, count: int) -> list[torch.Tensor]:
        """The round with ``x̄'``; a diverged worker is reset to the new center."""
        mean, center = self._mean.buffers, self.center_state.buffers
        torch._foreach_add_(mean, center, alpha=float(self.world_size - count))
        torch._foreach_div_(mean, float(self.world_size))
        if healthy:
            elastic_step_(self._state, self.center_state.views, self._mean.views,
                          self.alpha, self.moving_rate)
        else:
            pull_(self.center_state.views, self._mean.views, self.moving_rate)
        return self.center_state.views

    def center(self) -> nn.Module:
        """A copy of the model holding the center variable ``c`` (no communication)."""
        model = copy.deepcopy(self._module)
        self.center_state.copy_to(state_tensors(model, self._buffers_in_state))
        return model

    def reset_target(self) -> list[torch.Tensor]:
        return self.center_state.views
