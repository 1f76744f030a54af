"""MATCHA (Wang, Sahu, Yang, Joshi, Kar, "MATCHA: Speeding Up Decentralized SGD
via Matching Decomposition Sampling", 2019).

The graph's edges are split into matchings ``M_1 .. M_M`` (an edge colouring;
:attr:`lsgd.topology.Topology.matchings`). At each communication, matching
``j`` is active with probability ``p_j``, independently, and every worker
draws the same activations from a generator seeded with the same ``seed``, so
they agree without a message. Then each worker gossips with its partners in
the active matchings (at most one per matching)::

    x_i <- (1 - d_i a) x_i + a sum_{j in A_i} x_j

Two convex programs, solved once at construction (cvxpy, ``lsgd[matcha]``):

* ``p = argmax lambda_2(sum_j p_j L_j)`` s.t. ``sum_j p_j <= budget * M``,
  ``0 <= p_j <= 1``: spend the budget where it helps connectivity most
  (:func:`lsgd.topology.activation_probabilities`);
* ``a = argmin ||E[W^T W] - J||_2`` with ``W = I - a L(t)``
  (:func:`lsgd.topology.matcha_mixing_weight`).

With ``budget=1`` every matching is always active and ``a`` is D-PSGD's: the
method is exactly :class:`~lsgd.strategies.dpsgd.DPSGD` (no solver needed).

Communicated per communication: the state, once to each partner in an active
matching. In expectation ``sum_j p_j <= budget * M`` matchings are active, so a
worker sends about ``budget`` times what D-PSGD sends (exactly so on a regular
graph whose matchings are perfect, such as an even ring).
"""

from __future__ import annotations

from lsgd.strategies.decentralized import Decentralized


class MATCHA(Decentralized):
    """Matching decomposition sampling: gossip along randomly activated matchings.

    Args:
        topology: a :class:`~lsgd.topology.Topology`, a list of them used in turn
            (dynamic graphs; each keeps its own matchings, probabilities and
            weight), or a kind name; default ``ring(W)``.
        budget: C_b in (0, 1] (default 0.5), the expected fraction of matchings active per
            communication (the paper's communication budget).
        period: local steps between communications (1: every step).
        seed: seed of the activation sampler, the same on every worker
            (checked at construction).
        mixing_weight: ``a``; default the method's own; ``"max-degree"`` or a
            number: see :class:`~lsgd.strategies.decentralized.Decentralized`.
        comm, init, sync_buffers, bn_buffers: see :class:`~lsgd.strategies.base.Strategy`.
    """

    name = "matcha"
    default_budget = 0.5

    @property
    def probabilities(self) -> list[list[float]]:
        """Activation probability of each matching, per graph."""
        return [list(plan.probabilities) for plan in self.plans]

