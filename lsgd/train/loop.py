"""One worker of ``lsgd train``: data, model, optimizer, strategy, the loop.

``run_worker(info, cfg)`` is the same function under every backend (threads
of the simulator, local processes, torchrun on several nodes). All decisions
that must be common to the workers (when to evaluate, when to stop, when to
checkpoint) are taken from values every worker has. Synchronously: its step
count (equal on all workers) and, for time budgets, rank 0's training clock,
broadcast every few steps. Asynchronously (``--async``): the workers' total
step count and their latest clock, agreed at each sync point (right after a
round among all workers), the only place where asynchronous workers act
together. No worker is ever left alone in a collective that the others have
abandoned.

``--straggle RANK:FACTOR`` slows a worker down for experiments: after its
forward and backward pass it sleeps ``FACTOR - 1`` times as long as they took
(with ``--backend threads`` its steps take ``FACTOR`` units on the simulator's
virtual clock instead).

Only rank 0 writes files; every worker writes its own checkpoint file.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import lsgd
from lsgd.functional import finite_each
from lsgd.plots import draw_graphs
from lsgd.tasks import reaches
from lsgd.train.plots import plot_run
from lsgd.strategies import DivergedError
from lsgd.train import checkpoint, outputs, progress
from lsgd.train import summary as run_summary
from lsgd.train.build import (UsageError, build_model_of, graphs_of, make_optimizer,
                              make_schedule, make_strategy, make_task, pick_device, preflight)
from lsgd.train.clock import Pace, time_axis
from lsgd.train.checks import DECENTRALIZED
from lsgd.train.config import TrainConfig
from lsgd.train.evaluate import broadcast_model, gather_named, recalibrate_bn
from lsgd.train.faults import Faults

__all__ = ["UsageError", "Worker", "preflight", "run_worker"]


class Worker:
    """The state of one worker's run; ``run()`` trains and returns rank 0's summary."""

    def __init__(self, info: lsgd.WorkerInfo, cfg: TrainConfig,
                 started: float | None = None) -> None:
        self.info, self.cfg = info, cfg
        self.rank, self.world = info.rank, info.world_size
        self.comm = lsgd.get_communicator()
        self.run_dir = cfg.out_dir
        self.device = pick_device(cfg)
        self.task = make_task(cfg, self.device)
        self.model = build_model_of(cfg, self.task)  # the same initial model everywhere
        self.model.to(self.device)
        self.opt = make_optimizer(cfg, self.model)
        self.strategy = make_strategy(cfg, self.model, self.opt)
        self.steps_per_epoch = self.task.steps_per_epoch
        self.schedule = make_schedule(cfg, self.opt, self.steps_per_epoch)
        torch.manual_seed(cfg.seed * 7919 + 1 + self.rank)  # per-worker dropout stream
        self.generator = torch.Generator().manual_seed(cfg.seed * 7919 + 10_000 + self.rank)
        self.pace = Pace(cfg, self.steps_per_epoch, self.strategy, self.device)
        self.asynchronous = self.strategy.asynchronous
        simulated = lsgd.comm.current_simulated() is not None  # stragglers use its clock
        # With a modeled link the simulator's clock is the time axis: seconds of measured
        # compute (or --step-seconds per step) plus modeled transfers and waits.
        self.modeled = simulated and cfg.link is not None
        self.clock = self.comm.now if self.modeled else time.perf_counter
        self.straggle = 1.0 if simulated else cfg.straggler_factors().get(self.rank, 1.0)
        # Position and accounting.
        self.steps = self.epoch = self.batch = 0
        self.train_seconds = self.data_seconds = 0.0
        self.rows: list[dict[str, Any]] = []
        # The mean training loss between evaluations, over the finite losses only.
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.loss_count = torch.zeros((), dtype=torch.float64, device=self.device)
        self.resets_seen = self.skipped_seen = 0
        self.last_train_loss = math.nan
        # The run's start (time.time()), kept by restarted attempts: wall_seconds covers them.
        self.start = time.perf_counter() - (time.time() - (started or time.time()))
        self.tensorboard: outputs.TensorBoard | None = None
        # Restarted by the elastic agent (torchrun --max-restarts, lsgd train --restarts):
        # the same command again, which continues from the latest good checkpoint.
        self.attempt = 0 if simulated else int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.faults = Faults(cfg.faults(), self.rank, self.attempt)  # --fault, for tests
        self.identity = {"method": cfg.method, "model": cfg.model, "dataset": cfg.dataset,
                         "groups": info.groups}
        self.restarts: list[dict[str, Any]] = []  # resumes and restarts of this run so far
        self.reached: dict[str, float] | None = None  # where the center first met --target
        self.log_lines = False  # a line per evaluation on stderr (no terminal to draw a bar)
        resume = cfg.resume
        if not resume and self.attempt > 0 and checkpoint.complete(self.run_dir):
            resume = str(self.run_dir)
        if resume:
            self._resume(Path(resume))
        elif self.attempt > 0:
            self._restart_from_scratch()
        self.progress_file = checkpoint.Progress(self.run_dir) if self.rank == 0 else None

    # -- checkpoints ---------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state(), "generator": self.generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {
            "steps": self.steps, "epoch": self.epoch, "batch": self.batch,
            "train_seconds": self.train_seconds, "data_seconds": self.data_seconds,
            **self.pace.state_dict(),
            "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "strategy": self.strategy.state_dict(), "schedule": self.schedule.state_dict(),
            "rng": rng, "reached": self.reached,
        }
        if self.rank == 0:
            state["rows"] = self.rows
            state["restarts"] = self.restarts
        return state

    def _agree(self, mine: torch.Tensor) -> torch.Tensor:
        """Every worker's ``mine`` (a small control-traffic all-gather), on the CPU."""
        with self.comm.category("control"):
            return self.comm.all_gather(mine.to(self.device)).cpu()

    def _resume(self, run: Path) -> None:
        """Continue from the newest checkpoint that verifies on every worker (collective)."""
        chosen, skipped = checkpoint.choose(run, self.rank, self.world, self._agree)
        checkpoint.check_identity(run, chosen, self.identity)
        for bad in skipped:  # each worker names its own problem; rank 0 sets them aside
            if bad.problem:
                checkpoint.warn(f"checkpoint {bad.checkpoint.path.name} is not usable: "
                                f"{bad.problem}")
        if self.rank == 0 and skipped:
            for bad in skipped:
                checkpoint.warn(f"checkpoint {bad.checkpoint.path.name} set aside in "
                                f"{checkpoint.folder(run) / 'unusable'} (worker(s) "
                                f"{', '.join(map(str, bad.ranks))}); continuing from "
                                f"{chosen.path.name}")
            checkpoint.set_aside(run, [bad.checkpoint for bad in skipped])
        state = checkpoint.read(chosen, self.rank)
        self._restore(state)
        if self.rank == 0:
            reached = checkpoint.reached(run)
            redone = max(0, reached - self.steps) if reached is not None else None
            self.restarts = list(state.get("restarts", []))
            self.restarts.append({
                "kind": "restart" if self.attempt > 0 else "resume",
                "attempt": self.attempt, "from_step": self.steps, "reached_step": reached,
                "steps_redone": redone, "checkpoint": chosen.path.name,
            })
            if self.attempt > 0:
                checkpoint.warn(f"restart {self.attempt}: continuing from {chosen.path.name} "
                                f"(step {self.steps}; {redone} steps to redo)")

    def _restart_from_scratch(self) -> None:
        """A restart with no checkpoint to continue from: every step again, said and
        counted (before this worker's progress mark is written anew)."""
        if self.rank != 0:
            return
        reached = checkpoint.reached(self.run_dir)
        self.restarts.append({"kind": "restart", "attempt": self.attempt, "from_step": 0,
                              "reached_step": reached, "steps_redone": reached,
                              "checkpoint": None})
        checkpoint.warn(f"restart {self.attempt}: no checkpoint was written before the "
                        f"failure (--checkpoint-every N writes one every N steps); starting "
                        f"again from step 0 ({'?' if reached is None else reached} steps to "
                        "redo)")

    def _restore(self, state: dict[str, Any]) -> None:
        for key in ("steps", "epoch", "batch", "train_seconds", "data_seconds"):
            setattr(self, key, state[key])
        self.pace.load_state_dict(state)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"]["torch"])
        self.generator.set_state(state["rng"]["generator"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.rows = state.get("rows", [])
        self.reached = state.get("reached")

    def save_checkpoint(self) -> None:
        """Collective: every worker writes its file; rank 0 completes the checkpoint.

        The gathered records (each file's SHA-256 and size) are also the barrier:
        ``meta.json`` is written only once every file is on disk.
        """
        steps = round(self.pace.shared_steps)
        record = checkpoint.write_rank(self.run_dir, steps, self.rank, self._state())
        healthy = finite_each([list(self.model.parameters())])[0]
        records = self._agree(torch.frombuffer(bytearray(record + bytes([healthy])),
                                               dtype=torch.uint8))
        if not records[:, -1].any():  # never replace a good checkpoint by a diverged one
            raise DivergedError(
                f"every worker's model is NaN or infinite at step {steps}; the checkpoint of "
                f"this step was not completed, the last good one is kept in "
                f"{checkpoint.folder(self.run_dir)}: lower the learning rate and resume")
        if self.rank == 0:
            checkpoint.commit(self.run_dir, steps, [bytes(r[:-1].tolist()) for r in records],
                              self.identity)

    # -- evaluation ----------------------------------------------------------------
    def evaluate_all(self) -> dict[str, Any]:
        """Collective: loss and accuracy of the center, the leader (and each worker) on
        the task's evaluation set, with the figures the task derives from them.

        Every worker holds the center (and a copy of the leader, one broadcast) and
        evaluates its own interleaved slice of the evaluation set; the sums are gathered.
        """
        cfg, strategy = self.cfg, self.strategy
        report = strategy.report()
        leader = report.leader_rank
        with self.comm.category("eval"):
            center = strategy.center()
            leader_model = (broadcast_model(self.comm, self.model, leader)
                            if leader is not None and cfg.eval_leader else None)
        task = self.task
        if cfg.bn_recalibrate:  # the same fixed batches on every worker
            fixed = torch.Generator().manual_seed(cfg.seed)
            recalibrate_bn(center, [task.train_batch(0, self.world, 0, i, fixed)[0]
                                    for i in range(min(cfg.bn_recalibrate, self.steps_per_epoch))])
        nan = math.nan
        own = task.evaluate(center, self.rank, self.world)
        c_loss, c_correct, count = own.loss, own.correct, own.count
        l_loss, l_correct = nan, nan
        if leader_model is not None:
            led = task.evaluate(leader_model, self.rank, self.world)
            l_loss, l_correct = led.loss, led.correct
        own_accuracy = nan
        if cfg.eval_workers:
            mine = task.evaluate(self.model)
            own_accuracy = mine.correct / mine.count
        finite_losses = float(self.loss_count)
        train_loss = (float(self.loss_sum) / finite_losses if finite_losses
                      else self.last_train_loss)
        self.last_train_loss = train_loss
        self.loss_sum.zero_()
        self.loss_count.zero_()
        every = gather_named(self.comm, {
            "center_loss": c_loss, "center_correct": c_correct, "leader_loss": l_loss,
            "leader_correct": l_correct, "count": count, "accuracy": own_accuracy,
            "train_loss": train_loss, "bytes_sent": report.bytes_sent, "steps": self.steps,
            "rounds": report.rounds, "wait_seconds": report.wait_seconds,
            "comm_seconds": report.comm_seconds, "resets": report.resets,
        }, self.device)
        spread = strategy.spread()  # decentralized: mean distance of the workers to the center
        total = float(every["count"].sum())
        row: dict[str, Any] = {
            "time": self.pace.shared_seconds if self.pace.uses_clock else self.train_seconds,
            "wall_time": time.perf_counter() - self.start,
            "steps": self.pace.shared_steps,
            "epoch": self.pace.shared_steps / self.steps_per_epoch,
            "lr": self.opt.param_groups[0]["lr"],
            **task.columns("center", float(every["center_loss"].sum()) / total,
                           float(every["center_correct"].sum()) / total),
            "leader_rank": leader,
            **task.columns("leader", float(every["leader_loss"].sum()) / total,
                           float(every["leader_correct"].sum()) / total),
            "train_loss": float(every["train_loss"].mean()),
            "bytes_sent_per_worker": float(every["bytes_sent"].mean()),
            "rounds": report.rounds,
        }
        if spread is not None:
            row["spread"] = spread
        for r in range(self.world):
            row[f"worker{r}_train_loss"] = float(every["train_loss"][r])
        for r in range(self.world):  # per worker: own steps, rounds joined, seconds in rounds
            row[f"worker{r}_steps"] = int(every["steps"][r])
            row[f"worker{r}_rounds"] = int(every["rounds"][r])
            row[f"worker{r}_wait_seconds"] = float(every["wait_seconds"][r])
            row[f"worker{r}_comm_seconds"] = float(every["comm_seconds"][r])
            row[f"worker{r}_resets"] = int(every["resets"][r])
        if cfg.eval_workers:
            for r in range(self.world):
                row[f"worker{r}_accuracy"] = float(every["accuracy"][r])
        return row

    def record(self, row: dict[str, Any]) -> None:
        self.schedule.observe(row["center_loss"])  # the same value on every worker
        if self.rank != 0:
            return
        if self.log_lines:
            print(progress.line(self.task, self.pace, row), file=sys.stderr, flush=True)
        self.rows.append(row)
        fields = outputs.METRIC_FIELDS + [k for k in row if k not in outputs.METRIC_FIELDS]
        outputs.write_csv(self.run_dir / "metrics.csv", self.rows, fields)
        history = self.strategy.report().leader_history
        outputs.write_csv(self.run_dir / "leader_history.csv",
                          [{"step": s, "level": lv, "leader": ld} for s, lv, ld in history],
                          ["step", "level", "leader"])
        if self.tensorboard is not None:
            self.tensorboard.log(row)

    # -- the loop ------------------------------------------------------------------
    def _epochs_done(self) -> float:
        return self.pace.mean_steps(self.steps) / self.steps_per_epoch

    def _note_target(self, row: dict[str, Any]) -> bool:
        """Whether the center has reached ``--target`` (at ``row`` or before); the first
        row that did is kept. Every worker sees the same rows, so all stop together."""
        target = self.cfg.target
        if target is not None and self.reached is None and reaches(
                self.task.metric, row[self.task.column], target):
            self.reached = {"time": row["time"], "steps": row["steps"],
                            "value": row[self.task.column]}
        return self.reached is not None

    def run(self) -> dict[str, Any] | None:
        cfg, pace = self.cfg, self.pace
        if self.rank == 0 and cfg.tensorboard:
            self.tensorboard = outputs.TensorBoard(self.run_dir)
        bar = progress.bar(pace, disable=self.rank != 0 or cfg.quiet or not sys.stderr.isatty())
        # Without a terminal (a log file, CI) a line per evaluation says how far it is.
        self.log_lines = self.rank == 0 and not cfg.quiet and bar.disable
        task = self.task
        self.model.train()
        last_eval_step = -1
        stop = pace.done() or self.reached is not None
        while not stop:
            if self.batch == self.steps_per_epoch:
                self.epoch, self.batch = self.epoch + 1, 0
            t0, c0 = time.perf_counter(), self.clock()
            x, y = task.train_batch(self.rank, self.world, self.epoch, self.batch, self.generator)
            t1 = time.perf_counter()
            self.schedule.at(self._epochs_done(), pace.shared_seconds / 60)
            loss = task.loss(self.strategy.model(x), y)
            if self.faults.active:
                loss = self.faults.apply(loss, self.steps + 1)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.straggle > 1:
                time.sleep((self.straggle - 1) * (time.perf_counter() - t0))
            self.strategy.step(loss)
            self.steps += 1
            self.batch += 1
            if self.progress_file is not None:
                self.progress_file.mark(self.steps)
            finite = torch.isfinite(loss.detach())
            self.loss_sum += torch.where(finite, loss.detach(), 0.0)
            self.loss_count += finite
            self._note_divergence()
            self.data_seconds += t1 - t0
            self.train_seconds += self.clock() - c0
            evaluate_now, save, stop = pace.due(self.steps, self.train_seconds)
            if evaluate_now or save or stop:  # nothing travels while the clock is stopped
                c1 = self.clock()
                self.strategy.settle()
                self.train_seconds += self.clock() - c1
            if evaluate_now or stop:
                row = self.evaluate_all()
                self.record(row)
                last_eval_step = self.steps
                stop = self._note_target(row) or stop
            if save:
                self.save_checkpoint()
            if not bar.disable:
                if evaluate_now or self.steps % 10 == 0:
                    bar.set_postfix(progress.fields(self.task, self.strategy.report(), self.rows,
                                                    self._epochs_done(), float(loss.detach())),
                                    refresh=False)
                bar.update((pace.mean_steps(self.steps) if pace.by_steps
                            else pace.shared_seconds) - bar.n)
        if last_eval_step != self.steps:  # a resumed run that was already done
            self.record(self.evaluate_all())
        self.save_checkpoint()
        bar.close()
        if self.progress_file is not None:
            self.progress_file.close()
        return self.finish()

    def _note_divergence(self) -> None:
        """Say so when the strategy reset this worker or skipped a step for NaN or inf."""
        resets = self.strategy.resets
        skipped = getattr(self.strategy, "skipped_steps", 0)
        if resets != self.resets_seen:
            self.resets_seen = resets
            print(f"worker {self.rank}: its state was NaN or infinite; reset at step "
                  f"{self.steps} (reset {resets} of this run)", file=sys.stderr, flush=True)
        if skipped != self.skipped_seen and self.rank == 0:
            self.skipped_seen = skipped
            print(f"step {self.steps}: the averaged gradient was NaN or infinite; every worker "
                  f"skipped the step ({skipped} so far)", file=sys.stderr, flush=True)

    def finish(self) -> dict[str, Any] | None:
        report = self.strategy.report()
        every = gather_named(self.comm, {
            "bytes_sent": report.bytes_sent, "bytes_received": report.bytes_received,
            "data_seconds": self.data_seconds, "train_seconds": self.train_seconds,
            "comm_seconds": report.comm_seconds, "steps": self.steps, "rounds": report.rounds,
            "wait_seconds": report.wait_seconds, "resets": report.resets,
            "skipped_steps": report.details.get("skipped_steps", 0),
        }, self.device)
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.rank != 0:
            return None
        worker_steps = [int(v) for v in every["steps"]]
        steps = sum(worker_steps) / self.world if self.asynchronous else self.steps
        epochs = steps / self.steps_per_epoch
        cfg = self.cfg
        summary = {
            "method": cfg.method, "model": cfg.model, "dataset": cfg.dataset,
            "workers": self.world, "groups": self.info.groups, "backend": cfg.backend,
            **run_summary.of_evaluations(self.rows, self.task, cfg.target, self.reached),
            "steps": steps, "epochs": epochs,
            "wall_seconds": time.perf_counter() - self.start,
            "train_seconds": self.train_seconds,
            "seconds_per_epoch": self.train_seconds / epochs if epochs else None,
            **run_summary.of_workers(every),
            "rounds": report.rounds,
            "leader_switches": report.leader_switches,
            "asynchronous": self.asynchronous,
            "straggle": {str(r): f for r, f in cfg.straggler_factors().items()},
            "link": cfg.link,
            "link_kind": ("modeled" if self.modeled else "shaped") if cfg.link else None,
            "restarts": sum(1 for r in self.restarts if r["kind"] == "restart"),
            "steps_redone": sum(r["steps_redone"] or 0 for r in self.restarts),
            "resumes": self.restarts,
            "time_axis": time_axis(cfg, self.modeled),
            "out": str(self.run_dir),
        }
        outputs.write_json(self.run_dir / "summary.json", summary)
        summary["plots"] = [str(p) for p in plot_run(self.run_dir)]
        if self.cfg.method in DECENTRALIZED:  # the communication graph(s)
            try:
                summary["plots"].append(str(draw_graphs(graphs_of(self.cfg),
                                                        self.run_dir / "graphs.png")))
            except ImportError:
                pass
        return summary


def run_worker(info: lsgd.WorkerInfo, cfg: TrainConfig,
               started: float | None = None) -> dict[str, Any] | None:
    """Train as worker ``info.rank``; rank 0 returns the run's summary. ``started``: when
    the run began (``time.time()``), so that a restarted attempt's summary covers it all."""
    return Worker(info, cfg, started).run()
