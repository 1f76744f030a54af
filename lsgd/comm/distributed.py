"""The torch.distributed communicator (gloo on CPU, NCCL on GPU).

Works under ``torchrun`` (``env://``) and with a process group the caller initialized. Groups are
nodes (``WORLD_SIZE / LOCAL_WORLD_SIZE`` unless given or set by ``LSGD_GROUPS``), one subgroup per
node. The shared step counter of asynchronous methods is one ``add`` on the c10d store, under a
prefix holding torchrun's restart count. Every collective, exchange and store call is bounded by the
process group's timeout; a failure raises :class:`~lsgd.comm.failures.CommunicationError` naming
this rank, the operation and how long it waited.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import time
from concurrent import futures
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lsgd.comm.communicator import Among, Communicator, ReduceOp
from lsgd.comm.info import WorkerInfo
from lsgd.comm.chain import chain_heads, chunk_count
from lsgd.comm.data_parallel import DataParallel, GradientCompression
from lsgd.comm.failures import communication_errors, seconds_text
from lsgd.comm.lanes import BackgroundLane, current_lane
from lsgd.comm.transfers import LANES, Transfer

DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
_ZERO = datetime.timedelta(0)


class _StoreCalls(BackgroundLane):
    """Runs store calls on a daemon thread, so that the caller can stop waiting:
    ``TCPStore.add`` has no timeout of its own and waits forever when the process serving
    the store stops. A call that gave up leaves the thread ``stuck``; use a new one."""

    stuck = False

    def __init__(self) -> None:
        super().__init__("store")

    def __call__(self, call: Callable[[], Any], timeout: datetime.timedelta) -> Any:
        """``call()``, or a ``RuntimeError`` once it took longer than ``timeout``."""
        future = self.submit(call)
        if not futures.wait([future], timeout.total_seconds()).done:
            self.stuck = True
            raise RuntimeError(
                f"the c10d store did not answer within {seconds_text(timeout)}") from None
        return future.result()


def _group_timeout(group: dist.ProcessGroup) -> datetime.timedelta | None:
    """The timeout ``group`` was created with, where torch lets us read it."""
    try:
        timeout = group._get_backend(torch.device("cpu")).options._timeout
    except Exception:  # a private API, absent or different in other torch versions
        return None
    return timeout if isinstance(timeout, datetime.timedelta) and timeout > _ZERO else None


def default_backend() -> str:
    """``LSGD_BACKEND`` if set (``gloo``: CUDA tensors too, as two processes sharing one
    GPU need, since NCCL refuses two ranks on one device); else ``"cuda:nccl,cpu:gloo"``
    where CUDA is present (both kinds of tensor work), else gloo."""
    default = "cuda:nccl,cpu:gloo" if torch.cuda.is_available() else "gloo"
    return os.environ.get("LSGD_BACKEND") or default


def groups_from_env(world_size: int) -> int:
    """``LSGD_GROUPS`` if set, else the number of nodes ``WORLD_SIZE / LOCAL_WORLD_SIZE``."""
    if "LSGD_GROUPS" in os.environ:
        return int(os.environ["LSGD_GROUPS"])
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return max(1, world_size // max(1, local))


def init_from_env(timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> None:
    """Initialize the default process group from torchrun's environment, once (with
    CUDA, on the device ``LOCAL_RANK``).

    The store is torch's ``env://`` rendezvous. torchrun's agent store outlives an elastic restart
    and still holds the failed attempt's keys (addresses of processes now gone), so it is used under
    a prefix holding ``TORCHELASTIC_RESTART_COUNT``. Agents on different nodes may count
    differently, so restarts across nodes need ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in every
    agent (rank 0 then serves a fresh store per rendezvous round); the workers then agree on the
    count (:func:`agree_on_attempt`).
    """
    if dist.is_initialized():
        return
    if torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    store, rank, world_size = next(dist.rendezvous("env://", timeout=timeout))
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"attempt-{attempt}", store)
    dist.init_process_group(backend=default_backend(), timeout=timeout, rank=rank,
                            world_size=world_size, store=store)
    agree_on_attempt()


def agree_on_attempt() -> int:
    """Give every worker the same ``TORCHELASTIC_RESTART_COUNT``: the largest of the
    nodes' agents' (one all-reduce of one integer, where there are several agents).

    torch's elastic agent counts a restart only when its own workers failed, so after
    one failure the count is 1 on some nodes and 0 on others. Whatever tells a restart
    from a first start by the count (``lsgd train`` continues from its checkpoint; a
    ``--fault`` fires on the first attempt only) would then act differently on different
    nodes, and their collectives would no longer match.
    """
    count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) <= 1 or not dist.is_initialized():
        return count  # one agent: every worker has its count
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))
    agreed = torch.tensor([count], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    count = int(agreed.item())
    os.environ["TORCHELASTIC_RESTART_COUNT"] = str(count)
    return count


class DistCommunicator(Communicator):
    """Collectives over ``process_group`` (default: the world group) in ``groups`` groups
    (default: :func:`groups_from_env`). Constructing one is collective (subgroups)."""

    _label = ""  # names this communicator's collectives apart from another's

    def __init__(self, process_group: dist.ProcessGroup | None = None,
                 groups: int | None = None, timeout: datetime.timedelta | None = None,
                 label: str = "", lane_groups: dict[str, dist.ProcessGroup] | None = None
                 ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: run under torchrun, call "
                               "torch.distributed.init_process_group(...) first, or use "
                               "lsgd.simulate")
        self._pg = process_group or dist.group.WORLD
        # The subgroups get the same timeout (torch's own default is 30 minutes).
        self._timeout = timeout or _group_timeout(self._pg) or DEFAULT_TIMEOUT
        world_size = dist.get_world_size(self._pg)
        groups = groups_from_env(world_size) if groups is None else groups
        super().__init__(WorkerInfo(dist.get_rank(self._pg), world_size, groups))
        self._global = [dist.get_global_rank(self._pg, r) for r in range(world_size)]
        self._store: dist.Store | None = None
        self._store_wait = self._timeout  # the store's own timeout, once the store is opened
        self._store_calls: _StoreCalls | None = None
        self._calls: dict[str, int] = {}  # collectives per scope, for the roll call
        self._subgroup = self._node_subgroup(self._pg)
        # What bounds each kind of operation, resolved once (reported in errors).
        world_wait = _group_timeout(self._pg) or self._timeout
        self._waits = {"world": world_wait,
                       "group": world_wait if self._subgroup is self._pg else self._timeout}
        self._lanes: dict[str, BackgroundLane] = {}  # started transfers, by lane, once any
        self._label = label
        # A communicator of some processes only has its lanes' groups made for it, by all
        # processes together (a group of the whole world is made on first use).
        self._lane_groups = lane_groups

    def _node_subgroup(self, world: dist.ProcessGroup) -> dist.ProcessGroup | None:
        """The process group of this worker's node within ``world`` (collective): a subgroup
        per node, ``world`` itself for one node, None for nodes of one worker (no-ops)."""
        world_size, groups = self.info.world_size, self.info.groups
        if 1 < groups < world_size:
            subgroup, _ = dist.new_subgroups(group_size=world_size // groups, group=world,
                                             timeout=self._timeout)
            return subgroup
        return None if groups == world_size else world

    def _replica_parts(self) -> tuple[DistCommunicator, DistCommunicator]:
        """(the node's communicator, the peers' communicator) of this worker's replica
        (:mod:`lsgd.comm.replica`): the node's own subgroup, and the group of the workers
        of this local rank on every node, with its lanes' groups (collective)."""
        info = self.info
        lists = [[self._global[node * info.group_size + r] for node in range(info.groups)]
                 for r in range(info.group_size)]

        def peers_group() -> dist.ProcessGroup:
            return dist.new_subgroups_by_enumeration(lists, timeout=self._timeout)[0]

        node = DistCommunicator(self._subgroup, groups=1, timeout=self._timeout, label="node")
        peers = DistCommunicator(peers_group(), groups=info.groups, timeout=self._timeout,
                                 label="peers",
                                 lane_groups={lane: peers_group() for lane in LANES})
        return node, peers

    @property
    def broadcast_algorithm(self) -> str:  # type: ignore[override]
        """NCCL broadcasts along a ring (a chain); gloo along a binomial tree."""
        return "chain" if dist.get_backend(self._pg) == "nccl" else "tree"

    def data_parallel(self, module: nn.Module, sync_buffers: bool = True,
                      options: dict[str, Any] | None = None,
                      compression: GradientCompression | None = None) -> DataParallel:
        """DistributedDataParallel on this process group, its traffic counted; with
        ``compression``, one of torch's communication hooks (:mod:`lsgd.comm.ddp`)."""
        if self.world_size == 1:
            return DataParallel(module)
        from lsgd.comm.ddp import ddp_data_parallel

        return ddp_data_parallel(self, self._pg, module, sync_buffers, options,
                                 compression or GradientCompression())

    @property
    def store(self) -> dist.Store:
        """The c10d key-value store of this job, under a prefix of lsgd's own."""
        if self._store is None:
            from torch.distributed import distributed_c10d as c10d

            restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            self._store = dist.PrefixStore(f"lsgd-r{restart}/", c10d._get_default_store())
            with contextlib.suppress(Exception):
                timeout = self._store.timeout
                if isinstance(timeout, datetime.timedelta) and timeout > _ZERO:
                    self._store_wait = timeout
        return self._store

    def _add_count(self, key: str, amount: int) -> int:
        store = self.store
        if self._store_calls is None or self._store_calls.stuck:
            self._store_calls = _StoreCalls()
        with communication_errors(self.rank, f"update of the shared step counter {key!r} in "
                                  "the c10d store", self._store_wait):
            return int(self._store_calls(lambda: store.add(key, amount), self._store_wait))

    def _failures(self, operation: str,
                  among: Among | None = None) -> contextlib.AbstractContextManager[None]:
        """:func:`communication_errors` for ``operation`` (``among`` says among whom;
        None: point-to-point in the world group), with the timeout that bounds it."""
        absent: Callable[[], list[int] | None] | None = None
        if among is not None:
            lane = current_lane()
            where = "world" if among == "world" else f"group{self.info.group}"
            scope = "-".join(p for p in (lane.name if lane else "", self._label, where) if p)
            self._calls[scope] = number = self._calls.get(scope, 0) + 1
            members = self.among_members(among)
            absent = functools.partial(self._roll_call, f"{scope}/{number}", members)
        if among == "world":
            operation += " among all workers"
        elif among == "group":
            operation += f" in group {self.info.group} (ranks {members[0]}-{members[-1]})"
        return communication_errors(self.rank, operation, self._waits[among or "world"], absent)

    def _roll_call(self, call: str, members: list[int]) -> list[int] | None:
        """After a collective timed out: the members that never reached it (None when the
        store is gone too). Every member that gave up on collective number ``call`` of its
        scope marks itself present in the c10d store and waits a little for the others."""
        wait = datetime.timedelta(seconds=max(2.0, min(10.0, 0.05 * self._timeout.total_seconds())))
        prefix = f"roll-call/{call}/"
        try:
            store = self.store
            calls = _StoreCalls()  # never stuck behind an earlier call
            calls(lambda: store.set(prefix + str(self.rank), "here"), wait)
            deadline = time.monotonic() + wait.total_seconds()
            while True:
                present = {m for m in members
                           if calls(lambda m=m: store.check([prefix + str(m)]), wait)}
                if len(present) == len(members) or time.monotonic() > deadline:
                    return [m for m in members if m not in present]
                time.sleep(0.1)
        except Exception:  # the store went with the worker: nobody can be named
            return None

    def _groups(self) -> tuple[dist.ProcessGroup, dist.ProcessGroup | None]:
        """(world, node subgroup) of the calling thread: its lane's on a lane, else our own."""
        lane = current_lane()
        return lane.groups if lane is not None else (self._pg, self._subgroup)

    def _group(self, among: Among) -> dist.ProcessGroup:
        world, node = self._groups()
        group = world if among == "world" else node
        assert group is not None, "collectives among one worker never reach the primitives"
        return group

    def _start(self, transfer: Transfer) -> Callable[[], tuple[Any, float]]:
        lane = self._lanes.get(transfer.lane)
        if lane is None:  # collective: every worker starts the lane's first transfer together
            if self._lane_groups is not None:
                world = self._lane_groups[transfer.lane]
            else:
                assert self._pg is dist.group.WORLD, "a subgroup's lanes are made with it"
                world = dist.new_group(ranks=self._global, timeout=self._timeout)
            lane = BackgroundLane(transfer.lane, (world, self._node_subgroup(world)),
                                  transfer.tensor.device)
            self._lanes[transfer.lane] = lane
        return lane.submit(functools.partial(self._collective, transfer)).result

    def _all_to_all(self, parts: list[torch.Tensor], sizes: list[int],
                    among: Among) -> list[torch.Tensor]:
        received = torch.empty(sum(sizes), dtype=torch.uint8, device=parts[0].device)
        with self._failures("all_to_all", among):
            dist.all_to_all_single(received, torch.cat(parts), sizes,
                                   [part.numel() for part in parts], group=self._group(among))
        return list(received.split(sizes))

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, among: Among) -> float:
        start = time.perf_counter()
        with self._failures("all_reduce", among):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._group(among))
        if op == "mean":  # gloo has no AVG; divide locally
            tensor.div_(self.among_size(among))
        return time.perf_counter() - start

    def _broadcast(self, tensor: torch.Tensor, src: int, among: Among) -> None:
        with self._failures(f"broadcast from rank {src}", among):
            dist.broadcast(tensor, src=self._global[src], group=self._group(among))

    def _chain_broadcast(self, tensor: torch.Tensor, src: int) -> None:
        # Along the heads, each chunk passed on (isend) as soon as it has arrived, while
        # the next ones arrive; then inside the node.
        world, node = self._groups()
        info = self.info
        heads = chain_heads(src, info.groups, info.group_size)
        with self._failures(f"pipelined broadcast from rank {src}", "world"):
            if self.rank in heads:
                chain = [self._global[h] for h in heads]
                position = heads.index(self.rank)
                pieces = tensor.view(-1).chunk(chunk_count(tensor.nbytes))
                # Every receive is posted at once, so that chunks stream in while
                # earlier ones are passed on (gloo keeps the order between a pair).
                receives = ([dist.irecv(piece, src=chain[position - 1], group=world)
                             for piece in pieces] if position > 0 else [])
                sends = []
                for k, piece in enumerate(pieces):
                    if receives:
                        receives[k].wait()
                    if position + 1 < len(chain):
                        sends.append(dist.isend(piece, dst=chain[position + 1], group=world))
                for work in sends:
                    work.wait()
            if node is not None and info.group_size > 1:
                head = next(h for h in heads if h // info.group_size == info.group)
                dist.broadcast(tensor, src=self._global[head], group=node)

    def _all_gather(self, tensor: torch.Tensor, among: Among) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        n = self.among_size(among)
        parts = [torch.empty_like(tensor) for _ in range(n)]
        with self._failures("all_gather", among):
            dist.all_gather(parts, tensor, group=self._group(among))
        return torch.stack(parts), time.perf_counter() - start

    def _barrier(self) -> None:
        with self._failures("barrier", "world"):
            dist.barrier(group=self._pg)

    def _exchange(self, tensor: torch.Tensor, peers: list[int]
                  ) -> tuple[list[torch.Tensor], float]:
        # All sends and receives posted at once (batch_isend_irecv), so the
        # order of the peers cannot deadlock; P2POp takes global ranks.
        start = time.perf_counter()
        received = [torch.empty_like(tensor) for _ in peers]
        ops = []
        for peer, out in zip(peers, received):
            ops.append(dist.P2POp(dist.isend, tensor, self._global[peer], self._pg))
            ops.append(dist.P2POp(dist.irecv, out, self._global[peer], self._pg))
        names = ", ".join(str(p) for p in peers)
        with self._failures(f"pairwise exchange with rank{'s' if len(peers) > 1 else ''} {names}"):
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return received, time.perf_counter() - start
