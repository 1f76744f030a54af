"""``lsgd train --elastic``: a run that goes on when workers fail (torchft).

Each node (``--groups`` of them, or one per worker) is a torchft replica group started by an
elastic agent of its own (:func:`lsgd.launcher.elastic_jobs.launch_elastic`), its workers on
an :class:`~lsgd.comm.elastic_collectives.ElasticCommunicator`; the strategy's rounds are the
quorum points. Right after the method's rule (``Strategy.on_round``) a round's members agree
on the clock (their largest training seconds, ``"control"`` traffic), the evaluations and who
writes (the lowest member). A joining worker receives the run's own state with the
strategy's; no checkpoint is written or read (docs/reliability.md, "Survivors keep training").
Faults: ``--fault``, and for benchmarks ``extra_faults`` (:meth:`ElasticRun.before_step`).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import lsgd
from lsgd.comm.elastic_collectives import ElasticCommunicator
from lsgd.comm.replica import replicas_of
from lsgd.launcher.elastic_jobs import launch_elastic
from lsgd.train import faults
from lsgd.train.build import knobs_from_config
from lsgd.train.config import TrainConfig
from lsgd.train.loop import WorkerLoop


class ElasticRun(WorkerLoop):
    """One worker of an elastic run (see the module docstring)."""

    reseeds = True  # a restarted worker does not replay its first attempt's streams

    def __init__(self, slot: int, slots: int, local_rank: int, lighthouse: str,
                 cfg: TrainConfig, address: str, t0: float,
                 extra_faults: list[tuple[Any, ...]]) -> None:
        self.t0, self.started = t0, time.time() - t0
        comm = ElasticCommunicator(slot, slots, lighthouse=lighthouse, address=address,
                                   per_node=cfg.workers // slots, local_rank=local_rank,
                                   min_members=cfg.quorum.min_workers, timeout=cfg.timeout,
                                   quorum_timeout=quorum_timeout(cfg),
                                   quorum_log=cfg.out_dir / "logs" / "quorums-{}.csv".format(
                                       slot * (cfg.workers // slots) + local_rank))
        super().__init__(cfg, replicas_of(comm, cfg.replica), torch.device("cpu"), t0)
        self.comm: ElasticCommunicator = comm
        self.groups = cfg.groups
        self.strategy.on_round = self._after_round
        comm.add_state("run", self._send, self._take)
        self.pace.uses_clock = False  # the members agree on the clock in each round, below
        self.extra_faults = list(extra_faults) if self.attempt == 0 else []
        self.trace: list[tuple[float, int]] = []
        self.join_gap: float | None = None
        self.healed_seconds: float | None = None  # the run's clock, received at a heal
        self.writer = False  # the lowest member of the last round writes the files
        self.after_end = False  # restarted after the run had ended (see run)
        self.restarts = 0  # restarts of the last round's members (the attempts they are in)
        if self.attempt > 0:
            self._answer(f"restart {self.attempt} of worker {self.rank}")

    def make_strategy(self) -> lsgd.Strategy:
        """The method's strategy on the elastic communicator."""
        return lsgd.make_strategy(self.cfg.method, self.model, self.opt, comm=self.method_comm,
                                  **knobs_from_config(self.cfg, self.method_comm.groups))

    def _send(self) -> dict[str, Any]:
        """What a joining worker receives besides the strategy's state."""
        return {"train_seconds": self.train_seconds, "rows": self.rows,
                "pace": self.pace.state_dict(), "schedule": self.schedule.state_dict()}

    def _take(self, state: dict[str, Any]) -> None:
        self._answer(f"heal of worker {self.rank}")
        self.healed_seconds = self.train_seconds = float(state["train_seconds"])
        self.rows = list(state["rows"])
        self.pace.load_state_dict(state["pace"])
        self.schedule.load_state_dict(state["schedule"])

    def _after_round(self) -> None:
        """Agree on the clock; stop or evaluate when due (collective among the members)."""
        comm = self.comm
        with comm.category("control"):
            clock = float(torch.nan_to_num(comm.all_gather(
                torch.tensor([self.train_seconds], dtype=torch.float64)), nan=0.0).max())
        self.pace.shared_seconds = clock
        evaluate, _, stop = self.pace.due(self.strategy.steps, clock)
        if evaluate or stop:
            members = comm.members()
            self.writer = members[0] == self.rank and not (stop and self._ended_before())
            row, every = self.evaluate(clock, members, heals=comm.heals, attempt=self.attempt)
            row.update(members=len(members), heals=int(every["heals"].sum()))
            self.restarts = int(every["attempt"].sum())
            self.record(row)
        self.stop = stop

    def run(self) -> dict[str, Any] | None:
        """Train; but a restarted worker that finds the run ended while it was down ends
        at once (else it would train the whole run again alone, the others gone)."""
        if self.attempt > 0 and self.ended_marker.exists():
            self.after_end = True
            self._answer(f"worker {self.rank} came back after the run ended; it ended too")
            return self.finish()
        return super().run()

    def _answer(self, what: str) -> None:
        if self.cfg.faults.fault:
            faults.answer(self.cfg.out_dir, what, rank=self.rank)

    @property
    def ended_marker(self) -> Path:
        """``logs/ended``: created by the first round that ends the run."""
        return self.cfg.out_dir / "logs" / "ended"

    def writes(self) -> bool:
        """Whether this worker was the lowest member of the last round."""
        return self.writer

    def _ended_before(self) -> bool:
        """Whether another round already ended the run (made ``logs/ended``): a worker left
        out of the final round ends the run again alone, and its lone round must not
        overwrite the run's record."""
        self.ended_marker.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.ended_marker.touch(exist_ok=False)
            return False
        except FileExistsError:
            self._answer(f"worker {self.rank} ended after the others; its lone last round "
                         "left out of the record")
            return True

    def before_step(self) -> None:
        """The ``extra_faults`` due by this step, on a worker's first attempt only: each
        ``("kill" | "hang", rank, step[, seconds])``, a SIGKILL or a hang of ``seconds``
        (default 10) while the heartbeats go on. One for a rank fires at the first step at or
        past its own (a worker healed past it, having started late, still gets it); one for
        ``"leader"``, at its step only, on whoever leads then."""
        if not self.extra_faults:
            return
        leads = self.strategy.report().leader_rank == self.rank
        for fault in list(self.extra_faults):
            kind, who, at, *seconds = fault
            due = at == self.steps if who == "leader" else at <= self.steps
            if due and who in (self.rank, "leader" if leads else None):
                self.extra_faults.remove(fault)
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(seconds[0] if seconds else 10.0)

    def after_step(self, loss: torch.Tensor) -> None:
        """Keep the clock a heal brought, and the trace of the steps."""
        if self.healed_seconds is not None:
            self.train_seconds, self.healed_seconds = self.healed_seconds, None
        self.trace.append((time.time() - self.t0, self.steps))
        if self.join_gap is None and self.comm.heals:
            self.join_gap = _gap_to_target(self.strategy)

    def finish(self) -> dict[str, Any]:
        """This worker's record; the writer's has the run's summary, with ``restarts`` (the
        attempts of the last round's members), ``heals``, ``members_at_end`` and
        ``steps_redone`` 0: a restarted worker joins with the live state at the run's step."""
        report = self.strategy.report()
        last = self.rows[-1] if self.rows else {}
        result = {"slot": self.rank, "attempt": self.attempt, "started": self.started,
                  "start_wait": self.comm.start_wait, "after_end": self.after_end,
                  "trace": self.trace, "steps": self.steps, "rounds": report.rounds,
                  "resets": report.resets, "heals": self.comm.heals,
                  "failed_rounds": self.comm.failed_rounds,
                  "committed_rounds": self.comm.committed_rounds(),
                  "bytes_sent": report.bytes_sent, "bytes_received": report.bytes_received,
                  "join_bytes": self.comm.stats("join").bytes_received,
                  "heal_seconds": self.comm.heal_seconds,
                  "accuracy": last.get("center_accuracy", math.nan),
                  "join_gap": self.join_gap, "writer": self.writer,
                  "leader_history": list(report.leader_history)}
        if self.writer:
            result["summary"] = self.write_summary(
                elastic=True, steps_per_second=self.steps / max(self.train_seconds, 1e-12),
                members_at_end=last["members"], heals=last["heals"], restarts=self.restarts,
                steps_redone=0, time_axis="wall-clock seconds of training (the members' largest)")
        self.comm.close()
        return result


def quorum_timeout(cfg: TrainConfig) -> float:
    """How long a worker waits for a quorum: ``--timeout``, but 10 s past the longest the
    lighthouse may hold one (the join and heartbeat timeouts), since a timed-out wait
    leaves torchft's manager failing every later quorum (docs/reliability.md)."""
    return max(cfg.timeout, cfg.quorum.join_timeout + cfg.quorum.heartbeat_timeout + 10.0)


def elastic_worker(info: Any, slot: int, slots: int, lighthouse: str, cfg: TrainConfig,
                   t0: float, extra_faults: Sequence[tuple[Any, ...]] = (),
                   address: str = "127.0.0.1") -> dict[str, Any]:
    """What :func:`~lsgd.launcher.elastic_jobs.launch_elastic` runs in every worker of node
    ``slot`` (``info``: its place in the node; None for a node of one worker)."""
    return ElasticRun(slot, slots, 0 if info is None else info.rank, lighthouse, cfg, address,
                      t0, list(extra_faults)).run()


def train_elastic(cfg: TrainConfig, extra_faults: Sequence[tuple[Any, ...]] = (),
                  started: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``cfg`` elastically into its run folder; (the summary, every slot's record).
    ``started``: when training started (``time.time()``, default now)."""
    nodes = cfg.elastic_nodes()
    records = launch_elastic(elastic_worker, nodes,
                             args=(cfg, started or time.time(), list(extra_faults)),
                             restarts=cfg.faults.restarts, timeout=cfg.timeout + 3600.0,
                             join_timeout=cfg.quorum.join_timeout,
                             heartbeat_timeout=cfg.quorum.heartbeat_timeout, link=cfg.link,
                             per_node=cfg.workers // nodes)
    summaries = [r["summary"] for r in records if r is not None and "summary" in r]
    if not summaries:
        raise RuntimeError("elastic run: no worker was left to write the summary")
    return summaries[-1], records


def _gap_to_target(strategy: lsgd.Strategy) -> float:
    """After joining: the largest gap between the worker's state and what the joining round reset
    it to (:meth:`~lsgd.Strategy.reset_target`); NaN for local SGD, whose target no worker keeps."""
    target = strategy.reset_target()
    if target is None:
        return math.nan
    gaps = [float((a - b).abs().max()) for a, b in zip(strategy.local_state, target) if a.numel()]
    return math.nan if any(math.isnan(g) for g in gaps) else max(gaps, default=0.0)
