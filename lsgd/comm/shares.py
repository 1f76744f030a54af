"""How a process takes part in its replica's work across nodes: by default, as the whole
replica (:class:`~lsgd.comm.replica.ReplicaCommunicator` overrides this for a node's
processes stepping as one replica)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lsgd.comm.data_parallel import DataParallel


class Shares:
    """The replica-facing side of a communicator (mixed into
    :class:`~lsgd.comm.communicator.Communicator`): here a process is its own replica."""

    @property
    def processes(self) -> Any:
        """The communicator of every process: this one, or a replica's processes'."""
        return self

    #: (this process's part, parts) of a replica's work across nodes.
    share = (0, 1)

    @property
    def across(self) -> Any:
        """The communicator of a collective among the replicas on this process's :meth:`part`."""
        return self

    def part(self, numel: int, r: int | None = None) -> tuple[int, int]:
        """``(begin, end)`` of this process's part (or part ``r``) of ``numel`` values."""
        return 0, numel

    def put_together_(self, flat: torch.Tensor) -> None:
        """Every process of the replica's part of the 1-D ``flat`` into it."""

    def replica_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """A per-process value (a loss, a score) as the replica's: its processes' mean, in place."""
        return tensor

    def all_agree(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every process of this replica."""
        return flag

    def replica_parallel(self, module: nn.Module) -> DataParallel | None:
        """The module to call in the forward pass when a replica is several processes
        (their gradients averaged every step); None: one process, ``module`` itself."""
        return None

    def _replica_parts(self) -> tuple[Any, Any]:
        """(the node's communicator, the peers' communicator) of a replica of this
        worker's node (:func:`lsgd.comm.replica.replicas_of`; collective)."""
        raise ValueError(f"{type(self).__name__} has no replicas of several processes; "
                         "use replica='process'")
