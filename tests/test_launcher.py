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

ROOT = Path(__file__).resolve().parents[1]


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
        "t = threading.Thread(target=time.sleep, args=(1,)); t.start()\n"
        "print(start_method(1))\n"                      # a thread started since
        "t.join()\n")
    assert out.split() == ["forkserver", "fork", "forkserver", "forkserver"]


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
    code = ("import lsgd, json\nfrom tests.test_launcher import _draw\n"
            "from lsgd.launcher.worker import vouch_for_fork\nvouch_for_fork()\n"
            "print(json.dumps(lsgd.launch(_draw, 3, args=(7,), timeout=60,"
            " threads_per_worker=1)))")
    results = {method: _python(code, LSGD_START_METHOD=method)
               for method in worker.START_METHODS}
    assert results["fork"] == results["forkserver"] == results["spawn"], results
    assert '1.0]' in results["fork"]  # one intra-op thread in every worker, as asked
