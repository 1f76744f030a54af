"""Elastic jobs (torchft): a lighthouse, and one elastic agent per worker.

``launch_elastic(fn, slots)`` runs ``fn(info, slot, slots, lighthouse, *args)``
for every slot as torchft's deployment does it: each worker is a replica group
of one process, started by an elastic agent of its own (torch's, as one
``torchrun`` per node would), so that a worker that dies is restarted by its
agent alone (up to ``restarts`` times) while the others go on; a lighthouse
(:func:`lsgd.comm.elastic.start_lighthouse`) in the calling process forms the
quorums. ``fn`` builds its :class:`~lsgd.comm.elastic.ElasticCommunicator`
from ``slot``, ``slots`` and ``lighthouse``. The agents are spawned (fresh
interpreters), so ``fn`` and ``args`` must be picklable. Loopback only.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lsgd.comm.elastic import require_torchft, start_lighthouse
from lsgd.launcher.worker import LaunchError

T = TypeVar("T")


def launch_elastic(
    fn: Callable[..., T],
    slots: int,
    *,
    args: Sequence[Any] = (),
    restarts: int = 0,
    timeout: float = 600.0,
    threads_per_worker: int | None = None,
    join_timeout: float = 30.0,
    heartbeat_timeout: float = 2.0,
) -> list[T]:
    """Run ``fn(info, slot, slots, lighthouse, *args)`` for each of ``slots`` workers;
    their results by slot. ``timeout`` bounds the whole job (seconds); a worker
    that failed more than ``restarts`` times raises :class:`LaunchError`."""
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(f"launch_elastic: slots must be a positive integer, got {slots!r}")
    if not isinstance(restarts, int) or restarts < 0:
        raise ValueError(f"launch_elastic: restarts must be 0 or more, got {restarts!r}")
    require_torchft()
    port = _free_port()
    lighthouse = start_lighthouse(port, 1, bind_host="127.0.0.1", join_timeout=join_timeout,
                                  heartbeat_timeout=heartbeat_timeout)
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // slots)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="lsgd-elastic-") as folder:
        paths = [Path(folder) / f"slot{slot}.pkl" for slot in range(slots)]
        agents = [context.Process(
            target=_agent, name=f"lsgd-elastic-agent-{slot}",
            args=(fn, slot, slots, f"http://127.0.0.1:{port}", tuple(args), restarts,
                  timeout, threads, str(paths[slot])))
            for slot in range(slots)]
        try:
            for agent in agents:
                agent.start()
            deadline = time.monotonic() + timeout
            for agent in agents:
                agent.join(max(0.0, deadline - time.monotonic()))
            late = [slot for slot, agent in enumerate(agents) if agent.is_alive()]
            if late:
                raise LaunchError(f"elastic job: workers {late} still running after {timeout} s")
        finally:
            for agent in agents:
                if agent.is_alive():
                    agent.kill()
                    agent.join(5)
            lighthouse.shutdown()
        outcomes = [_read(path) for path in paths]
    failures = [line for outcome in outcomes for line in outcome["failures"]]
    if failures:
        raise LaunchError("elastic job failed:\n" + "\n".join(failures))
    return [outcome["result"] for outcome in outcomes]


def _agent(fn: Callable[..., Any], slot: int, slots: int, lighthouse: str,
           args: tuple[Any, ...], restarts: int, timeout: float, threads: int,
           path: str) -> None:
    """One worker's agent (a spawned process): torch's elastic agent with restarts."""
    from lsgd.launcher.local import launch_local

    outcome: dict[str, Any]
    try:
        (result,) = launch_local(fn, 1, 1, args=(slot, slots, lighthouse, *args),
                                 timeout=timeout, threads_per_worker=threads,
                                 max_restarts=restarts)
        outcome = {"result": result, "failures": []}
    except LaunchError as error:
        outcome = {"result": None, "failures": [f"worker {slot}: {error}"]}
    Path(path).write_bytes(pickle.dumps(outcome))


def _read(path: Path) -> dict[str, Any]:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError):
        return {"result": None, "failures": [f"{path.stem}: its agent left no outcome"]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
