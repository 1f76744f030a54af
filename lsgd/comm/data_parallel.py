"""Data parallelism owned by the communicator: the module to call, and the gradient average.

``comm.data_parallel(model)`` returns a :class:`DataParallel`, the module to call in the forward
pass. Every step it averages the gradients of all workers (one ring all-reduce) and keeps the
buffers equal to rank 0's (one broadcast before each forward): under torch.distributed by
``DistributedDataParallel`` during the backward pass (:mod:`lsgd.comm.ddp`), elsewhere at
:meth:`DataParallel.synchronize` (:func:`~lsgd.comm.communicator.collective_data_parallel`). A step
whose forward pass did not go through this module raises instead of silently skipping the average.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: The gradient compressions of all-reduce: PyTorch's DDP communication hooks.
GRADIENT_COMPRESSIONS = ("none", "bf16", "powersgd")


@dataclass(frozen=True)
class GradientCompression:
    """Which of PyTorch's DDP communication hooks averages the gradients (torch.distributed
    only): ``"none"`` (DDP's all-reduce), ``"bf16"`` (the bucket cast to bfloat16,
    all-reduced, cast back) or ``"powersgd"`` (arXiv:1905.13727: each gradient matrix as
    two rank-``rank`` factors, error feedback, warm start; all-reduce for ``warmup`` steps)."""

    kind: str = "none"
    rank: int = 1
    warmup: int = 10

    def __post_init__(self) -> None:
        if self.kind not in GRADIENT_COMPRESSIONS:
            raise ValueError(f"gradient compression {self.kind!r}: choose one of "
                             f"{', '.join(GRADIENT_COMPRESSIONS)}")
        if self.kind == "powersgd" and (self.rank < 1 or self.warmup < 2):
            raise ValueError(f"PowerSGD: rank {self.rank} must be at least 1 and warmup "
                             f"{self.warmup} at least 2 steps (its error feedback and warm "
                             "start need two plain steps first)")


class DataParallel(nn.Module):
    """The forward-pass module of data-parallel training.

    ``module`` is the user's model (a registered submodule: ``state_dict()`` is the
    model's, prefixed ``module.`` as under DDP); ``inner`` is what the forward calls (the
    DDP wrapper, or the model); ``average`` runs at :meth:`synchronize`;
    ``before_forward`` runs before each forward pass (the simulator's buffer broadcast).
    """

    def __init__(self, module: nn.Module, inner: nn.Module | None = None,
                 average: Callable[[], None] | None = None,
                 before_forward: Callable[[], None] | None = None,
                 hook_state: Any = None) -> None:
        super().__init__()
        self.module = module
        #: The communication hook's own state (PowerSGD's), or None.
        self.hook_state = hook_state
        # Kept out of the submodules: parameters and state_dict stay the model's.
        self._inner = [inner if inner is not None else module]
        self._average, self._before_forward, self._forwarded = average, before_forward, False

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
            raise RuntimeError(f"{owner}: the forward pass of this step did not go through "
                               "strategy.model, so the gradients were not averaged across "
                               "workers; call strategy.model(x) (not your own model) in the "
                               "training forward pass")
        self._forwarded = False
        if self._average is not None:
            self._average()
