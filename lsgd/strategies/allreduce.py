"""All-reduce data parallel (the papers' "DataParallel" baseline).

Gradients are averaged across all workers every step, so all workers keep
identical states. Under torch.distributed this is
:class:`torch.nn.parallel.DistributedDataParallel` itself: call
``strategy.model`` in the forward pass (DDP must see it) and ``strategy.step``
after ``backward``. A DDP communication hook counts the gradient traffic
(ring all-reduce, ``2 (W - 1) / W`` of the gradient bytes per worker per step).

In the simulator ``step`` all-reduces the flattened gradients itself, and
``strategy.model`` is a thin wrapper that, like DDP's ``broadcast_buffers``,
copies rank 0's buffers to every worker before each forward pass.
"""

from __future__ import annotations

import copy
import inspect
import time
from typing import Any

import torch
from torch import nn

from lsgd.comm import Communicator
from lsgd.comm.distributed import DistCommunicator
from lsgd.flat import FlatBuffer
from lsgd.functional import ring_allreduce_bytes
from lsgd.strategies.base import Strategy


class AllReduce(Strategy):
    """Synchronous data parallel: one gradient all-reduce per step.

    Args:
        comm: see :class:`~lsgd.strategies.base.Strategy`.
        sync_buffers: keep buffers equal to rank 0's (DDP's ``broadcast_buffers``).
        ddp_kwargs: extra keyword arguments for ``DistributedDataParallel``.

    Workers always start from rank 0's state (data parallelism needs identical
    replicas), so there is no ``init`` argument.
    """

    name = "allreduce"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        comm: Communicator | None = None,
        sync_buffers: bool = True,
        ddp_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model, optimizer, comm=comm, init="broadcast", sync_buffers=sync_buffers)
        self._ddp: nn.parallel.DistributedDataParallel | None = None
        self._grads: FlatBuffer | None = None
        self._buffers = list(model.buffers()) if sync_buffers else []
        self._buffer_bytes = sum(b.numel() * b.element_size() for b in self._buffers)
        self._wrapper: nn.Module = model
        if isinstance(self.comm, DistCommunicator) and self.world_size > 1:
            self._ddp = self._wrap(model, ddp_kwargs or {})
            self._wrapper = self._ddp
        elif self.world_size > 1 and self._buffers:
            self._wrapper = _BufferBroadcast(model, self)

    def _wrap(self, model: nn.Module, kwargs: dict[str, Any]) -> nn.parallel.DistributedDataParallel:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        device = next(model.parameters()).device
        # Newer torch renamed broadcast_buffers (deprecated) to forward_sync_buffers.
        ddp_args = inspect.signature(nn.parallel.DistributedDataParallel).parameters
        sync_flag = "forward_sync_buffers" if "forward_sync_buffers" in ddp_args else "broadcast_buffers"
        options: dict[str, Any] = {sync_flag: self.sync_buffers}
        if device.type == "cuda":
            options["device_ids"] = [device]
        options.update(kwargs)
        ddp = nn.parallel.DistributedDataParallel(
            model, process_group=self.comm.process_group, **options  # type: ignore[attr-defined]
        )
        comm, world = self.comm, self.world_size

        # DDP checks a hook's annotations against real classes, which postponed
        # annotations would turn into strings: leave bucket and return unannotated.
        def counting_allreduce(pg: Any, bucket):  # type: ignore[no-untyped-def]
            buffer = bucket.buffer()
            volume = ring_allreduce_bytes(buffer.numel() * buffer.element_size(), world)
            start = time.perf_counter()

            def done(fut: torch.futures.Future) -> torch.Tensor:
                comm.record(volume, volume, time.perf_counter() - start)
                return fut.value()[0] if isinstance(fut.value(), list) else fut.value()

            return default_hooks.allreduce_hook(pg, bucket).then(done)

        ddp.register_comm_hook(self.comm.process_group, counting_allreduce)  # type: ignore[attr-defined]
        return ddp

    @property
    def model(self) -> nn.Module:
        return self._wrapper

    def step(self, loss: torch.Tensor | float | None = None) -> None:
        """Average gradients (unless DDP already did), then the optimizer step."""
        if self._ddp is None and self.world_size > 1:
            self._average_gradients()
        self.optimizer.step()
        self.steps += 1
        self.rounds += 1
        self.comm.local_step()
        if self._ddp is not None and self._buffers:
            # DDP broadcast rank 0's buffers in the forward; count it as a broadcast.
            first = self.rank == 0
            self.comm.record(self._buffer_bytes if first else 0, 0 if first else self._buffer_bytes, 0.0)

    def _broadcast_buffers(self) -> None:
        with torch.no_grad():
            for buffer in self._buffers:
                self.comm.broadcast_(buffer, src=0)

    def _average_gradients(self) -> None:
        params = [p for p in self._module.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        if self._grads is None:
            self._grads = FlatBuffer(grads)
        self._grads.copy_from(grads)
        for buffer in self._grads.buffers:
            self.comm.all_reduce_(buffer, op="mean")
        self._grads.copy_to(grads)

    def center(self) -> nn.Module:
        """A copy of the model: every replica already holds the average."""
        return copy.deepcopy(self._module)


class _BufferBroadcast(nn.Module):
    """Simulator stand-in for DDP's forward: rank 0's buffers, then the module."""

    def __init__(self, module: nn.Module, strategy: AllReduce) -> None:
        super().__init__()
        self.module = module
        self._strategy = [strategy]  # a list, so the strategy is not a submodule

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._strategy[0]._broadcast_buffers()
        return self.module(*args, **kwargs)
