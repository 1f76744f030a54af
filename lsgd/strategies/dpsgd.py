"""D-PSGD (Lian et al., "Can Decentralized Algorithms Outperform Centralized
Algorithms? A Case Study for Decentralized Parallel Stochastic Gradient
Descent", NeurIPS 2017, https://arxiv.org/abs/1705.09056).

Every ``period`` steps, after the inner optimizer step, each worker swaps its state with
every neighbour in the graph and mixes::

    x_i <- (1 - d_i a) x_i + a sum_{j in N(i)} x_j,     a = 2 / (lambda_2(L) + lambda_max(L))

(``a`` minimizes ``||I - a L - J||_2``); step then mix, the "adapt then combine"
order of MATCHA's and AL-DSGD's code. Communicated per communication: the state once
to each of the ``d_i`` neighbours, each way.
"""

from __future__ import annotations

from typing import Unpack

import torch
from torch import nn

from lsgd.strategies.decentralized import Decentralized, GraphSpec, MixingWeight
from lsgd.strategies.strategy import Options


class DPSGD(Decentralized):
    """Decentralized parallel SGD: gossip with all neighbours at every communication.

    Takes :class:`~lsgd.strategies.decentralized.Decentralized`'s keywords but
    ``budget`` (1: every matching) and ``seed`` (no draws); ``period=1`` is the paper's.
    """

    name = "dpsgd"
    options_type = Options  # the gossip's own keywords are D-PSGD's, or fixed

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 topology: GraphSpec = None, period: int = 1,
                 mixing_weight: MixingWeight = None, **options: Unpack[Options]) -> None:
        super().__init__(model, optimizer, topology=topology, budget=1.0, period=period, seed=0,
                         mixing_weight=mixing_weight, **options)

