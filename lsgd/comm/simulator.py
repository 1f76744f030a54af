"""In-process simulator: W workers as threads of one process.

``simulate(fn, world_size=W, groups=n)`` runs ``fn(info)`` once per worker and returns the results
by rank; workers talk through :class:`SimCommunicator`, so strategy code runs unchanged. One worker
runs at a time (the turn goes to the ready worker with the earliest virtual clock, ties to the
lowest rank, and passes at a collective, a local step's end or a return), and collectives reduce in
rank order, so a run is bit-for-bit repeatable; each worker has its own virtual clock
(:mod:`lsgd.comm.world`) and random state. An exception in any worker unwinds the others and
``simulate`` raises :class:`SimulationError` naming the rank; a collective that can never complete
is a deadlock, reported with what each worker waited for.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch

from lsgd.comm.communicator import Among, Communicator
from lsgd.comm.info import WorkerInfo, check_layout, check_replica
from lsgd.comm import codec as codecs
from lsgd.comm.chain import chain_heads, chunk_count
from lsgd.comm.transfers import Transfer, compute as compute_transfer
from lsgd.comm.world import RandomState, WorkerAborted, World, step_times
from lsgd.links.spec import Link, parse_link

T = TypeVar("T")

_local = threading.local()


def current_simulated() -> SimCommunicator | None:
    """The communicator of the simulated worker running on this thread, if any."""
    return getattr(_local, "comm", None)


class SimulationError(RuntimeError):
    """A simulated worker raised; ``rank`` says which, ``__cause__`` is the error."""

    def __init__(self, rank: int | None, message: str) -> None:
        super().__init__(message)
        self.rank = rank


class SimCommunicator(Communicator):
    """One simulated worker's end of the in-process world; with ``members`` (global ranks,
    increasing), among those workers only, in ``groups`` groups and with collectives of
    its own (``scope`` names them): a replica's node or peers (:mod:`lsgd.comm.replica`).
    """

    def __init__(self, world: World, rank: int, members: Sequence[int] | None = None,
                 groups: int | None = None, scope: str = "") -> None:
        self._global = list(range(world.world_size)) if members is None else list(members)
        assert self._global == sorted(self._global) and rank in self._global, self._global
        super().__init__(WorkerInfo(rank=self._global.index(rank), world_size=len(self._global),
                                    groups=world.groups if groups is None else groups))
        self._world = world
        self._me = rank  # the global rank
        self._scope = scope
        self._sequence: dict[tuple, int] = {}
        #: The default of lsgd.get_communicator(replica=None) in this simulation.
        self.replica = world.replica

    def _key(self, among: Among, lane: str = "") -> tuple:
        """The next collective of ``among``; started transfers (``lane``) are numbered apart."""
        where = ("world",) if among == "world" else ("group", self.info.group)
        return self._numbered((lane, self._scope, *where))

    def _numbered(self, key: tuple) -> tuple:
        """``key`` and its next number on this worker (every member counts the same)."""
        n = self._sequence.get(key, 0)
        self._sequence[key] = n + 1
        return (*key, n)

    def _globals(self, ranks: Sequence[int]) -> list[int]:
        return [self._global[r] for r in ranks]

    def node_of(self, rank: int) -> int:
        return self._world.node_of(self._global[rank])

    def _replica_parts(self) -> tuple[SimCommunicator, SimCommunicator]:
        """(node's, peers' communicator) of this worker's replica, each with its own collectives."""
        info, world = self.info, self._world
        peers = [g * info.group_size + info.group_rank for g in range(info.groups)]
        return (SimCommunicator(world, self._me, self._globals(info.group_members()), 1,
                                f"{self._scope}/node{info.group}"),
                SimCommunicator(world, self._me, self._globals(peers), info.groups,
                                f"{self._scope}/peers{info.group_rank}"))

    def now(self) -> float:
        """This worker's virtual clock: its steps plus its time in collectives."""
        return self._world.clock[self._me]

    def local_step(self) -> None:
        self._world.local_step(self._me)

    def _add_count(self, key: str, amount: int) -> int:
        return self._world.add_count(f"{self._scope}{key}", amount)

    def _prepared(self, transfer: Transfer) -> tuple[Transfer, list[int], float]:
        """``transfer`` with its source's global rank, its members' global ranks, and the
        seconds it takes on the modeled link (0 without one), for its message pattern."""
        members = self._globals(self.among_members(transfer.among))
        link, nbytes = self._world.link, transfer.payload_bytes()
        source = self._global[transfer.src]
        if link is None:
            seconds = 0.0
        elif transfer.kind == "all_gather":
            seconds = link.all_gather(nbytes, members)
        elif transfer.kind == "broadcast" and transfer.chained:
            heads = self._globals(chain_heads(transfer.src, self.info.groups,
                                              self.info.group_size))
            seconds = link.broadcast(nbytes, heads, source, "chain", chunk_count(nbytes))
        elif transfer.kind == "broadcast":
            seconds = link.broadcast(nbytes, members, source, self.broadcast_algorithm)
        elif transfer.codec == "none":
            seconds = link.all_reduce(nbytes, members)
        else:
            sizes = codecs.part_sizes(transfer.codec, transfer.tensor.numel(), len(members))
            seconds = link.all_to_all(sizes, members) + link.all_gather(max(sizes), members)
        return dataclasses.replace(transfer, src=source), members, seconds

    def _run(self, op: str, among: Among, payload: Any,
             compute: Callable[[dict[int, Any]], dict[int, Any]], seconds: float = 0.0
             ) -> tuple[Any, float]:
        """A blocking collective: (this worker's result, its seconds)."""
        members = self._globals(self.among_members(among))
        return self._world.collective(self._me, self._key(among), op, members, payload,
                                      compute, seconds)

    def _collective(self, transfer: Transfer) -> tuple[Any, float]:
        transfer, _, seconds = self._prepared(transfer)
        return self._run(transfer.kind, transfer.among, transfer, _results, seconds)

    def _barrier(self) -> None:
        self._run("barrier", "world", None, dict.fromkeys)

    def _start(self, transfer: Transfer) -> Callable[[], tuple[Any, float]]:
        transfer, members, seconds = self._prepared(transfer)
        pending = self._world.start_collective(
            self._me, self._key(transfer.among, f"started {transfer.lane}"), transfer.kind,
            members, transfer, _results, seconds, transfer.lane)
        return lambda: self._world.wait_collective(self._me, pending)

    def _exchange(self, tensor: torch.Tensor, peers: list[int]
                  ) -> tuple[list[torch.Tensor], float]:
        # One rendezvous per pair [low, high], numbered on its own. Pairs are taken in
        # increasing peer order, the lexicographic order of (low, high) shared by all
        # workers, so the smallest pending pair can always complete and any symmetric
        # set of exchanges finishes (as batched isend/irecv does under torch.distributed).
        received: dict[int, torch.Tensor] = {}
        seconds = 0.0
        link = self._world.link
        for peer in sorted(peers):
            low, high = sorted((self._me, self._global[peer]))

            def swap(payload: dict[int, torch.Tensor], low: int = low, high: int = high
                     ) -> dict[int, torch.Tensor]:
                _check_same([low, high], payload, "exchange")
                return {low: payload[high].clone(), high: payload[low].clone()}

            transfer = link.exchange(tensor.nbytes, [(low, high)]) if link is not None else 0.0
            received[peer], duration = self._world.collective(
                self._me, self._numbered(("pair", self._scope, low, high)), "exchange",
                [low, high], tensor, swap, transfer)
            seconds += duration
        return [received[p] for p in peers], seconds


def _results(payload: dict[int, Transfer]) -> dict[int, Any]:
    """Every member's result of the transfer all of them passed (checked to agree)."""
    ranks = sorted(payload)
    first = payload[ranks[0]]
    for r in ranks[1:]:
        other = payload[r]
        if (other.src, other.op, other.codec) != (first.src, first.op, first.codec):
            raise ValueError(f"{first.kind}: rank {ranks[0]} and rank {r} disagree on the "
                             f"source, operation or codec: {first.src}, {first.op}, "
                             f"{first.codec} against {other.src}, {other.op}, {other.codec}")
    tensors = {r: t.tensor for r, t in payload.items()}
    _check_same(ranks, tensors, first.kind)
    result = compute_transfer(first, tensors, ranks)
    if first.kind == "all_gather":
        return {r: result.clone() for r in ranks}
    return dict.fromkeys(ranks)


def _check_same(ranks: list[int], payload: dict[int, torch.Tensor], op: str) -> None:
    first = payload[ranks[0]]
    for r in ranks[1:]:
        t = payload[r]
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"{op}: rank {ranks[0]} passed {tuple(first.shape)} {first.dtype} "
                             f"but rank {r} passed {tuple(t.shape)} {t.dtype}")


def simulate(fn: Callable[..., T], world_size: int, groups: int = 1, *,
             args: Sequence[Any] = (), seed: int | None = None,
             step_time: Sequence[float] | Mapping[int, float] | None = None,
             link: str | Link | None = None, replica: str = "process") -> list[T]:
    """Run ``fn(info, *args)`` as ``world_size`` simulated workers; results by rank.

    ``info`` is the worker's :class:`~lsgd.comm.info.WorkerInfo`; inside ``fn``,
    :func:`lsgd.get_communicator` and every strategy find this worker's
    :class:`SimCommunicator` on their own.

    Worker ``r``'s random generators are seeded with ``seed + r``; with ``seed=None``
    the seeds are drawn from the caller's torch generator (a caller that seeded torch
    gets a reproducible simulation), whose state is left as it was.

    ``step_time``: the virtual duration of each worker's local step, one value per
    rank, or ``{rank: time}`` for some ranks (the others take 1.0; ``{3: 3.0}`` makes
    worker 3 a straggler three times slower).

    ``link`` (``"100mbit"``, ``"20mbit,5ms"`` or a :class:`~lsgd.links.Link`) puts each group on a
    node of its own, the nodes joined by links of that rate and latency, and makes every collective
    cost its modeled transfer time on the virtual clock (:class:`~lsgd.comm.wire.LinkModel`); inside
    a node traffic is free. Without ``step_time`` a step then costs the compute time it measured.

    ``replica="node"`` makes the workers of each group one replica for the strategies
    (:mod:`lsgd.comm.replica`); ``info`` stays the worker's own (its rank shards the data).
    """
    check_layout(world_size, groups)
    check_replica(replica)
    parsed = None if link is None else parse_link(link)
    times = None if parsed is not None and step_time is None else step_times(step_time, world_size)
    if seed is None:  # one draw from the caller's generator: successive runs differ
        seed = int(torch.randint(0, 2**62, (1,)).item())
    saved = RandomState.capture()
    world = World(world_size, groups, [seed + r for r in range(world_size)], times, parsed,
                  replica)
    results: list[Any] = [None] * world_size

    def body(rank: int) -> None:
        comm = SimCommunicator(world, rank)
        _local.comm = comm
        error: BaseException | None = None
        try:
            world.start(rank)
            results[rank] = fn(comm.info, *args)
        except WorkerAborted:
            pass
        except BaseException as exc:  # re-raised by the caller with the rank
            error = exc
        finally:
            _local.comm = None
            world.finish(rank, error)

    threads = [threading.Thread(target=body, args=(r,), name=f"lsgd-sim-{r}", daemon=True)
               for r in range(world_size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        saved.restore()
    if world.failure is not None:
        rank, error, message = world.failure
        raise SimulationError(rank, message) from error
    return results


