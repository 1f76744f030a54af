"""Pure update math on lists of tensors: pulls, elastic updates, leader election,
finiteness checks. Nothing here communicates; updates are in place, one
``torch._foreach_*`` call for a whole model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

Tensors = Sequence[torch.Tensor]


def pull_(xs: Tensors, targets: Tensors, weight: float) -> None:
    """Move every ``x`` ``weight`` of the way toward its target: ``x <- x - weight * (x -
    target)``. A zero weight leaves ``x`` untouched bit for bit, which keeps ``pull=0``
    runs identical to runs without communication."""
    if weight == 0.0 or not xs:
        return
    torch._foreach_lerp_(list(xs), list(targets), weight)


def pull_two_(xs: Tensors, first: Tensors, first_weight: float, second: Tensors,
              second_weight: float) -> None:
    """Simultaneous pull toward two targets (LSGD's every-step pull toward the local and
    the global leader): ``x <- (1 - a - b) x + a first + b second``. Both differences use
    the same ``x``; two successive lerps would differ by an ``a*b`` cross term."""
    if first_weight == 0.0:
        pull_(xs, second, second_weight)
        return
    if second_weight == 0.0:
        pull_(xs, first, first_weight)
        return
    xs = list(xs)
    torch._foreach_mul_(xs, 1.0 - first_weight - second_weight)
    torch._foreach_add_(xs, list(first), alpha=first_weight)
    torch._foreach_add_(xs, list(second), alpha=second_weight)


def elastic_step_(xs: Tensors, center: Tensors, mean: Tensors, alpha: float,
                  beta: float) -> None:
    """One EASGD round given the workers' mean ``x_bar``: ``x <- x - alpha * (x - c)``
    with the center before its update, then ``c <- c + beta * (x_bar - c)``. With
    ``alpha = beta / W`` that is ``c + alpha * sum_i (x_i - c)``, the elastic force
    summed over workers, so one all-reduce of ``x`` replaces EASGD's parameter server."""
    pull_(xs, center, alpha)
    pull_(center, mean, beta)


def lags_(out: Tensors, xs: Tensors, targets: Sequence[tuple[Tensors, float]]) -> None:
    """``out <- sum over (t, w) of w (x - t)``: the weighted distances to several
    targets (LSGD's every-step pull toward each level's leader, taken at once)."""
    out, xs = list(out), list(xs)
    (first, weight), *rest = targets
    torch._foreach_copy_(out, xs)
    torch._foreach_sub_(out, list(first))
    torch._foreach_mul_(out, weight)
    for target, w in rest:
        torch._foreach_add_(out, xs, alpha=w)
        torch._foreach_add_(out, list(target), alpha=-w)


def nesterov_pull_(xs: Tensors, targets: Tensors, weight: float, velocity: Tensors,
                   lag: Tensors, mu: float) -> None:
    """A pull through Nesterov momentum: with ``d = x - target``, ``v <- mu v + d`` and
    ``x <- x - weight (d + mu v)``; ``lag`` is scratch space shaped like ``xs``."""
    xs, lag, velocity = list(xs), list(lag), list(velocity)
    torch._foreach_copy_(lag, xs)
    torch._foreach_sub_(lag, list(targets))  # d = x - target
    torch._foreach_mul_(velocity, mu)
    torch._foreach_add_(velocity, lag)  # v <- mu v + d
    torch._foreach_add_(lag, velocity, alpha=mu)  # d + mu v
    torch._foreach_add_(xs, lag, alpha=-weight)


def elect(scores: torch.Tensor) -> int | None:
    """Index of the lowest finite score, ties to the lowest index; ``None`` when no
    score is finite (then nobody leads and no pull should happen)."""
    values = scores.detach().to("cpu", torch.float64).reshape(-1).tolist()
    finite = [(value, i) for i, value in enumerate(values) if math.isfinite(value)]
    return min(finite)[1] if finite else None


def finite_flag(tensors: Tensors) -> torch.Tensor:
    """Whether every value of ``tensors`` is finite, as a 0-d bool tensor computed on
    their device without synchronisation, so it can ride along with a collective (LSGD
    folds it into the score it gathers). Empty tensors and an empty list are finite."""
    flags = [torch.isfinite(t).all() for t in tensors if t.numel()]
    if not flags:
        return torch.ones((), dtype=torch.bool)
    device = flags[0].device
    return torch.stack([f.to(device) for f in flags]).all()


def finite_each(groups: Sequence[Tensors]) -> list[bool]:
    """For each group of tensors, whether all its values are finite (one device
    synchronisation for all the groups together)."""
    if not groups:
        return []
    flags = [finite_flag(tensors) for tensors in groups]
    device = flags[0].device
    return [bool(v) for v in torch.stack([f.to(device) for f in flags]).tolist()]


def all_finite(tensors: Tensors) -> bool:
    """Whether every value of ``tensors`` is finite (one device synchronisation)."""
    return finite_each([tensors])[0]


def ring_allreduce_bytes(nbytes: int, n: int) -> int:
    """Bytes one worker sends (and receives) in a ring all-reduce of ``nbytes``: a
    reduce-scatter then an all-gather, each ``n - 1`` chunks of ``nbytes / n``."""
    return 0 if n <= 1 else (2 * (n - 1) * nbytes) // n
