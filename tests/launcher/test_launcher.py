"""How worker processes are started: fork only where it is safe, and every start
method gives the same run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lsgd
from lsgd.launcher import worker

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **env: str) -> str:
    """``code`` in a fresh interpreter (a process that has run nothing else); its stdout."""
    environ = {k: v for k, v in os.environ.items() if k != "LSGD_START_METHOD"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_fork_only_from_a_process_that_vouched_for_itself_and_started_no_thread() -> None:
    out = _python(
        "import threading, time\n"
        "from lsgd.launcher.worker import start_method, vouch_for_fork\n"
        "print(start_method(1))\n"                      # not vouched: a fork server
        "vouch_for_fork()\n"
        "print(start_method(1), start_method(2))\n"     # one thread per worker only
        "print(start_method(1, by_agent=True))\n"       # never from torch's agent
        "t = threading.Thread(target=time.sleep, args=(1,)); t.start()\n"
        "print(start_method(1))\n"                      # a thread started since
        "t.join()\n")
    assert out.split() == ["forkserver", "fork", "forkserver", "forkserver", "forkserver"]


def test_the_start_method_can_be_chosen_and_a_bad_choice_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for method in worker.START_METHODS:
        monkeypatch.setenv("LSGD_START_METHOD", method)
        assert worker.start_method(1) == method
    monkeypatch.setenv("LSGD_START_METHOD", "thread")
    with pytest.raises(ValueError, match="LSGD_START_METHOD='thread': use one of fork"):
        worker.start_method(1)


def _draw(info: lsgd.WorkerInfo, seed: int) -> list[float]:
    """Per-rank random numbers, summed over the workers (one all-reduce)."""
    import torch

    torch.manual_seed(seed + info.rank)
    values = torch.rand(4)
    lsgd.get_communicator().all_reduce_(values)
    return [round(float(v), 6) for v in values] + [float(torch.get_num_threads())]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fork_forkserver_and_spawn_give_the_same_results() -> None:
    code = ("import lsgd, json\nfrom tests.launcher.test_launcher import _draw\n"
            "from lsgd.launcher.worker import vouch_for_fork\nvouch_for_fork()\n"
            "print(json.dumps(lsgd.launch(_draw, 3, args=(7,), timeout=60,"
            " threads_per_worker=1)))")
    results = {method: _python(code, LSGD_START_METHOD=method)
               for method in worker.START_METHODS}
    assert results["fork"] == results["forkserver"] == results["spawn"], results
    assert '1.0]' in results["fork"]  # one intra-op thread in every worker, as asked


def test_an_agent_names_the_rendezvous_limit_that_ran_out() -> None:
    """A node's failure in the rendezvous says which limit ran out and what it means."""
    from torch.distributed.elastic.rendezvous.api import (RendezvousClosedError,
                                                          RendezvousConnectionError,
                                                          RendezvousTimeoutError)

    from lsgd.launcher.agent import explain

    job = {"nodes": 4, "join_timeout": 60.0, "endpoint": "10.77.0.101:29400"}
    timed_out = explain(RendezvousTimeoutError(), 1, job, 61.4)
    assert timed_out.startswith("node 1: RendezvousTimeoutError after 61 s: ")
    assert "all 4 nodes within its join_timeout of 60 s" in timed_out
    assert "another node's agent stopped" in explain(RendezvousClosedError(), 0, job, 7.0)
    unreachable = explain(RendezvousConnectionError("gone"), 2, job, 70.0)
    assert "store at 10.77.0.101:29400 (node 0's agent) did not answer" in unreachable
    assert explain(ValueError("odd"), 3, job, 1.0) == "node 3: ValueError after 1 s: odd"
