"""The Communicator interface: the only way strategies move tensors.

Implementations: :class:`~lsgd.comm.distributed.DistCommunicator` (torch.distributed),
:class:`~lsgd.comm.simulator.SimCommunicator` (workers as threads of one process),
:class:`~lsgd.comm.local.LocalCommunicator` (one worker); a
:class:`~lsgd.comm.replica.ReplicaCommunicator` makes a node's processes one worker.

Workers ``0 .. W-1`` form ``groups`` groups of ``group_size`` consecutive ranks (a group is a node).
Every collective takes ``among="world"`` or ``among="group"``; ``src`` is always a global rank. What
is communicated: ``all_reduce`` (ring), ``broadcast`` (gloo's tree, NCCL's chain, or across nodes
lsgd's pipelined chain, :mod:`lsgd.comm.chain`), ``all_gather`` and the pairwise ``exchange``. Each
worker counts the bytes it sends and receives as the algorithm moves them (:mod:`lsgd.comm.wire`),
per traffic *category* (``"train"`` by default; ``"eval"`` keeps evaluation out of a method's cost).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import codec as codecs
from lsgd.comm.data_parallel import DataParallel, GradientCompression
from lsgd.comm.info import Among, CommStats, ReduceOp, WorkerInfo, check_layout
from lsgd.comm.shares import Shares
from lsgd.comm.chain import chain_heads
from lsgd.comm.transfers import LANES, Handle, Transfer, done_handle, run as run_transfer
from lsgd.comm.wire import (Traffic, broadcast_pattern, compressed_all_reduce_traffic,
                            pattern_traffic, ring_allreduce_bytes, ring_traffic)
from lsgd.flat import FlatBuffer


class Communicator(Shares, ABC):
    """Collectives among workers, with traffic and time accounting: subclasses implement
    the primitives (``_all_reduce``, ...) on one contiguous tensor and report their
    seconds; this class validates arguments, applies the cost model and keeps the stats.
    """

    #: How a broadcast moves its bytes: "tree" (gloo's, the simulator's) or "chain" (NCCL's).
    broadcast_algorithm = "tree"
    #: Whether a world broadcast across nodes goes as lsgd's chain (:mod:`lsgd.comm.chain`)
    #: where the backend's own is a tree.
    pipelined_broadcast = True

    def __init__(self, info: WorkerInfo) -> None:
        check_layout(info.world_size, info.groups)
        self.info = info
        self._stats: dict[str, CommStats] = {}
        self._category, self._counters = "train", 0

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def groups(self) -> int:
        return self.info.groups

    def among_size(self, among: Among) -> int:
        return len(self.among_members(among))

    def among_members(self, among: Among) -> list[int]:
        """Global ranks taking part in a collective of ``among`` from this worker."""
        return list(range(self.world_size)) if among == "world" else self.info.group_members()

    def stats(self, category: str = "train") -> CommStats:
        """Counters of ``category`` (a copy)."""
        return dataclasses.replace(self._stats.get(category, CommStats()))

    @contextlib.contextmanager
    def category(self, name: str) -> Iterator[None]:
        """Count the traffic inside the ``with`` block under ``name``."""
        previous, self._category = self._category, name
        try:
            yield
        finally:
            self._category = previous

    def count(self, traffic: Traffic, seconds: float, category: str | None = None) -> None:
        """Count one call's :class:`~lsgd.comm.wire.Traffic` in ``category`` (default: current)."""
        category = category or self._category
        call = CommStats(traffic.sent, traffic.received, seconds, 1, traffic.link_sent,
                         traffic.link_received)
        self._stats[category] = self._stats.get(category, CommStats()).plus(call)

    def node_of(self, rank: int) -> int:
        """The node (group) of worker ``rank``: who shares a link with whom."""
        return rank // self.info.group_size

    def ring(self, per_hop: float, among: Among = "world") -> Traffic:
        """This worker's traffic in a ring among ``among`` where each member sends
        ``per_hop`` bytes to the next (what DistributedDataParallel's all-reduce moves)."""
        return ring_traffic(per_hop, self.among_members(among), self.rank, self.node_of)

    def all_reduce_(self, tensor: torch.Tensor, op: ReduceOp = "mean", among: Among = "world",
                    codec: str = "none") -> torch.Tensor:
        """Sum or average ``tensor`` across ``among`` in place; returns it. With a
        ``codec`` it travels compressed, as :meth:`start_all_reduce`."""
        if codec != "none":
            self.start_all_reduce(tensor, op, among, codec).wait()
            return tensor
        self._check(tensor, among, op, name="all_reduce_")
        if self.among_size(among) > 1:
            seconds = self._collective(Transfer("all_reduce", tensor, among, op=op))[1]
            self.count(self._reduce_traffic(tensor, among, "none"), seconds)
        return tensor

    def broadcast_(self, tensor: torch.Tensor, src: int, among: Among = "world",
                   codec: str = "none") -> torch.Tensor:
        """Overwrite ``tensor`` with the one of global rank ``src``; returns it. With a
        ``codec`` it travels compressed, as :meth:`start_broadcast`."""
        if codec != "none":
            self.start_broadcast(tensor, src, among, codec).wait()
            return tensor
        self._check(tensor, among, src=src, name="broadcast_")
        if self.among_size(among) > 1:
            transfer = Transfer("broadcast", tensor, among, src=src, chained=self._chained(among))
            seconds = self._collective(transfer)[1]
            self.count(self.broadcast_traffic(tensor.nbytes, src, among, transfer.chained), seconds)
        return tensor

    def _chained(self, among: Among) -> bool:
        return (self.pipelined_broadcast and among == "world" and self.groups > 1
                and self.world_size > 2 and self.broadcast_algorithm == "tree")

    def all_gather(self, tensor: torch.Tensor, among: Among = "world") -> torch.Tensor:
        """Stack every member's ``tensor`` (in rank order) into a new tensor ``[n, ...]``."""
        self._check(tensor, among)
        n = self.among_size(among)
        if n == 1:
            return tensor.detach().clone().unsqueeze(0)
        out, seconds = self._collective(Transfer("all_gather", tensor.contiguous(), among))
        self.count(self.ring((n - 1) * tensor.nbytes, among), seconds)
        return out

    def barrier(self) -> None:
        """Wait until every worker reaches this point."""
        if self.world_size > 1:
            self._barrier()

    def data_parallel(self, module: nn.Module, sync_buffers: bool = True,
                      options: dict[str, Any] | None = None,
                      compression: GradientCompression | None = None) -> DataParallel:
        """``module`` for data-parallel training, gradients averaged every step: the module
        to call in the forward pass; call its ``synchronize()`` after ``backward()``
        (:mod:`lsgd.comm.data_parallel`). ``options`` (DistributedDataParallel's keyword
        arguments) and ``compression`` (one of its hooks) are torch.distributed's only."""
        if options:
            raise ValueError(f"data_parallel: options {sorted(options)} are "
                             "DistributedDataParallel's and apply under torch.distributed "
                             f"only, not to {type(self).__name__}")
        if compression is not None and compression.kind != "none" and self.world_size > 1:
            raise ValueError(f"data_parallel: {compression.kind} gradients are PyTorch's DDP "
                             "communication hook, which runs inside DistributedDataParallel in "
                             f"worker processes; {type(self).__name__} has no DDP: use worker "
                             "processes (lsgd.launch, torchrun; lsgd train --backend processes)")
        if self.world_size == 1:
            return DataParallel(module)
        return collective_data_parallel(self, module, sync_buffers)

    def start_all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean",
                         among: Among = "world", codec: str = "none") -> Handle:
        """Start summing or averaging ``tensor`` across ``among`` in place; returns at once.
        ``codec`` ``"bf16"`` or ``"int8"`` (float32 tensors) sends it compressed
        (:mod:`lsgd.comm.codec`): every member ends with the same decoded values."""
        self._check(tensor, among, op, name="start_all_reduce")
        transfer = Transfer("all_reduce", tensor, among, op=op, codec=self._codec(tensor, codec))
        return self._started(transfer, self._reduce_traffic(tensor, among, transfer.codec))

    def start_broadcast(self, tensor: torch.Tensor, src: int, among: Among = "world",
                        codec: str = "none") -> Handle:
        """Start overwriting ``tensor`` with global rank ``src``'s; returns at once. With a
        ``codec`` every member, the source included, ends with the decoded bytes."""
        self._check(tensor, among, src=src, name="start_broadcast")
        transfer = Transfer("broadcast", tensor, among, src=src, codec=self._codec(tensor, codec),
                            chained=self._chained(among))
        return self._started(transfer, self.broadcast_traffic(transfer.payload_bytes(), src,
                                                              among, transfer.chained))

    def start_all_gather(self, tensor: torch.Tensor, among: Among = "world",
                         lane: str = "bulk") -> Handle:
        """Start gathering every member's ``tensor``; ``wait()`` returns them stacked.
        ``lane="control"`` runs it apart from the states in flight (:data:`LANES`)."""
        self._check(tensor, among)
        if lane not in LANES:
            raise ValueError(f"start_all_gather: lane must be one of {LANES}, got {lane!r}")
        n = self.among_size(among)
        transfer = Transfer("all_gather", tensor.contiguous(), among, lane=lane)
        if n == 1:
            return done_handle(tensor.detach().clone().unsqueeze(0))
        return self._started(transfer, self.ring((n - 1) * tensor.nbytes, among))

    def _started(self, transfer: Transfer, traffic: Traffic) -> Handle:
        if self.among_size(transfer.among) == 1:  # nothing travels, nothing changes
            return done_handle()
        category = self._category
        return Handle(self._start(transfer),
                      lambda seconds: self.count(traffic, seconds, category))

    def _codec(self, tensor: torch.Tensor, codec: str) -> str:
        codecs.check(codec)
        if codec != "none" and tensor.dtype != torch.float32:
            raise ValueError(f"codec {codec!r} encodes float32 tensors, got {tensor.dtype}")
        return codec

    def _reduce_traffic(self, tensor: torch.Tensor, among: Among, codec: str) -> Traffic:
        """This worker's traffic in an all-reduce of ``tensor`` (a ring; compressed: an
        all-to-all of the encoded parts, then a ring all-gather)."""
        members = self.among_members(among)
        if codec == "none":
            return self.ring(ring_allreduce_bytes(tensor.nbytes, len(members)), among)
        sizes = codecs.part_sizes(codec, tensor.numel(), len(members))
        return compressed_all_reduce_traffic(sizes, members, self.rank, self.node_of)

    def broadcast_traffic(self, nbytes: int, src: int, among: Among = "world",
                          chained: bool = False) -> Traffic:
        """This worker's traffic in a broadcast of ``nbytes`` from ``src`` (``chained``:
        lsgd's pipelined chain of the nodes)."""
        heads = chain_heads(src, self.groups, self.info.group_size) if chained else None
        moves = broadcast_pattern(nbytes, self.among_members(among), src,
                                  self.broadcast_algorithm, heads)
        return pattern_traffic(moves, self.rank, self.node_of)

    def now(self) -> float:
        """Seconds on this worker's clock (wall clock; the virtual clock in the simulator)."""
        return time.perf_counter()

    def local_step(self) -> None:
        """Mark the end of one local step of this worker: in the simulator its virtual
        clock advances and another worker may run; elsewhere nothing."""

    def add_count(self, key: str, amount: int = 1) -> int:
        """Add ``amount`` to the counter ``key`` shared by all workers (starting at 0);
        return its new value. Not collective: each worker adds on its own."""
        if not _validate.is_int(amount) or amount < 0:
            raise ValueError(f"add_count: amount must be a non-negative integer, got {amount!r}")
        return self._add_count(key, amount)

    def new_counter_key(self, name: str) -> str:
        """A counter key unique to this call, the same on every worker that creates its
        counters in the same order (a second strategy gets a fresh counter)."""
        self._counters += 1
        return f"lsgd/{name}/{self._counters}"

    def exchange(self, tensor: torch.Tensor, peer: int) -> torch.Tensor:
        """Send ``tensor`` to global rank ``peer``; return what ``peer`` sent (a new tensor).

        Point-to-point: ``peer`` must call ``exchange`` with this worker's rank and a
        tensor of the same shape and dtype. Workers that exchange along the matchings of a
        graph, all walking the matchings in the same order, cannot deadlock.
        """
        return self.exchange_many(tensor, [peer])[0]

    def exchange_many(self, tensor: torch.Tensor, peers: Sequence[int]) -> list[torch.Tensor]:
        """Send ``tensor`` to each of ``peers`` and receive one tensor from each (in their
        order), in one batch: ``len(peers) * B`` bytes each way; each peer lists this worker."""
        peers = list(peers)
        bad = [p for p in peers
               if not _validate.is_int(p) or not 0 <= p < self.world_size or p == self.rank]
        if bad or len(set(peers)) != len(peers):
            raise ValueError(f"exchange: peers must be distinct ranks in [0, {self.world_size}) "
                             f"other than this worker's {self.rank}, got {peers}")
        assert tensor.is_contiguous() or tensor.dim() == 0, "exchange needs a contiguous tensor"
        if not peers:
            return []
        received, seconds = self._exchange(tensor, peers)
        nbytes = float(tensor.nbytes)
        moves = [(self.rank, p, nbytes) for p in peers] + [(p, self.rank, nbytes) for p in peers]
        self.count(pattern_traffic(moves, self.rank, self.node_of), seconds)
        return received

    # -- primitives: among more than one worker (a single worker never reaches them) --
    def _collective(self, transfer: Transfer) -> tuple[Any, float]:
        """Carry out ``transfer`` now (by default with :func:`~lsgd.comm.transfers.run`)."""
        return run_transfer(self, transfer)

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, among: Among) -> float:
        """Sum or average ``tensor`` in place across ``among``; seconds."""
        raise NotImplementedError(f"{type(self).__name__} has no all-reduce")

    def _broadcast(self, tensor: torch.Tensor, src: int, among: Among) -> None:
        """Overwrite ``tensor`` with global rank ``src``'s (:func:`~lsgd.comm.transfers.run`
        times a broadcast as a whole, its coding included)."""
        raise NotImplementedError(f"{type(self).__name__} has no broadcast")

    def _chain_broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """The pipelined chain broadcast of :mod:`lsgd.comm.chain`."""
        raise NotImplementedError(f"{type(self).__name__} has no pipelined broadcast")

    def _all_gather(self, tensor: torch.Tensor, among: Among) -> tuple[torch.Tensor, float]:
        """Every member's ``tensor`` stacked, and the seconds."""
        raise NotImplementedError(f"{type(self).__name__} has no all-gather")

    def _barrier(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no barrier")

    def _start(self, transfer: Transfer) -> Callable[[], tuple[Any, float]]:
        """Start ``transfer``; return the call that waits for it: (result, seconds)."""
        raise NotImplementedError(f"{type(self).__name__} has no non-blocking collectives")

    def _all_to_all(self, parts: list[torch.Tensor], sizes: list[int],
                    among: Among) -> list[torch.Tensor]:
        """Send ``parts[j]`` to member ``j``; receive one tensor of ``sizes[j]`` bytes
        (uint8) from each member ``j`` (the compressed all-reduce's first half)."""
        raise NotImplementedError(f"{type(self).__name__} has no all-to-all")

    def _exchange(self, tensor: torch.Tensor, peers: list[int]
                  ) -> tuple[list[torch.Tensor], float]:
        """Send ``tensor`` to every peer, receive one tensor from each; report seconds."""
        raise NotImplementedError(f"{type(self).__name__} does not implement pairwise exchange")

    @abstractmethod
    def _add_count(self, key: str, amount: int) -> int: ...

    def _check(self, tensor: torch.Tensor, among: Among, op: str = "sum",
               src: int | None = None, name: str = "") -> None:
        """Raise ``ValueError`` for a bad ``among``, ``op`` (of ``name``) or ``src``."""
        if among not in ("world", "group"):
            raise ValueError(f"among must be 'world' or 'group', got {among!r}")
        assert tensor.is_contiguous() or tensor.dim() == 0, "collectives need contiguous tensors"
        if op not in ("sum", "mean"):
            raise ValueError(f"{name}: op must be 'sum' or 'mean', got {op!r}")
        if src is not None and src not in (members := self.among_members(among)):
            raise ValueError(f"{name}: src={src} is not a member of this {among} "
                             f"(ranks {members})")


def collective_data_parallel(comm: Communicator, module: nn.Module,
                             sync_buffers: bool = True) -> DataParallel:
    """Data parallelism from ``comm``'s own collectives (the simulator's): after the
    backward pass one all-reduce (mean) of the flattened gradients, and before each
    forward a broadcast of rank 0's buffers (with ``sync_buffers``)."""
    params = [p for p in module.parameters() if p.requires_grad]
    buffers = list(module.buffers()) if sync_buffers else []
    grads: list[FlatBuffer] = []

    def average() -> None:
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        tensors = [p.grad for p in params]
        if not grads:
            grads.append(FlatBuffer(tensors))
        flat = grads[0].copy_from(tensors)
        with torch.no_grad():
            for buffer in flat.buffers:
                comm.all_reduce_(buffer, op="mean")
        flat.copy_to(tensors)

    def broadcast_buffers() -> None:
        with torch.no_grad():
            for buffer in buffers:
                comm.broadcast_(buffer, src=0)

    return DataParallel(module, average=average,
                        before_forward=broadcast_buffers if buffers else None)
