"""Elastic membership on torchft: collectives among the nodes of the current quorum.

:class:`ElasticCommunicator` lets a periodic method go on when workers die and take
them back when they return (``pip install 'lsgd[torchft]'``): each *node* is a torchft
replica group (one process, or ``per_node`` processes started by one elastic agent)
with a ``Manager`` in every process; a lighthouse forms a *quorum* of the live nodes
at each round. Node ``n`` keeps its number across restarts; its workers are the
global ranks ``n * per_node + k``. A round among all workers is a quorum point::

    comm.begin_round()     # the quorum: which nodes take part (members()); a node
                           # behind the others is healed here from a live one
    ...collectives...      # among the members' workers only (QuorumCollectives)
    comm.end_round()       # torchft's commit: False if anything failed

A collective across nodes that fails raises :class:`RoundFailed`: the round is not
committed. Healing (torchft's ``PGTransport``) sends what :meth:`add_state` registered,
counted under ``"join"``. Not available: pairwise exchange, the shared counter of
asynchronous methods, and NCCL (docs/reliability.md, "Survivors keep training").
"""

from __future__ import annotations

import datetime
import logging
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from lsgd import _validate
from lsgd.comm.communicator import Communicator
from lsgd.comm.wire import Traffic
from lsgd.comm.info import WorkerInfo
from lsgd.comm.quorum import (EXTRA, FailureSignal, LighthouseLost, RoundFailed, answers,
                              cloned, options, payload_bytes, require_torchft, signalling_gloo,
                              start_gate)
from lsgd.comm.quorum_collectives import ElasticPeers, QuorumCollectives

__all__ = ["EXTRA", "ElasticCommunicator", "LighthouseLost", "RoundFailed"]


class ElasticCommunicator(QuorumCollectives):
    """Collectives among the members of each round's torchft quorum.

    Args:
        slot: this worker's node in ``[0, slots)`` (kept across restarts).
        slots: the number of nodes the job is made for.
        lighthouse: the lighthouse's address, ``http://host:port``.
        address: the address this node's servers listen on and advertise.
        per_node: workers per node; above 1 they must share torch.distributed's default
            process group and its store (one agent per node started them); nodes are
            then the groups (multi-leader LSGD's local level).
        local_rank: this worker's rank inside its node.
        min_members: rounds with fewer member nodes are not committed.
        timeout: seconds a collective or a heal may take before the round fails.
        quorum_timeout: seconds to wait for a quorum; when none came and the
            lighthouse does not answer, :class:`LighthouseLost` is raised.
        quorum_log: a CSV file to which every quorum adds a line (time, worker, attempt,
            committed rounds, member nodes, whether it was healed, a failure's error).
    """

    def __init__(self, slot: int, slots: int, *, lighthouse: str, address: str = "127.0.0.1",
                 per_node: int = 1, local_rank: int = 0, min_members: int = 1,
                 timeout: float = 30.0, quorum_timeout: float = 300.0,
                 quorum_log: str | os.PathLike[str] | None = None) -> None:
        name = "ElasticCommunicator"
        if not isinstance(slot, int) or not 0 <= slot < slots:
            raise ValueError(f"{name}: slot must be in [0, {slots}), got {slot!r}")
        _validate.positive_int(name, "per_node", per_node)
        if not isinstance(local_rank, int) or not 0 <= local_rank < per_node:
            raise ValueError(f"{name}: local_rank must be in [0, {per_node}), got {local_rank!r}")
        if not isinstance(min_members, int) or not 1 <= min_members <= slots:
            raise ValueError(f"{name}: min_members must be in [1, {slots}], got {min_members!r}")
        require_torchft()
        super().__init__(WorkerInfo(rank=slot * per_node + local_rank, world_size=slots * per_node,
                                    groups=slots if per_node > 1 else 1))
        os.environ.setdefault("RUST_LOG", "error")
        # torchft warns at every new quorum that it cannot reset NCCL's flight recorder,
        # and torch that a received checkpoint's buffer is read-only: neither matters here.
        logging.getLogger("torchft.manager").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        from torchft.checkpointing.pg_transport import PGTransport
        from torchft.manager import Manager

        self.node, self.per_node, self.local_rank = slot, per_node, local_rank
        if per_node > 1 and not (dist.is_initialized() and dist.get_world_size() == per_node):
            raise RuntimeError(f"{name}: per_node={per_node} needs the node's {per_node} workers "
                               "in torch.distributed's default process group (start them with "
                               "one agent per node: lsgd.launch_elastic(..., per_node=...))")
        patience = datetime.timedelta(seconds=timeout)
        # torchft's store for the node: a fresh one every attempt, on the node's first worker
        # (a store that outlived a restart would hand the others the dead attempt's manager).
        if local_rank == 0:
            self._store = dist.TCPStore(host_name=address, port=0, is_master=True,
                                        wait_for_workers=False)
            store_port = self._store.port
        if per_node > 1:  # its port reaches the node's others through the agent's store
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            shared = dist.PrefixStore(f"lsgd-elastic/{attempt}", dist.TCPStore(
                os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                timeout=patience))
            if local_rank == 0:
                shared.set("torchft-store", str(store_port))
            else:
                store_port = int(shared.get("torchft-store"))
        self._pg = signalling_gloo(patience)
        self._signal = FailureSignal(self._pg)
        self._parts: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}
        self._nodes: list[int] | None = None
        self._lighthouse = lighthouse
        self.healed = False  # whether the last begin_round healed this worker
        self.heals, self.heal_seconds, self.failed_rounds = 0, 0.0, 0
        self._quorum_log = quorum_log
        #: seconds this worker waited at the job's start gate (its first attempt's first
        #: round, in a job of :func:`lsgd.launch_elastic`); None: no wait, or it timed out
        self.start_wait: float | None = None
        self._gated = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
        try:
            self.manager = Manager(
                pg=self._pg, min_replica_size=min_members, use_async_quorum=False,
                load_state_dict=self._on_heal, state_dict=lambda: cloned(
                    {name: save() for name, (save, _) in self._parts.items()}),
                replica_id=f"lsgd{slot}", store_addr=address, store_port=store_port,
                rank=local_rank, world_size=per_node, lighthouse_addr=lighthouse, hostname=address,
                # heals over the process group of the quorum: no HTTP server of the whole state
                checkpoint_transport=PGTransport(
                    self._pg, timeout=patience, device=torch.device("cpu")),
                timeout=patience, quorum_timeout=datetime.timedelta(seconds=quorum_timeout),
                connect_timeout=datetime.timedelta(seconds=60), init_sync=False)
        except RuntimeError as exc:  # torchft's manager could not reach the lighthouse
            if answers(lighthouse):
                raise
            raise self._lost(exc) from None

    def add_state(self, name: str, save: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """A part of what an up-to-date worker sends to a healing one: ``save()`` there,
        ``load(value)`` here (the parts are taken in the order they were added)."""
        self._parts[name] = (save, load)

    def _on_heal(self, state: dict[str, Any]) -> None:
        healed = payload_bytes(state)
        self.count(Traffic(0, healed, 0, healed), 0.0, "join")
        for name, (_, load) in self._parts.items():
            load(state[name])
        self.healed = True
        self.heals += 1

    def _lost(self, error: object) -> LighthouseLost:
        return LighthouseLost(
            f"worker {self.rank}: the lighthouse at {self._lighthouse} does not answer (stopped, "
            f"or its node is down): {error}. Every round forms there, so elastic training "
            "cannot go on without it: start the run again, lighthouse included")

    def begin_round(self) -> None:
        """Join this round's quorum (healing this node first if it is behind).

        Raises :class:`RoundFailed` when the quorum or the heal failed (call
        :meth:`end_round` in any case), :class:`LighthouseLost` when no quorum
        came and the lighthouse does not answer."""
        self.healed = False
        self._nodes = []
        if not self._gated:  # the job starts together (a restarted worker does not wait)
            self._gated = True
            self.start_wait = start_gate(self.rank, self.world_size)
        start = time.perf_counter()
        try:
            self.manager.start_quorum()
            error = self.manager.errored()
        except Exception as exc:  # torchft raises when no quorum came back in time
            error = exc
        error = self._node_agrees(error)
        if error is not None:
            self._log_quorum(f"failed: {error}")
            if not answers(self._lighthouse):
                raise self._lost(error) from None
            raise RoundFailed(f"worker {self.rank}: the quorum failed: {error}")
        ranks = getattr(self._pg, "_global_ranks", None) or []  # node * per_node + k
        nodes = [r // self.per_node for r in ranks]
        if self.node not in nodes:  # the member nodes in participating order: an all-gather
            n = self.manager.num_participants()
            out = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
            self._nodes = list(range(n))  # a placeholder while the gather runs
            self._across(lambda: self._pg.allgather([out], [torch.tensor([self.node])],
                                                    options("gather")))
            nodes = [int(t) for t in out]
        if nodes.index(self.node) != self.manager.participating_rank():
            raise RoundFailed(f"worker {self.rank}: quorum order {nodes} does not match "
                              f"its participating rank {self.manager.participating_rank()}")
        self._nodes = nodes
        self._signal.arm()
        if self.healed:  # the quorum's time, the heal's transfer included
            self.heal_seconds += time.perf_counter() - start
        self._log_quorum("")

    def _log_quorum(self, error: str) -> None:
        if self._quorum_log is not None:
            path = Path(self._quorum_log)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("time,rank,attempt,committed_rounds,member_nodes,healed,error\n")
            nodes = " ".join(map(str, self._nodes or []))
            step = self.manager.current_step()
            error = " ".join(error.split()).replace(",", ";")[:300]
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            with open(path, "a") as f:
                f.write(f"{time.time():.3f},{self.rank},{attempt},{step},{nodes},"
                        f"{int(self.healed)},{error}\n")

    def end_round(self) -> bool:
        """Leave the round: whether it was committed (no member saw a failure)."""
        self._nodes = None
        try:
            committed = bool(self.manager.should_commit())
        except Exception:  # the node's own workers did not agree in time: not committed
            committed = False
        if not committed:
            self.failed_rounds += 1
        return committed

    def member_nodes(self) -> list[int]:
        """The nodes taking part in the current round, in order."""
        if self._nodes is None:
            raise RuntimeError(f"worker {self.rank}: an elastic communicator exchanges among all "
                               "workers only inside a round (between begin_round() and "
                               "end_round())")
        return list(self._nodes)

    def members(self) -> list[int]:
        """The ranks of the workers taking part in the current round, in order."""
        return self.among_members("world")

    def committed_rounds(self) -> int:
        """Rounds this worker committed (a healed worker takes its source's count)."""
        return int(self.manager.current_step())

    def _replica_parts(self) -> tuple[Communicator, Communicator]:
        """(the node's process group, the peers' view: :class:`ElasticPeers`)."""
        from lsgd.comm.distributed import DistCommunicator

        return DistCommunicator(groups=1, label="node"), ElasticPeers(self)

    def close(self) -> None:
        """Stop this worker's torchft servers (its checkpoint server and manager)."""
        if self._lane is not None:
            self._lane.close()
        self.manager.shutdown(wait=False)

    def _across(self, start: Callable[[], Any] | None, node_group: Any = None) -> None:
        """Run one collective across nodes (torchft's process group; ``None``: this worker
        takes no part in it). Every worker of the node then learns whether any of them saw
        it fail (a node-local all-reduce of a flag over ``node_group``, by default the
        node's group), and all raise :class:`RoundFailed` together: they stay in step.
        A failure is told to the other members at once (:class:`FailureSignal`)."""
        error: Any = None
        if start is not None:
            try:
                error = self._signal.wait(start()) or self._pg.errored()
            except Exception as exc:  # a dead or silent node: gloo's error or timeout
                error = exc
        error = self._node_agrees(error, node_group)
        if error is not None:
            self._signal.raise_()
            self.manager.report_error(error if isinstance(error, Exception)
                                      else RuntimeError(str(error)))
            raise RoundFailed(f"worker {self.rank}: a collective failed: {error}")

    def _node_agrees(self, error: Any, group: Any = None) -> Any:
        """``error``, or one if another worker of this node saw one (a node-local all-reduce)."""
        if self.per_node == 1:
            return error
        seen = torch.tensor([0.0 if error is None else 1.0])
        dist.all_reduce(seen, group=group)
        if error is None and float(seen) > 0:
            return RuntimeError("another worker of this node saw it fail")
        return error
