"""The collectives of an elastic worker among the member nodes of the current quorum
(:mod:`lsgd.comm.elastic_collectives`), written once for both views of a node's
processes: :class:`QuorumCollectives`, and :class:`ElasticPeers`."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from lsgd.comm.communicator import Communicator
from lsgd.comm.lanes import BackgroundLane, current_lane
from lsgd.comm.info import Among, ReduceOp, WorkerInfo
from lsgd.comm.quorum import options


class QuorumCollectives(Communicator):
    """The collectives of an elastic worker among the member nodes of the current round.

    A view says how many of its workers a node holds (``per_node``: a collective inside
    the node, then across the member nodes) and which of them it is (``local_rank``);
    across nodes they run on the torchft process group of :meth:`_elastic`, and the
    node's processes agree on each one's outcome over :meth:`_agreement`. A collective
    across nodes that fails leaves its tensor as it was.
    """

    elastic = True
    pipelined_broadcast = False
    per_node = 1
    local_rank = 0
    #: the name of the background lane of started collectives
    _lane_name = "elastic"
    _lane: BackgroundLane | None = None

    def _elastic(self) -> Any:
        """The communicator of the rounds, quorums and torchft process group: by default, this."""
        return self

    def _agreement(self) -> Any:
        """The node's group its processes agree on an outcome over (None: the default)."""
        return None

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def among_size(self, among: Among) -> int:
        if among != "world":
            return self.per_node
        return len(self._elastic().member_nodes()) * self.per_node

    def among_members(self, among: Among) -> list[int]:
        if among != "world":
            return self.info.group_members()
        s = self.per_node
        return [node * s + k for node in self._elastic().member_nodes() for k in range(s)]

    def all_gather(self, tensor: torch.Tensor, among: Among = "world") -> torch.Tensor:
        """``world``: ``W`` rows, one per rank, those of absent workers NaN (0 for integers)."""
        if self.among_size(among) > 1:
            return super().all_gather(tensor, among)
        mine = tensor.detach().clone().unsqueeze(0)
        return mine if among == "group" else self._table([mine], tensor)

    def _table(self, blocks: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        """``W`` rows from one block of ``per_node`` rows per member node."""
        fill = float("nan") if like.is_floating_point() else 0
        out = torch.full((self.world_size, *like.shape), fill, dtype=like.dtype,
                         device=like.device)
        for node, block in zip(self._elastic().member_nodes(), blocks):
            out[node * self.per_node:(node + 1) * self.per_node] = block
        return out

    def _over_nodes(self, start: Callable[[Any], Any] | None, work: torch.Tensor) -> None:
        """``start(pg)`` across the member nodes on torchft's process group ``pg`` (``None``,
        or an empty ``work``: this worker takes no part); the node's processes agree on the
        outcome all the same, and all raise :class:`RoundFailed` if one saw it fail."""
        elastic = self._elastic()
        elastic._across((lambda: start(elastic._pg)) if start and work.numel() else None,
                        self._agreement())

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, among: Among) -> float:
        t0 = time.perf_counter()
        work = tensor.detach().clone()
        if self.per_node > 1:
            dist.all_reduce(work)
        if among == "world":
            self._over_nodes(lambda pg: pg.allreduce([work], options("sum")), work)
        if op == "mean":
            work /= self.among_size(among)
        tensor.copy_(work)
        return time.perf_counter() - t0

    def _broadcast(self, tensor: torch.Tensor, src: int, among: Among) -> None:
        work = tensor.detach().clone()
        node, local = divmod(src, self.per_node)
        if among == "world":  # the source's local rank on every member node
            root = self._elastic().member_nodes().index(node)
            self._over_nodes((lambda pg: pg.broadcast([work], options("broadcast", root)))
                             if self.local_rank == local else None, work)
        if self.per_node > 1:
            dist.broadcast(work, src=local)
        tensor.copy_(work)

    def _all_gather(self, tensor: torch.Tensor, among: Among) -> tuple[torch.Tensor, float]:
        t0 = time.perf_counter()
        if self.per_node > 1:
            local = [torch.empty_like(tensor) for _ in range(self.per_node)]
            dist.all_gather(local, tensor)
        else:
            local = [tensor.detach().clone()]
        block = torch.stack(local)
        if among == "group":
            return block, time.perf_counter() - t0
        blocks = [torch.empty_like(block) for _ in self._elastic().member_nodes()]
        self._over_nodes(lambda pg: pg.allgather([blocks], [block], options("gather")), block)
        return self._table(blocks, tensor), time.perf_counter() - t0

    def _all_to_all(self, parts: list[torch.Tensor], sizes: list[int], among: Among) -> Any:
        """Across the member nodes, one worker per node (a compressed all-reduce's first
        half); ``RoundFailed`` as any collective across nodes."""
        if self.per_node > 1 or among != "world":
            raise NotImplementedError("an elastic all-to-all runs among all workers, one "
                                      "worker per node")
        received = torch.empty(sum(sizes), dtype=torch.uint8)
        work = torch.cat(parts)
        self._over_nodes(lambda pg: pg.alltoall_base(
            received, work, sizes, [p.numel() for p in parts],
            torch._C._distributed_c10d.AllToAllOptions()), work)
        return list(received.split(sizes))

    def _barrier(self) -> None:
        self._all_reduce(torch.zeros(1), "sum", "world")

    def _add_count(self, key: str, amount: int) -> int:
        raise NotImplementedError(
            "elastic training runs synchronous methods only (no shared step counter)")

    def _start(self, transfer: Any) -> Any:
        if self.per_node > 1:
            raise NotImplementedError("started collectives of an elastic worker need one worker "
                                      "per node (its node's own collectives keep the main thread)")
        if self._lane is None:
            self._lane = BackgroundLane(self._lane_name)
        return self._lane.submit(functools.partial(self._collective, transfer)).result


class ElasticPeers(QuorumCollectives):
    """The nodes of an elastic job as this process's local rank sees them (the peers of an
    elastic replica, ``replica="node"``): rank = the node, world = the nodes the job is
    made for, members = the nodes of the current quorum. Rounds, quorums, heals and commits
    stay the elastic communicator's; a collective failing on one process fails on all."""

    _lane_name = "elastic-peers"

    def __init__(self, elastic: Any) -> None:
        """``elastic``: this process's :class:`ElasticCommunicator`, which makes its peers."""
        super().__init__(WorkerInfo(rank=elastic.node, world_size=elastic.world_size //
                                    elastic.per_node, groups=1))
        self.source = elastic
        # The node's processes, for agreeing on a started collective's outcome (collective).
        self._lane_node = dist.new_group(list(range(dist.get_world_size())))

    # -- the rounds are the elastic communicator's --------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in ("begin_round", "end_round", "add_state", "healed", "heals", "members",
                    "member_nodes", "committed_rounds", "failed_rounds", "heal_seconds"):
            return getattr(self.source, name)
        raise AttributeError(name)

    def _elastic(self) -> Any:
        return self.source

    def among_members(self, among: Among) -> list[int]:
        return super().among_members("world") if among == "world" else [self.rank]

    def _agreement(self) -> Any:
        """The node's group its processes agree on an outcome over: the lane's own on a
        background lane (the node's own carries the data parallelism meanwhile)."""
        return self._lane_node if current_lane() is not None else None
