"""The in-process simulator: results by rank, process-like randomness, failures."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import lsgd
from lsgd.comm import SimulationError


def _gather_rank(info: lsgd.WorkerInfo) -> list[float]:
    comm = lsgd.get_communicator()
    return comm.all_gather(torch.tensor([float(info.rank)])).reshape(-1).tolist()


def test_results_come_back_by_rank() -> None:
    results = lsgd.simulate(lambda info: (info.rank, info.group, info.group_rank), 6, groups=3)
    assert results == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 2, 0), (5, 2, 1)]


def test_collectives() -> None:
    def fn(info: lsgd.WorkerInfo) -> dict[str, list[float]]:
        comm = lsgd.get_communicator()
        x = torch.tensor([float(info.rank + 1)])
        out = {
            "sum": comm.all_reduce_(x.clone(), op="sum").tolist(),
            "mean": comm.all_reduce_(x.clone(), op="mean").tolist(),
            "group_sum": comm.all_reduce_(x.clone(), op="sum", among="group").tolist(),
            "bcast": comm.broadcast_(x.clone(), src=2).tolist(),
            "group_bcast": comm.broadcast_(x.clone(), src=info.group_members()[-1], among="group").tolist(),
            "gather": comm.all_gather(x, among="group").reshape(-1).tolist(),
        }
        comm.barrier()
        return out

    r = lsgd.simulate(fn, 4, groups=2)
    assert [o["sum"] for o in r] == [[10.0]] * 4
    assert [o["mean"] for o in r] == [[2.5]] * 4
    assert [o["group_sum"] for o in r] == [[3.0], [3.0], [7.0], [7.0]]
    assert [o["bcast"] for o in r] == [[3.0]] * 4
    assert [o["group_bcast"] for o in r] == [[2.0], [2.0], [4.0], [4.0]]
    assert [o["gather"] for o in r] == [[1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [3.0, 4.0]]


def test_traffic_follows_the_cost_model() -> None:
    def fn(info: lsgd.WorkerInfo) -> tuple[int, int]:
        comm = lsgd.get_communicator()
        comm.all_reduce_(torch.zeros(100))  # 400 bytes, ring of 4: 2*3/4*400 = 600 each way
        comm.broadcast_(torch.zeros(10), src=1)  # 40 bytes from rank 1 only
        comm.all_gather(torch.zeros(2))  # 8 bytes each: 3*8 = 24 each way
        stats = comm.stats()
        return stats.bytes_sent, stats.bytes_received

    result = lsgd.simulate(fn, 4)
    assert result == [(624, 664), (704, 624), (664, 664), (624, 664)]
    assert sum(s for s, _ in result) == sum(r for _, r in result)  # every byte received was sent


def test_an_exception_names_its_rank_and_stops_everyone() -> None:
    def fn(info: lsgd.WorkerInfo) -> None:
        comm = lsgd.get_communicator()
        for _ in range(3):
            if info.rank == 2:
                raise KeyError("boom")
            comm.barrier()

    with pytest.raises(SimulationError, match="worker 2") as caught:
        lsgd.simulate(fn, 4)
    assert caught.value.rank == 2
    assert isinstance(caught.value.__cause__, KeyError)


def test_a_worker_that_returns_early_is_a_deadlock_not_a_hang() -> None:
    def fn(info: lsgd.WorkerInfo) -> None:
        if info.rank != 0:
            lsgd.get_communicator().barrier()

    with pytest.raises(SimulationError, match="deadlocked.*returned"):
        lsgd.simulate(fn, 3)


def test_mismatched_collectives_are_reported() -> None:
    def fn(info: lsgd.WorkerInfo) -> None:
        comm = lsgd.get_communicator()
        if info.rank == 0:
            comm.all_reduce_(torch.zeros(2))
        else:
            comm.all_gather(torch.zeros(2))

    with pytest.raises(SimulationError, match="mismatched collectives"):
        lsgd.simulate(fn, 2)


def test_shape_mismatch_is_reported() -> None:
    def fn(info: lsgd.WorkerInfo) -> None:
        lsgd.get_communicator().all_reduce_(torch.zeros(2 + info.rank))

    with pytest.raises(SimulationError, match=r"rank 0 passed \(2,\).*rank 1 passed \(3,\)"):
        lsgd.simulate(fn, 2)


def _draws(info: lsgd.WorkerInfo) -> list[float]:
    out = []
    for _ in range(3):
        out += [float(torch.rand(())), random.random(), float(np.random.rand())]
        lsgd.get_communicator().barrier()  # turns interleave here
    return out


def test_each_worker_has_its_own_random_stream() -> None:
    seed = 7
    results = lsgd.simulate(_draws, 3, seed=seed)
    for rank, draws in enumerate(results):
        # What a separate process seeded with seed + rank would draw.
        torch.manual_seed(seed + rank)
        random.seed(seed + rank)
        np.random.seed(seed + rank)
        alone = []
        for _ in range(3):
            alone += [float(torch.rand(())), random.random(), float(np.random.rand())]
        assert draws == alone


def test_the_callers_random_state_is_untouched() -> None:
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    lsgd.simulate(_draws, 2, seed=1)
    assert torch.equal(torch.rand(4), expected)


def test_unseeded_runs_follow_the_callers_seed() -> None:
    torch.manual_seed(11)
    first = lsgd.simulate(_draws, 2)
    torch.manual_seed(11)
    assert lsgd.simulate(_draws, 2) == first


def test_bad_layouts_are_rejected() -> None:
    with pytest.raises(ValueError, match="groups=3 must divide.*world_size=4"):
        lsgd.simulate(_gather_rank, 4, groups=3)
    with pytest.raises(ValueError, match="world_size must be a positive integer, got 0"):
        lsgd.simulate(_gather_rank, 0)


def test_get_communicator_outside_any_world_is_a_single_worker() -> None:
    comm = lsgd.get_communicator()
    assert (comm.rank, comm.world_size, comm.groups) == (0, 1, 1)
    x = torch.ones(3)
    assert comm.all_reduce_(x) is x and comm.stats().bytes_sent == 0
