"""What a collective moves, in closed form from lsgd.comm.wire's patterns: the tests'
reference for the bytes the communicators count."""

from __future__ import annotations

from lsgd.comm.chain import chain_heads
from lsgd.comm.codec import part_sizes
from lsgd.comm.wire import broadcast_pattern, compressed_all_reduce_traffic, pattern_traffic


def chain_bytes(nbytes: int, src: int, rank: int, groups: int, group_size: int) -> tuple[int, int]:
    """(sent, received) by ``rank`` in a chain broadcast of ``nbytes`` from ``src``."""
    moves = broadcast_pattern(nbytes, list(range(groups * group_size)), src, "tree",
                              chain_heads(src, groups, group_size))
    traffic = pattern_traffic(moves, rank, lambda r: r // group_size)
    return traffic.sent, traffic.received


def all_reduce_bytes(codec: str, numel: int, n: int, position: int) -> tuple[int, int]:
    """(sent, received) by the member at ``position`` of ``n`` in a compressed all-reduce
    of ``numel`` values."""
    if n <= 1:
        return 0, 0
    traffic = compressed_all_reduce_traffic(part_sizes(codec, numel, n), list(range(n)),
                                            position, lambda rank: rank)
    return traffic.sent, traffic.received
