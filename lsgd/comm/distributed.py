"""The torch.distributed communicator (gloo on CPU, NCCL on GPU).

Works under ``torchrun`` (``env://``: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and with a process group the caller initialized.
Groups are nodes: ``groups = WORLD_SIZE / LOCAL_WORLD_SIZE`` unless given
(or set by ``LSGD_GROUPS``); a group is ``group_size`` consecutive ranks,
which is how torchrun numbers the workers of a node. One subgroup per group
is created with :func:`torch.distributed.new_subgroups`, collectively.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist

from lsgd.comm.base import Communicator, ReduceOp, Scope, WorkerInfo, check_layout

DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)


def default_backend() -> str:
    """``"cuda:nccl,cpu:gloo"`` where CUDA is present (both kinds of tensor work), else gloo."""
    return "cuda:nccl,cpu:gloo" if torch.cuda.is_available() else "gloo"


def groups_from_env(world_size: int) -> int:
    """``LSGD_GROUPS`` if set, else the number of nodes ``WORLD_SIZE / LOCAL_WORLD_SIZE``."""
    if "LSGD_GROUPS" in os.environ:
        return int(os.environ["LSGD_GROUPS"])
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return max(1, world_size // max(1, local))


def init_from_env(timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> None:
    """Initialize the default process group from torchrun's environment, once.

    On a machine with CUDA the worker's device is set to ``LOCAL_RANK``.
    """
    if dist.is_initialized():
        return
    if torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    dist.init_process_group(backend=default_backend(), init_method="env://", timeout=timeout)


class DistCommunicator(Communicator):
    """Collectives over a torch.distributed process group.

    ``process_group`` defaults to the world group; ``groups`` defaults to
    :func:`groups_from_env`. Constructing one is collective (the subgroups are
    created on every rank).
    """

    def __init__(
        self,
        process_group: dist.ProcessGroup | None = None,
        groups: int | None = None,
        timeout: datetime.timedelta | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: run under torchrun, call "
                "torch.distributed.init_process_group(...) first, or use lsgd.simulate"
            )
        self._pg = process_group or dist.group.WORLD
        world_size = dist.get_world_size(self._pg)
        groups = groups_from_env(world_size) if groups is None else groups
        check_layout(world_size, groups)
        super().__init__(WorkerInfo(dist.get_rank(self._pg), world_size, groups))
        self._global = [dist.get_global_rank(self._pg, r) for r in range(world_size)]
        self._subgroup: dist.ProcessGroup | None = None
        if 1 < groups < world_size:
            self._subgroup, _ = dist.new_subgroups(
                group_size=world_size // groups, group=self._pg, timeout=timeout
            )
        elif groups == world_size:
            self._subgroup = None  # groups of one: group collectives are no-ops
        else:
            self._subgroup = self._pg

    @property
    def process_group(self) -> dist.ProcessGroup:
        return self._pg

    def _group(self, scope: Scope) -> dist.ProcessGroup:
        group = self._pg if scope == "world" else self._subgroup
        assert group is not None, "size-1 scopes never reach the primitives"
        return group

    def _all_reduce(self, tensor: torch.Tensor, op: ReduceOp, scope: Scope) -> float:
        start = time.perf_counter()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._group(scope))
        if op == "mean":  # gloo has no AVG; divide locally
            tensor.div_(self.scope_size(scope))
        return time.perf_counter() - start

    def _broadcast(self, tensor: torch.Tensor, src: int, scope: Scope) -> float:
        start = time.perf_counter()
        dist.broadcast(tensor, src=self._global[src], group=self._group(scope))
        return time.perf_counter() - start

    def _all_gather(self, tensor: torch.Tensor, scope: Scope) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        n = self.scope_size(scope)
        parts = [torch.empty_like(tensor) for _ in range(n)]
        dist.all_gather(parts, tensor, group=self._group(scope))
        return torch.stack(parts), time.perf_counter() - start

    def _barrier(self) -> None:
        dist.barrier(group=self._pg)

    def _exchange(
        self, tensor: torch.Tensor, peers: list[int]
    ) -> tuple[list[torch.Tensor], float]:
        # All sends and receives posted at once (batch_isend_irecv), so the
        # order of the peers cannot deadlock; P2POp takes global ranks.
        start = time.perf_counter()
        received = [torch.empty_like(tensor) for _ in peers]
        ops = []
        for peer, out in zip(peers, received):
            ops.append(dist.P2POp(dist.isend, tensor, self._global[peer], self._pg))
            ops.append(dist.P2POp(dist.irecv, out, self._global[peer], self._pg))
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return received, time.perf_counter() - start
