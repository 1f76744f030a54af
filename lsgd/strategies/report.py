"""What a strategy reports: one typed record, the same fields for every method.

Fields that a method does not have keep their neutral value; counters that only one
family has are in ``details`` (``skipped_steps``, ``skipped_rounds``,
``dropped_neighbours``, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Report:
    """One worker's view of its strategy: steps, rounds, traffic and leaders.

    Traffic is what this strategy moved since it was built (or resumed): ``bytes_*`` and
    ``comm_*`` for training, ``eval_*`` for evaluation; ``link_bytes_*`` crossed this
    node's link. ``rank`` and ``world_size`` are the replica's and the replicas'.
    """

    method: str
    rank: int
    world_size: int
    groups: int
    steps: int  #: this worker's optimizer steps
    rounds: int  #: communication rounds this worker joined
    asynchronous: bool
    total_steps: int  #: steps of all workers together, as this worker last saw them
    wait_seconds: float  #: time inside rounds: waiting for the others, and the transfer
    bytes_sent: int
    bytes_received: int
    comm_seconds: float
    comm_calls: int
    eval_bytes_sent: int
    eval_bytes_received: int
    leader_rank: int | None = None  #: the global leader at the last election (LSGD)
    local_leader_rank: int | None = None  #: this worker's group leader (LSGD)
    leader_switches: int = 0  #: elections whose global leader differed from the last one
    leader_history: tuple[tuple[int, str, int | None], ...] = ()  #: (step, level, leader)
    resets: int = 0  #: times this worker's state went NaN or infinite and was reset
    link_bytes_sent: int = 0  #: training bytes sent across the node's link
    link_bytes_received: int = 0  #: training bytes received across the node's link
    replica_processes: int = 1  #: processes stepping together as this replica
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  #: method-specific

    def as_dict(self) -> dict[str, Any]:
        """The fields as a flat dict (``details`` merged in, the history left out)."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("details", "leader_history")}
        flat.update(self.details)
        return flat
