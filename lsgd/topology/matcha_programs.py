"""MATCHA's two convex programs (Wang et al., arXiv:1905.09435), solved with cvxpy (the
optional extra ``lsgd[matcha]``): how often each matching is used under a communication
budget, and the mixing weight that minimizes the expected contraction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: Laplacians, as tensors or arrays.
Laplacians = Sequence[torch.Tensor | np.ndarray]


def _cvxpy() -> Any:
    try:
        import cvxpy
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("MATCHA's activation probabilities and mixing weight are convex "
                          "programs solved with cvxpy, which is not installed: pip install "
                          "'lsgd[matcha]' (or cvxpy>=1.3)") from error
    return cvxpy


def _as_numpy(laplacians: Laplacians) -> list[np.ndarray]:
    arrays = [lap.detach().cpu().double().numpy() if isinstance(lap, torch.Tensor)
              else np.asarray(lap, dtype=float) for lap in laplacians]
    return [(a + a.T) / 2 for a in arrays]


def activation_probabilities(laplacians: Laplacians, budget: float) -> list[float]:
    """MATCHA's activation probability of each matching under communication ``budget``.

    Solves ``max lambda_2(sum_j p_j L_j)`` s.t. ``sum_j p_j <= budget * M`` and
    ``0 <= p_j <= 1`` (``M`` matchings), a concave maximization because
    ``lambda_2`` of a Laplacian is the sum of its two smallest eigenvalues
    (the smallest is 0). With ``budget = 1`` the answer is every ``p_j = 1``
    (``lambda_2`` never decreases as a ``p_j`` grows) and no solver is needed.
    """
    mats = _as_numpy(laplacians)
    m = len(mats)
    if not 0.0 < budget <= 1.0:
        raise ValueError(f"activation_probabilities: budget must be in (0, 1], got {budget!r}")
    if m == 0:
        return []
    if budget == 1.0:
        return [1.0] * m
    cp = _cvxpy()
    p = cp.Variable(m)
    combined = sum(p[j] * mats[j] for j in range(m))
    problem = cp.Problem(cp.Maximize(cp.lambda_sum_smallest(combined, 2)),
                         [cp.sum(p) <= budget * m, p >= 0, p <= 1])
    problem.solve()
    if p.value is None:  # pragma: no cover - solver failure
        raise RuntimeError(f"MATCHA's probability program failed: status {problem.status}")
    values = np.clip(np.asarray(p.value, dtype=float), 0.0, 1.0)
    total = values.sum()
    if total > budget * m:  # solver tolerance: stay inside the budget
        values *= budget * m / total
    return [float(v) for v in values]


def _second_moment(mats: list[np.ndarray], p: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``E[L]`` and ``E[L^2]`` for ``L = sum_j B_j L_j`` with independent ``B_j ~ Bernoulli(p_j)``.

    ``E[L^2] = E[L]^2 + sum_j p_j (1 - p_j) L_j^2`` (the cross terms of
    independent ``B_j`` have no variance).
    """
    n = mats[0].shape[0]
    mean = np.zeros((n, n))
    var = np.zeros((n, n))
    for lap, pj in zip(mats, p):
        mean += pj * lap
        var += pj * (1 - pj) * (lap @ lap)
    return mean, mean @ mean + var


def expected_contraction(laplacians: Laplacians, probabilities: Sequence[float],
                         weight: float) -> float:
    """``rho = ||E[W^T W] - J||_2`` for ``W = I - a L(t)``: the mean-square contraction
    of the disagreement per step, which MATCHA's mixing weight minimizes."""
    mats = _as_numpy(laplacians)
    n = mats[0].shape[0]
    mean, second = _second_moment(mats, probabilities)
    m = np.eye(n) - 2 * weight * mean + weight**2 * second - np.ones((n, n)) / n
    return float(np.linalg.norm(m, 2))


def matcha_mixing_weight(laplacians: Laplacians, probabilities: Sequence[float]) -> float:
    """MATCHA's mixing weight ``a``: minimizes ``||E[W^T W] - J||_2``, ``W = I - a L(t)``.

    ``E[W^T W] - J = I - 2a E[L] + a^2 E[L^2] - J`` is positive semidefinite on
    the disagreement (and zero on ``1``), so its norm is its largest eigenvalue:
    minimize ``s`` subject to ``I - 2a E[L] + b E[L^2] - J <= s I`` with
    ``b >= a^2`` (an SDP; ``b = a^2`` at the optimum since ``E[L^2]`` is PSD).
    When every probability is 1 this is D-PSGD's ``2 / (lambda_2 + lambda_max)``
    of the whole graph, computed in closed form.
    """
    mats = _as_numpy(laplacians)
    if not mats:
        return 0.0
    n = mats[0].shape[0]
    if all(p == 1.0 for p in probabilities):
        eig = np.linalg.eigvalsh(sum(mats))
        nonzero = [v for v in eig if v > 1e-9]
        return 2.0 / (nonzero[0] + nonzero[-1]) if nonzero else 0.0
    cp = _cvxpy()
    mean, second = _second_moment(mats, probabilities)
    a, b, s = cp.Variable(nonneg=True), cp.Variable(nonneg=True), cp.Variable(nonneg=True)
    eye, j = np.eye(n), np.ones((n, n)) / n
    bound = (1 - s) * eye - 2 * a * mean - j + b * ((second + second.T) / 2)
    problem = cp.Problem(cp.Minimize(s), [bound << 0, cp.square(a) <= b])
    problem.solve()
    if a.value is None:  # pragma: no cover - solver failure
        raise RuntimeError(f"MATCHA's mixing-weight program failed: status {problem.status}")
    return float(a.value)

