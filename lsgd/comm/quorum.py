"""torchft, as lsgd's elastic runs use it: the extra, the lighthouse, the errors, the
options of its process group's collectives, and what a heal moves.

Nothing here imports torchft until it is used, so ``import lsgd`` works without
the optional extra (``pip install 'lsgd[torchft]'``).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import socket
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

EXTRA = "pip install 'lsgd[torchft]'"
#: ``host:port:seconds`` of an elastic job's start gate (a c10d store), in the environment
#: of the workers that :func:`lsgd.launch_elastic` starts.
GATE_ENV = "LSGD_ELASTIC_GATE"


class RoundFailed(RuntimeError):
    """A collective of this round failed (a member died or did not answer in time):
    the round is dropped, and the next round forms a new quorum."""


class LighthouseLost(RuntimeError):
    """The lighthouse does not answer: no round can form, so elastic training stops."""


def require_torchft(what: str = "elastic training") -> None:
    """Raise ``RuntimeError`` naming the extra unless torchft can be imported."""
    if importlib.util.find_spec("torchft") is None:
        raise RuntimeError(f"{what} needs torchft, an optional extra: {EXTRA}")


def start_lighthouse(port: int = 29510, min_members: int = 1, *, host: str = "127.0.0.1",
                     join_timeout: float = 30.0, heartbeat_timeout: float = 2.0) -> Any:
    """torchft's lighthouse server on ``host:port`` (that address only: give the node's
    address on the workers' private network); call ``.shutdown()`` on what it returns.

    A quorum forms once every live worker asked for it, or ``join_timeout`` seconds
    after ``min_members`` did; a worker whose heartbeats stop for ``heartbeat_timeout``
    seconds is left out of the next quorum.
    """
    require_torchft("the lighthouse")
    os.environ.setdefault("RUST_LOG", "error")
    from torchft._torchft import LighthouseServer

    bind = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    return LighthouseServer(bind=bind, min_replicas=min_members,
                            join_timeout_ms=int(join_timeout * 1000),
                            heartbeat_timeout_ms=int(heartbeat_timeout * 1000))


def start_gate(rank: int, world: int) -> float | None:
    """Worker ``rank`` of ``world`` is up: mark it in the job's start gate (``GATE_ENV``)
    and wait there, up to the gate's seconds (the lighthouse's join timeout), for every
    worker of the job. The seconds it waited; None when the job has no gate or not every
    worker came in time (slow to start, or lost: the join timeout and heals take over)."""
    where = os.environ.get(GATE_ENV)
    if not where:
        return None
    host, port, seconds = where.rsplit(":", 2)
    patience = datetime.timedelta(seconds=max(float(seconds), 0.001))
    start = time.monotonic()
    try:
        store = dist.TCPStore(host, int(port), is_master=False, timeout=patience)
        store.set(f"up/{rank}", "1")
        store.wait([f"up/{r}" for r in range(world)], patience)
    except (RuntimeError, ValueError):  # c10d's timeout (DistStoreError), or a lost store
        return None
    return time.monotonic() - start


def answers(url: str) -> bool:
    """Whether something accepts connections at ``url`` (``http://host:port``) within 2 s."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80),
                                      timeout=2.0):
            return True
    except OSError:
        return False


def options(kind: str, root: int = 0) -> Any:
    """c10d's options object for a collective of ``kind``."""
    c10d = torch._C._distributed_c10d
    opts = {"sum": c10d.AllreduceOptions, "broadcast": c10d.BroadcastOptions}.get(
        kind, c10d.AllgatherOptions)()
    if kind == "sum":
        opts.reduceOp = c10d.ReduceOp.SUM
    if kind == "broadcast":
        opts.rootRank = root
    return opts


def cloned(value: Any) -> Any:
    """``value`` with every tensor copied (what a healing peer reads cannot change under it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: cloned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cloned(v) for v in value)
    return value


def payload_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (what a heal moved, framing aside)."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    parts = value.values() if isinstance(value, dict) else value
    return sum(map(payload_bytes, parts)) if isinstance(value, (dict, list, tuple)) else 0


def signalling_gloo(timeout: datetime.timedelta) -> Any:
    """torchft's reconfigurable gloo process group that keeps each quorum's c10d store
    (``.store``, under the quorum's prefix) for :class:`FailureSignal`."""
    from torchft.process_group import ProcessGroupGloo

    class Gloo(ProcessGroupGloo):
        store: Any = None

        def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
            self.store = store
            return super()._create_pg(store, rank, world_size)

    return Gloo(timeout=timeout)


class FailureSignal:
    """A round's failure, told to every member at once through the quorum's store.

    A worker that dies inside a collective breaks only its neighbours' connections at once;
    gloo left the others waiting for their data until the timeout. A member that saw an
    error adds 1 to a counter in the quorum's store (:meth:`raise_`); the others, waiting on
    their part (:meth:`wait`), read it every 50 ms and give up once it passed the value of
    the round's start (:meth:`arm`). Work given up stays alive, with its process group,
    until gloo ends it: dropping a gloo group with a pending collective blocks."""

    KEY = "lsgd/failed-rounds"

    def __init__(self, pg: Any) -> None:
        self._pg, self._seen, self._given_up = pg, None, []

    def _count(self, add: int = 0) -> int:
        return int(self._pg.store.add(self.KEY, add))

    def arm(self) -> None:
        """At a round's start: the failures told so far in this quorum."""
        self._given_up = [(w, pg) for w, pg in self._given_up if not w.is_completed()]
        try:
            self._seen = self._count()
        except Exception:  # no store (no quorum yet) or a lost one: wait as gloo does
            self._seen = None

    def raise_(self) -> None:
        """Tell the other members that this round failed."""
        if self._seen is not None:
            with contextlib.suppress(Exception):
                self._count(1)
            self._seen = None

    def wait(self, work: Any) -> Exception | None:
        """Wait for ``work``; an error once another member told of a failure, or the
        quorum's store is gone (its member died), before ``work`` finished."""
        done = threading.Event()
        work.get_future().add_done_callback(lambda _: done.set())
        while not done.wait(0.05):
            if self._seen is not None:
                try:
                    told: Any = self._count() > self._seen
                except Exception as exc:
                    told = exc
                if told:
                    self._given_up.append((work, self._pg._pg))
                    return told if isinstance(told, Exception) else RuntimeError(
                        "another member of the quorum saw this round fail")
        work.wait()
        return None
