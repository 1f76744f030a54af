"""``lsgd train --elastic``: a run that goes on when workers fail (torchft).

Each node (``--groups`` of them, or one per worker) is a torchft replica
group started by an elastic agent of its own
(:func:`lsgd.launcher.elastic.launch_elastic`), every worker with an
:class:`~lsgd.comm.elastic.ElasticCommunicator`; the strategy's rounds among
all workers are the quorum points (:mod:`lsgd.strategies.elastic`). Everything the workers decide
together is decided inside a round, among its members, right after the
method's rule (``Strategy.on_round``):

* **the clock and the budgets**: the members all-gather their training
  seconds (``"control"`` traffic) and take the largest; the run stops at the
  first round where the step count (the same on every member) or that clock
  reaches its budget;
* **evaluations**, at the first round where ``--eval-every`` (steps or
  seconds) is due: the center (the members' mean, one all-reduce, ``"eval"``
  traffic) is evaluated on the test set, each member its own interleaved
  slice; the sums are gathered, and every member appends the same row;
* **who writes**: the member with the lowest slot writes ``metrics.csv`` and,
  at the end, ``summary.json`` and the figures.

A joining worker receives with the strategy's state the run's own (its rows,
training seconds, next evaluation, learning-rate schedule), so it continues
the run where the others are. Worker ``r`` reads its shard of each epoch,
the batch chosen by its step count. No checkpoint is written or read.

Faults for tests and benchmarks, on a worker's first attempt only:
``--fault kill:R:S`` (SIGKILL before step S), ``nan:R:S``, and in
:func:`elastic_worker`'s ``extra_faults`` ``("kill" | "hang", rank, step)``
where ``rank`` may be ``"leader"`` (the leader elected last) and a hang takes
a fourth item, its seconds (default 10; the worker's heartbeats go on).
"""

from __future__ import annotations

import copy
import math
import os
import signal
import time
from typing import Any

import torch

from lsgd.comm.elastic import ElasticCommunicator
from lsgd.strategies.state import on_state_
from lsgd.train import outputs
from lsgd.train.build import (build_model_of, make_optimizer, make_schedule, make_task,
                              knobs_from_config)
from lsgd.train.config import TrainConfig
from lsgd.train.faults import Faults

ATTEMPT = "TORCHELASTIC_RESTART_COUNT"


class ElasticRun:
    """One worker of an elastic run (see the module docstring)."""

    def __init__(self, slot: int, slots: int, local_rank: int, lighthouse: str,
                 cfg: TrainConfig, address: str, t0: float,
                 extra_faults: list[tuple[Any, ...]]) -> None:
        import lsgd

        self.cfg, self.t0 = cfg, t0
        self.attempt = int(os.environ.get(ATTEMPT, "0"))
        self.started = time.time() - t0
        self.comm = ElasticCommunicator(slot, slots, lighthouse=lighthouse, address=address,
                                        per_node=cfg.workers // slots, local_rank=local_rank,
                                        min_members=cfg.min_workers, timeout=cfg.timeout,
                                        quorum_timeout=cfg.timeout)
        self.rank = self.comm.rank  # faults, shards and files go by global rank
        self.task = make_task(cfg, torch.device("cpu"))
        self.model = build_model_of(cfg, self.task)  # the same initial model on every worker
        self.opt = make_optimizer(cfg, self.model)
        self.strategy = lsgd.make_strategy(cfg.method, self.model, self.opt, comm=self.comm,
                                           **knobs_from_config(cfg))
        self.strategy.on_round = self._after_round
        self.comm.add_state("run", self._send, self._take)
        self.per_epoch = self.task.steps_per_epoch
        self.schedule = make_schedule(cfg, self.opt, self.per_epoch)
        torch.manual_seed(cfg.seed * 7919 + 1 + slot + 101 * self.attempt)
        self.generator = torch.Generator().manual_seed(
            cfg.seed * 7919 + 10_000 + slot + 101 * self.attempt)
        budget = cfg.budgets()
        self.max_steps = min(budget.get("steps", math.inf),
                             math.ceil(budget["epochs"] * self.per_epoch)
                             if "epochs" in budget else math.inf)
        self.max_seconds = budget.get("minutes", math.inf) * 60
        kind, every = cfg.eval_interval()
        if kind == "auto":
            kind, every = (("steps", max(1, int(self.max_steps) // 10))
                           if math.isfinite(self.max_steps) else ("seconds", self.max_seconds / 10))
        self.eval_kind, self.eval_every, self.next_eval = kind, every, every
        self.faults = Faults(cfg.faults(), self.rank, self.attempt)
        self.extra_faults = list(extra_faults) if self.attempt == 0 else []
        self.train_seconds, self.rows, self.stop = 0.0, [], False
        self.trace: list[tuple[float, int]] = []
        self.join_gap: float | None = None
        self.writer = False  # the lowest member of the last round writes the files

    # -- what a joining worker receives ---------------------------------------
    def _send(self) -> dict[str, Any]:
        return {"train_seconds": self.train_seconds, "rows": self.rows,
                "next_eval": self.next_eval, "schedule": self.schedule.state_dict()}

    def _take(self, state: dict[str, Any]) -> None:
        self.train_seconds = float(state["train_seconds"])
        self.rows = list(state["rows"])
        self.next_eval = float(state["next_eval"])
        self.schedule.load_state_dict(state["schedule"])

    # -- inside every round ---------------------------------------------------
    def _after_round(self) -> None:
        """Agree on the clock; stop or evaluate when due (collective among the members)."""
        comm = self.comm
        with comm.category("control"):
            clock = float(torch.nan_to_num(comm.all_gather(
                torch.tensor([self.train_seconds], dtype=torch.float64)), nan=0.0).max())
        steps = self.strategy.steps
        stop = steps >= self.max_steps or clock >= self.max_seconds
        position = steps if self.eval_kind == "steps" else clock
        if stop or position >= self.next_eval:
            self.rows.append(self._evaluate(clock))
            while self.next_eval <= position:
                self.next_eval += self.eval_every
            self.schedule.observe(self.rows[-1]["center_loss"])
            members = comm.members()
            self.writer = members[0] == self.rank
            if self.writer:
                fields = outputs.METRIC_FIELDS + [k for k in self.rows[-1]
                                                  if k not in outputs.METRIC_FIELDS]
                outputs.write_csv(self.cfg.out_dir / "metrics.csv", self.rows, fields)
        self.stop = stop

    def _evaluate(self, clock: float) -> dict[str, Any]:
        comm, members = self.comm, self.comm.members()
        center = copy.deepcopy(self.model)
        with comm.category("eval"):
            on_state_(center, lambda buffer: comm.all_reduce_(buffer, op="mean"))
        sums = self.task.evaluate(center, members.index(self.rank), len(members))
        report = self.strategy.report()
        mine = torch.tensor([sums.loss, sums.correct, sums.count, report.bytes_sent,
                             self.comm.heals], dtype=torch.float64)
        with comm.category("eval"):
            table = comm.all_gather(mine)
        sums = torch.nansum(table, dim=0)
        total = float(sums[2])
        return {"time": clock, "wall_time": time.time() - self.t0,
                "steps": float(self.strategy.steps),
                "epoch": self.strategy.steps / self.per_epoch,
                "lr": self.opt.param_groups[0]["lr"],
                **self.task.columns("center", float(sums[0]) / total, float(sums[1]) / total),
                "leader_rank": getattr(self.strategy, "leader_rank", None),
                **self.task.columns("leader", math.nan, math.nan), "train_loss": math.nan,
                "bytes_sent_per_worker": float(sums[3]) / len(members),
                "rounds": report.rounds, "members": len(members),
                "heals": int(sums[4])}

    # -- the loop -------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        strategy, task = self.strategy, self.task
        while not self.stop:
            step = strategy.steps
            self._faults(step)
            t0 = time.perf_counter()
            x, y = task.train_batch(self.rank, self.comm.world_size, step // self.per_epoch,
                                    step % self.per_epoch, self.generator)
            self.schedule.at(step / self.per_epoch, self.train_seconds / 60)
            loss = task.loss(self.model(x), y)
            if self.faults.active:
                loss = self.faults.apply(loss, step + 1)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            joined_before = self.comm.heals
            strategy.step(loss)  # its rounds run _after_round
            if self.comm.heals == joined_before:  # a heal brought the run's own clock
                self.train_seconds += time.perf_counter() - t0
            self.trace.append((time.time() - self.t0, strategy.steps))
            if self.join_gap is None and self.comm.heals:
                self.join_gap = _gap_to_target(strategy)
        return self._result()

    def _faults(self, step: int) -> None:
        leads = getattr(self.strategy, "leader_rank", None) == self.rank
        for kind, who, at, *seconds in self.extra_faults:
            if at == step and who in (self.rank, "leader" if leads else None):
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(seconds[0] if seconds else 10.0)

    def _result(self) -> dict[str, Any]:
        report = self.strategy.report()
        last = self.rows[-1] if self.rows else {}
        result = {"slot": self.rank, "attempt": self.attempt, "started": self.started,
                  "trace": self.trace, "steps": self.strategy.steps, "rounds": report.rounds,
                  "resets": report.resets, "heals": self.comm.heals,
                  "failed_rounds": self.comm.failed_rounds,
                  "committed_rounds": self.comm.committed_rounds(),
                  "bytes_sent": report.bytes_sent, "bytes_received": report.bytes_received,
                  "join_bytes": self.comm.stats("join").bytes_received,
                  "accuracy": last.get("center_accuracy", math.nan),
                  "join_gap": self.join_gap, "writer": self.writer,
                  "leader_history": list(getattr(self.strategy, "leader_history", []))}
        if self.writer:
            result["summary"] = self._summary(last)
        self.comm.close()
        return result

    def _summary(self, last: dict[str, Any]) -> dict[str, Any]:
        from lsgd.train.plots import plot_run

        cfg = self.cfg
        summary = {
            "method": cfg.method, "model": cfg.model, "dataset": cfg.dataset,
            "workers": cfg.workers, "groups": cfg.groups, "backend": "processes",
            "elastic": True, "test_accuracy": last["center_accuracy"],
            "leader_test_accuracy": None, "leader_rank": last["leader_rank"],
            "test_loss": last["center_loss"], "steps": self.strategy.steps,
            "epochs": self.strategy.steps / self.per_epoch,
            "wall_seconds": time.time() - self.t0, "train_seconds": self.train_seconds,
            "seconds_per_epoch": self.train_seconds * self.per_epoch / max(1, self.strategy.steps),
            "steps_per_second": self.strategy.steps / max(self.train_seconds, 1e-12),
            "bytes_sent_per_worker": last["bytes_sent_per_worker"], "rounds": last["rounds"],
            "members_at_end": last["members"], "heals": last["heals"],
            "link": cfg.link, "link_kind": "shaped" if cfg.link else None,
            "time_axis": "wall-clock seconds of training (the members' largest)",
            "out": str(cfg.out_dir), **self.task.summary(self.rows)}
        outputs.write_json(cfg.out_dir / "summary.json", summary)
        summary["plots"] = [str(p) for p in plot_run(cfg.out_dir)]
        return summary


def elastic_worker(info: Any, slot: int, slots: int, lighthouse: str, cfg: TrainConfig,
                   t0: float, extra_faults: list[tuple[Any, ...]] = (),  # type: ignore[assignment]
                   address: str = "127.0.0.1") -> dict[str, Any]:
    """What :func:`~lsgd.launcher.elastic.launch_elastic` runs in every worker of node
    ``slot`` (``info``: its place in the node; None for a node of one worker)."""
    local_rank = 0 if info is None else info.rank
    return ElasticRun(slot, slots, local_rank, lighthouse, cfg, address, t0,
                      list(extra_faults)).run()


def train_elastic(cfg: TrainConfig, extra_faults: list[tuple[Any, ...]] = ()  # type: ignore[assignment]
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``cfg`` elastically into its run folder; (the summary, every slot's record)."""
    from lsgd.launcher.elastic import launch_elastic

    nodes = cfg.elastic_nodes()
    records = launch_elastic(elastic_worker, nodes, args=(cfg, time.time(), list(extra_faults)),
                             restarts=cfg.restarts, timeout=cfg.timeout + 3600.0,
                             join_timeout=cfg.join_timeout, link=cfg.link,
                             per_node=cfg.workers // nodes)
    summaries = [r["summary"] for r in records if r is not None and "summary" in r]
    if not summaries:
        raise RuntimeError("elastic run: no worker was left to write the summary")
    return summaries[-1], records


def _gap_to_target(strategy: Any) -> float:
    """After joining: the largest difference between the worker's state and what the
    joining round reset it to (LSGD: the leader's state; DiLoCo: the global
    parameters; EASGD: the center); NaN for local SGD, whose target (the mean)
    no worker keeps."""
    if hasattr(strategy, "levels"):
        target = strategy.levels[-1].snapshot.views
    elif hasattr(strategy, "global_state"):
        target = strategy.global_state.views
    elif hasattr(strategy, "center_state"):
        target = strategy.center_state.views
    else:
        return math.nan
    gaps = [float((a - b).abs().max()) for a, b in zip(strategy.local_state, target) if a.numel()]
    return math.nan if any(math.isnan(g) for g in gaps) else max(gaps, default=0.0)


