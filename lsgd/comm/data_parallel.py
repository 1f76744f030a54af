"""Data parallelism owned by the communicator: the module to call, and the gradient average.

``comm.data_parallel(model)`` returns a :class:`DataParallel`, the module a
user calls in the forward pass. Every step it averages the gradients of all
workers (one ring all-reduce of the flattened gradients, ``2 (W - 1) / W``
of the gradient bytes per worker) and keeps the floating buffers equal to
rank 0's (one broadcast before each forward, as DistributedDataParallel's
``broadcast_buffers``).

Under torch.distributed the work is done by ``DistributedDataParallel``
itself, overlapping the all-reduce with the backward pass (see
:mod:`lsgd.comm.ddp`); in the simulator and for a single worker,
:meth:`DataParallel.synchronize` all-reduces the gradients after the backward
pass (:meth:`lsgd.comm.base.Communicator.data_parallel`, from the
communicator's own collectives). Both backends check the same thing the same way: the forward pass of
the step must have gone through this module, otherwise DDP would silently
skip the average (and the simulator would silently do it), so
:meth:`DataParallel.synchronize` raises instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

NOT_THROUGH_MODEL = (
    "{owner}: the forward pass of this step did not go through strategy.model, so the "
    "gradients were not averaged across workers; call strategy.model(x) (not your own "
    "model) in the training forward pass"
)


class DataParallel(nn.Module):
    """The forward-pass module of data-parallel training; see the module docstring.

    ``module`` is the user's model (a registered submodule, so ``parameters()``
    and ``state_dict()`` are the model's, prefixed ``module.`` as under DDP);
    ``inner`` is what the forward calls (the DDP wrapper, or the model itself);
    ``average`` runs at :meth:`synchronize` (``None`` when the backend already
    averaged during the backward pass); ``before_forward`` runs before each
    forward pass (the simulator's buffer broadcast).
    """

    def __init__(self, module: nn.Module, inner: nn.Module | None = None,
                 average: Callable[[], None] | None = None,
                 before_forward: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.module = module
        # Kept out of the submodules: parameters and state_dict stay the model's.
        self._inner = [inner if inner is not None else module]
        self._average = average
        self._before_forward = before_forward
        self._forwarded = False

    @property
    def inner(self) -> nn.Module:
        """What the forward pass calls (``DistributedDataParallel`` under torch.distributed)."""
        return self._inner[0]

    def train(self, mode: bool = True) -> DataParallel:
        super().train(mode)
        self.inner.train(mode)
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            self._forwarded = True
        if self._before_forward is not None:
            self._before_forward()
        return self.inner(*args, **kwargs)

    def synchronize(self, owner: str = "AllReduce") -> None:
        """Before the optimizer step: check the forward went through here; average gradients."""
        if not self._forwarded:
            raise RuntimeError(NOT_THROUGH_MODEL.format(owner=owner))
        self._forwarded = False
        if self._average is not None:
            self._average()
