"""Elastic jobs (torchft): a lighthouse, and one elastic agent per node.

Each node's workers are started by an elastic agent of their own, so a node that fails
is restarted alone while the others go on; a lighthouse forms the quorums (on the
switch of a shaped network with ``link=``). A c10d store beside it is the job's start
gate (:func:`lsgd.comm.quorum.start_gate`), so that the first quorum waits for a node
slow to start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lsgd.comm.quorum import GATE_ENV, require_torchft, start_lighthouse
from lsgd.launcher.worker import LaunchError, exit_now, threads_for
from lsgd.links.spec import Link

LIGHTHOUSE_PORT = 29510  # on shaped links: at the switch's address
GATE_PORT = LIGHTHOUSE_PORT + 1  # the start gate's store, beside it

T = TypeVar("T")


def launch_elastic(fn: Callable[..., T], slots: int, *, args: Sequence[Any] = (),
                   restarts: int = 0, timeout: float = 600.0,
                   threads_per_worker: int | None = None, join_timeout: float = 30.0,
                   heartbeat_timeout: float = 2.0, link: str | Link | None = None,
                   per_node: int = 1) -> list[T]:
    """Run ``fn(info, slot, slots, lighthouse, *args)`` in ``per_node`` workers on each of
    ``slots`` nodes (``fn`` builds its elastic communicator from them; the agents are
    spawned, so ``fn`` and ``args`` must be picklable); results by global rank.
    ``timeout`` bounds the job. A node whose workers failed more than ``restarts`` times
    is lost for good: its results are ``None`` and its error is printed;
    :class:`LaunchError` if no node finished."""
    for name, value, least in (("slots", slots, 1), ("per_node", per_node, 1),
                               ("restarts", restarts, 0)):
        if not isinstance(value, int) or value < least:
            raise ValueError(f"launch_elastic: {name} must be an integer >= {least}, "
                             f"got {value!r}")
    require_torchft()
    import torch.distributed as dist

    threads = threads_for(slots * per_node, threads_per_worker)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lsgd-elastic-")))
        context = multiprocessing.get_context("spawn")
        if link is None:
            lighthouse = start_lighthouse(0, 1, host="127.0.0.1", join_timeout=join_timeout,
                                          heartbeat_timeout=heartbeat_timeout)
            stack.callback(lighthouse.shutdown)
            where = [(None, "127.0.0.1")] * slots
            # the port the system chose; address() names the host, not the loopback
            address = "http://127.0.0.1:" + lighthouse.address().rsplit(":", 1)[1]
            gate_store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            gate = f"127.0.0.1:{gate_store.port}:{join_timeout}"
        else:
            from lsgd.links.netns import ShapedNetwork, node_address, switch_address

            net = stack.enter_context(ShapedNetwork(slots, link))
            where = [(net.namespaces[n], node_address(n)) for n in range(slots)]
            server = context.Process(target=_lighthouse, name="lsgd-lighthouse",
                                     args=(net.switch, LIGHTHOUSE_PORT, join_timeout,
                                           heartbeat_timeout), daemon=True)
            server.start()
            stack.callback(_stop, server)
            address = f"http://{switch_address()}:{LIGHTHOUSE_PORT}"
            gate = f"{switch_address()}:{GATE_PORT}:{join_timeout}"
        paths = [folder / f"slot{slot}.pkl" for slot in range(slots)]
        agents = [context.Process(
            target=_agent, name=f"lsgd-elastic-agent-{slot}",
            args=(fn, slot, slots, address, tuple(args), restarts, timeout, threads,
                  str(paths[slot]), *where[slot], per_node, gate))
            for slot in range(slots)]
        for agent in agents:
            stack.callback(_stop, agent)
            agent.start()
        deadline = time.monotonic() + timeout
        for agent in agents:
            agent.join(max(0.0, deadline - time.monotonic()))
        late = [slot for slot, agent in enumerate(agents) if agent.is_alive()]
        if late:
            raise LaunchError(f"elastic job: workers {late} still running after {timeout} s")
        outcomes = [_read(path) for path in paths]
    failures = [line for outcome in outcomes for line in outcome["failures"]]
    if all(outcome["results"] is None for outcome in outcomes):
        raise LaunchError("elastic job failed:\n" + "\n".join(failures))
    for line in failures:  # the others finished without it
        print(f"lost for good (its restarts spent): {line}", file=sys.stderr, flush=True)
    return [result for outcome in outcomes
            for result in (outcome["results"] or [None] * per_node)]


def _agent(fn: Callable[..., Any], slot: int, slots: int, lighthouse: str,
           args: tuple[Any, ...], restarts: int, timeout: float, threads: int,
           path: str, namespace: str | None, address: str, per_node: int, gate: str) -> None:
    """One node's agent (a spawned process, in its namespace on shaped links), which
    starts the node's workers together."""
    from lsgd.launcher.standalone import launch_local

    os.environ[GATE_ENV] = gate  # before its workers' fork server starts: they inherit it

    if namespace is not None:
        from lsgd.links.netns import enter_namespace

        enter_namespace(namespace)
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d: no reverse DNS here
        args = (*args, address)  # fn's keyword ``address``, as the last positional
    outcome: dict[str, Any] = {"results": None, "failures": []}
    try:
        outcome["results"] = launch_local(fn, per_node, 1,
                                          args=(slot, slots, lighthouse, *args),
                                          timeout=timeout, threads_per_worker=threads,
                                          max_restarts=restarts)
    except LaunchError as error:
        outcome["failures"] = [f"node {slot}: {error}"]
    Path(path).write_bytes(pickle.dumps(outcome))
    exit_now(0)


def _lighthouse(namespace: str, port: int, join_timeout: float,
                heartbeat_timeout: float) -> None:
    """The lighthouse and the start gate on the switch (a spawned process in its
    namespace: one node's link down cuts that node off alone), until it is stopped."""
    from lsgd.links.netns import enter_namespace, switch_address

    enter_namespace(namespace)
    server = start_lighthouse(port, 1, host=switch_address(), join_timeout=join_timeout,
                              heartbeat_timeout=heartbeat_timeout)
    import torch.distributed as dist

    gate = dist.TCPStore(switch_address(), GATE_PORT, is_master=True, wait_for_workers=False)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.shutdown()
        del gate


def _stop(process: Any) -> None:
    if process.is_alive():
        process.kill()
        process.join(5)


def _read(path: Path) -> dict[str, Any]:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError):
        return {"results": None, "failures": [f"{path.stem}: its agent left no outcome"]}

