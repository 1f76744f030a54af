"""Communication graphs for decentralized training, and the math on them.

A :class:`Topology` is an undirected simple graph on the workers ``0 .. W-1`` (built by
:mod:`~lsgd.topology.generators`) with its matchings (rounds of pairwise exchange, at
most ``D + 1`` for maximum degree ``D``), Laplacian, connectivity check and D-PSGD's
mixing weight (Lian et al., arXiv:1705.09056); MATCHA's convex programs are in
:mod:`lsgd.topology.matcha_programs`.
Nothing here communicates: every worker builds the same graph from the same arguments.
"""

from lsgd.topology.colouring import Edge, _misra_gries, edge_colouring
from lsgd.topology.generators import (KINDS, complete, erdos_renyi, from_edges, from_spec, make,
                                      ring, torus, union)
from lsgd.topology.graph import Topology, laplacian
from lsgd.topology.matcha_programs import (activation_probabilities, expected_contraction,
                                           matcha_mixing_weight)

__all__ = [
    "Edge", "KINDS", "Topology", "_misra_gries", "activation_probabilities", "complete",
    "edge_colouring", "erdos_renyi", "expected_contraction", "from_edges", "from_spec",
    "laplacian", "make", "matcha_mixing_weight", "ring", "torus", "union"]
