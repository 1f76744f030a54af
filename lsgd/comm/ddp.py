"""Data parallelism under torch.distributed: DistributedDataParallel with traffic counted.

:func:`ddp_data_parallel` wraps the model in ``DistributedDataParallel`` on
the communicator's process group and registers a communication hook that
runs DDP's own all-reduce and counts it (ring all-reduce of each gradient
bucket, ``2 (W - 1) / W`` of its bytes per worker). DDP broadcasts rank 0's
floating buffers before each forward (``forward_sync_buffers``, formerly
``broadcast_buffers``); that traffic is counted at each step.
"""

from __future__ import annotations

import inspect
import time
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from lsgd.comm.data_parallel import DataParallel
from lsgd.comm.wire import broadcast_bytes, ring_allreduce_bytes

if TYPE_CHECKING:
    import torch.distributed as dist

    from lsgd.comm.base import Communicator


def ddp_data_parallel(comm: Communicator, process_group: dist.ProcessGroup, module: nn.Module,
                      sync_buffers: bool = True,
                      options: dict[str, Any] | None = None) -> DataParallel:
    """``module`` under DDP on ``process_group`` (CUDA: ``device_ids`` of its device);
    the traffic is counted in ``comm`` (the communicator of that group)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    device = next(module.parameters()).device
    # Newer torch renamed broadcast_buffers (deprecated) to forward_sync_buffers.
    ddp_args = inspect.signature(nn.parallel.DistributedDataParallel).parameters
    sync_flag = "forward_sync_buffers" if "forward_sync_buffers" in ddp_args else "broadcast_buffers"
    kwargs: dict[str, Any] = {sync_flag: sync_buffers}
    if device.type == "cuda":
        kwargs["device_ids"] = [device]
    kwargs.update(options or {})
    ddp = nn.parallel.DistributedDataParallel(module, process_group=process_group, **kwargs)
    world = comm.world_size
    # Buckets are reduced one after another while later ones wait: a bucket's
    # seconds run from when it started or the previous one finished, whichever
    # is later, so that the seconds of one step add up to its time on the wire.
    finished = [0.0]
    # The hook's callback runs on one of gloo's threads and may be the last thing to
    # let go of what it holds: were that the communicator (and with it its process
    # groups), their threads would be joined from one of their own, which aborts the
    # process ("Resource deadlock avoided"). So it holds the communicator weakly.
    counted = weakref.ref(comm)

    # DDP checks a hook's annotations against real classes, which postponed
    # annotations would turn into strings: leave bucket and return unannotated.
    def counting_allreduce(pg: Any, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer()
        volume = ring_allreduce_bytes(buffer.numel() * buffer.element_size(), world)
        start = time.perf_counter()

        def done(fut: torch.futures.Future) -> torch.Tensor:
            now = time.perf_counter()
            owner = counted()
            if owner is not None:
                owner.record(volume, volume, now - max(start, finished[0]))
            finished[0] = now
            return fut.value()[0] if isinstance(fut.value(), list) else fut.value()

        return default_hooks.allreduce_hook(pg, bucket).then(done)

    ddp.register_comm_hook(process_group, counting_allreduce)
    buffer_bytes = sum(b.numel() * b.element_size() for b in module.buffers()) if sync_buffers else 0
    sent, received = broadcast_bytes(buffer_bytes, world, comm.rank, comm.broadcast_algorithm)

    def count_buffer_broadcast() -> None:
        # DDP broadcast rank 0's buffers in this step's forward.
        if buffer_bytes:
            comm.record(sent, received, 0.0)

    return DataParallel(module, inner=ddp, average=count_buffer_broadcast)
