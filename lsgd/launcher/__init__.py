"""Process start-up: :func:`launch`, the process counterpart of :func:`lsgd.simulate`
(under ``torchrun`` nothing here is needed: workers find their communicator from the
environment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from lsgd.launcher.worker import LaunchError
from lsgd.links.spec import Link

T = TypeVar("T")

__all__ = ["LaunchError", "launch"]


def launch(fn: Callable[..., T], world_size: int, groups: int = 1, *, args: Sequence[Any] = (),
           timeout: float = 300.0, threads_per_worker: int | None = None,
           link: str | Link | None = None, max_restarts: int = 0,
           replica: str = "process") -> list[T]:
    """Run ``fn(info, *args)`` in ``world_size`` processes; results by rank. A worker's
    failure raises :class:`LaunchError` naming its rank and error.

    ``groups`` splits the workers into groups of consecutive ranks as if on separate
    nodes. ``timeout`` (seconds) bounds every collective. ``threads_per_worker``:
    each worker's intra-op threads (default: cores / workers). Where the workers
    cannot be forked (:func:`~lsgd.launcher.worker.start_method`), ``fn`` and
    ``args`` must be picklable. ``link`` (``"100mbit"``; root and iproute2 needed)
    puts each group in a network namespace behind a link the kernel shapes, one
    elastic agent per node (:mod:`lsgd.launcher.nodes`), or raises
    :class:`~lsgd.links.netns.LinkSetupError`; it never runs unshaped.
    ``max_restarts``: when a worker fails, all are started again (with
    ``TORCHELASTIC_RESTART_COUNT`` raised by one) up to this many times; ``fn``
    continues from its own checkpoint. ``replica="node"``: each group's workers
    step as one replica of the strategies (:mod:`lsgd.comm.replica`).
    """
    from lsgd.comm.info import check_layout, check_replica  # torch: not before a launch

    check_layout(world_size, groups)
    check_replica(replica)
    options: dict[str, Any] = {"args": args, "timeout": timeout, "replica": replica,
                               "threads_per_worker": threads_per_worker,
                               "max_restarts": max_restarts}
    if link is not None:
        from lsgd.launcher.nodes import launch_on_links

        return launch_on_links(fn, world_size, groups, link, **options)
    from lsgd.launcher.standalone import launch_local

    return launch_local(fn, world_size, groups, **options)
