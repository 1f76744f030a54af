"""Elastic replicas of a node's processes: the peers' view of an elastic worker.

With ``replica="node"`` on an :class:`~lsgd.comm.elastic_collectives.ElasticCommunicator` of
``per_node`` processes (:func:`lsgd.comm.replica.replicas_of`), a method's world is
the nodes, and each round's collective runs on this process's part among the
processes of its local rank on every member node: torchft's process group of the
worker. :class:`ElasticPeers` is that view: rank = the node (slot), world = the
nodes the job is made for, members = the nodes of the current quorum; an all-gather
has a row per node, NaN for absent ones. Rounds, quorums, heals and commits stay the
elastic communicator's; a collective that fails on one process fails on all of the
node's. Hidden rounds start their collective on a background thread, as with one
process per node.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from lsgd.comm.communicator import Communicator
from lsgd.comm.info import Among, ReduceOp, WorkerInfo
from lsgd.comm.lanes import BackgroundLane, current_lane
from lsgd.comm.quorum import options
from lsgd.comm.transfers import run as run_transfer


class ElasticPeers(Communicator):
    """The nodes of an elastic job, as this process's local rank sees them."""

    elastic = True
    pipelined_broadcast = False

    def __init__(self, elastic: Any) -> None:
        """``elastic``: this process's :class:`~lsgd.comm.elastic_collectives.ElasticCommunicator`,
        which builds its peers (``_replica_parts``)."""
        super().__init__(WorkerInfo(rank=elastic.node, world_size=elastic.world_size //
                                    elastic.per_node, groups=1))
        self.source = elastic
        # The node's processes, for agreeing on a started collective's outcome (collective).
        self._lane_node = dist.new_group(list(range(dist.get_world_size())))
        self._lane: BackgroundLane | None = None

    # -- the rounds are the elastic communicator's --------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in ("begin_round", "end_round", "add_state", "healed", "heals", "members",
                    "member_nodes", "committed_rounds", "failed_rounds", "heal_seconds"):
            return getattr(self.source, name)
        raise AttributeError(name)

    def node_of(self, rank: int) -> int:
        return rank

    def among_size(self, among: Among) -> int:
        return len(self.source.member_nodes()) if among == "world" else 1

    def among_members(self, among: Among) -> list[int]:
        return self.source.member_nodes() if among == "world" else [self.rank]

    # -- collectives across the member nodes, on torchft's process group -----------
    def _pg(self) -> Any:
        return self.source._pg

    def all_gather(self, tensor: torch.Tensor, among: Among = "world") -> torch.Tensor:
        """A row per node the job is made for, those of absent nodes NaN (0 for integers)."""
        if self.among_size(among) > 1:
            return super().all_gather(tensor, among)
        mine = tensor.detach().clone().unsqueeze(0)
        return mine if among == "group" else self._table([mine[0]], tensor)

    def _table(self, rows: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        fill = float("nan") if like.is_floating_point() else 0
        out = torch.full((self.world_size, *like.shape), fill, dtype=like.dtype,
                         device=like.device)
        for node, row in zip(self.source.member_nodes(), rows):
            out[node] = row
        return out

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, among: Among) -> float:
        t0 = time.perf_counter()
        work = tensor.detach().clone()
        self.source._sum_across(work, self._agreement())
        if op == "mean":
            work /= self.among_size(among)
        tensor.copy_(work)
        return time.perf_counter() - t0

    def _broadcast(self, tensor: torch.Tensor, src: int, among: Among) -> float:
        t0 = time.perf_counter()
        work = tensor.detach().clone()
        self.source._broadcast_across(work, src, node_group=self._agreement())
        tensor.copy_(work)
        return time.perf_counter() - t0

    def _all_gather(self, tensor: torch.Tensor, among: Among) -> tuple[torch.Tensor, float]:
        t0 = time.perf_counter()
        rows = [torch.empty_like(tensor) for _ in self.source.member_nodes()]
        self._across(lambda: self._pg().allgather([rows], [tensor.detach().clone()],
                                                  options("gather")), tensor)
        return self._table(rows, tensor), time.perf_counter() - t0

    def _agreement(self) -> Any:
        """The node's group its processes agree on an outcome over: the lane's own on a
        background lane (the node's own carries the data parallelism meanwhile)."""
        return self._lane_node if current_lane() is not None else None

    def _across(self, start: Callable[[], Any], work: torch.Tensor) -> None:
        """``start()`` across the member nodes; with an empty part, no part in it (the
        node's processes agree on every collective's outcome all the same)."""
        self.source._across(start if work.numel() else None, self._agreement())

    def _all_to_all(self, parts: list[torch.Tensor], sizes: list[int],
                    among: Among) -> list[torch.Tensor]:
        received = torch.empty(sum(sizes), dtype=torch.uint8)
        work = torch.cat(parts)
        self._across(lambda: self._pg().alltoall_base(
            received, work, sizes, [p.numel() for p in parts],
            torch._C._distributed_c10d.AllToAllOptions()), work)
        return list(received.split(sizes))

    def _barrier(self) -> None:
        self._all_reduce(torch.zeros(1), "sum", "world")

    def _add_count(self, key: str, amount: int) -> int:
        raise NotImplementedError(
            "elastic training runs synchronous methods only (no shared step counter)")

    def _start(self, transfer: Any) -> Any:
        if self._lane is None:
            self._lane = BackgroundLane("elastic-peers", (None, None), torch.device("cpu"))
        return self._lane.submit(functools.partial(run_transfer, self, transfer)).result
