"""The named, typed views of a :class:`~lsgd.strategies.strategy.Strategy` that code outside
the strategy uses (the elastic layer, the elastic trainer) instead of its private state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from lsgd.comm import CommStats, Communicator
from lsgd.strategies.pipeline import InFlight, Pipeline
from lsgd.strategies.cadence import Cadence, RoundSchedule


def supporting(capability: str) -> list[str]:
    """The names of the methods whose class sets the flag ``capability``."""
    found: dict[str, None] = {}
    pending = list(Seams.__subclasses__())
    while pending:
        cls = pending.pop(0)
        pending += cls.__subclasses__()
        if getattr(cls, capability, False) and "name" in vars(cls):
            found[vars(cls)["name"]] = None
    return sorted(found)


class Seams:
    """Mixed into :class:`~lsgd.strategies.strategy.Strategy`, which sets the attributes
    annotated here; what a method supports is a class flag, read by every check."""

    #: Rounds by all workers' steps together (``asynchronous=True``).
    supports_asynchronous = False
    #: Elastic rounds (:mod:`lsgd.strategies.elastic_rounds`).
    supports_elastic = False
    #: Exchanges along a communication graph (``--topology``), not rounds of all.
    uses_graph = False

    #: The hidden-round options of the methods that take them (0, 1, "none": blocking).
    overlap: int = 0
    fragments: int = 1
    compress: str = "none"

    name: str
    init: str
    comm: Communicator
    module: nn.Module
    steps: int
    asynchronous: bool
    on_round: Callable[[], None] | None
    _state: list[torch.Tensor]
    _schedule: RoundSchedule
    _pipeline: Pipeline
    _baseline: dict[str, CommStats]
    resets: int
    wait_seconds: float

    @property
    def hides_rounds(self) -> bool:
        """Whether rounds stay in flight across steps (overlap, compression, fragments)."""
        return bool(self.overlap or self.fragments > 1 or self.compress != "none")

    def reset_target(self) -> list[torch.Tensor] | None:
        """What a diverged or joining worker is reset to at a round (like :attr:`local_state`;
        ``None`` where no worker keeps it, as an average)."""
        return None

    # -- what the round runners call (lsgd.strategies.rounds, .elastic_rounds) ------
    def join_rounds(self, names: list[str]) -> None:
        """Run the rounds ``names`` that fell due together, then the BatchNorm average."""
        raise NotImplementedError

    def arrive(self, item: InFlight) -> None:
        """Wait for ``item``'s transfer and apply it."""
        raise NotImplementedError

    def start_together(self) -> None:
        """At construction, outside any round: the same model and start on every worker."""
        raise NotImplementedError

    def average_buffers_now(self, among: str) -> None:
        """The BatchNorm average of a round's members, at once."""
        raise NotImplementedError

    def in_flight(self) -> list[InFlight]:
        """The rounds whose transfer is under way, oldest first (``overlap``)."""
        return self._pipeline.items()

    @property
    def cadences(self) -> list[Cadence]:
        """The kinds of round this strategy runs, each with its period and offset."""
        return list(self._schedule.cadences)

    @property
    def local_state(self) -> list[torch.Tensor]:
        """The live tensors that this worker's rounds communicate, in order."""
        return self._state

    def state_dict(self) -> dict[str, Any]:
        """Everything of the strategy's own needed to resume (not model or optimizer)."""
        raise NotImplementedError

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def take(self, state: Mapping[str, Any]) -> None:
        """Take a peer's model and strategy (torchft's heal), keeping this worker's own
        traffic baseline, resets and seconds in rounds."""
        own = dict(self._baseline), self.resets, self.wait_seconds
        self.module.load_state_dict(state["model"])
        self.load_state_dict(state["strategy"])
        self._baseline, self.resets, self.wait_seconds = own
