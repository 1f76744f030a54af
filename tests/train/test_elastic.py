"""Elastic training on torchft: survivors keep stepping, a lost worker rejoins from a live peer.

The multi-process tests run real worker processes, each a torchft replica
group with its own elastic agent, and a lighthouse; they need the extra
``lsgd[torchft]`` (``scripts/test.sh --all`` installs it) and are skipped
without it. The checks of bad input and of the missing extra run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd.comm.local import LocalCommunicator
from lsgd.links.netns import shaping_problem

HAVE_TORCHFT = importlib.util.find_spec("torchft") is not None
needs_torchft = pytest.mark.skipif(not HAVE_TORCHFT, reason="torchft is not installed "
                                   "(pip install 'lsgd[torchft]')")

STEPS, PERIOD, SLOTS = 96, 8, 3
SHAPING = shaping_problem()


class _Elastic(LocalCommunicator):
    """Looks elastic to a strategy (for the checks made at construction)."""

    elastic = True

    def add_state(self, name: str, save: Any, load: Any) -> None:
        self.registered = (name, save, load)


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("method, knobs, message", [
    ("dpsgd", {}, "runs diloco, easgd, local-sgd, lsgd, muloco; dpsgd is not one of them"),
    ("allreduce", {}, "runs diloco, easgd, local-sgd, lsgd, muloco; allreduce"),
    ("easgd", {"init": "independent"}, "drop init='independent'"),
    ("diloco", {"period": 8, "fragments": 2, "overlap": 4},
     "overlap must be below period / fragments = 4, got 4"),
    ("lsgd", {"period": 4, "overlap": 4}, r"overlap must be a whole number of steps in \[0, 4\)"),
    ("local-sgd", {"asynchronous": True}, "drop asynchronous=True"),
])
def test_what_elastic_rounds_refuse(method: str, knobs: dict[str, Any], message: str) -> None:
    model, optimizer = _model()
    with pytest.raises(ValueError, match=message):
        lsgd.make_strategy(method, model, optimizer, comm=_Elastic(), **knobs)


class _ElasticNodes(_Elastic):
    per_node = 2


@pytest.mark.parametrize("method, knobs", [("lsgd", {"overlap": 2}),
                                           ("diloco", {"compress": "int8"})])
def test_hidden_elastic_rounds_take_one_worker_per_node(method: str,
                                                        knobs: dict[str, Any]) -> None:
    model, optimizer = _model()
    strategy = lsgd.make_strategy(method, model, optimizer, comm=_Elastic(), **knobs)
    assert strategy.hides_rounds
    assert getattr(strategy, "election", None) is None or strategy.election.rule == "round"
    model, optimizer = _model()
    with pytest.raises(ValueError, match="run with one replica per node"):
        lsgd.make_strategy(method, model, optimizer, comm=_ElasticNodes(), **knobs)


def test_an_elastic_strategy_sends_nothing_at_construction() -> None:
    comm = _Elastic()
    model, optimizer = _model()
    strategy = lsgd.make_strategy("lsgd", model, optimizer, comm=comm, period=4)
    assert comm.stats("init").calls == 0 and hasattr(comm, "registered")
    assert not strategy._rounds.joined  # it joins at its first step


def test_without_torchft_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lsgd.comm import elastic_collectives, quorum

    real = importlib.util.find_spec
    monkeypatch.setattr(quorum.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchft" else real(name, *a))
    with pytest.raises(RuntimeError, match=r"pip install 'lsgd\[torchft\]'"):
        elastic_collectives.ElasticCommunicator(0, 2, lighthouse="http://127.0.0.1:1")


@pytest.mark.parametrize("kwargs, message", [
    ({"slot": 3, "slots": 3}, r"slot must be in \[0, 3\)"),
    ({"slot": 0, "slots": 3, "min_members": 4}, r"min_members must be in \[1, 3\]"),
])
def test_bad_slots(kwargs: dict[str, Any], message: str) -> None:
    from lsgd.comm.elastic_collectives import ElasticCommunicator

    with pytest.raises(ValueError, match=message):
        ElasticCommunicator(lighthouse="http://127.0.0.1:1", **kwargs)


@needs_torchft
def test_a_lighthouse_that_never_answered_stops_the_worker_with_lighthouse_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """torchft's manager could not reach the lighthouse at start (it died before this
    worker connected, or its address is wrong): the same clear error as in a round."""
    import torchft.manager

    from lsgd.comm.elastic_collectives import ElasticCommunicator, LighthouseLost

    def unreachable(**_: Any) -> None:
        raise RuntimeError("failed to connect to http://127.0.0.1:1 within timeout of 60s")

    monkeypatch.setattr(torchft.manager, "Manager", unreachable)
    with pytest.raises(LighthouseLost, match=r"lighthouse at http://127.0.0.1:1 does not answer"
                       r".*failed to connect"):
        ElasticCommunicator(0, 2, lighthouse="http://127.0.0.1:1")


# -- real processes ----------------------------------------------------------------

def _job(method: str, faults: list[tuple[Any, ...]], tmp: Path, *, restarts: int = 1,
         join_timeout: float = 30.0, steps: int = STEPS, heartbeat_timeout: float = 10.0,
         link: str | None = None, groups: int | None = None,
         extra: dict[str, Any] | None = None, late: tuple[int, ...] = ()) -> list[Any]:
    from lsgd.train.config import make_config
    from lsgd.train.elastic_run import train_elastic
    from lsgd.train.runner import prepare

    cfg = make_config({"method": method, "model": "mlp", "dataset": "digits",
                       "workers": (extra or {}).get("workers", SLOTS), "period": PERIOD, "batch_size": 32, "seed": 0,
                       "steps": steps, "elastic": True, "restarts": restarts,
                       "join_timeout": join_timeout, "timeout": 10.0, "quiet": True,
                       # A killed worker's restart beats again within 10 s even on a loaded
                       # machine, so the others wait for it at their next round (with the
                       # default 2 s they went on, and a short run could end before it came).
                       "heartbeat_timeout": heartbeat_timeout,
                       "out": str(tmp / "run"), "link": link,
                       "groups": groups or (SLOTS if link else 1), **(extra or {})})
    prepare(cfg, cfg.out_dir)
    summary, records = train_elastic(cfg, faults)
    assert summary["steps"] == steps and (tmp / "run" / "metrics.csv").is_file()
    # The summary counts the final round's members: every finished worker but the
    # ``late`` ones, left out of it (they may still be healed before they end alone).
    members = [r for r in records if r is not None and r["slot"] not in late]
    assert not any(r["after_end"] for r in members), _seen(tmp / "run", records)
    assert summary["members_at_end"] == len(members), _seen(tmp / "run", records)
    for record in members:  # each worker's quorums are in the run's logs, the last formed
        log = tmp / "run" / "logs" / f"quorums-{record['slot']}.csv"
        _, rank, _, _, nodes, _, error = log.read_text().splitlines()[-1].split(",")
        assert int(rank) == record["slot"] and nodes and not error, log.read_text()
    _failure_checks(summary, members)
    return records


def _seen(run: Path, records: list[Any]) -> str:
    """What each worker and each evaluation saw, for a failed assertion's message."""
    import csv

    with open(run / "metrics.csv") as f:
        rows = [(r["steps"], r["members"], r["heals"]) for r in csv.DictReader(f)]
    workers = [None if r is None else
               {k: r.get(k) for k in ("slot", "attempt", "started", "steps", "heals",
                                      "committed_rounds", "failed_rounds", "writer")}
               | {"first": r["trace"][:1], "last": r["trace"][-1:]} for r in records]
    quorums = {}
    for log in sorted((run / "logs").glob("quorums-*.csv")):
        with open(log) as f:
            quorums[log.stem] = [(r["attempt"], r["committed_rounds"], r["member_nodes"],
                                  r["healed"], r["error"][:60]) for r in csv.DictReader(f)]
    return (f"evaluations (steps, members, heals): {rows}; workers: {workers}; quorums "
            f"(attempt, committed rounds, member nodes, healed, error): {quorums}")


def _failure_checks(summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """The summary carries a restarted run's failure fields: the workers' restarts (the
    attempts of those that finished), no step redone, and the heals they received."""
    assert summary["restarts"] == sum(r["attempt"] for r in records)
    assert summary["steps_redone"] == 0
    assert summary["heals"] == sum(r["heals"] for r in records)


def _steps(record: dict[str, Any]) -> list[int]:
    return [steps for _, steps in record["trace"]]


def _rejoined_checks(record: dict[str, Any], died: int) -> None:
    """Restarted once, healed once at a round after its death (the next one when it was
    back within the heartbeat timeout, later on a loaded machine), and reset exactly to
    what the joining round reset it to (the leader, the global state, the center)."""
    assert record["attempt"] == 1 and record["heals"] == 1 and record["join_gap"] == 0.0
    first = _steps(record)[0]
    assert first > died and first % PERIOD == 0, first


def _survivor_checks(records: list[dict[str, Any] | None], survivors: list[int]) -> None:
    """Survivors took every step once, in order, with no restart."""
    for slot in survivors:
        record = records[slot]
        assert record is not None and record["attempt"] == 0
        assert _steps(record) == list(range(1, STEPS + 1))


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lsgd_survives_its_leader_and_then_another_worker(tmp_path: Path) -> None:
    """The leader of step 30 (worker 0 with these seeds) dies, then worker 2 before
    step 60 (two failures in a row); each is restarted by its own agent, rejoins at a
    round (the next one when it is back within the heartbeat timeout) as an exact copy
    of the elected leader, and the job ends with every worker, the survivors never
    going back a step."""
    records = _job("lsgd", [("kill", "leader", 30), ("kill", 2, 60)], tmp_path)
    restarted = [r["slot"] for r in records if r["attempt"] == 1]
    assert restarted == [0, 2]
    _survivor_checks(records, [1])
    for slot, died in ((0, 30), (2, 60)):
        record = records[slot]
        steps = _steps(record)
        assert steps == list(range(steps[0], STEPS + 1))
        assert steps[0] > died and steps[0] % PERIOD == 0  # it joined at a round
        assert record["heals"] == 1 and record["resets"] >= 1
        assert record["join_gap"] == 0.0  # exactly the leader's state
        assert record["join_bytes"] > 0
    assert all(r["steps"] == STEPS for r in records)
    assert min(r["accuracy"] for r in records) > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_diloco_survives_a_kill_and_every_copy_of_the_global_state_agrees(tmp_path: Path) -> None:
    """Worker 1 dies before step 44; three nodes behind 100 Mbit/s links with the
    lighthouse on the switch (on one network where links cannot be shaped
    here; LSGD on shaped elastic nodes: tests/links/test_link_faults.py)."""
    records = _job("diloco", [("kill", 1, 44)], tmp_path,
                   link="100mbit" if SHAPING is None else None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["restarts"] >= 1 and summary["heals"] >= 1  # worker 1's, at least
    assert summary["steps_redone"] == 0 and summary["members_at_end"] == SLOTS
    _survivor_checks(records, [0, 2])
    joined = records[1]
    _rejoined_checks(joined, 44)
    # The global parameters and outer momentum it received keep every copy identical.
    assert len({r["accuracy"] for r in records}) == 1 and records[0]["accuracy"] > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hung_worker_is_left_behind_and_healed_when_it_returns(tmp_path: Path) -> None:
    """Worker 0 sleeps 4 s at step 20 (or its first step past it, were it healed there at
    its first round after a late start; its heartbeats go on): after the lighthouse's
    join timeout (0.5 s) the others go on without it; when it wakes it is behind,
    is healed from a live peer at its next round and jumps to the job's step.
    Worker 2 sleeps 2 s three steps before the end: the others end the run without
    it, and its own last round, alone, after they left, does not overwrite their
    record (it did: the run's end then showed one worker's model as the center)."""
    steps = 2000
    records = _job("local-sgd", [("hang", 0, 20, 4.0), ("hang", 2, steps - 3, 2.0)], tmp_path,
                   restarts=0, join_timeout=0.5, steps=steps, late=(2,))
    seen = [{k: r[k] for k in ("slot", "writer", "heals", "join_bytes")} for r in records]
    assert [r["writer"] for r in records] == [True, False, False], seen
    for record in records:
        taken = _steps(record)
        assert record["attempt"] == 0 and taken[-1] == steps
        assert all(b > a for a, b in zip(taken, taken[1:]))  # never back
    hung = _steps(records[0])
    assert records[0]["heals"] >= 1 and records[0]["join_bytes"] > 0, seen
    # The heal moved it forward, past the steps the others took while it slept (how many
    # depends on the machine's load).
    assert max(b - a for a, b in zip(hung, hung[1:])) > 1, (seen, hung[:40])


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_easgd_survives_a_kill_and_the_joiner_takes_the_center(tmp_path: Path) -> None:
    records = _job("easgd", [("kill", 0, 36)], tmp_path)
    _survivor_checks(records, [1, 2])
    _rejoined_checks(records[0], 36)
    assert records[1]["accuracy"] > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_node_lost_for_good_leaves_the_others_to_finish(tmp_path: Path) -> None:
    """Worker 2 dies and its agent may not restart it (a node lost): the others finish."""
    records = _job("lsgd", [("kill", 2, 40)], tmp_path, restarts=0, heartbeat_timeout=2.0)
    assert records[2] is None
    _survivor_checks(records, [0, 1])


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_when_the_lighthouse_dies_every_worker_stops_and_says_so(tmp_path: Path) -> None:
    """Two nodes as on separate machines (one torchrun each, torchft's own lighthouse);
    the lighthouse is killed: no round can form, and both workers stop with a clear
    error within the --timeout of 8 s."""
    import shutil
    import socket
    import subprocess
    import sys
    import time as clock

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    binary = shutil.which("torchft_lighthouse") or str(Path(sys.executable).parent
                                                       / "torchft_lighthouse")
    lighthouse = subprocess.Popen([binary, "--min_replicas", "1", "--bind", f"127.0.0.1:{port}",
                                   "--heartbeat_timeout_ms", "2000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "RUST_LOG": "error"})
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         "--max-restarts", "0", "-m", "lsgd", "train", "--elastic", "--workers", "2",
         "--slot", str(k), "--lighthouse", f"http://127.0.0.1:{port}", "--address",
         "127.0.0.1", "--model", "mlp", "--dataset", "digits", "--steps", "1000000",
         "--period", "8", "--eval-every", "100000", "--timeout", "8", "--quiet",
         "--out", str(tmp_path / f"node{k}")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(2)]
    try:
        deadline = clock.monotonic() + 90
        while not all((tmp_path / f"node{k}" / "config.toml").exists() for k in range(2)):
            assert clock.monotonic() < deadline, "the nodes did not start"
            clock.sleep(0.5)
        clock.sleep(3)  # training, round after round
        assert all(node.poll() is None for node in nodes)
        lighthouse.kill()
        outputs = [node.communicate(timeout=120)[0] for node in nodes]
    finally:
        for process in (*nodes, lighthouse):
            if process.poll() is None:
                process.kill()
    for node, output in zip(nodes, outputs):
        assert node.returncode != 0
        assert "LighthouseLost" in output and "does not answer" in output, output[-3000:]


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_multi_leader_lsgd_survives_a_node_that_fails_and_returns(tmp_path: Path) -> None:
    """Two nodes of two workers (a leader per node and a global one); worker 3 dies
    before step 30, and its agent restarts node 1, both workers: node 0 never stops,
    node 1 rejoins at a global round as exact copies of the global leader."""
    steps = 400  # node 0 is still training when node 1 is back
    records = _job("lsgd", [("kill", 3, 30)], tmp_path, groups=2, steps=steps,
                   extra={"workers": 4, "period": 4, "global_period": 8})
    for rank in (0, 1):
        assert records[rank]["attempt"] == 0
        assert _steps(records[rank]) == list(range(1, steps + 1))
    for rank in (2, 3):
        _rejoined_checks(records[rank], 30)
    levels = {level for record in records for _, level, _ in record["leader_history"]}
    assert levels == {"local", "global"} and records[0]["accuracy"] > 0.8


def test_lsgds_lighthouse_listens_on_the_address_it_is_given_only() -> None:
    """Bound to 127.0.0.1, the lighthouse is not reachable at 127.0.0.2 (another address
    of the same machine's loopback), where a server on every interface would be."""
    import socket

    pytest.importorskip("torchft")
    from lsgd.comm.quorum import start_lighthouse

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = start_lighthouse(port, 1, host="127.0.0.1")
    try:
        def reachable(host: str) -> bool:
            with socket.socket() as client:
                client.settimeout(2)
                return client.connect_ex((host, port)) == 0
        assert reachable("127.0.0.1")
        assert not reachable("127.0.0.2")
    finally:
        server.shutdown()

