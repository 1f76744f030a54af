"""Data parallelism under torch.distributed: DistributedDataParallel with traffic counted.

Its communication hook runs DDP's all-reduce of each gradient bucket (or PyTorch's
``bf16_compress_hook`` or ``powerSGD_hook``) and counts it as a ring's (``2 (W - 1) / W``
of its bytes per worker; compressed, as torch's ``total_numel_after_compression``);
DDP's broadcast of rank 0's buffers before each forward is counted too.
"""

from __future__ import annotations

import inspect
import time
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from lsgd.comm.data_parallel import DataParallel, GradientCompression
from lsgd.comm.wire import ring_allreduce_bytes

if TYPE_CHECKING:
    import torch.distributed as dist

    from lsgd.comm.communicator import Communicator


def ddp_data_parallel(comm: Communicator, process_group: dist.ProcessGroup, module: nn.Module,
                      sync_buffers: bool = True, options: dict[str, Any] | None = None,
                      compression: GradientCompression = GradientCompression()) -> DataParallel:
    """``module`` under DDP on ``process_group`` (CUDA: ``device_ids`` of its device), its gradients
    averaged by DDP's all-reduce or ``compression``'s hook; the traffic counted in ``comm``."""
    device = next(module.parameters()).device
    # Newer torch renamed broadcast_buffers (deprecated) to forward_sync_buffers.
    ddp_args = inspect.signature(nn.parallel.DistributedDataParallel).parameters
    sync_flag = ("forward_sync_buffers" if "forward_sync_buffers" in ddp_args
                 else "broadcast_buffers")
    kwargs: dict[str, Any] = {sync_flag: sync_buffers}
    if device.type == "cuda":
        kwargs["device_ids"] = [device]
    if compression.kind == "powersgd":
        # PowerSGD's hook starts its later all-reduces from the callbacks of earlier ones,
        # on the backend's threads: with two buckets, two such chains race, and gloo
        # matched the collectives of different buckets across workers ("Received data
        # size doesn't match expected size", 4 workers). One bucket keeps one chain.
        grads = sum(p.nbytes for p in module.parameters() if p.requires_grad)
        kwargs["bucket_cap_mb"] = grads // 2**20 + 1
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

    state, reduce = torch_hook(process_group, compression)

    # DDP checks a hook's annotations against real classes, which postponed
    # annotations would turn into strings: leave bucket and return unannotated.
    def counting_allreduce(pg: Any, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer()
        width = 2 if compression.kind == "bf16" else buffer.element_size()
        before = getattr(state, "total_numel_after_compression", 0)
        start = time.perf_counter()
        future = reduce(state, bucket)
        compressed = getattr(state, "total_numel_after_compression", 0) - before
        volume = ring_allreduce_bytes((compressed or buffer.numel()) * width, world)

        def done(fut: torch.futures.Future) -> torch.Tensor:
            now = time.perf_counter()
            owner = counted()
            if owner is not None:
                owner.count(owner.ring(volume), now - max(start, finished[0]))
            finished[0] = now
            return fut.value()[0] if isinstance(fut.value(), list) else fut.value()

        return future.then(done)

    ddp.register_comm_hook(process_group, counting_allreduce)
    buffer_bytes = sum(b.nbytes for b in module.buffers()) if sync_buffers else 0
    buffers = comm.broadcast_traffic(buffer_bytes, 0)

    def count_buffer_broadcast() -> None:
        # DDP broadcast rank 0's buffers in this step's forward.
        if buffer_bytes:
            comm.count(buffers, 0.0)

    return DataParallel(module, inner=ddp, average=count_buffer_broadcast,
                        hook_state=state if compression.kind == "powersgd" else None)


def torch_hook(process_group: dist.ProcessGroup, compression: GradientCompression
               ) -> tuple[Any, Any]:
    """(state, hook): the PyTorch communication hook that ``compression`` names, and the
    state it is called with (the process group, or PowerSGD's ``PowerSGDState``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if compression.kind == "bf16":
        return process_group, default_hooks.bf16_compress_hook
    if compression.kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=process_group, matrix_approximation_rank=compression.rank,
            start_powerSGD_iter=compression.warmup)
        return state, powerSGD_hook.powerSGD_hook
    return process_group, default_hooks.allreduce_hook
