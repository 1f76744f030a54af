"""The background lanes of a torch.distributed worker: started transfers, in order.

:meth:`~lsgd.comm.base.Communicator.start_all_reduce` and its kin return at
once; under torch.distributed the transfer runs on a background thread of
its lane (``"bulk"`` for states, ``"control"`` for small messages such as an
election's scores), one after another in the order started, over process
groups of the lane's own (a copy of the world group and of the node
subgroups, created once, collectively, when the lane's first transfer
starts). Collectives of different process groups never wait for each other,
and each group sees its collectives in the same order on every worker (the
main thread's blocking ones in program order, each lane's in start order),
so training, a round's transfer in flight, a score exchange and an
evaluation's all-reduce can all proceed at once without mismatching.

A started transfer may carry several collectives (a compressed all-reduce is
an all-to-all and an all-gather; the pipelined chain broadcast is a chain of
point-to-point sends): running them on a thread, rather than as
``async_op=True`` work, lets one transfer be any sequence of blocking calls.
On a GPU the thread works on the worker's device with the default stream, so
the transfer is ordered after the copies that filled its buffers; this path
has not been run on a GPU.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

_here = threading.local()


def current_lane() -> BackgroundLane | None:
    """The background lane whose thread is calling; None on any other thread."""
    return getattr(_here, "lane", None)


class BackgroundLane:
    """One thread that runs submitted calls in order; ``groups`` are its process groups
    (world, node subgroup or None), used by the communicator's primitives when they run
    on this thread."""

    def __init__(self, name: str, groups: tuple[Any, Any], device: torch.device) -> None:
        self.name = name
        self.groups = groups
        self._device = device
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._serve, name=f"lsgd-{name}",
                                        daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        """Run ``call`` after every call submitted before it; its future."""
        future: Future[Any] = Future()
        self._calls.put((call, future))
        return future

    def close(self) -> None:
        """Let the thread end once the calls submitted so far have run."""
        self._calls.put(None)

    def _serve(self) -> None:
        _here.lane = self
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        while (item := self._calls.get()) is not None:
            call, future = item
            try:
                future.set_result(call())
            except BaseException as error:  # handed to whoever waits for it
                future.set_exception(error)
