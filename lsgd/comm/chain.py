"""The pipelined chain broadcast across nodes: the plan every communicator follows.

With one link per node, a broadcast in which the source's node sends the
state to every other node (gloo's binomial tree sends it ``ceil(log2 n)``
times through the source's link) costs up to ``(n - 1) B / rate``. The chain
costs about ``B / rate``:

1. The nodes form a chain that starts at the source's node and goes on in
   node order (``node(src), node(src) + 1, ... mod groups``). Each node has a
   *head*: the source on its own node, the node's first worker elsewhere.
2. The state is cut into ``c`` chunks (:func:`chunk_count`, about 64 KB
   each). Each head posts the receives of every chunk from the previous head
   at once and forwards chunk ``k`` to the next head as soon as it has arrived,
   while the later chunks arrive:
   ``hops + c - 1`` stages of ``B / c``, each crossing every link at most once
   each way.
3. Inside each node the head broadcasts to its node's workers (gloo's tree on
   the node's own fast links).

Bytes: every head but the last sends ``B`` along the chain, every head but the
source receives ``B``; inside a node the tree's bytes (:func:`chain_bytes`).
Communicators use it for broadcasts among all workers when there are several
nodes and more than two workers (with two single-worker nodes the tree is the
same single send), unless the backend's own broadcast is a chain already
(NCCL's ring).
"""

from __future__ import annotations

import math

from lsgd.comm.wire import broadcast_bytes

CHUNK_BYTES = 1 << 16
MAX_CHUNKS = 256


def chain_heads(src: int, groups: int, group_size: int) -> list[int]:
    """The global ranks that carry the state between nodes, in chain order from ``src``."""
    first = src // group_size
    heads = []
    for j in range(groups):
        node = (first + j) % groups
        heads.append(src if node == first else node * group_size)
    return heads


def chunk_count(nbytes: int) -> int:
    """How many pieces a state of ``nbytes`` bytes travels in (1 to ``MAX_CHUNKS``)."""
    return max(1, min(MAX_CHUNKS, math.ceil(nbytes / CHUNK_BYTES)))


def chain_bytes(nbytes: int, src: int, rank: int, groups: int, group_size: int) -> tuple[int, int]:
    """(sent, received) by ``rank`` in a chain broadcast of ``nbytes`` from ``src``."""
    heads = chain_heads(src, groups, group_size)
    node = rank // group_size
    head = heads[(node - src // group_size) % groups]
    sent = received = 0
    if rank == head:
        position = heads.index(rank)
        sent += nbytes if position < len(heads) - 1 else 0
        received += 0 if position == 0 else nbytes
    members = list(range(node * group_size, (node + 1) * group_size))
    inner = (members.index(rank) - members.index(head)) % group_size
    inner_sent, inner_received = broadcast_bytes(nbytes, group_size, inner, "tree")
    return sent + inner_sent, received + inner_received
