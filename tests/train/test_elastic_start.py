"""An elastic job's start and end: the first round waits for every node (the start gate
of ``launch_elastic``), and a worker restarted after the run ended ends at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.train.test_elastic import needs_torchft


def _first_round(info: Any, slot: int, slots: int, lighthouse: str,
                 delay: float) -> tuple[float | None, list[int]]:
    """One worker of the start-gate test: the last node starts ``delay`` seconds late."""
    import time

    from lsgd.comm.elastic_collectives import ElasticCommunicator

    time.sleep(delay if slot == slots - 1 else 0.0)
    comm = ElasticCommunicator(slot, slots, lighthouse=lighthouse, timeout=10.0)
    comm.begin_round()  # the first: at the job's start gate, then the quorum
    nodes = comm.member_nodes()
    comm.end_round()
    comm.close()
    return comm.start_wait, nodes


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_first_round_waits_for_a_node_slow_to_start() -> None:
    """Node 1 starts 4 s after node 0. Without the start gate the first quorum formed
    at once without it (it was not beating yet: the lighthouse did not know it), and
    it was healed a round later; with it, node 0 waits for it at the gate, and the
    first round has both nodes. (How long each waited depends on when the agents
    started, seconds apart on a loaded machine.)"""
    from lsgd.launcher.elastic_jobs import launch_elastic

    results = launch_elastic(_first_round, 2, args=(4.0,), join_timeout=30.0)
    assert [nodes for _, nodes in results] == [[0, 1]] * 2, results
    assert None not in [waited for waited, _ in results], results  # None: timed out


def test_a_worker_restarted_after_the_run_ended_ends_at_once(tmp_path: Path) -> None:
    """A restarted worker that finds ``logs/ended`` (the others ended the run while it was
    down) does not train the whole run again alone: it ends at once, saying so in the
    fault log (``faults.csv``'s outcomes); a first attempt, or one before the end,
    trains."""
    from types import SimpleNamespace

    from lsgd.train.elastic_run import ElasticRun
    from lsgd.train.loop import WorkerLoop

    trained: list[int] = []

    def worker(attempt: int) -> ElasticRun:
        run = ElasticRun.__new__(ElasticRun)
        run.attempt, run.rank, run.after_end = attempt, 2, False
        run.cfg = SimpleNamespace(out_dir=tmp_path,
                                  faults=SimpleNamespace(fault=["kill:2:60"]))
        run.finish = lambda: {"after_end": run.after_end}  # type: ignore[method-assign]
        return run

    real = WorkerLoop.run
    WorkerLoop.run = lambda self: trained.append(self.attempt) or {}  # type: ignore[method-assign]
    try:
        assert worker(1).run() == {} and trained == [1]  # the run goes on: it trains
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "ended").touch()
        assert worker(0).run() == {} and trained == [1, 0]
        assert worker(1).run() == {"after_end": True} and trained == [1, 0]
    finally:
        WorkerLoop.run = real  # type: ignore[method-assign]
    from lsgd.train import faults

    assert [e["what"] for e in faults.read_log(tmp_path)] == [
        "worker 2 came back after the run ended; it ended too"]


def test_a_worker_waits_for_a_quorum_past_the_lighthouses_longest_hold() -> None:
    """The lighthouse may hold a quorum for the join timeout (a live worker that has not
    come) or the heartbeat timeout (a silent one still counted live); a worker whose
    wait for it timed out first left torchft's manager failing every later quorum at
    once, so the wait is past both, whatever ``--timeout`` says."""
    from lsgd.train.config import make_config
    from lsgd.train.elastic_run import quorum_timeout

    cfg = make_config({"elastic": True, "timeout": 10.0, "join_timeout": 30.0,
                       "heartbeat_timeout": 10.0})
    assert quorum_timeout(cfg) == 50.0
    assert quorum_timeout(make_config({"elastic": True, "timeout": 600.0})) == 600.0
