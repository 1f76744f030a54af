"""W worker processes on this machine, as ``torchrun --standalone`` starts them: an
elastic agent in this process hosts a c10d rendezvous on the loopback.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from lsgd.launcher.worker import LaunchError, failure_lines, run_workers, threads_for

T = TypeVar("T")


def launch_local(fn: Callable[..., T], world_size: int, groups: int, *,
                 args: Sequence[Any] = (), timeout: float = 300.0,
                 threads_per_worker: int | None = None, max_restarts: int = 0,
                 replica: str = "process") -> list[T]:
    """Run ``fn(info, *args)`` in ``world_size`` local processes: :func:`lsgd.launch`."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        results = run_workers(fn, groups, timeout, args, replica,
                              threads_for(world_size, threads_per_worker), min_nodes=1,
                              max_nodes=1, nproc_per_node=world_size,
                              run_id=f"lsgd-{uuid.uuid4().hex[:8]}",
                              rdzv_endpoint="127.0.0.1:0", max_restarts=max_restarts)
    except ChildFailedError as error:
        raise LaunchError("worker processes failed:\n"
                          + "\n".join(failure_lines(error.failures))) from error
    return [results[r] for r in range(world_size)]
