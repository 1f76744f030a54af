"""The wire's cost model: bytes per collective and seconds under a link."""

import pytest

from lsgd.comm.wire import LinkModel, broadcast_bytes, ring_allreduce_bytes, tree_rounds


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 12])
@pytest.mark.parametrize("algorithm", ["tree", "chain"])
def test_broadcast_sent_equals_received(n, algorithm):
    sent = [broadcast_bytes(100, n, p, algorithm)[0] for p in range(n)]
    received = [broadcast_bytes(100, n, p, algorithm)[1] for p in range(n)]
    assert sum(sent) == sum(received) == (n - 1) * 100
    assert received[0] == 0 and all(r == 100 for r in received[1:])


def test_tree_matches_gloo_binomial_tree():
    # gloo: round i, every v < 2**i sends to v + 2**i.
    assert tree_rounds(4) == [[(0, 1)], [(0, 2), (1, 3)]]
    assert tree_rounds(5) == [[(0, 1)], [(0, 2), (1, 3)], [(0, 4)]]
    assert [broadcast_bytes(10, 4, p)[0] for p in range(4)] == [20, 10, 0, 0]
    assert [broadcast_bytes(10, 4, p, "chain")[0] for p in range(4)] == [10, 10, 10, 0]


def test_allreduce_bytes():
    assert ring_allreduce_bytes(1000, 4) == 1500
    assert ring_allreduce_bytes(1000, 1) == 0


def _model(group_size, rate=8e6, latency=0.0):
    return LinkModel(rate=rate, latency=latency, node_of=lambda r: r // group_size)


def test_seconds_one_worker_per_node():
    m = _model(1)  # 8 Mbit/s: 1 MB per second
    B = 1_000_000
    assert m.all_reduce(B, [0, 1, 2, 3]) == pytest.approx(1.5)  # 2 (n-1)/n B
    assert m.all_gather(B, [0, 1, 2, 3]) == pytest.approx(3.0)
    assert m.broadcast(B, [0, 1, 2, 3], src=2) == pytest.approx(2.0)  # two tree rounds
    assert m.broadcast(B, [0, 1, 2, 3], src=2, algorithm="chain") == pytest.approx(3.0)
    # A pipelined chain approaches B / rate as the chunks get small.
    assert m.broadcast(B, [0, 1, 2, 3], src=0, algorithm="chain", chunks=100) == pytest.approx(1.02)
    assert m.exchange(B, [(0, 1), (2, 3)]) == pytest.approx(1.0)


def test_traffic_inside_a_node_is_free_and_latency_counts_per_stage():
    m = _model(2, latency=0.01)
    assert m.all_reduce(1000, [0, 1]) == 0.0
    assert m.broadcast(1000, [2, 3], src=3) == 0.0
    # Two nodes of two: the ring crosses between nodes; 6 stages of B/4 each.
    assert m.all_reduce(4_000_000, [0, 1, 2, 3]) == pytest.approx(6 * (0.01 + 1.0))
    # Round 0 (0 -> 1) stays inside node 0; in round 1 both 0 -> 2 and 1 -> 3 leave
    # node 0 through its one link: 2 B. A chain crosses once: B, plus one more stage.
    assert m.broadcast(1_000_000, [0, 1, 2, 3], src=0) == pytest.approx(0.01 + 2.0)
    assert m.broadcast(1_000_000, [0, 1, 2, 3], src=0, algorithm="chain") == pytest.approx(0.01 + 1.0)


def _timed(info, pipelined=True):
    import lsgd
    import torch

    comm = lsgd.get_communicator()
    comm.pipelined_broadcast = pipelined
    x = torch.zeros(250_000)  # 1 MB
    start = comm.now()
    comm.all_reduce_(x)
    middle = comm.now()
    comm.broadcast_(x, src=0)
    return middle - start, comm.now() - middle, comm.stats().bytes_sent


def test_the_simulator_charges_the_modeled_transfer_on_its_clock():
    import lsgd

    # 4 nodes of one worker, 8 Mbit/s: 1.5 MB per worker for the all-reduce, then the
    # broadcast of 1 MB as the pipelined chain: 16 chunks over 3 hops, 18 stages of
    # 1/16 MB. Measured compute between calls is tiny.
    for allreduce, broadcast, _ in lsgd.simulate(_timed, 4, groups=4, link="8mbit"):
        assert allreduce == pytest.approx(1.5, abs=0.05)
        assert broadcast == pytest.approx(18 / 16, abs=0.05)
    # gloo's binomial tree instead: two rounds of 1 MB through the source's link.
    for _, broadcast, _ in lsgd.simulate(_timed, 4, groups=4, link="8mbit", args=(False,)):
        assert broadcast == pytest.approx(2.0, abs=0.05)
    # One node: nothing crosses a link.
    for allreduce, broadcast, _ in lsgd.simulate(_timed, 4, groups=1, link="8mbit,10ms"):
        assert allreduce < 0.05 and broadcast < 0.05


def test_link_spelling():
    from lsgd.links import Link, parse_link

    assert parse_link("100mbit") == Link(1e8)
    assert parse_link("20mbit,5ms") == Link(2e7, 0.005)
    assert str(parse_link("1gbit")) == "1gbit"
    with pytest.raises(ValueError, match=r"expected RATE\[,LATENCY\].*got '100mb'"):
        parse_link("100mb")


def test_chain_plan_and_bytes_add_up():
    from lsgd.comm.chain import chain_heads, chunk_count
    from tests.comm.byte_counts import chain_bytes

    # 3 nodes of 2, source 3 (node 1): heads 3, then node 2's first (4), then node 0's (0).
    assert chain_heads(3, 3, 2) == [3, 4, 0]
    assert chunk_count(10) == 1 and chunk_count(1 << 20) == 16 and chunk_count(1 << 30) == 256
    b = 1000
    counts = [chain_bytes(b, 3, r, 3, 2) for r in range(6)]
    # Heads 3 and 4 send along the chain; every head sends to its partner in its node.
    assert [s for s, _ in counts] == [b, 0, 0, 2 * b, 2 * b, 0]
    assert [r for _, r in counts] == [b, b, b, 0, b, b]
    assert sum(s for s, _ in counts) == sum(r for _, r in counts) == 5 * b
