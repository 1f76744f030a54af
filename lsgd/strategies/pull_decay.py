"""LSGD's round pull, and its early valley: a pull that decays from a full copy
(docs/algorithms.md, "The early valley: a round pull that decays from 1").

With ``pull_decay_rounds=R > 0`` a level's round ``r`` first copies a share
``c_r = max(0, 1 - r / R)`` of the way to the leader's state ``x̃``, so that its pull is
``λ_r = λ + (1 - λ) c_r``, decaying linearly to ``λ`` at ``r = R``. Nothing more is
communicated: every member counts ``r`` alike.

A hidden round (``overlap=K``) lands when the worker's state is ``x = x_s + δ``
(``x_s``: its state at the round, ``δ``: the ``K`` steps since): the copied share moves
by the round's own difference, keeping those steps, then the ordinary pull follows::

    x <- x - c_r (x_s - x̃)        then        x <- x - λ (x - x̃)

Each non-leader keeps ``x_s`` while such a round is in flight (the first ``R`` rounds).
"""

from __future__ import annotations

import torch

from lsgd.functional import nesterov_pull_, pull_


def copied_share(round_index: int | None, decay_rounds: int) -> float:
    """``c_r = max(0, 1 - r / R)``, the share round ``r`` copies (0: no decay)."""
    if not decay_rounds or round_index is None:
        return 0.0
    return max(0.0, 1.0 - round_index / decay_rounds)


def round_pull_(x: list[torch.Tensor], leader: list[torch.Tensor], pull: float, share: float,
                velocity: list[torch.Tensor] | None = None,
                lag: list[torch.Tensor] | None = None, mu: float = 0.0,
                start: list[torch.Tensor] | None = None) -> None:
    """A non-leader's round pull toward ``leader`` (in place on ``x``).

    Plain (no ``velocity``): ``x <- x - λ_r (x - x̃)``. With leader momentum ``mu``:
    first ``x <- x - share (x - x̃)``, then with ``d = x - x̃`` the Nesterov step
    ``v <- mu v + d``, ``x <- x - λ (d + mu v)`` (``lag`` is scratch space). A hidden
    round's copied share is ``x <- x - share (start - x̃)``, the steps since ``start`` (the
    state at the round, used up) kept; then the pull.
    """
    if start is not None and share:
        torch._foreach_sub_(start, leader)
        torch._foreach_add_(x, start, alpha=-share)
        share = 0.0
    if velocity is None or lag is None:
        pull_(x, leader, pull + (1.0 - pull) * share)
    else:
        pull_(x, leader, share)
        nesterov_pull_(x, leader, pull, velocity, lag, mu)

