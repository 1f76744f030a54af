"""Run a function on nodes joined by shaped links: one torchrun agent per node.

The agents meet through a c10d rendezvous hosted by node 0's agent, as ``torchrun
--nnodes N --rdzv-backend c10d`` does on separate machines; gloo binds to each node's
``eth0``, so only traffic between nodes crosses the shaped links.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lsgd.launcher.worker import (LaunchError, before_start, exit_now, start_method,
                                  threads_for, vouch_for_fork)
from lsgd.links.netns import ShapedNetwork, enter_namespace, node_address
from lsgd.links.spec import Link

T = TypeVar("T")
RENDEZVOUS_PORT = 29400  # inside the namespaces only
GRACE_SECONDS = 10.0  # after one agent fails, the others get this long to notice
#: Seconds a rendezvous round may wait for every node's agent, at most (and ``timeout``).
JOIN_TIMEOUT = 60.0


def launch_on_links(fn: Callable[..., T], world_size: int, groups: int, link: str | Link, *,
                    args: Sequence[Any] = (), timeout: float = 300.0,
                    threads_per_worker: int | None = None, max_restarts: int = 0,
                    replica: str = "process") -> list[T]:
    """Run ``fn(info, *args)`` as ``world_size`` workers on ``groups`` nodes behind links
    shaped to ``link``: the contract of :func:`lsgd.launch`. A node whose workers fail
    once more than ``max_restarts`` allows gives up, and the others stop within
    seconds; a restart whose rendezvous cannot gather every node fails after
    ``min(JOIN_TIMEOUT, timeout)``. The :class:`LaunchError` names each node's cause.
    """
    threads = threads_for(world_size, threads_per_worker)
    job = {
        "fn": fn, "args": tuple(args), "groups": groups, "timeout": timeout, "replica": replica,
        "nodes": groups, "per_node": world_size // groups,
        # An agent counts its own workers' failures only (the others restart uncounted).
        "max_restarts": max_restarts, "join_timeout": min(JOIN_TIMEOUT, timeout),
        "run_id": f"lsgd-{uuid.uuid4().hex[:8]}",
        "endpoint": f"{node_address(0)}:{RENDEZVOUS_PORT}"}
    # A fresh store for every rendezvous round: the agents' shared one would hand
    # restarted workers the addresses of the failed attempt's processes.
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="eth0",
               PYTHONUNBUFFERED="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    # The agents are forked from here where workers could be, else fresh interpreters.
    forked = start_method(threads) == "fork"
    if forked:
        before_start("fork", fn)
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lsgd-links-")))
        # Each node's log (its agent's and workers' output), kept in LSGD_LOG_DIR if set.
        folder = Path(os.environ.get("LSGD_LOG_DIR") or work)
        folder.mkdir(parents=True, exist_ok=True)
        logs = [folder / f"node-{node}.log" for node in range(groups)]
        net = stack.enter_context(ShapedNetwork(groups, link))
        began = time.monotonic()
        start_agent = _fork_agent if forked else _exec_agent
        agents = [start_agent(net, node, job, work, stack.enter_context(open(logs[node], "w")), env)
                  for node in range(groups)]
        try:
            codes, stopped = _wait(agents, deadline=began + timeout + 3600.0,
                                   relays=[_Relay(log, progress=node == 0)
                                           for node, log in enumerate(logs)])
        finally:
            for process in agents:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        results: dict[int, Any] = {}
        failures: list[str] = []
        waited: dict[int, str] = {}  # nodes whose agents were in the rendezvous: its error
        for node, code in enumerate(codes):
            out = work / f"node-{node}.pkl"
            if out.exists():
                outcome = pickle.loads(out.read_bytes())
                results.update(outcome.get("results", {}))
                failures += outcome.get("failures", [])
                if outcome.get("waited"):
                    waited[node] = outcome["waited"]
            elif node in stopped:
                failures.append(f"node {node}: its agent was still running {stopped[node]}; "
                                "stopped by the launcher")
            elif code != 0:
                tail = logs[node].read_text(errors="replace")[-2000:]
                failures.append(f"node {node}: agent exited with {code}:\n{tail}")
        if failures or len(results) != world_size:
            missing = sorted(set(range(world_size)) - set(results))
            if "RendezvousTimeoutError" in waited.values():  # each node's line says why
                failures.insert(0, f"the rendezvous did not gather all {groups} nodes within "
                                   f"its join_timeout of {job['join_timeout']:.0f} s; node(s) "
                                   f"{', '.join(map(str, waited))} waited in it:")
            raise LaunchError(
                f"worker processes failed on the shaped network after "
                f"{time.monotonic() - began:.0f} s:\n"
                + "\n".join(failures or [f"no result from ranks {missing}"]))
    return [results[r] for r in range(world_size)]


def _exec_agent(net: ShapedNetwork, node: int, job: dict[str, Any], work: Path, log: Any,
                env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Node ``node``'s agent as ``python -m lsgd.launcher.agent`` in its namespace."""
    payload = work / "payload.pkl"
    if not payload.exists():
        main = sys.modules["__main__"]
        payload.write_bytes(pickle.dumps({
            # A function of the caller's script pickles as __main__.name: the agent
            # loads that script first, as multiprocessing's spawn does.
            "main_path": getattr(main, "__file__", None), "job": pickle.dumps(job)}))
    command = net.command(node, [sys.executable, "-m", "lsgd.launcher.agent",
                                 str(payload), str(node), str(work / f"node-{node}.pkl")])
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


class _Forked:
    """An agent forked from this process: the part of ``Popen`` that :func:`_wait` uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _fork_agent(net: ShapedNetwork, node: int, job: dict[str, Any], work: Path, log: Any,
                env: dict[str, str]) -> _Forked:
    """Node ``node``'s agent, forked from this process into the node's namespace: it starts
    at once, sharing what this process imported and read (a fresh interpreter takes
    seconds to import torch). The child never returns: it ends with ``os._exit``."""
    from lsgd.launcher.agent import run_node

    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)
        pid = os.fork()
    if pid:
        return _Forked(pid)
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        os.environ.clear()
        os.environ.update(env)
        enter_namespace(net.namespaces[node])  # its sockets see only the node's link
        vouch_for_fork()  # a fork of a process fit to fork from, running one thread
        code = run_node(job, node, str(work / f"node-{node}.pkl"))
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)


class _Relay:
    """Shows on this process's stderr what the workers print for their user while the
    nodes run (their output goes to a log file per node): from node 0's log, rank 0's
    line per evaluation; from every node's, lsgd's warnings and injected faults."""

    SHOWN = ("warning: ", "fault: ")

    def __init__(self, path: Path, progress: bool = False) -> None:
        self.path, self.offset, self.partial = path, 0, b""
        self.shown = ("step ", *self.SHOWN) if progress else self.SHOWN

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                data = log.read()
        except OSError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            text = line.decode(errors="replace").rstrip("\r")
            if text.startswith(self.shown):
                print(text, file=sys.stderr, flush=True)


def _wait(agents: list[Any], deadline: float, relays: list[_Relay]
          ) -> tuple[list[int], dict[int, str]]:
    """Wait for every agent, relaying their news; after the first failure the rest get
    ``GRACE_SECONDS``. Returns the exit codes and, for each agent stopped here, why."""
    failed_at: float | None = None
    first = -1
    shown_at = 0.0
    while True:
        codes = [process.poll() for process in agents]
        done = None not in codes
        if done or time.monotonic() - shown_at > 1.0:
            for relay in relays:
                relay.poll()
            shown_at = time.monotonic()
        if done:
            return [int(code) for code in codes if code is not None], {}
        now = time.monotonic()
        failed = [node for node, code in enumerate(codes) if code not in (None, 0)]
        if failed_at is None and failed:
            failed_at, first = now, failed[0]
        if now > deadline or (failed_at is not None and now - failed_at > GRACE_SECONDS):
            why = (f"{GRACE_SECONDS:.0f} s after node {first}'s agent failed"
                   if failed_at is not None else "at the job's deadline")
            stopped: dict[int, str] = {}
            for node, process in enumerate(agents):
                if process.poll() is None:
                    process.kill()
                    stopped[node] = why
            return [process.wait() for process in agents], stopped
        time.sleep(0.05)
