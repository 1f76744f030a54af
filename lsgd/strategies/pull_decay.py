"""LSGD's round pull, and its early valley: a pull that decays from a full copy.

The round pull of a level (docs/algorithms.md, "LSGD, synchronous", and "The
early valley: a round pull that decays from 1") moves every non-leader toward the
leader's state ``x̃`` that the round broadcast. With ``pull_decay_rounds=R > 0``
the level's round ``r`` (``r = 0, 1, ...``: the level's earlier rounds that
elected a leader) first copies a share

    c_r = max(0, 1 - r / R)

of the way, so that its pull is

    λ_r = λ + (1 - λ) c_r

a full copy of the leader at ``r = 0``, decaying linearly to ``λ`` at ``r = R``
and ``λ`` from then on (bit for bit; ``R = 0`` is the constant pull). Nothing
more is communicated: ``r`` is a count every member of the level holds alike.

A hidden round (``overlap=K``) lands ``K`` steps after its election, when the
worker's state is ``x = x_s + δ`` (``x_s``: its state at the round, ``δ``: the
``K`` steps since). Its copied share moves by the round's own difference,
keeping those steps, and the ordinary pull follows (:func:`copy_since_`):

    x <- x - c_r (x_s - x̃)        then        x <- x - λ (x - x̃)

so ``r = 0`` leaves ``x̃ + (1 - λ) δ``, not ``x̃``; with ``K = 0`` the two are
the one pull ``λ_r``. Each non-leader keeps ``x_s`` (or the part sent) while
such a round is in flight: one copy of the state, only in the first ``R``
rounds, and in checkpoints with the round.
"""

from __future__ import annotations

from typing import Any

import torch

from lsgd import _validate
from lsgd.functional import nesterov_pull_, pull_


def check_decay_rounds(owner: str, value: Any) -> int:
    """``pull_decay_rounds`` as a whole number of rounds >= 0 (``ValueError`` naming it)."""
    if not _validate.is_int(value) or value < 0:
        raise ValueError(f"{owner}: pull_decay_rounds must be a whole number of rounds >= 0 "
                         f"(R: the round pull decays from 1 to pull over the first R rounds "
                         f"of each level; 0 keeps it constant), got {value!r}")
    return int(value)


def copied_share(round_index: int | None, decay_rounds: int) -> float:
    """``c_r = max(0, 1 - r / R)``: the share of the way round ``r`` copies before its
    ordinary pull; 0 with ``R = 0`` or no round index (a round with no decay)."""
    if not decay_rounds or round_index is None:
        return 0.0
    return max(0.0, 1.0 - round_index / decay_rounds)


def round_pull_(x: list[torch.Tensor], leader: list[torch.Tensor], pull: float, share: float,
                velocity: list[torch.Tensor] | None = None,
                lag: list[torch.Tensor] | None = None, mu: float = 0.0,
                start: list[torch.Tensor] | None = None) -> None:
    """A non-leader's round pull toward ``leader`` (in place on ``x``).

    Plain (no ``velocity``): one pull of ``λ_r = pull + (1 - pull) share``,
    ``x <- x - λ_r (x - x̃)`` (``share = 0``: ``λ``, bit for bit). With leader
    momentum ``mu``: first ``x <- x - share (x - x̃)``, then the Nesterov step on
    what is left, with ``d = x - x̃``: ``v <- mu v + d``, ``x <- x - λ (d + mu v)``
    (``lag`` is scratch space); with ``mu = 0`` that would be the plain ``λ_r``.
    A hidden round gives ``start`` (the worker's state at the round, used up): its
    copied share is :func:`copy_since_`, then the pull of ``pull`` as above.
    """
    if start is not None and share:
        copy_since_(x, start, leader, share)
        share = 0.0
    if velocity is None or lag is None:
        pull_(x, leader, pull + (1.0 - pull) * share)
    else:
        pull_(x, leader, share)
        nesterov_pull_(x, leader, pull, velocity, lag, mu)


def copy_since_(x: list[torch.Tensor], start: list[torch.Tensor],
                leader: list[torch.Tensor], share: float) -> None:
    """A hidden round's copied share: ``x <- x - share (start - leader)``, the worker's
    steps since ``start`` (its state at the round) kept; ``start`` is used up."""
    torch._foreach_sub_(start, leader)
    torch._foreach_add_(x, start, alpha=-share)
