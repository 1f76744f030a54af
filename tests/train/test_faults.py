"""A worker that dies or hangs makes the others fail with CommunicationError, never hang.

The process tests start three workers (tests/fault_worker.py) with
``subprocess.Popen`` and torchrun's environment variables, not with
``lsgd.launch`` or torchrun: torch's elastic agent kills the surviving workers
itself when one dies, which would hide what the survivors do on their own.
Each test then kills (SIGKILL) or stops (SIGSTOP) one worker while the others
wait for it, and checks that they exit with CommunicationError within the
collective timeout ``T`` plus a margin for Python to exit.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from lsgd.comm.communicator import Communicator
from lsgd.comm.info import WorkerInfo
from lsgd.comm.distributed import DistCommunicator, _StoreCalls
from lsgd.comm.failures import CommunicationError, communication_errors

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parents[1] / "fault_worker.py"
WORLD = 3
T = 5.0  # the collective timeout of the workers, seconds
MARGIN = 10.0  # for a survivor to unwind and exit on a busy 2-core machine
START_LIMIT = 60.0  # for three workers to import torch and reach the victim's step

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workers:
    """``WORLD`` fault workers, their output in files under ``folder``; all killed on exit."""

    def __init__(self, folder: Path, mode: str, victim: int, block_at: int, steps: int) -> None:
        self.folder = folder
        self.victim = victim
        sync = folder / "sync"
        sync.mkdir()
        port = _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        for rank in range(WORLD):
            env = dict(
                os.environ,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(WORLD),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(WORLD),
                OMP_NUM_THREADS="1",
                PYTHONPATH=str(ROOT),
                FAULT_SYNC_DIR=str(sync),
            )
            env.pop("LSGD_GROUPS", None)
            with open(self.out(rank), "wb") as out, open(self.err(rank), "wb") as err:
                self.procs.append(subprocess.Popen(
                    [sys.executable, str(WORKER), mode, str(T), str(victim), str(block_at),
                     str(steps)],
                    env=env, stdout=out, stderr=err, cwd=ROOT,
                ))

    def out(self, rank: int) -> Path:
        return self.folder / f"rank{rank}.out"

    def err(self, rank: int) -> Path:
        return self.folder / f"rank{rank}.err"

    def output(self, rank: int) -> str:
        paths = (self.out(rank), self.err(rank))
        return "".join(path.read_text(errors="replace") for path in paths)

    def wait_for_victim(self) -> None:
        """Until the victim says it is about to block (the others then wait for it)."""
        deadline = time.monotonic() + START_LIMIT
        while "blocking before step" not in self.out(self.victim).read_text(errors="replace"):
            for rank, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    pytest.fail(f"rank {rank} exited early ({proc.returncode}):\n"
                                + self.output(rank))
            if time.monotonic() > deadline:
                pytest.fail(f"the victim did not block within {START_LIMIT} s:\n"
                            + self.output(self.victim))
            time.sleep(0.02)

    def signal_victim(self, signum: int) -> float:
        """Send ``signum`` to the victim; the time it was sent."""
        os.kill(self.procs[self.victim].pid, signum)
        return time.monotonic()

    def survivors(self, since: float) -> dict[int, tuple[int | None, float, str]]:
        """For each survivor: exit code (None: still running), seconds since ``since``, output."""
        results = {}
        for rank, proc in enumerate(self.procs):
            if rank == self.victim:
                continue
            try:
                proc.wait(timeout=max(0.0, since + T + MARGIN - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            results[rank] = (proc.poll(), time.monotonic() - since, self.output(rank))
        return results

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # SIGKILL ends a stopped process too
        for proc in self.procs:
            proc.wait(timeout=30)


def _check_message(rank: int, output: str) -> None:
    assert "CommunicationError" in output, output
    assert f"Rank {rank} gave up on the " in output, output
    assert f"collective timeout of {T:g} s" in output, output
    assert "the timeout argument of lsgd.launch; lsgd train --timeout" in output, output
    assert "Original error: " in output, output


def _check_survivors(results: dict[int, tuple[int | None, float, str]], least: float) -> None:
    for rank, (code, elapsed, output) in results.items():
        print(f"rank {rank}: exit code {code} after {elapsed:.2f} s")  # shown by pytest -s
        assert code is not None, f"rank {rank} still runs {elapsed:.1f} s later:\n{output}"
        assert code != 0, f"rank {rank} exited with 0:\n{output}"
        assert least <= elapsed < T + MARGIN, f"rank {rank} exited after {elapsed:.1f} s"
        _check_message(rank, output)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_survivors_fail_fast_when_a_worker_is_killed(tmp_path: Path) -> None:
    """Rank 0 (which also serves the c10d store) is SIGKILLed before the round of step 4."""
    with Workers(tmp_path, "sync", victim=0, block_at=4, steps=8) as workers:
        workers.wait_for_victim()
        killed = workers.signal_victim(signal.SIGKILL)
        results = workers.survivors(since=killed)
    _check_survivors(results, least=0.0)
    for rank, (_, _, output) in results.items():
        assert "among all workers" in output, output


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_survivors_fail_after_the_timeout_when_a_worker_hangs(tmp_path: Path) -> None:
    """Rank 1 is SIGSTOPped before the round of step 4: the others wait T, then fail."""
    with Workers(tmp_path, "sync", victim=1, block_at=4, steps=8) as workers:
        workers.wait_for_victim()
        stopped = workers.signal_victim(signal.SIGSTOP)
        results = workers.survivors(since=stopped)
    _check_survivors(results, least=0.8 * T)
    for rank, (_, _, output) in results.items():
        assert "ran out" in output, output
        assert "Worker 1 never reached it" in output, output  # the roll call names it


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_store_calls_fail_after_the_timeout_when_the_store_server_hangs(tmp_path: Path) -> None:
    """Asynchronous LSGD: rank 0, which serves the step counter, is SIGSTOPped.

    TCPStore.add alone would wait forever; the survivors give up after T.
    """
    with Workers(tmp_path, "async", victim=0, block_at=3, steps=2000) as workers:
        workers.wait_for_victim()
        stopped = workers.signal_victim(signal.SIGSTOP)
        results = workers.survivors(since=stopped)
    _check_survivors(results, least=0.8 * T)
    for rank, (_, _, output) in results.items():
        assert "shared step counter" in output and "in the c10d store" in output, output


# -- the message itself, without processes -----------------------------------------


def test_message_names_rank_operation_timeout_and_cause() -> None:
    cause = dist.DistNetworkError("Connection closed by peer [127.0.0.1]:1234")
    with pytest.raises(CommunicationError) as caught:
        with communication_errors(2, "all_gather in group 1 (ranks 2-3)",
                                  datetime.timedelta(seconds=7)):
            raise cause
    error = caught.value
    message = str(error)
    assert isinstance(error, RuntimeError)
    assert error.__cause__ is cause
    assert message.startswith("Rank 2 gave up on the all_gather in group 1 (ranks 2-3) after ")
    assert "before the collective timeout of 7 s ran out" in message
    assert "died, hung or become unreachable" in message
    assert "other workers' logs" in message
    assert "the timeout argument of lsgd.launch; lsgd train --timeout" in message
    assert message.splitlines()[-1] == (
        "Original error: DistNetworkError: Connection closed by peer [127.0.0.1]:1234")


def test_message_after_the_timeout_and_other_errors_pass_through() -> None:
    with pytest.raises(CommunicationError, match=r"after waiting 0\.\d s: the collective "
                       r"timeout of 0\.1 s ran out") as caught:
        with communication_errors(0, "barrier among all workers",
                                  datetime.timedelta(seconds=0.1)):
            time.sleep(0.12)
            raise RuntimeError("[gloo] Timed out waiting 100ms for recv operation to complete\n"
                               "Exception raised from ... (C++ frames)")
    assert str(caught.value).splitlines()[-1] == (
        "Original error: RuntimeError: [gloo] Timed out waiting 100ms for recv operation "
        "to complete")
    with pytest.raises(ValueError):  # not a communication failure: left alone
        with communication_errors(0, "barrier among all workers", datetime.timedelta(seconds=1)):
            raise ValueError("bad argument")
    inner = CommunicationError("already explained")
    with pytest.raises(CommunicationError) as caught:
        with communication_errors(0, "barrier among all workers", datetime.timedelta(seconds=1)):
            raise inner
    assert caught.value is inner


def test_operations_are_described_with_their_scope() -> None:
    """What DistCommunicator says about each operation (a stand-in, no process group)."""
    comm = object.__new__(DistCommunicator)
    Communicator.__init__(comm, WorkerInfo(rank=3, world_size=4, groups=2))
    comm._pg = comm._subgroup = object()  # stand-ins whose timeout cannot be read
    comm._timeout = comm._store_wait = datetime.timedelta(seconds=9)
    comm._waits = {"world": comm._timeout, "group": comm._timeout}
    comm._calls = {}

    class FailingStore:
        def add(self, key: str, amount: int) -> int:
            raise dist.DistStoreError("boom")

    comm._store, comm._store_calls = FailingStore(), None
    cases = {
        ("all_gather", "group"): "the all_gather in group 1 (ranks 2-3) after ",
        ("broadcast from rank 0", "world"): "the broadcast from rank 0 among all workers after ",
        ("pairwise exchange with ranks 1, 2", None): "the pairwise exchange with ranks 1, 2 after ",
    }
    for (operation, scope), says in cases.items():
        with pytest.raises(CommunicationError) as caught:
            with comm._failures(operation, scope):
                raise RuntimeError("boom")
        assert str(caught.value).startswith("Rank 3 gave up on " + says)
        assert "collective timeout of 9 s" in str(caught.value)
    with pytest.raises(CommunicationError, match="the shared step counter 'k' in the c10d store"):
        comm._add_count("k", 1)


def test_store_calls_give_up_after_the_timeout() -> None:
    calls = _StoreCalls()
    assert calls(lambda: 41 + 1, datetime.timedelta(seconds=5)) == 42
    with pytest.raises(KeyError):
        calls(lambda: {}["missing"], datetime.timedelta(seconds=5))
    never = threading.Event()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not answer within 0.2 s"):
        calls(never.wait, datetime.timedelta(seconds=0.2))
    assert 0.15 < time.monotonic() - start < 5
    assert calls.stuck
    never.set()  # let the helper thread finish
