"""MATCHA (Wang, Sahu, Yang, Joshi, Kar, "MATCHA: Speeding Up Decentralized SGD
via Matching Decomposition Sampling", 2019, https://arxiv.org/abs/1905.09435).

The graph's edges are split into matchings ``M_1 .. M_M``. At each communication
matching ``j`` is active with probability ``p_j``, drawn alike on every worker from a
generator seeded with ``seed``; each worker then gossips with its partners in the
active matchings, ``x_i <- (1 - d_i a) x_i + a sum_{j in A_i} x_j``.

``p = argmax lambda_2(sum_j p_j L_j)`` s.t. ``sum_j p_j <= budget * M``, and
``a = argmin ||E[W^T W] - J||_2`` (:mod:`lsgd.topology`, solved once with cvxpy).
``budget=1`` is D-PSGD. Communicated per communication: the state, once to each active
partner.
"""

from __future__ import annotations

from lsgd.strategies.decentralized import Decentralized


class MATCHA(Decentralized):
    """Matching decomposition sampling: gossip along randomly activated matchings.

    Takes :class:`~lsgd.strategies.decentralized.Decentralized`'s keywords; ``budget``,
    the expected fraction of matchings active per communication, defaults to 0.5.
    """

    name = "matcha"
    default_budget = 0.5

