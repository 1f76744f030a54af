"""All-reduce data parallel (the papers' "DataParallel" baseline).

Gradients are averaged across all workers every step, so all workers keep identical
states (docs/algorithms.md, "All-reduce data parallel"): with real processes
:class:`torch.nn.parallel.DistributedDataParallel` itself, in the simulator an
all-reduce after the backward pass. Communicated per step: one ring all-reduce of the
gradients, plus the buffers. The forward pass must go through ``strategy.model``. A
non-finite averaged gradient skips that optimizer step on every worker.
``compress="bf16"`` and ``powersgd=RANK`` use PyTorch's DDP communication hooks.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lsgd.comm import Communicator, get_communicator
from lsgd.comm.data_parallel import GradientCompression
from lsgd.strategies.strategy import Strategy
from lsgd.functional import all_finite


class AllReduce(Strategy):
    """Synchronous data parallel: one gradient all-reduce per step.

    Args:
        comm: see :class:`~lsgd.strategies.strategy.Strategy`.
        bn_buffers: ``"broadcast"`` (rank 0's buffers before every forward, the
            default) or ``"local"``.
        ddp_kwargs: extra keyword arguments for ``DistributedDataParallel``.
        compress: ``"none"`` or ``"bf16"`` (torch's ``bf16_compress_hook``).
        powersgd: the rank of torch's PowerSGD hook (0: off).
        powersgd_warmup: plain all-reduce steps before PowerSGD compresses (at least 2).

    Workers always start from rank 0's state (no ``init`` argument).
    """

    name = "allreduce"
    bn_modes = ("broadcast", "local")
    counters = ("skipped_steps",)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 comm: Communicator | None = None, bn_buffers: str | None = None,
                 ddp_kwargs: dict[str, Any] | None = None, compress: str = "none",
                 powersgd: int = 0, powersgd_warmup: int = 10) -> None:
        self.compression = gradient_compression(compress, powersgd, powersgd_warmup)
        # Over every process, whether or not a node's processes are one replica.
        comm = (comm if comm is not None else get_communicator()).processes
        super().__init__(model, optimizer, comm=comm, init="broadcast", bn_buffers=bn_buffers)
        self._parallel = self.comm.data_parallel(model, self.bn_buffers != "local", ddp_kwargs,
                                                 self.compression)
        self.skipped_steps = 0  # optimizer steps skipped for a non-finite averaged gradient

    @property
    def model(self) -> nn.Module:
        """The data-parallel module to call in the forward pass."""
        return self._parallel

    def _before_optimizer_step(self) -> bool:
        """Average the gradients; skip the step (on every worker alike) if not finite;
        raise if the parameters are not finite either."""
        self._parallel.synchronize(self.name)
        grads = [p.grad for p in self._module.parameters() if p.grad is not None]
        if all_finite(grads):
            return True
        self.skipped_steps += 1
        # The parameters, not the buffers: they are identical on every replica.
        if not all_finite([p.data for p in self._module.parameters()]):
            raise self._diverged_error(step=self.steps + 1)  # the step being taken
        return False

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        self.rounds += 1

    def center(self) -> nn.Module:
        """A copy of the model: every replica already holds the average."""
        return copy.deepcopy(self._module)

    def _report_fields(self) -> dict[str, Any]:
        fields = super()._report_fields()
        fields["details"]["gradient_compression"] = self.compression.kind
        return fields

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        hook = self._parallel.hook_state
        if hook is not None:  # PowerSGD's errors, factors and step count
            quiet = logging.getLogger(type(hook).__module__)  # says the group is not saved
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                state["powersgd"] = hook.__getstate__()
            finally:
                quiet.setLevel(level)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        hook = self._parallel.hook_state
        if hook is not None and "powersgd" in state:
            group = hook.process_group  # not saved: the one of this run
            hook.__setstate__(dict(state["powersgd"]))
            hook.process_group = group


def gradient_compression(compress: str, powersgd: int, powersgd_warmup: int) -> GradientCompression:
    """All-reduce's ``compress`` and ``powersgd`` knobs as one of torch's hooks."""
    if compress not in ("none", "bf16"):
        raise ValueError(f"allreduce: compress={compress!r}: PyTorch's DDP communication "
                         "hooks compress to bf16 (compress='bf16') or by PowerSGD "
                         "(powersgd=RANK); it has no int8 hook")
    if powersgd and compress != "none":
        raise ValueError(f"allreduce: compress={compress!r} and powersgd={powersgd}: give one")
    if powersgd:
        return GradientCompression("powersgd", int(powersgd), int(powersgd_warmup))
    return GradientCompression(compress)
