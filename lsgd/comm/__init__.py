"""Communication between workers: the interface and how to find one."""

from __future__ import annotations

import os
import sys

from lsgd.comm.communicator import Communicator
from lsgd.comm.local import LocalCommunicator
from lsgd.comm.info import REPLICAS, CommStats, WorkerInfo, check_replica
from lsgd.comm.replica import ReplicaCommunicator, replicas_of
from lsgd.comm.failures import CommunicationError
from lsgd.comm.simulator import SimulationError, WorkerAborted, current_simulated, simulate

__all__ = ["CommStats", "CommunicationError", "Communicator", "LocalCommunicator", "REPLICAS",
           "ReplicaCommunicator", "replicas_of", "SimulationError", "WorkerAborted", "WorkerInfo",
           "get_communicator", "shutdown", "simulate", "worker_info"]

_dist_cache: dict[int | None, Communicator] = {}


def get_communicator(groups: int | None = None, replica: str | None = None) -> Communicator:
    """This worker's communicator, found from the environment: inside :func:`simulate`
    the simulated worker's; under ``torchrun`` (or once ``torch.distributed`` is
    initialized) a :class:`~lsgd.comm.distributed.DistCommunicator` on the world group in
    ``groups`` groups (default: the nodes), created once; otherwise a single worker.

    ``replica``: what a strategy sees as one worker, ``"process"`` or ``"node"`` (every process of a
    group steps as one replica, :mod:`lsgd.comm.replica`); by default the simulation's, else
    ``LSGD_REPLICA``, else ``"process"``. Its ``.processes`` is every process's.
    """
    simulated = current_simulated()
    if simulated is not None:
        if groups is not None and groups != simulated.groups:
            raise ValueError(f"groups={groups} conflicts with the simulation's groups="
                             f"{simulated.groups}; set groups in lsgd.simulate(...)")
        return replicas_of(simulated, replica or simulated.replica)
    replica = check_replica(replica or os.environ.get("LSGD_REPLICA", "process"))
    import torch.distributed as dist

    from lsgd.comm import distributed

    if dist.is_available() and (dist.is_initialized() or "TORCHELASTIC_RUN_ID" in os.environ
                                or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)):
        if groups not in _dist_cache:
            distributed.init_from_env()
            _dist_cache[groups] = distributed.DistCommunicator(groups=groups)
        return replicas_of(_dist_cache[groups], replica)
    if groups not in (None, 1):
        raise ValueError(f"groups={groups} needs several workers, but this is a single worker")
    return LocalCommunicator()


def shutdown(wait_s: float = 10.0) -> None:
    """Destroy torch.distributed's process groups and forget the cached communicator;
    call once a worker is done.

    A collective's callback runs on one of gloo's threads and is let go there; were it
    the last holder of a group, the group would be freed on its own thread, which joins
    itself and aborts the process (``Resource deadlock avoided``). So this holds every
    group until nothing else does (at most ``wait_s`` seconds) and lets go of it here,
    on the calling thread; a group still held after that is kept for the process's life.
    """
    import gc
    import time

    import torch.distributed as dist

    _dist_cache.clear()
    gc.collect()
    if not (dist.is_available() and dist.is_initialized()):
        return
    from torch.distributed import distributed_c10d

    held = list(distributed_c10d._world.pg_map)
    dist.destroy_process_group()
    gc.collect()
    deadline = time.monotonic() + wait_s
    while any(sys.getrefcount(group) > 3 for group in held):  # held, the loop, the call
        if time.monotonic() > deadline:
            _kept.extend(held)
            return
        time.sleep(0.005)
    held.clear()  # the last reference: each group is freed here, on this thread


#: Process groups that something other than :func:`shutdown` still held when it gave up.
_kept: list[object] = []


def worker_info() -> WorkerInfo:
    """The calling process's rank (it shards the data), world size and groups, replica or not."""
    return get_communicator().processes.info
