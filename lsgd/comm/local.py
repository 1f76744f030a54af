"""A world of one worker, the communicator of a single process."""

from __future__ import annotations

from lsgd.comm.communicator import Communicator
from lsgd.comm.info import WorkerInfo


class LocalCommunicator(Communicator):
    """A world of one worker: every collective is the identity and costs nothing."""

    def __init__(self) -> None:
        super().__init__(WorkerInfo(rank=0, world_size=1, groups=1))
        self._counts: dict[str, int] = {}

    def _add_count(self, key: str, amount: int) -> int:
        self._counts[key] = self._counts.get(key, 0) + amount
        return self._counts[key]
