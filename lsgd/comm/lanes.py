"""The background lanes of a torch.distributed worker: started transfers, in order.

A started transfer (:meth:`~lsgd.comm.communicator.Communicator.start_all_reduce` and its kin) runs
on its lane's background thread, in start order, over process groups of the lane's own (created
collectively at the lane's first transfer). Each group then sees its collectives in the same order
on every worker, so training, a round in flight, a score exchange and an evaluation proceed at once
without mismatching. A thread, rather than ``async_op=True``, lets one transfer be any sequence of
blocking calls (a compressed all-reduce, the chain broadcast). On a GPU the thread uses the worker's
device and default stream; this path has not been run on a GPU.
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
    """One daemon thread that runs submitted calls in order, on ``device``; ``groups`` (world,
    node subgroup or None) are what the communicator's primitives use on this thread."""

    def __init__(self, name: str, groups: tuple[Any, Any] = (None, None),
                 device: torch.device = torch.device("cpu")) -> None:
        self.name, self.groups, self._device = name, groups, device
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        threading.Thread(target=self._serve, name=f"lsgd-{name}", daemon=True).start()

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
