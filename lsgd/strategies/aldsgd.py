"""AL-DSGD (He, Wang, Choromanska, "Adjacent Leader Decentralized Stochastic
Gradient Descent", 2024, https://arxiv.org/abs/2405.11389).

Gossip as in D-PSGD / MATCHA, pulled toward the strongest neighbours. At each
communication every worker sends its active neighbours its state, its leader score (as
in LSGD) and its active degree ``d_i``. Among itself and its active neighbours it picks
``B``, the best finite score, and ``D``, the highest active degree, and updates::

    x_mix <- (1 - d_i a) x_i + a sum_{j in A_i} x_j
    y     <- (1 - c_B - c_D) x_mix + c_B x_B + c_D x_D
    x_i   <- (1 - p_B - p_D) y     + p_B x_B + p_D x_D

A worker with no active neighbour does nothing. Communicated per communication: to
each active neighbour the state and two float64s (score and degree). Diverged
neighbours are dropped before ``B`` and ``D`` are chosen; a reset also empties the
worker's loss window (docs/algorithms.md, "Decentralized methods").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.flat import FlatBuffer
from lsgd.functional import elect
from lsgd.leader import Scorer
from lsgd.strategies.strategy import as_loss_tensor
from lsgd.strategies.decentralized import Decentralized, GossipOptions, Tensors, mix_


def choose(rank: int, scores: Mapping[int, float], degrees: Mapping[int, int]) -> tuple[int, int]:
    """``(B, D)``: the best-scoring and the highest-degree worker among ``rank`` and
    its active neighbours (the other keys of ``scores`` and ``degrees``); ties go to
    the worker itself, then to the lowest rank. Scores follow
    :func:`lsgd.functional.elect` (lowest finite wins); none finite: ``B`` is ``rank``.
    """
    order = [rank] + sorted(r for r in scores if r != rank)
    winner = elect(torch.tensor([float(scores[r]) for r in order], dtype=torch.float64))
    best = rank if winner is None else order[winner]
    top = max(degrees[r] for r in order)
    degree = next(r for r in order if degrees[r] == top)
    return best, degree


def leader_terms_(xs: Tensors, x_best: Tensors, x_degree: Tensors,
                  c_B: float, c_D: float, p_B: float, p_D: float) -> None:
    """Apply the ``c`` and ``p`` terms in place to the mixed state ``xs``, the two
    combinations folded into one pass with ``k = 1 - p_B - p_D``::

        x = k (1 - c_B - c_D) x_mix + (k c_B + p_B) x_B + (k c_D + p_D) x_D
    """
    k = 1.0 - p_B - p_D
    xs = list(xs)
    torch._foreach_mul_(xs, k * (1.0 - c_B - c_D))
    torch._foreach_add_(xs, list(x_best), alpha=k * c_B + p_B)
    torch._foreach_add_(xs, list(x_degree), alpha=k * c_D + p_D)


def aldsgd_update_(xs: Tensors, rank: int, neighbours: Mapping[int, Tensors],
                   scores: Mapping[int, float], degrees: Mapping[int, int], weight: float,
                   c_B: float = 0.3, c_D: float = 0.1, p_B: float = 0.1, p_D: float = 0.1,
                   original: Tensors | None = None) -> tuple[int, int] | None:
    """One AL-DSGD communication of worker ``rank``, in place on its state ``xs``:
    ``neighbours`` maps each active neighbour to its state, ``scores`` and ``degrees``
    cover ``rank`` and its neighbours, ``weight`` is ``a``, ``original`` (if held) a copy
    of ``xs``. Returns ``(B, D)``, or ``None`` (``xs`` left alone) with no neighbour."""
    if not neighbours:
        return None
    best, degree = choose(rank, scores, degrees)
    mine = list(original) if original is not None else [x.clone() for x in xs]
    mix_(xs, list(neighbours.values()), weight)
    leader_terms_(xs, mine if best == rank else neighbours[best],
                  mine if degree == rank else neighbours[degree], c_B, c_D, p_B, p_D)
    return best, degree


class ALDSGD(Decentralized):
    """Adjacent-leader decentralized SGD: D-PSGD's (or MATCHA's) gossip weighted toward
    the best and the best-connected neighbour, with corrective pulls toward both.

    Args:
        c_B, c_D: extra averaging weight of the best-scoring and of the
            highest-degree worker, each in [0, 1], ``c_B + c_D <= 1``.
        p_B, p_D: corrective force toward them, each in [0, 1], ``p_B + p_D <= 1``.
            Defaults ``0.3, 0.1, 0.1, 0.1`` are the authors' library's.
        leader_window, leader_metric, eval_batch, eval_loss: the leader score,
            as in :class:`~lsgd.strategies.lsgd.LSGD`.
        options: :class:`~lsgd.strategies.decentralized.Decentralized`'s (``budget``
            default 1: every matching active).
    """

    name = "al-dsgd"
    counters = (*Decentralized.counters, "led")

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 c_B: float = 0.3, c_D: float = 0.1, p_B: float = 0.1, p_D: float = 0.1,
                 leader_window: int = 10, leader_metric: str = "train",
                 eval_batch: tuple[torch.Tensor, torch.Tensor] | None = None,
                 eval_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 **options: Unpack[GossipOptions]) -> None:
        owner = "ALDSGD"
        self.c_B = _validate.fraction(owner, "c_B", c_B)
        self.c_D = _validate.fraction(owner, "c_D", c_D)
        self.p_B = _validate.fraction(owner, "p_B", p_B)
        self.p_D = _validate.fraction(owner, "p_D", p_D)
        for (a, va), (b, vb) in ((("c_B", c_B), ("c_D", c_D)), (("p_B", p_B), ("p_D", p_D))):
            if va + vb > 1.0:
                raise ValueError(f"{owner}: {a} + {b} must be at most 1 (a convex "
                                 f"combination), got {a}={va!r} and {b}={vb!r}")
        self.scorer = Scorer(owner, leader_window, leader_metric, eval_batch, eval_loss)
        super().__init__(model, optimizer, **options)
        self.device = self._device()
        self._original = FlatBuffer(self._state)  # this worker's state before the update
        self.best_rank: int | None = None
        self.degree_rank: int | None = None
        self._scores: dict[int, float] = {}  # this communication's, from _share
        self._degrees: dict[int, int] = {}
        self.led = 0  # communications at which B was a neighbour, not this worker

    def _agreement_key(self) -> list[float]:
        return [*super()._agreement_key(), self.c_B, self.c_D, self.p_B, self.p_D]

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        self.scorer.record(None if loss is None else as_loss_tensor(loss, "ALDSGD"), "ALDSGD")
        super()._after_step(loss)

    def _share(self, peers: list[int]) -> None:
        """Swap score (a replica's: its processes' mean) and active degree with the peers."""
        score = self.comm.replica_mean_(self.scorer.score(self._module, self.device))
        meta = torch.stack([score, torch.tensor(float(len(peers)), dtype=torch.float64,
                                                device=self.device)])
        theirs = self.comm.exchange_many(meta, peers)
        self._scores = {self.rank: float(score)}
        self._degrees = {self.rank: len(peers)}
        for peer, values in zip(peers, theirs):
            s, d = values.tolist()
            self._scores[peer], self._degrees[peer] = s, int(d)

    def _combine(self, mine: list[torch.Tensor], received: dict[int, list[torch.Tensor]],
                 weight: float) -> None:
        scores = {r: self._scores[r] for r in (self.rank, *received)}  # not the dropped ones
        degrees = {r: self._degrees[r] for r in scores}
        original = self._original.buffers
        torch._foreach_copy_(original, mine)
        chosen = aldsgd_update_(mine, self.rank, received, scores, degrees, weight,
                                self.c_B, self.c_D, self.p_B, self.p_D, original=original)
        self.best_rank, self.degree_rank = chosen or (self.rank, self.rank)
        self.led += self.best_rank != self.rank

    def _after_reset(self) -> None:
        """Forget the losses of the diverged past: the window refills from the next step."""
        self.scorer.window.load([])

    def _report_fields(self) -> dict[str, Any]:
        fields = super()._report_fields()
        fields["details"].update(best_rank=self.best_rank, degree_rank=self.degree_rank)
        return fields

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"scorer": self.scorer.state(), "best_rank": self.best_rank,
                                       "degree_rank": self.degree_rank}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.scorer.load(state["scorer"])
        self.best_rank, self.degree_rank = state["best_rank"], state["degree_rank"]

