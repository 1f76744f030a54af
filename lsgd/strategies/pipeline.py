"""Rounds whose transfer runs behind the next local steps: what is in flight, and when
it lands. With ``overlap=K`` a round's transfer starts at the round step ``s`` (a
non-blocking collective, :mod:`lsgd.comm.transfers`) and its result is applied right
after local step ``s + K`` (docs/algorithms.md, "Overlapped rounds"). A checkpoint
stores every transfer in flight, and a resumed run applies them at the same steps.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm.codec import CODECS
from lsgd.names import GATHERED_CODECS
from lsgd.comm.transfers import Handle, done_handle


@dataclasses.dataclass
class InFlight:
    """A round's transfer, started after local step ``started``, applied after
    ``apply_at``; ``tensors``: where its results land, ``info``: JSON-able facts."""

    started: int
    apply_at: int
    name: str
    handles: list[Handle]
    tensors: dict[str, list[torch.Tensor]]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def wait(self) -> None:
        for handle in self.handles:
            handle.wait()


class Pipeline:
    """The transfers in flight of one worker, oldest first."""

    def __init__(self) -> None:
        self._items: deque[InFlight] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[InFlight]:
        """The transfers in flight, oldest first."""
        return list(self._items)

    def add(self, item: InFlight) -> None:
        self._items.append(item)

    def due(self, steps: int) -> list[InFlight]:
        """The transfers to apply after local step ``steps`` (removed), oldest first."""
        ready = []
        while self._items and self._items[0].apply_at <= steps:
            ready.append(self._items.popleft())
        return ready

    def settle(self) -> None:
        """Wait until every transfer in flight has arrived (nothing is applied)."""
        for item in self._items:
            item.wait()

    def state(self) -> list[dict[str, Any]]:
        """The transfers in flight, arrived (:meth:`settle`), with copies of their buffers."""
        self.settle()
        return [{"started": item.started, "apply_at": item.apply_at, "name": item.name,
                 "info": dict(item.info),
                 "tensors": {key: [t.clone() for t in tensors]
                             for key, tensors in item.tensors.items()}}
                for item in self._items]

    def load(self, states: list[Mapping[str, Any]], device: torch.device) -> None:
        """Continue with the transfers of :meth:`state`, as arrived."""
        self._items = deque(
            InFlight(int(s["started"]), int(s["apply_at"]), str(s["name"]), [done_handle()],
                     {key: [t.to(device) for t in tensors]
                      for key, tensors in s["tensors"].items()}, dict(s["info"]))
            for s in states)


def check_options(owner: str, period: int, overlap: Any, fragments: Any, compress: Any,
                  asynchronous: bool) -> tuple[int, int, str]:
    """``overlap``, ``fragments`` and ``compress`` of a periodic method, checked against
    its (shortest) ``period``: ``0 <= overlap < period``, ``fragments`` dividing the
    period; synchronous rounds only."""
    if not _validate.is_int(overlap) or not 0 <= overlap < period:
        raise ValueError(f"{owner}: overlap must be a whole number of steps in [0, {period}) "
                         f"(below the period, so that a round lands before the next one "
                         f"starts), got {overlap!r}")
    fragments = _validate.positive_int(owner, "fragments", fragments)
    if period % fragments:
        raise ValueError(f"{owner}: fragments={fragments} must divide the period {period}, "
                         f"so that a fragment goes every {period}/fragments steps")
    if compress in GATHERED_CODECS:
        raise ValueError(f"{owner}: compress={compress!r} gathers every worker's compressed "
                         f"message, and a round of {owner} sends one worker's state (the "
                         "leader's broadcast): give compress 'none', 'bf16' or 'int8'")
    _validate.choice(owner, "compress", compress, CODECS)
    given = [f"{name}={value!r}" for name, value, default in (
        ("overlap", overlap, 0), ("fragments", fragments, 1), ("compress", compress, "none"))
        if value != default]
    if asynchronous and given:
        raise ValueError(f"{owner}: {', '.join(given)} need synchronous rounds; drop "
                         "asynchronous=True or these options")
    return overlap, fragments, compress
