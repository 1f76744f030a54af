"""Replicas of several processes: a node's processes step as one worker of the method.

With ``replica="node"`` the ``P`` processes of each node train one replica (their gradients averaged
every step by DDP over the node's process group), and the method sees the ``R`` nodes as its
workers: a :class:`ReplicaCommunicator` has rank = the node, world size = the nodes, one group.
Across replicas the work is split in HSDP's layout (docs/algorithms.md, "Across replicas, by
parts"): local rank ``r`` runs each collective on the ``r``-th of ``P`` parts of the flat tensor
among its *peers* (local rank ``r`` of every node), and the node's processes put the parts back
together with one all-gather inside the node. ``all_gather`` gathers each replica's *mean* of its
processes' tensors. ``stats`` adds the peers' and the node's counts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from lsgd.comm import codec as codecs
from lsgd.comm.communicator import Communicator
from lsgd.comm.data_parallel import DataParallel, GradientCompression
from lsgd.comm.info import Among, CommStats, ReduceOp, WorkerInfo, check_replica
from lsgd.comm.transfers import Handle, done_handle


def replicas_of(comm: Communicator, replica: str) -> Communicator:
    """``comm`` itself for ``replica="process"`` (or nodes of one process each), else the
    :class:`ReplicaCommunicator` of its nodes (made once per communicator; collective)."""
    check_replica(replica)
    if replica == "process" or comm.info.group_size == 1:
        return comm
    made = getattr(comm, "_replicas", None)
    if made is None:
        made = ReplicaCommunicator(comm, *comm._replica_parts())
        comm._replicas = made  # type: ignore[attr-defined]
    return made


class ReplicaCommunicator(Communicator):
    """The method's view of replicas of a node's processes: ``processes`` is the
    communicator of every process (its groups the nodes), ``node`` the one of this
    process's node, ``peers`` the one of the processes of this local rank on every node.
    """

    def __init__(self, processes: Communicator, node: Communicator,
                 peers: Communicator) -> None:
        info = processes.info
        super().__init__(WorkerInfo(rank=info.group, world_size=info.groups, groups=1))
        self._processes, self.node, self.peers = processes, node, peers
        #: Elastic replicas (:class:`~lsgd.comm.quorum_collectives.ElasticPeers`): the rounds
        #: are the peers'.
        self.elastic = bool(getattr(peers, "elastic", False))
        #: (this process's part, parts): local rank ``r`` of ``P`` owns part ``r``.
        self.share = (info.group_rank, info.group_size)
        self.broadcast_algorithm = peers.broadcast_algorithm

    @property
    def processes(self) -> Communicator:
        return self._processes

    def __getattr__(self, name: str) -> Any:
        """An elastic replica's rounds (``begin_round``, ``healed``, ...): the peers'."""
        if self.__dict__.get("elastic"):
            return getattr(self.__dict__["peers"], name)
        raise AttributeError(name)

    def among_members(self, among: Among) -> list[int]:
        return self.peers.among_members("world")  # one group: "group" is every replica

    def node_of(self, rank: int) -> int:
        return rank  # a replica is a node

    @property
    def across(self) -> Communicator:
        return self.peers

    def put_together_(self, flat: torch.Tensor) -> None:
        self._put_together(flat.unsqueeze(0), flat[slice(*self.part(flat.numel()))].unsqueeze(0))

    def replica_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point():
            self.node.all_reduce_(tensor, "mean")
        return tensor

    def all_agree(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every process of the node (one all-reduce inside it)."""
        count = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
        self.node.all_reduce_(count, "sum")
        return int(count.item()) == self.share[1]

    def part(self, numel: int, r: int | None = None) -> tuple[int, int]:
        """``(begin, end)`` of part ``r`` (default: this process's) of ``numel`` values: as
        equal as whole units of ``256 R`` values allow (an int8 block per replica), so a
        compressed collective of the parts moves exactly the bytes of the whole tensor's."""
        parts = codecs.split(numel, self.share[1], codecs.BLOCK * self.world_size)
        return parts[self.share[0] if r is None else r]

    def stats(self, category: str = "train") -> CommStats:
        """What this process moved in ``category``: its peers' collectives (across the
        node's link, ``link_*``) and its node's (DDP's gradients, the parts)."""
        return (super().stats(category).plus(self.peers.stats(category))
                .plus(self.node.stats(category)))

    @contextlib.contextmanager
    def category(self, name: str) -> Iterator[None]:
        with super().category(name), self.peers.category(name), self.node.category(name):
            yield

    def replica_parallel(self, module: nn.Module) -> DataParallel | None:
        """``module`` data-parallel over the node's processes, to call in the forward pass."""
        return self.node.data_parallel(module, True)

    def data_parallel(self, module: nn.Module, sync_buffers: bool = True,
                      options: dict[str, Any] | None = None,
                      compression: GradientCompression | None = None) -> DataParallel:
        """All-reduce data parallelism is over every process, as without replicas."""
        return self._processes.data_parallel(module, sync_buffers, options, compression)

    def all_reduce_(self, tensor: torch.Tensor, op: ReduceOp = "mean", among: Among = "world",
                    codec: str = "none") -> torch.Tensor:
        self._check(tensor, among)
        self._by_parts(tensor, lambda piece: done_handle(
            self.peers.all_reduce_(piece, op, "world", codec))).wait()
        return tensor

    def broadcast_(self, tensor: torch.Tensor, src: int, among: Among = "world",
                   codec: str = "none") -> torch.Tensor:
        self._check(tensor, among, src=src, name="broadcast_")
        self._by_parts(tensor, lambda piece: done_handle(
            self.peers.broadcast_(piece, src, "world", codec))).wait()
        return tensor

    def all_gather(self, tensor: torch.Tensor, among: Among = "world") -> torch.Tensor:
        """Every replica's mean of ``tensor`` (see the module docstring), stacked."""
        self._check(tensor, among)
        return self._gather(tensor, lambda piece: done_handle(
            self.peers.all_gather(piece, "world"))).wait()

    def start_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean",
                         among: Among = "world", codec: str = "none") -> Handle:
        self._check(tensor, among)
        return self._by_parts(tensor, lambda piece: self.peers.start_all_reduce(
            piece, op, "world", codec))

    def start_broadcast(self, tensor: torch.Tensor, src: int, among: Among = "world",
                        codec: str = "none") -> Handle:
        self._check(tensor, among, src=src, name="start_broadcast")
        return self._by_parts(tensor, lambda piece: self.peers.start_broadcast(
            piece, src, "world", codec))

    def start_all_gather(self, tensor: torch.Tensor, among: Among = "world",
                         lane: str = "bulk") -> Handle:
        """:meth:`all_gather`, started."""
        self._check(tensor, among)
        return self._gather(tensor, lambda piece: self.peers.start_all_gather(
            piece, "world", lane))

    def _gather(self, tensor: torch.Tensor, gather: Callable[[torch.Tensor], Handle]
                ) -> Handle:
        mean = self.replica_mean_(tensor.detach().clone().contiguous())
        if self.world_size == 1:
            return done_handle(mean.unsqueeze(0))
        flat = mean.view(-1)
        begin, end = self.part(flat.numel())
        inner = (gather(flat[begin:end].clone()) if end > begin or self.elastic
                 else done_handle(flat.new_empty(self.world_size, 0)))

        def finish() -> tuple[torch.Tensor, float]:
            rows = inner.wait()
            out = flat.new_empty(self.world_size, flat.numel())
            self._put_together(out, rows)
            return out.view(self.world_size, *tensor.shape), 0.0

        return Handle(finish)

    def exchange_many(self, tensor: torch.Tensor, peers: Sequence[int]) -> list[torch.Tensor]:
        flat = tensor.reshape(-1)
        begin, end = self.part(flat.numel())
        pieces = (self.peers.exchange_many(flat[begin:end].clone(), peers) if end > begin
                  else [flat.new_empty(0) for _ in peers])  # (no pairwise exchange elastically)
        received = []
        for piece in pieces:
            whole = flat.new_empty(flat.numel())
            self._put_together(whole.unsqueeze(0), piece.unsqueeze(0))
            received.append(whole.view_as(tensor))
        return received

    def barrier(self) -> None:
        self._processes.barrier()

    def now(self) -> float:
        return self._processes.now()

    def local_step(self) -> None:
        self._processes.local_step()

    def _add_count(self, key: str, amount: int) -> int:
        """The node's first process adds a replica's steps; the others learn the count."""
        value = torch.zeros(1, dtype=torch.int64)
        if self.share[0] == 0:
            value[0] = self._processes.add_count(key, amount)
        self.node.broadcast_(value, 0)
        return int(value)

    def _by_parts(self, tensor: torch.Tensor, start: Callable[[torch.Tensor], Handle]
                  ) -> Handle:
        """``start`` the collective on this process's part of ``tensor``; waiting reassembles it."""
        if self.world_size == 1:  # one replica: its processes hold the result already
            return done_handle()
        flat = tensor.view(-1)
        begin, end = self.part(flat.numel())
        piece = flat[begin:end].clone()
        # An elastic node's processes agree on every cross-node collective: none skips one.
        inner = start(piece) if end > begin or self.elastic else done_handle()

        def finish() -> tuple[None, float]:
            inner.wait()
            self._put_together(flat.unsqueeze(0), piece.unsqueeze(0))
            return None, 0.0

        return Handle(finish)

    def _put_together(self, out: torch.Tensor, rows: torch.Tensor) -> None:
        """``out[:, part r] <- process r's rows`` for every process ``r`` of the node (one
        all-gather inside the node); ``rows`` are this process's, ``[n, its part]``."""
        bounds = [self.part(out.shape[1], r) for r in range(self.share[1])]
        longest = max(end - begin for begin, end in bounds)
        padded = out.new_zeros(out.shape[0], longest)
        padded[:, :rows.shape[1]].copy_(rows)
        gathered = self.node.all_gather(padded)
        for r, (begin, end) in enumerate(bounds):
            out[:, begin:end].copy_(gathered[r, :, :end - begin])
