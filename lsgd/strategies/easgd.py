"""Elastic Averaging SGD (Zhang, Choromanska, LeCun, "Deep learning with Elastic
Averaging SGD", NeurIPS 2015), synchronous, without a parameter server.

Every worker holds an identical copy of the center ``c``, which starts as the
average of the workers' initial states. Every ``period`` steps, with
``x_bar`` the mean of the workers' states (one all-reduce) and
``alpha = moving_rate / W``::

    x <- x - alpha (x - c)          (c before its update)
    c <- c + moving_rate (x_bar - c)   (= c + alpha * sum_i (x_i - c))

Every worker applies the same center update to the same ``x_bar``, so the
copies of ``c`` stay identical. Communicated per round: one all-reduce of the
state. Elastic Averaging GD (EAGD) is this with ``period=1`` and full gradients.

Diverged workers (a state with a NaN or infinite value): when ``x_bar`` comes
out non-finite (every worker sees the same ``x_bar``, so all agree without a
message), the round is redone without them. Each worker all-reduces its state
if finite and zeros otherwise, plus the count ``H`` of healthy workers (one
float64, ``"control"`` traffic); this rare path costs one more state
all-reduce. A diverged worker counts as sitting at the center, which leaves
the elastic force of every healthy worker exactly as it was::

    x_bar' = (sum_{i healthy} x_i + (W - H) c) / W
    c <- c + moving_rate (x_bar' - c)   (= c + alpha * sum_{i healthy} (x_i - c))

Healthy workers take their usual ``x <- x - alpha (x - c)`` (old center); a
diverged worker is reset to the new center, its optimizer state cleared
(``report().resets``). With ``H = 0`` every worker raises
:class:`~lsgd.strategies.base.DivergedError`. A healthy round costs one
finiteness check of ``x_bar`` (one synchronisation) and nothing else.

With ``asynchronous=True`` round ``r`` falls due when all workers together
have taken ``r * W * period`` steps (see :mod:`lsgd.strategies.rounds`).
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
from lsgd.functional import elastic_step_, pull_
from lsgd.strategies.base import Strategy
from lsgd.functional import all_finite
from lsgd.strategies.rounds import Cadence


class EASGD(Strategy):
    """Synchronous EASGD with the center held identically by every worker.

    Args:
        moving_rate: beta in [0, 1] (default 0.43, the value the LSGD paper took
            from EASGD); the elastic pull of each worker is ``alpha = beta / W``.
        period: tau, local steps between rounds.
        comm, init, sync_buffers, bn_buffers, asynchronous: see
            :class:`~lsgd.strategies.base.Strategy` (``bn_buffers``: ``"average"``, the
            default, ``"pull"`` or ``"local"``).

    ``center()`` returns the center variable ``c`` (no communication).
    """

    name = "easgd"
    supports_asynchronous = True
    bn_modes = ("average", "pull", "local")

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        moving_rate: float = 0.43,
        period: int = 16,
        comm: Communicator | None = None,
        init: str = "broadcast",
        sync_buffers: bool = True,
        bn_buffers: str | None = None,
        asynchronous: bool = False,
    ) -> None:
        self.moving_rate = _validate.fraction("EASGD", "moving_rate", moving_rate)
        self.period = _validate.positive_int("EASGD", "period", period)
        super().__init__(model, optimizer, comm=comm, init=init, sync_buffers=sync_buffers,
                         bn_buffers=bn_buffers, asynchronous=asynchronous)
        self.alpha = self.moving_rate / self.world_size
        self.center_state = FlatBuffer(self._state).copy_from(self._state)
        self._mean = FlatBuffer(self._state)
        if self.init == "independent":
            with torch.no_grad(), self.comm.category("init"):
                for buffer in self.center_state.buffers:
                    self.comm.all_reduce_(buffer, op="mean")
        self._use_cadences([Cadence("global", self.period, "world")])

    def _round(self, names: list[str]) -> None:
        self._average_into(self._mean)
        if all_finite(self._mean.buffers):
            elastic_step_(self._state, self.center_state.views, self._mean.views,
                          self.alpha, self.moving_rate)
        else:
            self._round_without_diverged()
        self.rounds += 1

    def _round_without_diverged(self) -> None:
        """The round again, the diverged workers counted as sitting at the center.

        ``x_bar' = (sum of the healthy states + (W - H) c) / W``; healthy
        workers take the elastic step, diverged ones are reset to the new center.
        """
        healthy, count = self._healthy_sum_into(self._mean, "world")
        mean, center = self._mean.buffers, self.center_state.buffers
        torch._foreach_add_(mean, center, alpha=float(self.world_size - count))
        torch._foreach_div_(mean, float(self.world_size))
        if healthy:
            elastic_step_(self._state, self.center_state.views, self._mean.views,
                          self.alpha, self.moving_rate)
        else:
            pull_(self.center_state.views, self._mean.views, self.moving_rate)
            self._reset_to(self.center_state.views)

    def center(self) -> nn.Module:
        """A copy of the model holding the center variable ``c``."""
        replica = copy.deepcopy(self._module)
        self.center_state.copy_to(self._state_of(replica))
        return replica

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["center"] = [b.clone() for b in self.center_state.buffers]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        for buffer, value in zip(self.center_state.buffers, state["center"]):
            buffer.copy_(value)
