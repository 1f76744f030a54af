"""How a strategy's rounds run: at once (:class:`Rounds`), or wrapped as quorum points
for workers that leave and return (:class:`lsgd.strategies.elastic_rounds.ElasticRounds`,
the only place that knows about it).
"""

from __future__ import annotations

from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.seams import Seams as Strategy


class Rounds:
    """Rounds among every worker, as they fall due."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def start(self) -> None:
        """At construction: the same model and start on every worker."""
        self.strategy.start_together()

    def check(self) -> None:
        """Once the method declared its rounds: any option they cannot take refused."""

    def join(self) -> bool:
        """Before a worker's step: whether the step is spent joining a running job."""
        return False

    def run(self, names: list[str], world: bool) -> None:
        """The rounds ``names`` that fell due together (``world``: one is among all)."""
        self.strategy.join_rounds(names)

    def land(self, item: InFlight) -> None:
        """A transfer that is due: wait for it and apply it."""
        self.strategy.arrive(item)

    def average_buffers(self, among: str) -> None:
        """The BatchNorm average of a round (``bn_buffers="average"``), at once."""
        self.strategy.average_buffers_now(among)
