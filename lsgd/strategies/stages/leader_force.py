"""The leader's force on the averaging methods (DiLoCo, local SGD), the centralized
analogue of AL-DSGD's pull toward the best worker (docs/algorithms.md, "The leader's
force on averaging methods").

At every round the workers' scores (the mean of the last :data:`WINDOW` training
losses, ``+inf`` when the state is not finite) are all-gathered and the leader ``L``
elected as LSGD elects. With ``M`` workers (replicas):

* ``leader="weights"``: the round's mean is ``θ̄ = (Σ_m x_m + c x_L) / (M + c)``,
  ``c = leader_weight``. Communicated: the score all-gather, nothing else.
* ``leader="pull"``: after the method's rule, ``θ_g <- θ_g + λ (x_L - θ_g)``,
  ``λ = leader_pull``, toward the leader's state at the round's start. Communicated:
  the score all-gather and one broadcast of the leader's state (none when gathered).

Both apply on a healthy round only; elastic, asynchronous and hierarchical rounds are
refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.communicator import Among, Communicator
from lsgd.flat import FlatBuffer
from lsgd.functional import elect, pull_
from lsgd.leader import Scorer
from lsgd.strategies.election import Election
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.stages.parts import StateParts
from lsgd.names import LEADERS

WINDOW = 10  # losses in a score: LSGD's default leader_window
DEFAULT_WEIGHT = 1.0  # c: the leader counts twice, the mean moves 1/(M+1) of the way to it
DEFAULT_PULL = 0.5  # λ: θ_g halfway between the round's rule and the leader


class LeaderForce:
    """A method's leader force (``mode`` ``"weights"`` or ``"pull"``): the scorer, the
    round's election, and the leader's state for the pull."""

    def __init__(self, owner: str, mode: str, weight: float, pull: float) -> None:
        self.owner, self.mode, self.weight, self.pull = owner, mode, weight, pull
        self.scorer = Scorer(owner, WINDOW, "train", None, None)
        self.election = Election("round", self.scorer)
        self.leader: int | None = None  # elected at the last round
        self._landed: list[torch.Tensor] | None = None  # x_L of the round being applied

    def elect(self, comm: Communicator, module: nn.Module, state: Sequence[torch.Tensor],
              device: torch.device, among: Among) -> float | None:
        """Elect the round's leader; this worker's weight of the sum (None: a plain mean)."""
        scores = self.election.gather(comm, module, state, device, among)
        self.leader = elect(scores)
        weights = self.weights(len(scores), self.leader)
        return None if weights is None else weights[comm.rank]

    def weights(self, count: int, leader: int | None) -> list[float] | None:
        """Every member's weight of the round's sum (None: a plain mean)."""
        if self.mode != "weights":
            return None
        if leader is None:  # no finite score: the plain mean, as weights
            return [1.0 / count] * count
        return [(1.0 + self.weight if m == leader else 1.0) / (count + self.weight)
                for m in range(count)]

    def send(self, comm: Communicator, parts: StateParts, move: Any,
             reference: FlatBuffer | None, item: InFlight, part: int, among: Among) -> None:
        """Note the round's leader on ``item``; with ``"pull"`` broadcast its part of the
        state (compressed: ``x_L - r``) unless a gathering move already carries it."""
        if self.leader is None:
            return
        item.info["leader"] = self.leader
        if self.mode != "pull" or move.gathers:
            return
        buffers = [t.clone() for t in parts.current(part)]
        compress = move.codec
        if compress != "none" and comm.rank == self.leader:
            assert reference is not None
            torch._foreach_sub_(buffers, parts.of(reference, part))
        across = comm.across
        if move.blocking:
            for buffer in buffers:
                across.broadcast_(buffer, src=self.leader, among=among)
        else:
            item.handles += [across.start_broadcast(b, self.leader, among, codec=compress)
                             for b in buffers]
        item.tensors["leader"] = buffers

    def arrive(self, item: InFlight, reference: Sequence[torch.Tensor] | None,
               gathered: list[torch.Tensor] | None = None) -> None:
        """Hold the leader's state of the round ``item``, applied next (compressed: decoded
        against ``reference``; gathered: ``r - gathered``, its own decoded message)."""
        self._landed = item.tensors.get("leader")
        if gathered is not None and reference is not None:
            self._landed = [r - g for r, g in zip(reference, gathered)]
        elif self._landed is not None and reference is not None:
            torch._foreach_add_(self._landed, list(reference))

    def pull_(self, targets: Sequence[torch.Tensor]) -> None:
        """``θ <- θ + λ (x_L - θ)`` on ``targets`` when the round has a leader."""
        if self._landed is not None:
            pull_(targets, self._landed, self.pull)

    def done(self) -> None:
        self._landed = None

    def state(self) -> dict[str, Any]:
        return {"scorer": self.scorer.state(), "leader": self.leader}

    def load(self, state: Mapping[str, Any]) -> None:
        self.scorer.load(state["scorer"])
        self.leader = state.get("leader")


def make(owner: str, leader: Any, leader_weight: Any, leader_pull: Any) -> LeaderForce | None:
    """The leader force of a method's keywords (None for ``leader="none"``)."""
    _validate.choice(owner, "leader", leader, LEADERS)
    for name, value, mode in (("leader_weight", leader_weight, "weights"),
                              ("leader_pull", leader_pull, "pull")):
        if value is not None and leader != mode:
            raise ValueError(f"{owner}: {name}={value!r} is the strength of leader={mode!r}; "
                             f"give leader={mode!r} or drop {name}")
    if leader == "none":
        return None
    weight = DEFAULT_WEIGHT if leader_weight is None else leader_weight
    if not _validate.is_number(weight, finite=True) or weight < 0:
        raise ValueError(f"{owner}: leader_weight must be a finite number >= 0 (the leader's "
                         f"extra count c in the mean), got {leader_weight!r}")
    pull = _validate.fraction(owner, "leader_pull", DEFAULT_PULL if leader_pull is None
                              else leader_pull)
    return LeaderForce(owner, leader, float(weight), pull)


def check_rounds(force: LeaderForce | None, asynchronous: bool, hierarchical: bool,
                 elastic: bool) -> None:
    """Refuse the rounds a leader force does not take: elastic, asynchronous, hierarchical."""
    if force is None:
        return
    refused = [what for what, on in (("asynchronous=True", asynchronous),
                                     ("hierarchical=True", hierarchical),
                                     ("elastic training", elastic)) if on]
    if refused:
        raise ValueError(f"{force.owner}: leader={force.mode!r} elects among all workers at "
                         f"synchronous rounds of one level, not with {refused[0]}; drop one "
                         "of them (leader='none' is the plain method)")
