"""Run a function as W local worker processes over torch.distributed.

``launch(fn, world_size=W, groups=n)`` is the process counterpart of
:func:`lsgd.simulate`: it starts W processes with torch's own elastic launcher
(the machinery behind ``torchrun --standalone``), each initializes the default
process group from the environment (gloo on CPU, NCCL plus gloo with CUDA) and
runs ``fn(info, *args)``; the results come back by rank. ``fn`` and ``args``
must be picklable (``fn`` defined at module level).
"""

from __future__ import annotations

import datetime
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from torch.distributed.elastic.multiprocessing.errors import record

from lsgd.comm.base import WorkerInfo, check_layout
from lsgd.links.spec import Link

T = TypeVar("T")


class LaunchError(RuntimeError):
    """A worker process failed; the message carries its rank and error."""


@record  # the parent's error then carries the worker's exception and traceback
def _worker(fn: Callable[..., Any], groups: int, timeout_s: float, args: Sequence[Any]) -> Any:
    from lsgd.comm import get_communicator, shutdown
    from lsgd.comm.distributed import init_from_env

    os.environ["LSGD_GROUPS"] = str(groups)
    init_from_env(datetime.timedelta(seconds=timeout_s))
    try:
        info: WorkerInfo = get_communicator().info
        return fn(info, *args)
    finally:
        shutdown()


def _message(message: Any) -> str:
    """The worker's error line from what the elastic agent recorded."""
    if isinstance(message, dict):
        return str(message.get("message", message))
    return str(message)


def launch(
    fn: Callable[..., T],
    world_size: int,
    groups: int = 1,
    *,
    args: Sequence[Any] = (),
    timeout: float = 300.0,
    threads_per_worker: int | None = None,
    link: str | Link | None = None,
    max_restarts: int = 0,
) -> list[T]:
    """Run ``fn(info, *args)`` in ``world_size`` local processes; results by rank.

    ``groups`` splits the workers into groups of consecutive ranks as if they
    were on separate nodes. ``timeout`` (seconds) bounds every collective: a
    worker that dies or stops communicating makes the others fail after it.
    ``threads_per_worker`` sets ``OMP_NUM_THREADS`` (default: cores / workers).

    ``link`` (``"100mbit"``, ``"1gbit"``; root and iproute2 needed) makes the
    groups real nodes: each in a network namespace of its own behind a link
    that the kernel shapes to that rate, one torchrun agent per node (see
    :mod:`lsgd.links.nodes`). Where shaping is impossible it raises
    :class:`~lsgd.links.netns.LinkSetupError`; it never runs unshaped.

    ``max_restarts``: when a worker fails, torch's elastic agent stops the
    others and starts all of them again, up to this many times (the same
    function, with ``TORCHELASTIC_RESTART_COUNT`` raised by one); ``fn`` is
    expected to continue from its own checkpoint (``lsgd train`` does).
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    check_layout(world_size, groups)
    if link is not None:
        from lsgd.links.nodes import launch_on_links

        return launch_on_links(fn, world_size, groups, link, args=args, timeout=timeout,
                               threads_per_worker=threads_per_worker, max_restarts=max_restarts)
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // world_size)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size,
        run_id=f"lsgd-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=max_restarts,
        monitor_interval=0.05,
        start_method="spawn",
    )
    # The elastic agent logs every failure at length; LaunchError says it once.
    elastic_log = logging.getLogger("torch.distributed.elastic")
    level = elastic_log.level
    elastic_log.setLevel(logging.CRITICAL)
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        results = elastic_launch(config, _worker)(fn, groups, timeout, tuple(args))
    except ChildFailedError as error:
        lines = [f"rank {rank}: {_message(failure.message)}"
                 for rank, failure in sorted(error.failures.items())]
        raise LaunchError("worker processes failed:\n" + "\n".join(lines)) from error
    finally:
        elastic_log.setLevel(level)
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    return [results[r] for r in range(world_size)]
