"""Replicas of several processes (``replica="node"``), in the simulator: a replica of P
processes is one worker with their batches together; the parts of every collective are
put back together exactly; a node's link carries what one process per node would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import lsgd
from lsgd.cli import main
from lsgd.comm import ReplicaCommunicator
from tests.cases_replicas import VARIANTS, parts, train


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_replica_of_two_processes_is_one_process_with_both_batches(variant: str) -> None:
    """2 nodes of 2 processes, each replica's processes averaging their gradients, end
    where 2 processes end that each read their node's windows together: over three
    rounds, every kind of round (ring, chain, int8 all-to-all, int8 broadcast)."""
    replicas = lsgd.simulate(train, 4, groups=2, args=([variant], 2, "node"), replica="node")
    whole = lsgd.simulate(train, 2, groups=2, args=([variant], 2, "process"))
    for rank in range(4):
        assert _same(replicas[rank][variant]["params"],
                     whole[rank // 2][variant]["params"]) < 2e-5
    report = replicas[3][variant]["report"]
    assert (report.rank, report.world_size, report.replica_processes) == (1, 2, 2)
    assert report.rounds == whole[1][variant]["report"].rounds > 0


def test_the_parts_are_put_back_together_exactly() -> None:
    """2 replicas of 3 processes: sums, broadcasts, started broadcasts and int8 means
    of odd sizes come back whole on every process; a gather holds each replica's mean
    of its processes' values; integer tensors pass unchanged; an exchange too."""
    got = lsgd.simulate(parts, 6, groups=2, replica="node")
    reference = lsgd.simulate(parts, 2, groups=2)  # the same with one process per node
    for rank, mine in enumerate(got):
        for numel in (0, 1, 7, 3 * 2 * 256 + 5, 9000):
            base = torch.arange(max(numel, 1), dtype=torch.float32)
            assert torch.equal(mine[f"sum{numel}"].reshape(-1), 3 * base)
            assert torch.equal(mine[f"broadcast{numel}"].reshape(-1), 2 * base)
            assert torch.equal(mine[f"started{numel}"].reshape(-1), 2 * base)
            assert torch.equal(mine[f"int8 {numel}"], reference[rank // 3][f"int8 {numel}"])
            means = torch.stack([base + 1, base + 4])  # processes 0-2 and 3-5
            assert torch.allclose(mine[f"gather{numel}"].reshape(2, -1), means)
        assert mine["ints"].tolist() == [[0, 7], [1, 7]]
        assert torch.equal(mine["exchange"], torch.arange(600.0) * (2 - rank // 3))


ROUNDS = ["diloco", "diloco-int8", "lsgd", "lsgd-int8"]


@pytest.mark.parametrize("variant", ROUNDS)
def test_a_node_link_carries_no_more_than_one_process_per_node(variant: str) -> None:
    """Per node and run, the bytes that crossed its link: 4 replicas of 2 processes
    (their parts) against 4 nodes of one process, equal to the byte. For DiLoCo, 8
    processes as 8 replicas put more on it (with the int8 all-to-all and all-gather,
    half as much again); LSGD's process form is multi-leader, its global rounds rarer."""
    def per_node(results: list[dict[str, Any]], per: int, key: str) -> list[int]:
        values = [getattr(r[variant]["report"], key) for r in results]
        return [sum(values[n * per:(n + 1) * per]) for n in range(4)]

    node = lsgd.simulate(train, 8, groups=4, args=([variant], 2, "node"), replica="node")
    one = lsgd.simulate(train, 4, groups=4, args=([variant], 2, "process"))
    flat = lsgd.simulate(train, 8, groups=4, args=([variant], 1, "node"))
    for key in ("link_bytes_sent", "link_bytes_received"):
        assert per_node(node, 2, key) == per_node(one, 1, key), key
        if variant.startswith("diloco"):
            assert sum(per_node(flat, 2, key)) > sum(per_node(one, 1, key)), key
    if variant == "diloco-int8":
        assert sum(per_node(flat, 2, "link_bytes_sent")) > 1.5 * sum(
            per_node(one, 1, "link_bytes_sent"))
    # Inside the node: the gradients of every step (and the parts put back together).
    report = node[0][variant]["report"]
    assert report.bytes_sent > report.link_bytes_sent > 0


def test_one_process_per_node_is_the_process_form() -> None:
    def kind(info: lsgd.WorkerInfo) -> str:
        return type(lsgd.get_communicator()).__name__

    assert lsgd.simulate(kind, 2, groups=2, replica="node") == ["SimCommunicator"] * 2
    assert lsgd.simulate(kind, 4, groups=2, replica="node") == ["ReplicaCommunicator"] * 4
    with pytest.raises(ValueError, match="replica must be one of process, node.*'rack'"):
        lsgd.simulate(kind, 4, groups=2, replica="rack")


def test_all_reduce_is_over_every_process_and_worker_info_is_the_process() -> None:
    def layout(info: lsgd.WorkerInfo) -> tuple[Any, ...]:
        model = torch.nn.Linear(2, 1)
        strategy = lsgd.AllReduce(model, torch.optim.SGD(model.parameters(), lr=0.1))
        comm = lsgd.get_communicator()
        assert isinstance(comm, ReplicaCommunicator)
        return (info.rank, lsgd.worker_info().rank, strategy.world_size, comm.world_size)

    assert lsgd.simulate(layout, 4, groups=2, replica="node") == [
        (0, 0, 4, 2), (1, 1, 4, 2), (2, 2, 4, 2), (3, 3, 4, 2)]


COMMON = ["train", "--dataset", "digits", "--model", "mlp", "--backend", "threads",
          "--workers", "4", "--groups", "2", "--replica", "node", "--quiet",
          "--batch-size", "16"]


def test_a_diverged_process_makes_its_replica_diverged(tmp_path: Path) -> None:
    """Process 1's loss turns NaN at step 6: its replica's averaged gradient is NaN on
    both of its processes, the replica's score too, and at the round of step 8 the
    replica (processes 0 and 1) is reset to the leader's state, the other left alone."""
    out = tmp_path / "run"
    assert main([*COMMON, "--method", "lsgd", "--period", "8", "--steps", "16",
                 "--fault", "nan:1:6", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["worker_resets"] == [1, 1, 0, 0]
    assert summary["replica"] == "node" and summary["replicas"] == 2
    assert summary["test_accuracy"] > 0.5


def test_lsgd_train_resumes_a_replica_run_exactly(tmp_path: Path) -> None:
    from tests.strategies.test_diloco import same_diloco_ends

    common = [*COMMON, "--method", "diloco", "--period", "4", "--compress", "int8",
              "--overlap", "1"]
    assert main([*common, "--steps", "20", "--out", str(tmp_path / "straight")]) == 0
    assert main([*common, "--steps", "9", "--out", str(tmp_path / "resumed")]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--steps", "20",
                 "--quiet"]) == 0
    same_diloco_ends(tmp_path / "straight", tmp_path / "resumed", 4)
    # The run is what it was: another replica is another run.
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--replica", "process",
                 "--steps", "30"]) == 2


def _batchnorm_diloco(info: lsgd.WorkerInfo) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.BatchNorm1d(300),
                                torch.nn.ReLU(), torch.nn.Linear(300, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    strategy = lsgd.DiLoCo(model, opt, period=2)  # blocking: the buffers ride in the round
    for step in range(6):
        x = torch.randn(8, 40, generator=torch.Generator().manual_seed(10 * step + info.rank))
        loss = strategy.model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    momentum = [s["momentum_buffer"].numel() for o in strategy.outer_optimizers
                for s in o.state.values()]
    return {"global": strategy.global_state.buffers[0].clone(), "momentum": sum(momentum),
            "values": strategy.global_state.buffers[0].numel()}


def test_a_replica_shares_the_outer_step_and_every_copy_of_the_global_state_agrees() -> None:
    """DiLoCo with BatchNorm statistics in its rounds, 2 replicas of 2 processes: each
    process keeps the outer momentum of its share of θ_g only, and every process holds
    the same θ_g, parameters and averaged statistics alike."""
    results = lsgd.simulate(_batchnorm_diloco, 4, groups=2, replica="node")
    for result in results:
        assert torch.equal(result["global"], results[0]["global"])
    shares = [result["momentum"] for result in results[:2]]
    parameters = 40 * 300 + 300 + 2 * 300 + 300 * 3 + 3  # the buffers take no outer step
    assert sum(shares) == parameters and min(shares) > 0.3 * parameters


def test_one_process_per_group_is_recorded_as_the_process_form(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "digits", "--model", "mlp", "--workers", "2",
                 "--groups", "2", "--replica", "node", "--dry-run",
                 "--out", str(tmp_path / "run")]) == 0
    out, err = capsys.readouterr()
    assert 'replica = "process"' in out
    assert "--replica node with one worker per group" in err
