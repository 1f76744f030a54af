"""A worker's end: its process groups are let go on its own main thread.

A collective's callback runs on one of gloo's threads. If it is the last to hold a
process group when the worker shuts down, the group is freed on that thread, which
then joins itself and aborts the process ("Resource deadlock avoided") after the
work is done. :func:`lsgd.comm.shutdown` waits for such callbacks to let go.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import lsgd
from lsgd.comm import shutdown

ROOT = Path(__file__).resolve().parents[2]


def _late_callback(info: lsgd.WorkerInfo) -> float:
    lsgd.comm.get_communicator()
    group = dist.new_group(backend="gloo")
    work = dist.all_reduce(torch.ones(4), group=group, async_op=True)

    class Slow:  # lets go of the group 0.5 s after the callback returned
        def __init__(self, group: dist.ProcessGroup) -> None:
            self.group = group

        def __del__(self) -> None:
            time.sleep(0.5)

    def done(fut: torch.futures.Future, held: Slow = Slow(group)) -> torch.Tensor:
        return fut.value()[0]

    later = work.get_future().then(done)
    del group, work, later, done
    start = time.perf_counter()
    shutdown()
    waited = time.perf_counter() - start
    time.sleep(1.0)  # were the group freed on gloo's thread, the process would abort here
    return waited


@pytest.mark.timeout(60)
def test_a_group_held_by_a_late_callback_is_freed_on_the_main_thread() -> None:
    waited = lsgd.launch(_late_callback, 2, timeout=30)
    assert all(0.3 < w < 5.0 for w in waited), waited  # shutdown waited for the callback


def _blocked_or_gone(info: lsgd.WorkerInfo) -> int:
    import datetime
    import os
    import signal

    lsgd.comm.get_communicator()
    if info.rank == 2:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    # Rank 0 waits in C++ (a store key nobody sets; the interpreter cannot run a signal
    # handler until it returns), rank 1 in Python.
    if info.rank == 0:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(datetime.timedelta(seconds=45))
        store.get("never-set")
    time.sleep(45)
    return info.rank


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_worker_blocked_in_cpp_ends_when_its_agent_stops_it(
        monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """A worker dies: torch's agent stops the others with SIGTERM. One blocked in a C++
    call ends at once (not after the agent's 30 s grace and SIGKILL), so that a
    restart's rendezvous is not kept waiting for it."""
    # From a fresh interpreter: forked from this test process, which earlier tests left
    # with threads, a worker can hang before it starts (a lock held across the fork).
    monkeypatch.setenv("LSGD_START_METHOD", method)
    code = ("import time, lsgd, tests.launcher.test_worker_exit as t\n"
            "start = time.perf_counter()\n"
            "try:\n"
            "    lsgd.launch(t._blocked_or_gone, 3, timeout=60, threads_per_worker=1)\n"
            "except lsgd.LaunchError as error:\n"
            "    print('failed', 'rank 2' in str(error), time.perf_counter() - start)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=80)
    failed, named, seconds = done.stdout.split()[-3:]
    assert (failed, named) == ("failed", "True"), done.stdout + done.stderr[-2000:]
    assert float(seconds) < 20.0, seconds


def _hung_at_exit(info: lsgd.WorkerInfo) -> float:
    import threading

    from lsgd.launcher import worker

    worker.EXIT_GRACE_S = 0.3
    if info.rank == 0:  # a thread joined at exit that never ends: the teardown would hang
        threading.Thread(target=threading.Event().wait, name="hang_forever").start()
    else:  # rank 0 waits in the hand-over meanwhile, past its grace, and is not ended
        time.sleep(2.0)
    return time.time()


@pytest.mark.timeout(60)
def test_a_worker_hung_in_its_teardown_is_ended_after_its_grace_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LSGD_LOG_DIR", str(tmp_path))
    returned = lsgd.launch(_hung_at_exit, 2, timeout=30)
    notes = list(tmp_path.glob("exit-*.txt"))
    assert len(notes) == 1, notes  # rank 0 only: rank 1 ended by itself
    text = notes[0].read_text()
    assert "still running 0 s after its work was done" in text and "Thread" in text, text
    # ended only after rank 1 returned: not while it waited for it in the hand-over
    assert notes[0].stat().st_mtime >= returned[1] - 0.05
