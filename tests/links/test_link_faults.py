"""Restarts and links that fail on shaped nodes: runs finish, or fail within a bound.

Every test runs ``lsgd train`` (or ``lsgd.launch``) as a subprocess of its own, with
one node per worker behind 100 Mbit/s links shaped by the kernel
(:mod:`lsgd.links.netns`; root needed), and bounds it three times: the run's own
``--timeout``, a deadline here, and pytest-timeout. A node's link is taken down
with :func:`lsgd.links.netns.set_node_link` in the namespaces the run built
(named after its pid). The runs remove their namespaces; a test checks that
none of its run's is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lsgd.links import netns

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(netns.shaping_problem() is not None,
                                 reason=f"no shaped links here: {netns.shaping_problem()}")]
ROOT = Path(__file__).resolve().parents[2]
#: A quick run on 4 shaped nodes (16-40 s unfailed on 2 busy cores): 4 workers, one per node.
QUICK = ["--model", "mlp", "--dataset", "digits", "--workers", "4", "--groups", "4",
         "--link", "100mbit", "--steps", "160", "--period", "8", "--batch-size", "32",
         "--eval-every", "16", "--seed", "0", "--timeout", "60"]
RUN_LIMIT = 420.0  # seconds for any one run here
BOUND = 150.0  # seconds within which a restart that cannot complete must fail
ACCURACY_BAR = 0.85  # digits' center accuracy reached 0.95-0.97 in these runs


class Train:
    """``lsgd train ARGS`` in a subprocess; its stderr kept line by line as it comes."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.out = out
        env = {k: v for k, v in os.environ.items() if k not in ("LSGD_GROUPS", "RANK")}
        env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
                   OMP_NUM_THREADS="1")
        self.start = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "lsgd", "train", *args,
                                      "--out", str(out)], cwd=ROOT, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> Train:
        return self

    def __exit__(self, *exc: object) -> None:
        """A run a failed test leaves behind is stopped (it removes its namespaces)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, ready: Any, limit: float) -> float:
        """Wait until ``ready()`` or the run ends; the seconds since the run began."""
        deadline = time.monotonic() + limit
        while not ready() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert self.proc.poll() is None, f"the run ended early:\n{self.text()}"
        return time.monotonic() - self.start

    def reached(self, step: int) -> bool:
        """Rank 0 has finished step ``step`` (its progress mark, restartable runs)."""
        try:
            return int((self.out / "checkpoints" / "progress").read_text() or 0) >= step
        except (OSError, ValueError):
            return False

    def finish(self, limit: float = RUN_LIMIT) -> tuple[int, float]:
        """The exit code and the seconds since the run began; stopped after ``limit``."""
        try:
            code = self.proc.wait(timeout=max(1.0, limit - (time.monotonic() - self.start)))
        except subprocess.TimeoutExpired:
            self.__exit__()
            self._reader.join(5)
            raise AssertionError(f"still running after {limit:.0f} s:\n{self.text()}") from None
        self._reader.join(5)
        assert not [n for n in _namespaces() if n.startswith(f"lsgd-{self.proc.pid}-")]
        return code, time.monotonic() - self.start

    def text(self) -> str:
        return "\n".join(self.lines[-60:])

    def summary(self) -> dict[str, Any]:
        return json.loads((self.out / "summary.json").read_text())


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_down(run: Train, node: int, seconds: float | None) -> None:
    """Node ``node``'s link down for ``seconds`` (None: for good) in ``run``'s network."""
    netns.set_node_link(node, False, owner=run.proc.pid)
    if seconds is not None:
        time.sleep(seconds)
        netns.set_node_link(node, True, owner=run.proc.pid)


@pytest.mark.timeout(RUN_LIMIT + 60)
def test_a_restartable_run_waits_out_a_link_down_and_restarts_after_a_kill(
        tmp_path: Path) -> None:
    """DiLoCo on 4 shaped nodes: worker 2 killed at step 40 (every node's workers
    restart from step 32, together), and node 1's link down for 6 s from the first
    second after the first training step (the collectives wait); faults.csv says both."""
    with Train(["--method", "diloco", *QUICK, "--restarts", "1", "--checkpoint-every", "16",
                "--fault", "link-down:1:1:6", "--fault", "kill:2:40", "--quiet"],
               tmp_path / "run") as run:
        code, seconds = run.finish()
    assert code == 0, f"exit {code} after {seconds:.0f} s:\n{run.text()}"
    summary = run.summary()
    assert summary["restarts"] == 1 and summary["link_kind"] == "shaped", summary
    (resume,) = summary["resumes"]
    assert resume["from_step"] == 32 and resume["checkpoint"] == "step-00000032", resume
    assert summary["worker_steps"] == [160] * 4, summary
    assert summary["test_accuracy"] > ACCURACY_BAR, summary
    assert summary["faults"] == 2 and summary["fatal_faults"] == 1, summary
    rows = dict(line.split(",")[-3:-1] for line in
                (run.out / "faults.csv").read_text().splitlines()[1:])
    assert rows == {"link-down:1:1:6": "waited", "kill:2:40": "restart 1 from step 32"}, rows
    assert (run.out / "logs" / "node-2.log").is_file()  # each node's output is kept
    print(f"diloco: {seconds:.1f} s, {summary['steps_redone']} steps redone, "
          f"accuracy {summary['test_accuracy']:.4f}")


def _always_dies(info: Any) -> int:
    """Worker 2 SIGKILLs itself on every attempt; the others wait for it in a collective."""
    import torch

    import lsgd

    if info.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    lsgd.get_communicator().all_reduce_(torch.ones(1))
    return info.rank


@pytest.mark.timeout(BOUND + 60)
def test_a_restart_with_no_restart_left_fails_within_the_bound_naming_the_node() -> None:
    code = ("import lsgd\nfrom lsgd.launcher.worker import vouch_for_fork\n"
            "from tests.links.test_link_faults import _always_dies\nvouch_for_fork()\n"
            "try:\n    lsgd.launch(_always_dies, 4, 4, link='100mbit', max_restarts=1,"
            " timeout=30, threads_per_worker=1)\n"
            "except lsgd.LaunchError as error:\n    print(error)\nelse:\n    print('finished')\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=BOUND + 30,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    message = done.stdout
    assert "worker processes failed on the shaped network" in message, message
    assert "node 2: its workers failed 2 time(s), 1 restart(s) allowed" in message, message
    assert "rank 2 (node 2)" in message and "Signal 9" in message, message
    assert seconds < BOUND, (seconds, message)
    print(f"failed after {seconds:.1f} s:\n{message}")


@pytest.mark.timeout(RUN_LIMIT + 60)
def test_a_node_that_never_comes_back_fails_within_the_bound(tmp_path: Path) -> None:
    """Node 2's link down for good: the collectives time out (--timeout 8), every agent
    restarts, and the restart's rendezvous cannot gather the 4 nodes (join_timeout)."""
    with Train(["--method", "lsgd", *QUICK, "--timeout", "8", "--restarts", "1",
                "--checkpoint-every", "16"], tmp_path / "run") as run:
        run.wait_for(lambda: run.reached(40), RUN_LIMIT / 2)
        cut = time.monotonic()
        _link_down(run, 2, None)
        code, _ = run.finish()
        seconds = time.monotonic() - cut
    text = "\n".join(run.lines)
    assert code != 0, text
    assert seconds < BOUND, (seconds, text)
    # the restart's rendezvous timed out without node 2, or node 2 could not reach it
    assert ("the rendezvous did not gather all 4 nodes within its join_timeout of 8 s"
            in text or "node 2: RendezvousConnectionError" in text), text
    assert ("node 2: its agent was still running" in text
            or "node 2: RendezvousConnectionError" in text), text
    print(f"failed {seconds:.1f} s after the link went down:\n{run.text()}")


@pytest.mark.timeout(RUN_LIMIT + 60)
@pytest.mark.parametrize("mode", ["elastic"])  # restartable: the test above
def test_a_link_down_for_10_s_does_not_stop_the_run(tmp_path: Path, mode: str) -> None:
    """Node 2's link down for 10 s mid-run: the run finishes (after restarting, healing,
    or just waiting for the link); the summary says which."""
    # Elastic workers train 160 steps in seconds: ten times as many, cut at step 100.
    args = ["--steps", "1600", "--eval-every", "100", "--elastic", "--restarts", "2"]
    with Train(["--method", "lsgd", *QUICK, *args, "--quiet"], tmp_path / "run") as run:
        # the evaluation of step 100 is written
        at = run.wait_for(lambda: (run.out / "metrics.csv").exists(), RUN_LIMIT / 2)
        _link_down(run, 2, 10.0)
        code, seconds = run.finish()
    assert code == 0, f"exit {code} after {seconds:.0f} s:\n{run.text()}"
    summary = run.summary()
    assert summary["test_accuracy"] > ACCURACY_BAR, summary
    assert summary["steps"] >= 160, summary
    print(f"{mode}: link down at {at:.1f} s for 10 s; {seconds:.1f} s in all; "
          f"restarts {summary.get('restarts')}, steps redone {summary.get('steps_redone')}, "
          f"heals {summary.get('heals')}, accuracy {summary['test_accuracy']:.4f}")
