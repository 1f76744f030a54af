"""Elastic membership on torchft: collectives among the workers of the current quorum.

:class:`ElasticCommunicator` lets a periodic method go on when workers die
and take them back when they return, with torchft (the optional extra
``pip install 'lsgd[torchft]'``) as the engine: each worker is a torchft
*replica group* of one process with a ``Manager``; a lighthouse
(``torchft_lighthouse``, or :func:`start_lighthouse`) forms a *quorum* of the
live workers at each round. lsgd adds no membership protocol of its own.

A worker keeps a fixed *slot* ``0 .. W-1`` (its rank; a restarted worker takes
its old slot back). A round is a quorum point::

    comm.begin_round()     # the quorum: who takes part (members()); a worker
                           # behind the others is healed here from a live peer
    ...collectives...      # among the members only
    comm.end_round()       # torchft's commit: False if anything failed

Between ``begin_round`` and ``end_round`` the collectives run among the
members, in the order of their slots: ``all_reduce_`` sums or averages over
the members, ``broadcast_`` takes a member's slot as ``src``, and
``all_gather`` returns ``W`` rows where the rows of absent slots are NaN (0
for integer tensors). A collective that fails (a member died, or did not
answer within ``timeout``) leaves its tensor as it was and raises
:class:`RoundFailed`; the round is then not committed (see
:mod:`lsgd.strategies.elastic` for what the methods do about it). Nothing
may be exchanged outside a round.

Healing (torchft's): at the quorum, a worker whose count of committed
rounds is below the others' receives the state that ``state_dict`` returns
on an up-to-date peer, over torchft's HTTP checkpoint transport, before
the round's collectives; ``load_state_dict`` is called with it. Its bytes
are counted as received under the ``"join"`` category (the sender's are
not counted). Each worker runs a c10d ``TCPStore`` of its own for its
replica group.

Not available here: the non-blocking collectives (overlapped or compressed
rounds), pairwise exchange and the shared counter of asynchronous methods.
The CUDA/NCCL form (torchft's ``ProcessGroupNCCL``) is not built: elastic
workers run on gloo.
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os
import socket
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from lsgd.comm.base import Communicator
from lsgd.comm.info import Among, ReduceOp, WorkerInfo

EXTRA = "pip install 'lsgd[torchft]'"


class RoundFailed(RuntimeError):
    """A collective of this round failed (a member died or did not answer in time):
    the round is dropped, and the next round forms a new quorum."""


def require_torchft(what: str = "elastic training") -> None:
    """Raise ``RuntimeError`` naming the extra unless torchft can be imported."""
    if importlib.util.find_spec("torchft") is None:
        raise RuntimeError(f"{what} needs torchft, an optional extra: {EXTRA}")


def start_lighthouse(port: int = 29510, min_members: int = 1, *, bind_host: str = "[::]",
                     join_timeout: float = 30.0, heartbeat_timeout: float = 2.0) -> Any:
    """torchft's lighthouse server on ``port``; call ``.shutdown()`` on what it returns.

    A quorum forms once every live worker asked for it, or ``join_timeout``
    seconds after ``min_members`` did; a worker whose heartbeats stop for
    ``heartbeat_timeout`` seconds (it died, or its process stopped) is left
    out of the next quorum.
    """
    require_torchft("the lighthouse")
    os.environ.setdefault("RUST_LOG", "error")
    from torchft._torchft import LighthouseServer

    return LighthouseServer(bind=f"{bind_host}:{port}", min_replicas=min_members,
                            join_timeout_ms=int(join_timeout * 1000),
                            heartbeat_timeout_ms=int(heartbeat_timeout * 1000))


class ElasticCommunicator(Communicator):
    """Collectives among the members of each round's torchft quorum.

    Args:
        slot: this worker's slot in ``[0, slots)`` (its rank, kept across restarts).
        slots: the number of workers the job is made for (its world size).
        lighthouse: the lighthouse's address, ``http://host:port``.
        address: the address this worker's servers listen on and advertise
            (its node's address; loopback by default).
        min_members: rounds with fewer members are not committed.
        timeout: seconds a collective or a heal may take before the round fails.
        quorum_timeout: seconds to wait for a quorum.
    """

    elastic = True
    pipelined_broadcast = False

    def __init__(self, slot: int, slots: int, *, lighthouse: str, address: str = "127.0.0.1",
                 min_members: int = 1, timeout: float = 30.0,
                 quorum_timeout: float = 300.0) -> None:
        if not isinstance(slot, int) or not 0 <= slot < slots:
            raise ValueError(f"ElasticCommunicator: slot must be in [0, {slots}), got {slot!r}")
        if not isinstance(min_members, int) or not 1 <= min_members <= slots:
            raise ValueError(
                f"ElasticCommunicator: min_members must be in [1, {slots}], got {min_members!r}")
        require_torchft()
        super().__init__(WorkerInfo(rank=slot, world_size=slots, groups=1))
        os.environ.setdefault("RUST_LOG", "error")
        # torchft warns at every new quorum that it cannot reset NCCL's flight recorder,
        # and torch that a received checkpoint's buffer is read-only: neither matters here.
        logging.getLogger("torchft.manager").setLevel(logging.ERROR)
        if address != "127.0.0.1":  # torchft's HTTP checkpoint transport advertises this
            socket.gethostname = lambda: address  # type: ignore[assignment]
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        import torch.distributed as dist
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        patience = datetime.timedelta(seconds=timeout)
        self._store = dist.TCPStore(host_name=address, port=0, is_master=True,
                                    wait_for_workers=False)
        self._pg = ProcessGroupGloo(timeout=patience)
        self._parts: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}
        self._members: list[int] | None = None
        self.healed = False  # whether the last begin_round healed this worker
        self.heals = 0
        self.failed_rounds = 0
        self.manager = Manager(
            pg=self._pg, min_replica_size=min_members, use_async_quorum=False,
            load_state_dict=self._on_heal, state_dict=self._on_send,
            replica_id=f"lsgd{slot}", store_addr=address, store_port=self._store.port,
            rank=0, world_size=1, lighthouse_addr=lighthouse, hostname=address,
            timeout=patience, quorum_timeout=datetime.timedelta(seconds=quorum_timeout),
            connect_timeout=datetime.timedelta(seconds=60), init_sync=False)

    # -- what a healed worker receives ------------------------------------
    def add_state(self, name: str, save: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """A part of what an up-to-date worker sends to a healing one: ``save()`` there,
        ``load(value)`` here (the parts are taken in the order they were added)."""
        self._parts[name] = (save, load)

    def _on_send(self) -> dict[str, Any]:
        return _cloned({name: save() for name, (save, _) in self._parts.items()})

    def _on_heal(self, state: dict[str, Any]) -> None:
        size = _payload_bytes(state)
        self._record_in("join", 0, size, 0.0)
        for name, (_, load) in self._parts.items():
            load(state[name])
        self.healed = True
        self.heals += 1

    # -- rounds -----------------------------------------------------------
    def begin_round(self) -> None:
        """Join this round's quorum (healing this worker first if it is behind).

        Raises :class:`RoundFailed` when the quorum or the heal failed; call
        :meth:`end_round` in any case."""
        self.healed = False
        self._members = []
        self.manager.start_quorum()
        if self.manager.errored() is not None:
            raise RoundFailed(f"worker {self.rank}: the quorum failed: {self.manager.errored()}")
        members = list(getattr(self._pg, "_global_ranks", None) or [])
        if not members or self.rank not in members:
            members = self._gather_slots()
        if members.index(self.rank) != self.manager.participating_rank():
            raise RoundFailed(f"worker {self.rank}: quorum order {members} does not match "
                              f"its participating rank {self.manager.participating_rank()}")
        self._members = members

    def end_round(self) -> bool:
        """Leave the round: whether it was committed (no member saw a failure)."""
        self._members = None
        committed = bool(self.manager.should_commit())
        if not committed:
            self.failed_rounds += 1
        return committed

    def members(self) -> list[int]:
        """The slots taking part in the current round, in order."""
        return list(self._round_members())

    def committed_rounds(self) -> int:
        """Rounds this worker committed (a healed worker takes its source's count)."""
        return int(self.manager.current_step())

    def close(self) -> None:
        """Stop this worker's torchft servers (its checkpoint server and manager)."""
        self.manager.shutdown(wait=False)

    def _round_members(self) -> list[int]:
        if self._members is None:
            raise RuntimeError(
                f"worker {self.rank}: an elastic communicator exchanges only inside a round "
                "(between begin_round() and end_round())")
        return self._members

    def _gather_slots(self) -> list[int]:
        """The members' slots in participating order (one all-gather of an int64)."""
        n = self.manager.num_participants()
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
        self._members = list(range(n))  # a placeholder while the gather runs
        self._run(lambda: self._pg.allgather([out], [torch.tensor([self.rank])], _opts("gather")))
        return [int(t) for t in out]

    # -- layout seen by the collectives -------------------------------------
    def among_size(self, among: Among) -> int:
        return len(self._round_members())

    def among_members(self, among: Among) -> list[int]:
        return self.members()

    # -- primitives ---------------------------------------------------------
    def _run(self, start: Callable[[], Any]) -> float:
        """Run one collective of the torchft process group; seconds taken.
        A failure is reported to the manager and raised as :class:`RoundFailed`."""
        t0 = time.perf_counter()
        try:
            start().wait()
            error = self._pg.errored()
        except Exception as exc:  # a dead or silent peer: gloo's error or timeout
            error = exc
        if error is not None:
            self.manager.report_error(error if isinstance(error, Exception)
                                      else RuntimeError(str(error)))
            raise RoundFailed(f"worker {self.rank}: a collective failed: {error}")
        return time.perf_counter() - t0

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, among: Among) -> float:
        work = tensor.detach().clone()
        seconds = self._run(lambda: self._pg.allreduce([work], _opts("sum")))
        if op == "mean":
            work /= len(self._round_members())
        tensor.copy_(work)
        return seconds

    def _broadcast(self, tensor: torch.Tensor, src: int, among: Among) -> float:
        work = tensor.detach().clone()
        root = self._round_members().index(src)
        seconds = self._run(lambda: self._pg.broadcast([work], _opts("broadcast", root)))
        tensor.copy_(work)
        return seconds

    def _all_gather(self, tensor: torch.Tensor, among: Among) -> tuple[torch.Tensor, float]:
        members = self._round_members()
        parts = [torch.empty_like(tensor) for _ in members]
        seconds = self._run(lambda: self._pg.allgather([parts], [tensor], _opts("gather")))
        fill = float("nan") if tensor.is_floating_point() else 0
        out = torch.full((self.world_size, *tensor.shape), fill, dtype=tensor.dtype,
                         device=tensor.device)
        for slot, part in zip(members, parts):
            out[slot] = part
        return out, seconds

    def _chain_broadcast(self, tensor: torch.Tensor, src: int, heads: list[int],
                         chunks: int) -> float:
        raise AssertionError("unreachable: elastic broadcasts are never chained")

    def _barrier(self) -> None:
        self._all_reduce(torch.zeros(1), "sum", "world")

    def _add_count(self, key: str, amount: int) -> int:
        raise NotImplementedError(
            "elastic training runs synchronous methods only (no shared step counter)")

    def _start(self, transfer: Any) -> Any:
        raise NotImplementedError(
            "elastic training runs blocking, uncompressed rounds (no overlap or compress)")

    def _all_to_all(self, parts: list[torch.Tensor], sizes: list[int], among: Among) -> Any:
        raise NotImplementedError("elastic training has no all-to-all")


def _opts(kind: str, root: int = 0) -> Any:
    """c10d's options object for a collective of ``kind``."""
    c10d = torch._C._distributed_c10d
    if kind == "sum":
        opts = c10d.AllreduceOptions()
        opts.reduceOp = c10d.ReduceOp.SUM
    elif kind == "broadcast":
        opts = c10d.BroadcastOptions()
        opts.rootRank = root
    else:
        opts = c10d.AllgatherOptions()
    return opts


def _cloned(value: Any) -> Any:
    """``value`` with every tensor copied (what a healing peer reads cannot change under it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cloned(v) for v in value)
    return value


def _payload_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value`` (what a heal moved, framing aside)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_payload_bytes(v) for v in value)
    return 0
