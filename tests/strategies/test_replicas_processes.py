"""Replicas of several processes as real gloo processes: 2 nodes of 2 processes equal
one process per node with their batches together; lsgd train's replica runs as worker
processes, restarted from a checkpoint, and elastic (torchft) with a node lost and back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import lsgd
from lsgd.train import checkpoint
from tests.cases_replicas import VARIANTS, train
from tests.train.test_elastic import _seen, needs_torchft


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_nodes_of_two_gloo_processes_equal_one_process_per_node() -> None:
    """DDP inside each node over its own process group, each round's collective by
    parts among the peers: every kind of round ends where the simulator's one process
    per node, reading both processes' windows, ends."""
    variants = list(VARIANTS)
    replicas = lsgd.launch(train, 4, groups=2, args=(variants, 2, "node"), replica="node",
                           timeout=60)
    whole = lsgd.simulate(train, 2, groups=2, args=(variants, 2, "process"))
    for variant in variants:
        for rank in range(4):
            mine, theirs = replicas[rank][variant], whole[rank // 2][variant]
            assert max(float((a - b).abs().max()) for a, b in
                       zip(mine["params"], theirs["params"])) < 2e-5, variant
        node = [replicas[r][variant]["report"].link_bytes_sent for r in (0, 1)]
        assert sum(node) == whole[0][variant]["report"].link_bytes_sent, variant


def lsgd_train(*args: str) -> None:
    """``lsgd train ARGS`` in a fresh interpreter (worker processes are forked from a
    process that never trained in threads), which must succeed."""
    done = subprocess.run([sys.executable, "-m", "lsgd", "train", *args], capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]


GPT = ["--dataset", "kjv", "--model", "gpt", "--context", "32", "--layers", "1",
       "--width", "32", "--heads", "2", "--eval-tokens", "2048", "--batch-size", "4",
       "--workers", "8", "--groups", "4", "--replica", "node", "--quiet", "--lr", "0.01",
       "--warmup-epochs", "0.05"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lsgd_train_runs_replicas_as_worker_processes(tmp_path: Path) -> None:
    """LSGD's hidden int8 rounds among 4 replicas of 2 gloo processes (DiLoCo's: the
    equivalence test above)."""
    out = tmp_path / "run"
    lsgd_train(*GPT, "--method", "lsgd", "--overlap", "3", "--compress", "int8", "--steps", "24",
               "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["replica"], summary["replicas"], summary["workers"]) == ("node", 4, 8)
    assert summary["backend"] == "processes" and summary["steps"] == 24
    assert 0 < summary["link_bytes_sent_per_node"] < summary["bytes_sent_inside_per_node"]
    assert summary["validation_loss"] < 5.3  # a uniform guess: 5.545


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_process_restarts_its_replica_run_from_the_checkpoint(tmp_path: Path) -> None:
    common = ["--dataset", "digits", "--model", "mlp", "--workers", "4",
              "--groups", "2", "--replica", "node", "--method", "lsgd", "--period", "4",
              "--steps", "40", "--checkpoint-every", "10", "--quiet", "--seed", "3"]
    lsgd_train(*common, "--out", str(tmp_path / "straight"))
    lsgd_train(*common, "--restarts", "1", "--fault", "kill:3:20", "--out", str(tmp_path / "run"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["steps"] == 40
    ends = [checkpoint.complete(tmp_path / run)[0] for run in ("straight", "run")]
    for rank in range(4):
        a, b = (torch.load(end.file(rank), weights_only=True)["model"] for end in ends)
        assert all(torch.equal(a[key], b[key]) for key in a)


def _elastic(tmp: Path, method: str, **knobs: Any) -> tuple[dict[str, Any], list[Any]]:
    from lsgd.train.config import make_config
    from lsgd.train.elastic_run import train_elastic
    from lsgd.train.runner import prepare

    cfg = make_config({"method": method, "model": "mlp", "dataset": "digits", "workers": 4,
                       "groups": 2, "replica": "node", "period": 4, "batch_size": 32,
                       "seed": 0, "steps": 300, "elastic": True, "restarts": 1,
                       "join_timeout": 30.0, "timeout": 10.0, "quiet": True,
                       "heartbeat_timeout": 10.0,  # node 1's restart is waited for
                       "out": str(tmp / "run"), **knobs})
    prepare(cfg, cfg.out_dir)
    return train_elastic(cfg, [("kill", 3, 30)])


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method, knobs", [("lsgd", {}),
                                           ("diloco", {"overlap": 2, "compress": "int8"})],
                         ids=["lsgd", "diloco-overlap-int8"])
def test_an_elastic_replica_survives_a_dead_process(tmp_path: Path, method: str,
                                                    knobs: dict[str, Any]) -> None:
    """Process 3 dies before step 30: its agent restarts node 1, both processes, while
    node 0 (one replica of two processes) trains on; node 1 is healed from node 0, each
    local rank from its peer, and every process finishes in the same state."""
    summary, records = _elastic(tmp_path, method, **knobs)
    assert summary["members_at_end"] == 4 and summary["heals"] == 2, _seen(tmp_path / "run",
                                                                          records)
    for rank in (0, 1):
        assert records[rank]["attempt"] == 0 and records[rank]["heals"] == 0
        assert [s for _, s in records[rank]["trace"]][:3] == [1, 2, 3]
    for rank in (2, 3):
        assert records[rank]["attempt"] == 1 and records[rank]["heals"] == 1
        first = records[rank]["trace"][0][1]  # it joined at a round after its death
        assert first > 30 and first % 4 == 0, first
    assert len({record["accuracy"] for record in records}) == 1
    assert records[0]["accuracy"] > 0.9
