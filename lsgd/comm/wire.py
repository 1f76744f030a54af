"""What each collective puts on the wire, and how long that takes over a link.

**Bytes** a worker sends and receives as the algorithm moves them, for ``n`` members
and ``B`` bytes (docs/algorithms.md has the table): a ring all-reduce
``2 (n - 1) / n * B`` each way; a ring all-gather ``(n - 1) * B``; a broadcast as
gloo's binomial tree (``"tree"``) or as a chain (``"chain"``); a pairwise exchange ``B``
to and from each peer. :class:`Traffic` also counts those that cross the node's link.

**Seconds**, the simulator's link model: each node reaches the others through one link
of ``rate`` bits per second each way and ``latency`` seconds one way; traffic inside a
node is free. A collective runs in stages, one after another, each taking
``latency + 8 * max_bytes / rate`` (``max_bytes``: the most any node sends or receives
across its link in it), nothing when no bytes cross.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from lsgd.functional import ring_allreduce_bytes

__all__ = ["BROADCASTS", "LinkModel", "Traffic", "broadcast_bytes", "ring_allreduce_bytes",
           "tree_rounds"]

BROADCASTS = ("tree", "chain")


def tree_rounds(n: int) -> list[list[tuple[int, int]]]:
    """The (sender, receiver) pairs of each round of a binomial-tree broadcast, as in
    gloo's ``broadcast``; positions are distances from the source (0)."""
    rounds = []
    for i in range(math.ceil(math.log2(n)) if n > 1 else 0):
        step = 1 << i
        rounds.append([(v, v + step) for v in range(min(step, n)) if v + step < n])
    return rounds


Move = tuple[int, int, float]  # (sender, receiver, bytes)


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one worker moves in one collective: bytes sent and received, and of them
    those that cross its node's link (``link_sent``, ``link_received``)."""

    sent: int = 0
    received: int = 0
    link_sent: int = 0
    link_received: int = 0


def pattern_traffic(transfers: Sequence[Move], me: int, node_of: Callable[[int], int]
                    ) -> Traffic:
    """``me``'s :class:`Traffic` in a message pattern of (sender, receiver, bytes)."""
    sent = received = link_sent = link_received = 0.0
    for sender, receiver, nbytes in transfers:
        across = node_of(sender) != node_of(receiver)
        if sender == me:
            sent += nbytes
            link_sent += nbytes if across else 0
        if receiver == me:
            received += nbytes
            link_received += nbytes if across else 0
    return Traffic(round(sent), round(received), round(link_sent), round(link_received))


def ring_traffic(per_hop: float, members: Sequence[int], me: int,
                 node_of: Callable[[int], int]) -> Traffic:
    """A ring in collective order where every member sends ``per_hop`` bytes to the
    next (an all-reduce: ``2 (n - 1) / n B``; an all-gather: ``(n - 1) B``)."""
    return Traffic() if len(members) <= 1 else pattern_traffic(_ring(members, per_hop), me, node_of)


def _ring(members: Sequence[int], nbytes: float) -> list[Move]:
    n = len(members)
    return [(members[i], members[(i + 1) % n], float(nbytes)) for i in range(n)]


def _from(members: Sequence[int], src: int) -> list[int]:
    start = list(members).index(src)
    return [members[(start + v) % len(members)] for v in range(len(members))]


def _all_to_all(sizes: Sequence[int], members: Sequence[int]) -> list[Move]:
    return [(a, b, float(sizes[j])) for a in members for j, b in enumerate(members) if a != b]


def broadcast_pattern(nbytes: int, members: Sequence[int], src: int, algorithm: str,
                      heads: Sequence[int] | None = None) -> list[Move]:
    """Every (sender, receiver, bytes) of a broadcast from ``src``: gloo's tree, a chain
    in collective order (NCCL's ring), or with ``heads`` lsgd's pipelined chain of the
    nodes' heads followed by a tree inside each node (``members`` grouped by node)."""
    n = len(members)
    if n <= 1:
        return []
    if heads is not None:
        moves = [(a, b, float(nbytes)) for a, b in zip(heads, heads[1:])]
        size = n // len(heads)
        for head in heads:
            node = [m for m in members if m // size == head // size]
            moves += broadcast_pattern(nbytes, node, head, "tree")
        return moves
    order = _from(members, src)
    if algorithm == "chain":
        return [(order[v], order[v + 1], float(nbytes)) for v in range(n - 1)]
    return [(order[a], order[b], float(nbytes)) for pairs in tree_rounds(n) for a, b in pairs]


def broadcast_bytes(nbytes: int, n: int, position: int, algorithm: str = "tree"
                    ) -> tuple[int, int]:
    """(sent, received) by the member ``position`` steps after the source in a broadcast."""
    _check_broadcast(algorithm)
    moves = broadcast_pattern(nbytes, list(range(n)), 0, algorithm)
    traffic = pattern_traffic(moves, position, lambda rank: 0)
    return traffic.sent, traffic.received


def _check_broadcast(algorithm: str) -> None:
    if algorithm not in BROADCASTS:
        raise ValueError(f"broadcast algorithm must be one of {BROADCASTS}, got {algorithm!r}")


def compressed_all_reduce_traffic(sizes: Sequence[int], members: Sequence[int], me: int,
                                  node_of: Callable[[int], int]) -> Traffic:
    """A compressed all-reduce whose member ``j`` owns an encoded part of ``sizes[j]`` bytes: an
    all-to-all of the parts, then a ring all-gather of the reduced parts padded to the longest."""
    ring = _ring(members, (len(members) - 1) * max(sizes))
    return pattern_traffic(_all_to_all(sizes, members) + ring, me, node_of)


@dataclasses.dataclass(frozen=True)
class LinkModel:
    """Nodes joined by links of ``rate`` bits/s and ``latency`` s; free inside a node.

    ``node_of(rank)`` gives a worker's node. Every method returns the seconds a collective among
    ``members`` (global ranks, in their collective order) takes under the model.
    """

    rate: float
    latency: float
    node_of: Callable[[int], int]

    def _stage(self, transfers: Sequence[Move]) -> float:
        """Seconds of one stage of simultaneous transfers (sender, receiver, bytes)."""
        up: dict[int, float] = {}
        down: dict[int, float] = {}
        for sender, receiver, nbytes in transfers:
            a, b = self.node_of(sender), self.node_of(receiver)
            if a != b:
                up[a] = up.get(a, 0.0) + nbytes
                down[b] = down.get(b, 0.0) + nbytes
        if not up:
            return 0.0
        return self.latency + 8.0 * max(max(up.values()), max(down.values())) / self.rate

    def all_reduce(self, nbytes: int, members: Sequence[int]) -> float:
        """Ring all-reduce: ``2 (n - 1)`` stages, each moving ``B / n`` along every hop."""
        n = len(members)
        return 2 * (n - 1) * self._stage(_ring(members, nbytes / n)) if n > 1 else 0.0

    def all_gather(self, nbytes: int, members: Sequence[int]) -> float:
        """Ring all-gather: ``n - 1`` stages, each moving ``B`` along every hop."""
        n = len(members)
        return (n - 1) * self._stage(_ring(members, nbytes)) if n > 1 else 0.0

    def broadcast(self, nbytes: int, members: Sequence[int], src: int,
                  algorithm: str = "tree", chunks: int = 1) -> float:
        """Broadcast from global rank ``src``: gloo's tree, or a chain in ``chunks`` pieces.

        The chain starts at the source and visits the members in collective
        order; with ``c`` chunks it takes ``hops + c - 1`` stages of ``B / c``
        (a pipeline: each member forwards a chunk as soon as it has it).
        """
        n = len(members)
        if n <= 1:
            return 0.0
        order = _from(members, src)
        if algorithm == "tree":
            return sum(self._stage([(order[a], order[b], float(nbytes)) for a, b in pairs])
                       for pairs in tree_rounds(n))
        _check_broadcast(algorithm)
        chunks = max(1, int(chunks))
        hops = [(order[v], order[v + 1], nbytes / chunks) for v in range(n - 1)]
        # Hop v carries chunk (stage - v) when 0 <= stage - v < chunks.
        return sum(self._stage([h for v, h in enumerate(hops) if 0 <= stage - v < chunks])
                   for stage in range(n - 1 + chunks - 1))

    def all_to_all(self, sizes: Sequence[int], members: Sequence[int]) -> float:
        """All-to-all: every member sends ``sizes[j]`` bytes to member ``j``, in one stage."""
        return self._stage(_all_to_all(sizes, members))

    def exchange(self, nbytes: int, pairs: Sequence[tuple[int, int]]) -> float:
        """Simultaneous pairwise exchanges: ``B`` each way along every pair, one stage."""
        return self._stage([(a, b, float(nbytes)) for pair in pairs
                            for a, b in (pair, pair[::-1])])
