"""The one training loop of a worker, of ``lsgd train`` (:mod:`lsgd.train.run_worker`), its
elastic form (:mod:`lsgd.train.elastic_run`) and the torchft peer (:mod:`lsgd.bench.peer`):
what differs between them enters through the hooks of :class:`WorkerLoop`.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import torch
from torch import nn

import lsgd
from lsgd.tasks import reaches
from lsgd.train import outputs
from lsgd.train.build import (build_model_of, make_optimizer, make_schedule, make_strategy,
                              make_task)
from lsgd.train.clock import Pace, time_axis
from lsgd.train.config import TrainConfig
from lsgd.train.evaluate import gather_named, recalibrate_bn
from lsgd.train.checkpoint import folder as checkpoint_folder
from lsgd.train.faults import Faults, node_of


#: What every worker counts of itself, and as what: a column of each evaluation's row and a
#: list in the summary, one value per worker.
PER_WORKER = (("steps", int), ("rounds", int), ("wait_seconds", float),
              ("comm_seconds", float), ("resets", int))


def seed_worker(cfg: TrainConfig, rank: int, attempt: int = 0) -> torch.Generator:
    """Seed worker ``rank``'s dropout (torch's global generator) from the run's seed, the
    worker and its ``attempt`` (> 0: restarted afresh); returns its batch generator."""
    base = cfg.seed * 7919 + rank + 101 * attempt
    torch.manual_seed(base + 1)
    return torch.Generator().manual_seed(base + 10_000)


class WorkerLoop:
    """One worker: its task, model, optimizer, strategy, schedule and seeds; :meth:`run` takes
    each step (the batch of the step count, forward, backward, ``strategy.step``), evaluates
    the center and writes the rows and the summary. ``started`` is when the run began, so
    that a restarted worker's wall time covers it."""

    #: Whether a restarted worker draws new random streams (``attempt`` in the seeds).
    reseeds = False

    def __init__(self, cfg: TrainConfig, comm: lsgd.Communicator, device: torch.device,
                 started: float | None = None) -> None:
        simulated = lsgd.comm.current_simulated() is not None  # stragglers use its clock
        attempt = 0 if simulated else int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        # The strategy's communicator (a node's processes as one replica, --replica node),
        # and every process's, on which the run's own rows, checkpoints and files travel.
        self.method_comm, comm = comm, comm.processes
        self.cfg, self.comm, self.device, self.attempt = cfg, comm, device, attempt
        self.rank, self.world, self.groups = comm.rank, comm.world_size, comm.groups
        self.task = make_task(cfg, device)
        self.model = build_model_of(cfg, self.task).to(device)  # the same everywhere
        self.opt = make_optimizer(cfg, self.model)
        self.strategy = self.make_strategy()
        self.steps_per_epoch = self.task.steps_per_epoch
        self.schedule = make_schedule(cfg, self.opt, self.steps_per_epoch)
        self.generator = seed_worker(cfg, self.rank, attempt if self.reseeds else 0)
        self.pace = Pace(cfg, self.steps_per_epoch, self.strategy, device)
        self.faults = Faults(cfg.faults.fault, self.rank, node_of(self.rank, cfg), cfg.out_dir,
                             checkpoints=checkpoint_folder(cfg.out_dir))  # --fault
        # With a modeled link the simulator's clock is the time axis: seconds of measured
        # compute (or --step-seconds per step) plus modeled transfers and waits.
        self.modeled = simulated and cfg.link is not None
        self.clock = comm.now if self.modeled else time.perf_counter
        self.straggle = 1.0 if simulated else cfg.straggler_factors().get(self.rank, 1.0)
        self.steps, self.train_seconds, self.data_seconds = 0, 0.0, 0.0
        self.rows: list[dict[str, Any]] = []
        self.reached: dict[str, float] | None = None  # where the center first met --target
        self.evaluated_at = -1  # the step of the last evaluation
        # The mean training loss between evaluations, over the finite losses only.
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.loss_count = torch.zeros((), dtype=torch.float64, device=device)
        self.last_train_loss = math.nan
        self.start = time.perf_counter() - (time.time() - (started or time.time()))
        self.stop = False

    def make_strategy(self) -> lsgd.Strategy:
        """What steps ``self.opt`` and runs the rounds (called once, in ``__init__``): the
        run's strategy, or an object with the strategy methods the loop calls."""
        return make_strategy(self.cfg, self.model, self.opt, self.method_comm)

    def before_step(self) -> None:
        """Before each step (faults injected by a test)."""

    def after_step(self, loss: torch.Tensor) -> None:
        """After each step: evaluate, checkpoint and stop when :class:`Pace` says so."""
        evaluate, save, stop = self.pace.due(self.steps, self.train_seconds)
        if evaluate or save or stop:  # nothing travels while the clock is stopped
            c1 = self.clock()
            self.strategy.settle()
            self.train_seconds += self.clock() - c1
        if evaluate or stop:
            row = self.evaluation()
            self.record(row)
            # Where the center first reached --target: every worker sees the same rows.
            if self.cfg.evaluation.target is not None and self.reached is None and reaches(
                    self.task.metric, row[self.task.column], self.cfg.evaluation.target):
                self.reached = {"time": row["time"], "steps": row["steps"],
                                "value": row[self.task.column]}
            stop = stop or self.reached is not None
        if save:
            self.save_checkpoint()
        self.stop = stop

    def leader_model(self, leader: int | None) -> nn.Module | None:
        """The leader's model for the evaluation (collective), or None: not evaluated."""
        return None

    def save_checkpoint(self) -> None:
        """Write a checkpoint (collective); a run without checkpoints writes none."""

    def writes(self) -> bool:
        """Whether this worker writes the run's files."""
        return self.rank == 0

    def finish(self) -> dict[str, Any] | None:
        """After the last step: the summary, from the worker that writes it."""
        return self.write_summary() if self.writes() else None

    def run(self) -> dict[str, Any] | None:
        """Train until the run stops; returns :meth:`finish`'s result."""
        self.model.train()
        self.stop = self.pace.shared_steps >= self.pace.max_steps or self.reached is not None
        while not self.stop:
            self.after_step(self.take_step())
        return self.finish()

    def take_step(self) -> torch.Tensor:
        """One step: the batch of this worker's step count, forward, backward and the
        strategy's step; its loss and time are counted."""
        self.before_step()
        t0, c0 = time.perf_counter(), self.clock()
        epoch, batch = divmod(self.steps, self.steps_per_epoch)
        x, y = self.task.train_batch(self.rank, self.world, epoch, batch, self.generator)
        t1 = time.perf_counter()
        self.schedule.at(self.epochs_done(), self.pace.shared_seconds / 60)
        loss = self.task.loss(self.strategy.model(x), y)
        if self.faults.active:
            loss = self.faults.apply(loss, self.steps + 1, self.train_seconds)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.straggle > 1:
            time.sleep((self.straggle - 1) * (time.perf_counter() - t0))
        finite = torch.isfinite(loss.detach())
        self.loss_sum += torch.where(finite, loss.detach(), 0.0)
        self.loss_count += finite
        self.strategy.step(loss)  # an elastic run's rounds may evaluate in there
        self.steps = self.strategy.steps  # one more, or the run's step after a heal
        if self.cfg.faults.fault:
            self.faults.note_resets(self.strategy.resets, self.steps)
        self.data_seconds += t1 - t0
        self.train_seconds += self.clock() - c0
        return loss

    def epochs_done(self) -> float:
        """Epochs per worker so far, as the workers agree on them."""
        return self.pace.mean_steps(self.steps) / self.steps_per_epoch

    def evaluation(self) -> dict[str, Any]:
        """Collective: the row of an evaluation that :meth:`after_step` found due."""
        return self.evaluate()[0]

    def evaluate(self, clock: float | None = None, members: list[int] | None = None,
                 **values: float) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Collective: the row of the center (and the leader) at ``clock`` (by default
        the agreed clock), each worker (of ``members``) on its interleaved slice of the
        evaluation set; and every worker's sums and ``values`` by name."""
        cfg, task, report = self.cfg, self.task, self.strategy.report()
        members = members or list(range(self.world))
        with self.comm.category("eval"):
            center = self.strategy.center()
            leader = self.leader_model(report.leader_rank)
        fixed = torch.Generator().manual_seed(cfg.seed)  # the same batches on every worker
        recalibrate_bn(center, [task.train_batch(0, self.world, 0, i, fixed)[0] for i in
                                range(min(cfg.evaluation.bn_recalibrate, self.steps_per_epoch))])
        part, parts = members.index(self.rank), len(members)
        own = task.evaluate(center, part, parts)
        led = task.evaluate(leader, part, parts) if leader is not None else None
        finite = float(self.loss_count)
        self.last_train_loss = float(self.loss_sum) / finite if finite else self.last_train_loss
        self.loss_sum.zero_()
        self.loss_count.zero_()
        gathered = gather_named(self.comm, {
            "center_loss": own.loss, "center_correct": own.correct,
            "leader_loss": led.loss if led is not None else math.nan,
            "leader_correct": led.correct if led is not None else math.nan,
            "count": own.count, "train_loss": self.last_train_loss,
            "bytes_sent": report.bytes_sent, "link_bytes_sent": report.link_bytes_sent,
            **values}, self.device)
        # An elastic run's row is of its round's members only.
        every = {name: column[members] for name, column in gathered.items()}

        def mean(name: str) -> float:  # over the whole evaluation set
            return float(every[name].sum()) / float(every["count"].sum())

        row = {
            "time": clock if clock is not None else (
                self.pace.shared_seconds if self.pace.uses_clock else self.train_seconds),
            "wall_time": time.perf_counter() - self.start, "steps": self.pace.shared_steps,
            "epoch": self.pace.shared_steps / self.steps_per_epoch,
            "lr": self.opt.param_groups[0]["lr"],
            **task.columns("center", mean("center_loss"), mean("center_correct")),
            "leader_rank": report.leader_rank,
            **task.columns("leader", mean("leader_loss"), mean("leader_correct")),
            "train_loss": float(every["train_loss"].mean()),
            "bytes_sent_per_worker": float(every["bytes_sent"].mean()),
            "link_bytes_sent_per_node": float(every["link_bytes_sent"].sum()) / self.groups,
            "rounds": report.rounds}
        return row, every

    def record(self, row: dict[str, Any]) -> None:
        """Keep an evaluation's row (every worker alike); the writer writes them all."""
        self.schedule.observe(row["center_loss"])  # the same value on every worker
        self.rows.append(row)
        self.evaluated_at = self.steps
        if self.writes():
            fields = outputs.METRIC_FIELDS + [k for k in row if k not in outputs.METRIC_FIELDS]
            outputs.write_csv(self.cfg.out_dir / "metrics.csv", self.rows, fields)

    def write_summary(self, steps: float | None = None, **own: Any) -> dict[str, Any]:
        """Write ``summary.json`` and the run's plots; returns the summary: the last evaluation's
        figures, the task's headline, ``--target``'s, the run's size and time, then ``own``."""
        from lsgd.train.run_plots import plot_run

        cfg, last = self.cfg, self.rows[-1]
        steps = self.steps if steps is None else steps
        epochs = steps / self.steps_per_epoch
        summary = {
            "method": cfg.method, "model": cfg.model, "dataset": cfg.dataset,
            "workers": self.world, "groups": self.groups, "backend": cfg.backend,
            "test_accuracy": last["center_accuracy"], "test_loss": last["center_loss"],
            "leader_test_accuracy": none_if_nan(last["leader_accuracy"]),
            "leader_test_loss": none_if_nan(last["leader_loss"]),
            "leader_rank": last["leader_rank"], **self.task.summary(self.rows),
            "target": cfg.evaluation.target, "reached_target": self.reached,
            "steps": steps, "epochs": epochs, "wall_seconds": time.perf_counter() - self.start,
            "train_seconds": self.train_seconds,
            "seconds_per_epoch": self.train_seconds / epochs if epochs else None,
            "bytes_sent_per_worker": last["bytes_sent_per_worker"],
            "link_bytes_sent_per_node": last.get("link_bytes_sent_per_node"),
            "replica": cfg.replica, "replicas": self.strategy.world_size, "rounds": last["rounds"],
            "link": cfg.link,
            "link_kind": ("modeled" if self.modeled else "shaped") if cfg.link else None,
            "time_axis": time_axis(cfg, self.modeled), "out": str(cfg.out_dir), **own}
        outputs.write_json(cfg.out_dir / "summary.json", summary)
        summary["plots"] = [str(p) for p in plot_run(cfg.out_dir)]
        return summary


def worker_figures(every: dict[str, torch.Tensor], nodes: int) -> dict[str, Any]:
    """The summary's totals, means and per-worker lists of ``every`` worker's figures (as
    :func:`~lsgd.train.evaluate.gather_named` gives them), and what crossed each node's link."""
    total = sum(int(v) for v in every["steps"])
    return {
        "link_bytes_sent_per_node": float(every["link_bytes_sent"].sum()) / nodes,
        "bytes_sent_inside_per_node": float(
            (every["bytes_sent"] - every["link_bytes_sent"]).sum()) / nodes,
        "data_loading_fraction": float(
            (every["data_seconds"] / every["train_seconds"].clamp_min(1e-12)).mean()),
        **{f"{name}_per_worker": float(every[name].mean())
           for name in ("bytes_sent", "bytes_received", "comm_seconds")},
        "total_steps": total,
        "steps_per_second": total / max(float(every["train_seconds"].mean()), 1e-12),
        **{f"worker_{name}": [kind(v) for v in every[name]] for name, kind in PER_WORKER},
        "skipped_steps": int(every["skipped_steps"].max())}


def none_if_nan(value: float) -> float | None:
    """``value``, or None for NaN (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value
