"""One worker of ``lsgd train``, the same under every backend (threads of the simulator, local
processes, torchrun on several nodes): the shared loop (:class:`lsgd.train.loop.WorkerLoop`)
with checkpoints, resumes and restarts, per-worker columns, a progress bar and the run's
summary. Only rank 0 writes files; every worker writes its own checkpoint file.
"""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

import lsgd
from lsgd.functional import finite_each
from lsgd.plots import draw_graphs
from lsgd.registry import strategy_class
from lsgd.strategies import DivergedError
from lsgd.train import checkpoint, faults, outputs
from lsgd.train.build import UsageError, graphs_of, pick_device, preflight
from lsgd.train.config import TrainConfig
from lsgd.train.evaluate import gather_named, model_copy
from lsgd.train.loop import PER_WORKER, WorkerLoop, worker_figures

__all__ = ["UsageError", "Worker", "preflight", "run_worker"]


class Worker(WorkerLoop):
    """The state of one worker's run; ``run()`` trains and returns rank 0's summary."""

    def __init__(self, info: lsgd.WorkerInfo, cfg: TrainConfig,
                 started: float | None = None) -> None:
        super().__init__(cfg, lsgd.get_communicator(replica=cfg.replica), pick_device(cfg),
                         started)
        self.groups, self.run_dir = info.groups, cfg.out_dir
        self.resets_seen = self.skipped_seen = 0
        self.identity = {"method": cfg.method, "model": cfg.model, "dataset": cfg.dataset,
                         "groups": info.groups, "replica": cfg.replica}
        self.restarts: list[dict[str, Any]] = []  # resumes and restarts of this run so far
        # A restarted worker runs the same command: it continues from the latest good checkpoint.
        if cfg.resume or (self.attempt > 0 and checkpoint.complete(self.run_dir)):
            self._resume(Path(cfg.resume or self.run_dir), required=bool(cfg.resume))
        elif self.attempt > 0 and self.rank == 0:
            self._restarted(0, None, "no checkpoint was written before the failure "
                            "(--checkpoint-every N writes one every N steps); starting again "
                            "from step 0")
        self.progress_file = checkpoint.Progress(self.run_dir) if self.rank == 0 else None
        self.tensorboard = (outputs.TensorBoard(self.run_dir) if self.rank == 0
                            and cfg.output.tensorboard else None)
        # Rank 0 shows the progress (nothing with --quiet): a bar of the steps or seconds of
        # the budget; without a terminal (a log file, CI) a line per evaluation.
        by_steps = self.pace.by_steps
        self.bar = tqdm(total=self.pace.max_steps if by_steps else self.pace.max_seconds,
                        unit="step" if by_steps else "s", initial=0, dynamic_ncols=True,
                        disable=self.rank != 0 or cfg.output.quiet or not sys.stderr.isatty(),
                        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} {unit} "
                                   "[{elapsed}<{remaining}{postfix}]")

    def _state(self) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state(), "generator": self.generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"steps": self.steps, "train_seconds": self.train_seconds,
                 "data_seconds": self.data_seconds, **self.pace.state_dict(),
                 "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                 "strategy": self.strategy.state_dict(), "schedule": self.schedule.state_dict(),
                 "rng": rng, "reached": self.reached}
        if self.rank == 0:
            state |= {"rows": self.rows, "restarts": self.restarts}
        return state

    def _agree(self, mine: torch.Tensor) -> torch.Tensor:
        """Every worker's ``mine`` (a small control-traffic all-gather), on the CPU."""
        with self.comm.category("control"):
            return self.comm.all_gather(mine.to(self.device)).cpu()

    def _resume(self, run: Path, required: bool = True) -> None:
        """Continue from the newest checkpoint that verifies on every worker (collective).
        A restart (not ``required``: no ``--resume``) whose checkpoints all fail their
        check sets them aside and starts again from step 0, saying so."""
        chosen, skipped = checkpoint.choose(run, self.rank, self.world, self._agree, required)
        names = ", ".join(bad.checkpoint.path.name for bad in skipped)
        aside = checkpoint.folder(run) / "unusable"
        if chosen is None:
            if self.rank == 0:
                checkpoint.set_aside(run, [bad.checkpoint for bad in skipped])
                self._restarted(0, None, f"no usable checkpoint ({names} set aside in {aside}); "
                                         "starting again from step 0")
                faults.answer(self.run_dir, f"fell back to step 0 ({names} unusable)")
            return
        checkpoint.check_identity(run, chosen, self.identity)
        for bad in skipped:  # each worker names its own problem; rank 0 sets them aside
            if bad.problem:
                checkpoint.warn(f"checkpoint {bad.checkpoint.path.name} is not usable: "
                                f"{bad.problem}")
            if self.rank == 0:
                checkpoint.warn(f"checkpoint {bad.checkpoint.path.name} set aside in {aside} "
                                f"(worker(s) {', '.join(map(str, bad.ranks))}); continuing "
                                f"from {chosen.path.name}")
        if self.rank == 0:
            checkpoint.set_aside(run, [bad.checkpoint for bad in skipped])
        state = checkpoint.read(chosen, self.rank)
        self._restore(state)
        if self.rank == 0:
            self.restarts = list(state.get("restarts", []))
            self._restarted(self.steps, chosen.path.name,
                            f"continuing from {chosen.path.name} at step {self.steps}")
            if skipped:
                faults.answer(self.run_dir, f"fell back to {chosen.path.name} ({names} unusable)")

    def _restarted(self, from_step: int, chosen: str | None, how: str) -> None:
        """Rank 0: count a resume or a restart from ``from_step`` (of the checkpoint
        ``chosen``, None: from scratch); a restart is said (``how``) and logged as the
        answer to its faults (before this worker's progress mark is written anew)."""
        reached = checkpoint.reached(self.run_dir)
        redone = None if reached is None else max(0, reached - from_step)
        self.restarts.append({"kind": "restart" if self.attempt > 0 else "resume",
                              "attempt": self.attempt, "from_step": from_step,
                              "reached_step": reached, "steps_redone": redone,
                              "checkpoint": chosen})
        if self.attempt > 0:
            checkpoint.warn(f"restart {self.attempt}: {how} "
                            f"({'?' if redone is None else redone} steps to redo)")
            faults.answer(self.run_dir, f"restart {self.attempt} from step {from_step}")

    def _restore(self, state: dict[str, Any]) -> None:
        for key in ("steps", "train_seconds", "data_seconds"):
            setattr(self, key, state[key])
        self.pace.load_state_dict(state)
        for part, key in ((self.model, "model"), (self.opt, "optimizer"),
                          (self.strategy, "strategy"), (self.schedule, "schedule")):
            part.load_state_dict(state[key])
        torch.set_rng_state(state["rng"]["torch"])
        self.generator.set_state(state["rng"]["generator"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.rows = state.get("rows", [])
        self.reached = state.get("reached")

    def save_checkpoint(self) -> None:
        """Collective: every worker writes its file; rank 0 completes the checkpoint. The
        gathered records (each file's SHA-256 and size) are also the barrier."""
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

    def leader_model(self, leader: int | None) -> nn.Module | None:
        """A copy of the leader's model on every worker (one broadcast), with --eval-leader."""
        if leader is None or not self.cfg.evaluation.eval_leader:
            return None
        return model_copy(self.strategy.comm, self.model, leader)

    def evaluation(self) -> dict[str, Any]:
        """Collective: the row of the center, the leader (and each worker, with
        --eval-workers), with every worker's own figures in columns of its own."""
        report = self.strategy.report()
        own = self.task.evaluate(self.model) if self.cfg.evaluation.eval_workers else None
        row, every = self.evaluate(
            accuracy=own.correct / own.count if own is not None else math.nan,
            loss=own.loss / own.count if own is not None else math.nan,
            steps=self.steps, rounds=report.rounds, wait_seconds=report.wait_seconds,
            comm_seconds=report.comm_seconds, resets=report.resets)
        spread = self.strategy.spread()  # decentralized: mean distance of the workers to the center
        if spread is not None:
            row["spread"] = spread
        world = range(self.world)
        row.update({f"worker{r}_train_loss": float(every["train_loss"][r]) for r in world})
        row.update({f"worker{r}_{name}": kind(every[name][r])
                    for r in world for name, kind in PER_WORKER})
        if self.cfg.evaluation.eval_workers:
            row.update({f"worker{r}_{name}": float(every[name][r])
                        for r in world for name in ("accuracy", "loss")})
        return row

    def record(self, row: dict[str, Any]) -> None:
        """Keep the row; rank 0 also writes the leaders' history and TensorBoard's log."""
        super().record(row)
        if self.rank != 0:
            return
        if self.bar.disable and not self.cfg.output.quiet:  # no terminal: a line instead
            pace = self.pace
            where = (f" of {pace.max_steps:g}" if pace.by_steps
                     else f" ({row['time']:.1f} of {pace.max_seconds:g} s of training)")
            print(f"step {row['steps']:g}{where}: {self.task.headline.sentence(row)}, "
                  f"{row['bytes_sent_per_worker'] / 1e6:.1f} MB sent per worker",
                  file=sys.stderr, flush=True)
        history = self.strategy.report().leader_history
        outputs.write_csv(self.run_dir / "leader_history.csv",
                          [{"step": s, "level": lv, "leader": ld} for s, lv, ld in history],
                          ["step", "level", "leader"])
        if self.tensorboard is not None:
            self.tensorboard.log(row)

    def after_step(self, loss: torch.Tensor) -> None:
        """Mark the progress, say so on divergence, take the run's decisions, move the bar."""
        if self.progress_file is not None:
            self.progress_file.mark(self.steps)
        self._note_divergence()
        super().after_step(loss)
        pace, bar = self.pace, self.bar
        if not bar.disable:
            if self.evaluated_at == self.steps or self.steps % 10 == 0:  # when it redraws
                bar.set_postfix(self._shown(float(loss.detach())), refresh=False)
            bar.update((pace.mean_steps(self.steps) if pace.by_steps
                        else pace.shared_seconds) - bar.n)

    def _shown(self, loss: float) -> dict[str, str]:
        report = self.strategy.report()
        shown = {"epoch": f"{self.epochs_done():.2f}", "loss": f"{loss:.3f}"}
        if self.rows:
            shown[self.task.headline.label] = f"{self.rows[-1][self.task.column]:.4f}"
        if report.leader_rank is not None:
            shown["leader"] = str(report.leader_rank)
        shown["sent"] = f"{report.bytes_sent / 1e6:.1f} MB"
        return shown

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
        """The last evaluation (if not taken yet) and checkpoint; rank 0's summary."""
        if self.evaluated_at != self.steps:  # a resumed run that was already done
            self.record(self.evaluation())
        self.save_checkpoint()
        self.bar.close()
        if self.progress_file is not None:
            self.progress_file.close()
        report = self.strategy.report()
        every = gather_named(self.comm, {
            "bytes_sent": report.bytes_sent, "bytes_received": report.bytes_received,
            "link_bytes_sent": report.link_bytes_sent,
            "data_seconds": self.data_seconds, "train_seconds": self.train_seconds,
            "comm_seconds": report.comm_seconds, "steps": self.steps, "rounds": report.rounds,
            "wait_seconds": report.wait_seconds, "resets": report.resets,
            "skipped_steps": report.details.get("skipped_steps", 0)}, self.device)
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.rank != 0:
            return None
        cfg = self.cfg
        summary = self.write_summary(  # steps per worker: asynchronously, their mean
            float(every["steps"].sum()) / self.world if self.strategy.asynchronous else self.steps,
            **worker_figures(every, self.groups), rounds=report.rounds,
            leader_switches=report.leader_switches, asynchronous=self.strategy.asynchronous,
            straggle={str(r): f for r, f in cfg.straggler_factors().items()},
            restarts=sum(1 for r in self.restarts if r["kind"] == "restart"),
            steps_redone=sum(r["steps_redone"] or 0 for r in self.restarts),
            resumes=self.restarts)
        if strategy_class(cfg.method).uses_graph:  # the communication graph(s)
            with contextlib.suppress(ImportError):  # drawn with matplotlib, if installed
                drawn = draw_graphs(graphs_of(cfg), self.run_dir / "graphs.png")
                summary["plots"].append(str(drawn))
        return summary


def run_worker(info: lsgd.WorkerInfo, cfg: TrainConfig,
               started: float | None = None) -> dict[str, Any] | None:
    """Train as worker ``info.rank`` (a :class:`Worker`); rank 0 returns the run's summary."""
    return Worker(info, cfg, started).run()
