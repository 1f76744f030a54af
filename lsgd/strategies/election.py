"""LSGD's elections: this worker's score, gathered from every member, when and where.

A worker's score is its :class:`~lsgd.leader.Scorer`'s, ``+inf`` when its state is not
finite, so that a diverged worker is never elected. ``"round"``: a blocking all-gather
at the round step ``s``; ``"early"``: the all-gather starts after step ``s - 1`` on the
``"control"`` lane, so the leader is one step stale (Theorem 2 of the LSGD paper allows
it) and a round step holds no blocking collective (docs/algorithms.md, "LSGD's hidden
round: the early election and fragments").
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lsgd.comm import Communicator
from lsgd.comm.communicator import Among
from lsgd.comm.transfers import Handle, done_handle
from lsgd.functional import finite_flag
from lsgd.leader import Scorer

ELECTIONS = ("round", "early")


class Election:
    """Gathers the scores of a round's election (``rule``: ``"round"`` or ``"early"``)."""

    def __init__(self, rule: str, scorer: Scorer) -> None:
        self.rule, self.scorer = rule, scorer
        self._early: tuple[Among, Handle] | None = None  # started after step s - 1
        #: each level's leader of the current period and whether this worker had
        #: diverged at its election (None: no leader), for the later fragments
        self.elected: dict[str, tuple[int, bool] | None] = {}

    def _score(self, module: Any, state: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        score = self.scorer.score(module, device)
        finite = finite_flag(state).to(score.device)
        return torch.where(finite, score, torch.full_like(score, math.inf)).reshape(1)

    def start_early(self, comm: Communicator, module: Any, state: list[torch.Tensor],
                    device: torch.device, among: Among) -> None:
        """Start gathering the scores for the round after the next step (``"early"``)."""
        score = self._score(module, state, device)
        self._early = (among, comm.start_all_gather(score, among=among, lane="control"))

    def gather(self, comm: Communicator, module: Any, state: list[torch.Tensor],
               device: torch.device, among: Among) -> torch.Tensor:
        """Every member's score (float64, CPU, rank order): the early gather, or now."""
        if self._early is not None:
            early_among, handle = self._early
            self._early = None
            assert early_among == among, "an early election among other workers"
            gathered = handle.wait()
        else:
            gathered = comm.all_gather(self._score(module, state, device), among=among)
        return gathered.reshape(-1).to("cpu", torch.float64)  # one synchronisation

    def state(self) -> dict[str, Any]:
        """The leaders of the period and the early gather in flight, arrived."""
        early = None
        if self._early is not None:
            among, handle = self._early
            early = {"among": among, "scores": handle.wait().clone()}
        return {"early": early, "elected": dict(self.elected)}

    def load(self, state: dict[str, Any]) -> None:
        early = state.get("early")
        self._early = None if early is None else (early["among"], done_handle(early["scores"]))
        self.elected = {name: None if e is None else (int(e[0]), bool(e[1]))
                        for name, e in state.get("elected", {}).items()}
