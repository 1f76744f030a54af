"""Where a worker sits (:class:`WorkerInfo`) and what it moved (:class:`CommStats`)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from lsgd import _validate
from lsgd.names import REPLICAS  # what a strategy sees as one worker

Among = Literal["world", "group"]  # who takes part in a collective: all, or this node
ReduceOp = Literal["sum", "mean"]


@dataclasses.dataclass
class CommStats:
    """What one worker moved in one category: every byte it sent and received, and of
    them those that crossed its node's link (``link_*``; the rest stayed inside the node)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0
    calls: int = 0
    link_bytes_sent: int = 0
    link_bytes_received: int = 0

    def minus(self, other: CommStats) -> CommStats:
        """The counts accumulated since ``other`` was taken."""
        return CommStats(*(getattr(self, f.name) - getattr(other, f.name)
                           for f in dataclasses.fields(self)))

    def plus(self, other: CommStats) -> CommStats:
        """Both counts together."""
        return CommStats(*(getattr(self, f.name) + getattr(other, f.name)
                           for f in dataclasses.fields(self)))


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where a worker sits: its rank, the world size and its group."""

    rank: int
    world_size: int
    groups: int

    @property
    def group_size(self) -> int:
        return self.world_size // self.groups

    @property
    def group(self) -> int:
        """Index of this worker's group (its node)."""
        return self.rank // self.group_size

    @property
    def group_rank(self) -> int:
        """Position of this worker inside its group (its local rank)."""
        return self.rank % self.group_size

    def group_members(self) -> list[int]:
        """Global ranks of this worker's group."""
        return list(range(self.group * self.group_size, (self.group + 1) * self.group_size))


def check_layout(world_size: int, groups: int) -> None:
    """Raise ``ValueError`` unless ``groups`` splits ``world_size`` evenly."""
    for name, value in (("world_size", world_size), ("groups", groups)):
        if not _validate.is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if world_size % groups != 0:
        raise ValueError(f"groups={groups} must divide the number of workers world_size="
                         f"{world_size}; use a divisor such as 1 or {world_size}")


def check_replica(replica: str) -> str:
    """``replica`` if it is one of :data:`REPLICAS`; ``ValueError`` naming it otherwise."""
    if replica not in REPLICAS:
        raise ValueError(f"replica must be one of {', '.join(REPLICAS)} (a process, or all the "
                         f"processes of a node, is one worker of the method), got {replica!r}")
    return replica
