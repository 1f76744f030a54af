"""The named, typed views of a :class:`~lsgd.strategies.base.Strategy` that code outside
the strategy uses (the elastic layer, the elastic trainer) instead of its private state."""

from __future__ import annotations

from typing import Any

import torch

from lsgd.comm import CommStats
from lsgd.strategies.rounds import Cadence, Rounds


class Seams:
    """Mixed into :class:`Strategy`, which sets the attributes annotated here."""

    _state: list[torch.Tensor]
    _rounds: Rounds
    _pipeline: Any
    _baseline: dict[str, CommStats]
    resets: int
    wait_seconds: float

    @property
    def hides_rounds(self) -> bool:
        """Whether rounds stay in flight across steps (overlap, compression, fragments)."""
        return self._pipeline is not None or getattr(self, "_rounds_of", None) is not None

    @property
    def cadences(self) -> list[Cadence]:
        """The kinds of round this strategy runs, each with its period and offset."""
        return list(self._rounds.cadences)

    @property
    def local_state(self) -> list[torch.Tensor]:
        """This worker's parameters (and buffers, where rounds carry them), the tensors
        its rounds communicate, in order: the live tensors, not copies."""
        return self._state

    def own_counts(self) -> tuple[dict[str, CommStats], int, float]:
        """What stays this worker's own when it takes a peer's state: the traffic
        baseline, its resets and its seconds in rounds."""
        return dict(self._baseline), self.resets, self.wait_seconds

    def restore_own_counts(self, own: tuple[dict[str, CommStats], int, float]) -> None:
        """Put back what :meth:`own_counts` returned."""
        self._baseline, self.resets, self.wait_seconds = dict(own[0]), own[1], own[2]
