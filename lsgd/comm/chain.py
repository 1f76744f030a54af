"""The pipelined chain broadcast across nodes: the plan every communicator follows.

With one link per node, a tree broadcast sends the state through the source's link up to
``ceil(log2 n)`` times; the chain costs about ``B / rate`` (docs/algorithms.md, "Traffic
accounting"). The nodes form a chain from the source's node on, in node order; each node's *head*
(the source on its own node, the node's first worker elsewhere) forwards each of the chunks of
about 64 KB (:func:`chunk_count`) to the next head as soon as it has arrived, and inside each node
the head broadcasts to its workers (gloo's tree). Used for world broadcasts with several nodes and
more than two workers, unless the backend's broadcast is a chain already (NCCL's ring).
"""

from __future__ import annotations

import math

CHUNK_BYTES = 1 << 16
MAX_CHUNKS = 256


def chain_heads(src: int, groups: int, group_size: int) -> list[int]:
    """The global ranks that carry the state between nodes, in chain order from ``src``."""
    first = src // group_size
    return [src if j == 0 else (first + j) % groups * group_size for j in range(groups)]


def chunk_count(nbytes: int) -> int:
    """How many pieces a state of ``nbytes`` bytes travels in (1 to ``MAX_CHUNKS``)."""
    return max(1, min(MAX_CHUNKS, math.ceil(nbytes / CHUNK_BYTES)))


