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

import copy
import functools
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd import augment, data as datasets
from lsgd.models import build_model
from lsgd.strategies.base import on_state_
from lsgd.train import checkpoint, outputs, plots
from lsgd.topology import Topology, draw, from_spec
from lsgd.train.config import DECENTRALIZED, TrainConfig
from lsgd.train.progress import Progress
from lsgd.train.schedule import Schedule

CLOCK_SYNC_EVERY = 10  # steps between broadcasts of rank 0's clock (time budgets only)
EVAL_BATCH = 1000


class UsageError(Exception):
    """A mistake in the command line or the environment, reported without a traceback."""


# -- building blocks --------------------------------------------------------------
def pick_device(cfg: TrainConfig) -> torch.device:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu")
    if cfg.device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


@functools.lru_cache(maxsize=2)
def _load(name: str, data_dir: str | None) -> datasets.Dataset | datasets.ImageFolder:
    return datasets.load_dataset(name, data_dir)


def load_data(cfg: TrainConfig) -> datasets.Dataset | datasets.ImageFolder:
    """The dataset, read once per process (simulated workers share it, read only)."""
    try:
        return _load(cfg.dataset, cfg.data_dir)
    except (FileNotFoundError, ImportError, ValueError) as error:
        raise UsageError(str(error)) from error


class Source:
    """Batches of one dataset on one device, with the chosen augmentation."""

    def __init__(self, data: datasets.Dataset | datasets.ImageFolder, cfg: TrainConfig,
                 device: torch.device) -> None:
        self.data = data
        self.device = device
        self.in_memory = isinstance(data, datasets.Dataset)
        preset = augment.paper_preset(cfg.dataset, cfg.model) if cfg.augment == "auto" else cfg.augment
        self.preset = preset
        self.train_fn = augment.train_transform(preset)
        self.test_fn = augment.test_transform(preset)
        self.n_train = len(data.train_y)
        self.n_test = len(data.test_y)

    def input_shape(self) -> tuple[int, int, int]:
        if not self.in_memory:
            return tuple(self.data.input_shape)  # type: ignore[return-value]
        return tuple(self.test_fn(self.data.test_x[:1]).shape[1:])  # type: ignore[return-value]

    def train_batch(self, idx: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.in_memory:
            x, y = self.data.load(idx, train=True, generator=generator)
        else:
            x = self.train_fn(self.data.train_x[idx], generator)
            y = self.data.train_y[idx]
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def test_batches(self, part: int = 0, parts: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The test set, or its ``part``-th of ``parts`` interleaved slices."""
        indices = torch.arange(part, self.n_test, parts)
        for idx in indices.split(EVAL_BATCH):
            if not self.in_memory:
                x, y = self.data.load(idx, train=False)
            else:
                x, y = self.test_fn(self.data.test_x[idx]), self.data.test_y[idx]
            yield x.to(self.device), y.to(self.device)


def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum,
                               nesterov=cfg.nesterov and cfg.momentum > 0,
                               weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return lsgd.LARS(lsgd.lars_param_groups(model, cfg.weight_decay), lr=cfg.lr,
                     momentum=cfg.momentum)


def make_strategy(cfg: TrainConfig, model: nn.Module, opt: torch.optim.Optimizer) -> lsgd.Strategy:
    common: dict[str, Any] = {"sync_buffers": cfg.sync_buffers}
    if cfg.method == "allreduce":
        return lsgd.AllReduce(model, opt, **common)
    common["init"] = cfg.init
    if cfg.method in ("lsgd", "easgd", "local-sgd"):
        common["asynchronous"] = cfg.asynchronous
    if cfg.method == "lsgd":
        check_single_leader(cfg, lsgd.get_communicator().groups)
        return lsgd.LSGD(model, opt, pull=cfg.pull, scope=cfg.scope, period=cfg.period,
                         pull_global=cfg.pull_global, scope_global=cfg.scope_global,
                         global_period=cfg.global_period, leader_window=cfg.leader_window, **common)
    if cfg.method == "easgd":
        return lsgd.EASGD(model, opt, moving_rate=cfg.moving_rate, period=cfg.period, **common)
    if cfg.method == "local-sgd":
        return lsgd.LocalSGD(model, opt, period=cfg.period, hierarchical=cfg.hierarchical,
                             global_period=cfg.global_period, **common)
    if cfg.method in DECENTRALIZED:
        return make_decentralized(cfg, model, opt, common)
    return lsgd.Independent(model, opt, **common)


def check_single_leader(cfg: TrainConfig, groups: int) -> None:
    """With one group LSGD has one level: a different ``--*-global`` value is a mistake."""
    if cfg.method != "lsgd" or groups != 1:
        return
    for plain, global_ in (("pull", "pull_global"), ("scope", "scope_global"),
                           ("period", "global_period")):
        value = getattr(cfg, global_)
        if value is not None and value != getattr(cfg, plain):
            flag, global_flag = plain.replace("_", "-"), global_.replace("_", "-")
            raise UsageError(
                f"--{global_flag} {value}: with one group LSGD has a single leader, set by "
                f"--{flag} {getattr(cfg, plain)}; drop --{global_flag}, or use several groups "
                "(--groups N, or one group per node under torchrun)"
            )


def graphs_of(cfg: TrainConfig) -> list[Topology]:
    """The communication graph(s) of a decentralized run (several: used in turn)."""
    specs = list(cfg.graphs) or [cfg.topology]
    try:
        graphs = [from_spec(spec, cfg.workers) for spec in specs]
        for graph in graphs if len(graphs) == 1 else []:
            graph.check_connected()
    except ValueError as error:
        raise UsageError(f"--topology/--graphs: {error}") from error
    return graphs


def make_decentralized(cfg: TrainConfig, model: nn.Module, opt: torch.optim.Optimizer,
                       common: dict[str, Any]) -> lsgd.Strategy:
    weight: Any = {"auto": None, "max-degree": "max-degree"}.get(cfg.mixing_weight)
    if weight is None and cfg.mixing_weight != "auto":
        weight = float(cfg.mixing_weight)
    shared = dict(topology=graphs_of(cfg), period=cfg.gossip_period, mixing_weight=weight,
                  **common)
    if cfg.method == "dpsgd":
        return lsgd.DPSGD(model, opt, **shared)
    if cfg.method == "matcha":
        return lsgd.MATCHA(model, opt, budget=0.5 if cfg.budget is None else cfg.budget,
                           seed=cfg.seed, **shared)
    return lsgd.ALDSGD(model, opt, c_B=cfg.c_b, c_D=cfg.c_d, p_B=cfg.p_b, p_D=cfg.p_d,
                       budget=1.0 if cfg.budget is None else cfg.budget, seed=cfg.seed,
                       leader_window=cfg.leader_window, **shared)


@torch.no_grad()
def evaluate(model: nn.Module, source: Source, part: int = 0, parts: int = 1) -> tuple[float, int, int]:
    """Summed test loss, correct predictions and count of ``model`` on a slice of the test set.

    Runs in eval mode and restores the mode it found.
    """
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for x, y in source.test_batches(part, parts):
        out = model(x)
        loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
        correct += int((out.argmax(1) == y).sum())
        count += len(y)
    model.train(was_training)
    return loss_sum, correct, count


def broadcast_model(comm: lsgd.Communicator, model: nn.Module, src: int) -> nn.Module:
    """A copy of worker ``src``'s model on every worker (one broadcast of its state)."""
    replica = copy.deepcopy(model)
    on_state_(replica, lambda buffer: comm.broadcast_(buffer, src=src))
    return replica


@torch.no_grad()
def recalibrate_bn(model: nn.Module, batches: list[torch.Tensor]) -> None:
    """Recompute BatchNorm running statistics as the plain average over ``batches``."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms or not batches:
        return
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for x in batches:
        model(x)
    for m, momentum in zip(norms, saved):
        m.momentum = momentum


def steps_per_epoch(cfg: TrainConfig, n_train: int) -> int:
    """Batches in one worker's shard (drop-last); a usage error if there are none."""
    steps = n_train // cfg.workers // cfg.batch_size
    if steps == 0:
        raise UsageError(
            f"--batch-size {cfg.batch_size} is larger than a worker's shard "
            f"({n_train // cfg.workers} examples); lower it or use fewer workers")
    return steps


def preflight(cfg: TrainConfig) -> None:
    """Check, in the launching process, what would otherwise fail in every worker:
    the device, the dataset, the model on the dataset's input, the graphs."""
    pick_device(cfg)
    source = Source(load_data(cfg), cfg, torch.device("cpu"))
    steps_per_epoch(cfg, source.n_train)
    try:
        with torch.device("meta"):
            build_model(cfg.model, source.input_shape(), source.data.classes)
    except ValueError as error:
        raise UsageError(f"--model {cfg.model} on --dataset {cfg.dataset}: {error}") from error
    if cfg.method in DECENTRALIZED:
        graphs_of(cfg)
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # under torchrun the groups are the nodes
        check_single_leader(cfg, cfg.groups)


# -- the worker ---------------------------------------------------------------------
class Worker:
    """The state of one worker's run; ``run()`` trains and returns rank 0's summary."""

    def __init__(self, info: lsgd.WorkerInfo, cfg: TrainConfig) -> None:
        self.info, self.cfg = info, cfg
        self.rank, self.world = info.rank, info.world_size
        self.comm = lsgd.get_communicator()
        self.run_dir = cfg.out_dir
        self.device = pick_device(cfg)
        self.source = Source(load_data(cfg), cfg, self.device)
        torch.manual_seed(cfg.seed)  # the same initial model everywhere
        self.model = build_model(cfg.model, self.source.input_shape(), self.source.data.classes)
        self.model.to(self.device)
        self.opt = make_optimizer(cfg, self.model)
        self.strategy = make_strategy(cfg, self.model, self.opt)
        self.schedule = Schedule(cfg.lr, cfg.schedule, cfg.drops, cfg.drop_factor, cfg.patience,
                                 cfg.warmup_epochs)
        torch.manual_seed(cfg.seed * 7919 + 1 + self.rank)  # per-worker dropout stream
        self.generator = torch.Generator().manual_seed(cfg.seed * 7919 + 10_000 + self.rank)
        self.steps_per_epoch = steps_per_epoch(cfg, self.source.n_train)
        budget = cfg.budgets()
        self.max_steps = min(
            budget.get("steps", math.inf),
            math.ceil(budget["epochs"] * self.steps_per_epoch) if "epochs" in budget else math.inf,
        )
        self.max_seconds = budget.get("minutes", math.inf) * 60
        kind, every = cfg.eval_interval()
        if kind == "auto":
            if math.isfinite(self.max_steps):
                kind, every = "steps", max(1, int(self.max_steps) // 10)
            else:
                kind, every = "seconds", self.max_seconds / 10
        self.eval_kind, self.eval_every = kind, every
        self.uses_clock = (math.isfinite(self.max_seconds) or kind == "seconds"
                           or cfg.schedule == "minutes")
        self.asynchronous = self.strategy.asynchronous
        simulated = lsgd.comm.current_simulated() is not None  # stragglers use its clock
        self.straggle = 1.0 if simulated else cfg.straggler_factors().get(self.rank, 1.0)
        # Position and accounting.
        self.steps = self.epoch = self.batch = 0
        self.train_seconds = self.data_seconds = 0.0
        self.shared_seconds = 0.0  # rank 0's training clock, as last broadcast
        self.shared_steps = 0.0  # steps per worker all agree on (async: the mean)
        self.next_eval = every
        self.next_checkpoint = cfg.checkpoint_every
        self.rows: list[dict[str, Any]] = []
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.loss_count = 0
        self.last_train_loss = math.nan
        self.start = time.perf_counter()
        self.tensorboard: outputs.TensorBoard | None = None
        if cfg.resume:
            self._restore(checkpoint.load(Path(cfg.resume), self.rank, self.world))

    # -- checkpoints ---------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state(), "generator": self.generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {
            "steps": self.steps, "epoch": self.epoch, "batch": self.batch,
            "train_seconds": self.train_seconds, "data_seconds": self.data_seconds,
            "shared_seconds": self.shared_seconds, "next_eval": self.next_eval,
            "shared_steps": self.shared_steps, "next_checkpoint": self.next_checkpoint,
            "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "strategy": self.strategy.state_dict(), "schedule": self.schedule.state_dict(),
            "rng": rng,
        }
        if self.rank == 0:
            state["rows"] = self.rows
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        for key in ("steps", "epoch", "batch", "train_seconds", "data_seconds",
                    "shared_seconds", "next_eval"):
            setattr(self, key, state[key])
        self.shared_steps = state.get("shared_steps", self.steps)
        self.next_checkpoint = state.get("next_checkpoint", self.next_checkpoint)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"]["torch"])
        self.generator.set_state(state["rng"]["generator"])
        if "cuda" in state["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.rows = state.get("rows", [])

    def save_checkpoint(self) -> None:
        checkpoint.save(self.run_dir, self.rank, self._state())
        with self.comm.category("control"):
            self.comm.barrier()
        if self.rank == 0:
            checkpoint.write_meta(self.run_dir, round(self.shared_steps), self.world)

    # -- evaluation ----------------------------------------------------------------
    def evaluate_all(self) -> dict[str, Any]:
        """Collective: test loss and accuracy of the center, the leader (and each worker).

        Every worker holds the center (and a copy of the leader, one broadcast) and
        evaluates its own interleaved slice of the test set; the sums are gathered.
        """
        cfg, strategy = self.cfg, self.strategy
        leader = getattr(strategy, "leader_rank", None)
        with self.comm.category("eval"):
            center = strategy.center()
            leader_model = broadcast_model(self.comm, self.model, leader) if leader is not None else None
        if cfg.bn_recalibrate:  # the same fixed batches on every worker
            order = datasets.shard(self.source.n_train, 0, self.world, 0, cfg.seed)
            fixed = torch.Generator().manual_seed(cfg.seed)
            recalibrate_bn(center, [
                self.source.train_batch(order[i * cfg.batch_size:(i + 1) * cfg.batch_size], fixed)[0]
                for i in range(min(cfg.bn_recalibrate, self.steps_per_epoch))
            ])
        nan = math.nan
        c_loss, c_correct, count = evaluate(center, self.source, self.rank, self.world)
        l_loss, l_correct, _ = (evaluate(leader_model, self.source, self.rank, self.world)
                                if leader_model is not None else (nan, nan, count))
        own_loss = own_acc = nan
        if cfg.eval_workers:
            loss_sum, correct, n = evaluate(self.model, self.source)
            own_loss, own_acc = loss_sum / n, correct / n
        train_loss = float(self.loss_sum / self.loss_count) if self.loss_count else self.last_train_loss
        self.last_train_loss = train_loss
        self.loss_sum.zero_()
        self.loss_count = 0
        stats = strategy.stats
        mine = torch.tensor([c_loss, c_correct, l_loss, l_correct, count, own_loss, own_acc,
                             train_loss, stats["bytes_sent"], self.steps, stats["rounds"],
                             stats["wait_seconds"]],
                            dtype=torch.float64, device=self.device)
        with self.comm.category("eval"):
            table = self.comm.all_gather(mine).cpu()
        spread = strategy.spread() if hasattr(strategy, "spread") else math.nan
        total = float(table[:, 4].sum())
        row: dict[str, Any] = {
            "time": self.shared_seconds if self.uses_clock else self.train_seconds,
            "wall_time": time.perf_counter() - self.start,
            "steps": self.shared_steps,
            "epoch": self.shared_steps / self.steps_per_epoch,
            "lr": self.opt.param_groups[0]["lr"],
            "center_loss": float(table[:, 0].sum()) / total,
            "center_accuracy": float(table[:, 1].sum()) / total,
            "leader_rank": leader,
            "leader_loss": float(table[:, 2].sum()) / total,
            "leader_accuracy": float(table[:, 3].sum()) / total,
            "train_loss": float(table[:, 7].mean()),
            "bytes_sent_per_worker": float(table[:, 8].mean()),
            "rounds": strategy.rounds,
        }
        if not math.isnan(spread):  # decentralized: mean distance of the workers to the center
            row["spread"] = spread
        for r in range(self.world):
            row[f"worker{r}_train_loss"] = float(table[r, 7])
        for r in range(self.world):  # per worker: own steps, rounds joined, seconds in rounds
            row[f"worker{r}_steps"] = int(table[r, 9])
            row[f"worker{r}_rounds"] = int(table[r, 10])
            row[f"worker{r}_wait_seconds"] = float(table[r, 11])
        if cfg.eval_workers:
            for r in range(self.world):
                row[f"worker{r}_accuracy"] = float(table[r, 6])
        return row

    def record(self, row: dict[str, Any]) -> None:
        self.schedule.observe(row["center_loss"])  # the same value on every worker
        if self.rank != 0:
            return
        self.rows.append(row)
        fields = outputs.METRIC_FIELDS + [k for k in row if k not in outputs.METRIC_FIELDS]
        outputs.write_csv(self.run_dir / "metrics.csv", self.rows, fields)
        history = getattr(self.strategy, "leader_history", [])
        outputs.write_csv(self.run_dir / "leader_history.csv",
                          [{"step": s, "level": lv, "leader": ld} for s, lv, ld in history],
                          ["step", "level", "leader"])
        if self.tensorboard is not None:
            self.tensorboard.log(row)

    # -- the loop ------------------------------------------------------------------
    def _due(self) -> tuple[bool, bool, bool]:
        """(evaluate now, checkpoint now, stop now), identical on every worker."""
        if self.asynchronous:
            if not self.strategy.at_sync_point:  # only sync points are common to all
                return False, False, False
            (self.shared_seconds,) = self.strategy.agree(self.train_seconds)
            self.shared_steps = self.strategy.total_steps / self.world  # exact after agree
        else:
            if self.uses_clock and self.steps % CLOCK_SYNC_EVERY == 0:
                clock = torch.tensor([self.train_seconds], dtype=torch.float64, device=self.device)
                with self.comm.category("control"):
                    self.comm.broadcast_(clock, src=0)
                self.shared_seconds = float(clock)
            self.shared_steps = self.steps
        stop = self.shared_steps >= self.max_steps or self.shared_seconds >= self.max_seconds
        position = self.shared_steps if self.eval_kind == "steps" else self.shared_seconds
        evaluate = position >= self.next_eval
        if evaluate:
            while self.next_eval <= position:
                self.next_eval += self.eval_every
        save = bool(self.cfg.checkpoint_every) and self.shared_steps >= self.next_checkpoint
        if save:
            while self.next_checkpoint <= self.shared_steps:
                self.next_checkpoint += self.cfg.checkpoint_every
        return evaluate, save and not stop, stop

    def _mean_steps(self) -> float:
        """Steps per worker: own (sync) or the workers' mean as last seen (async)."""
        return self.strategy.total_steps / self.world if self.asynchronous else self.steps

    def _epochs_done(self) -> float:
        return self._mean_steps() / self.steps_per_epoch

    def run(self) -> dict[str, Any] | None:
        cfg = self.cfg
        if self.rank == 0 and cfg.tensorboard:
            self.tensorboard = outputs.TensorBoard(self.run_dir)
        total = self.max_steps if math.isfinite(self.max_steps) else self.max_seconds
        progress = Progress(total, "steps" if math.isfinite(self.max_steps) else "s",
                            enabled=self.rank == 0 and not cfg.quiet)
        order = datasets.shard(self.source.n_train, self.rank, self.world, self.epoch, cfg.seed)
        self.model.train()
        last_eval_step = -1
        stop = self.shared_steps >= self.max_steps
        while not stop:
            if self.batch == self.steps_per_epoch:
                self.epoch, self.batch = self.epoch + 1, 0
                order = datasets.shard(self.source.n_train, self.rank, self.world, self.epoch,
                                       cfg.seed)
            t0 = time.perf_counter()
            idx = order[self.batch * cfg.batch_size:(self.batch + 1) * cfg.batch_size]
            x, y = self.source.train_batch(idx, self.generator)
            t1 = time.perf_counter()
            lr = self.schedule.lr(self._epochs_done(), self.shared_seconds / 60)
            for group in self.opt.param_groups:
                group["lr"] = lr
            loss = F.cross_entropy(self.strategy.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.straggle > 1:
                time.sleep((self.straggle - 1) * (time.perf_counter() - t0))
            self.strategy.step(loss)
            self.steps += 1
            self.batch += 1
            self.loss_sum += loss.detach()
            self.loss_count += 1
            self.data_seconds += t1 - t0
            self.train_seconds += time.perf_counter() - t0
            evaluate_now, save, stop = self._due()
            if evaluate_now or stop:
                self.record(self.evaluate_all())
                last_eval_step = self.steps
            if save:
                self.save_checkpoint()
            progress.update(self._mean_steps() if math.isfinite(self.max_steps)
                            else self.shared_seconds,
                            self.steps, lambda: self._progress_fields(float(loss.detach())))
        if last_eval_step != self.steps:  # a resumed run that was already done
            self.record(self.evaluate_all())
        self.save_checkpoint()
        progress.close(self._mean_steps() if math.isfinite(self.max_steps) else self.shared_seconds,
                       self.steps, self._progress_fields(self.last_train_loss))
        return self.finish()

    def _progress_fields(self, loss: float) -> dict[str, str]:
        last = self.rows[-1] if self.rows else {}
        fields = {"epoch": f"{self._epochs_done():.2f}", "loss": f"{loss:.3f}"}
        if last:
            fields["center acc"] = f"{last['center_accuracy']:.4f}"
        leader = getattr(self.strategy, "leader_rank", None)
        if leader is not None:
            fields["leader"] = str(leader)
        fields["sent"] = f"{self.strategy.stats['bytes_sent'] / 1e6:.1f} MB"
        return fields

    def finish(self) -> dict[str, Any] | None:
        stats = self.strategy.stats
        mine = torch.tensor([stats["bytes_sent"], stats["bytes_received"], self.data_seconds,
                             self.train_seconds, stats["comm_seconds"], self.steps,
                             stats["rounds"], stats["wait_seconds"]],
                            dtype=torch.float64, device=self.device)
        with self.comm.category("eval"):
            table = self.comm.all_gather(mine).cpu()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.rank != 0:
            return None
        last = self.rows[-1]
        worker_steps = [int(v) for v in table[:, 5]]
        steps = sum(worker_steps) / self.world if self.asynchronous else self.steps
        epochs = steps / self.steps_per_epoch
        summary = {
            "method": self.cfg.method, "model": self.cfg.model, "dataset": self.cfg.dataset,
            "workers": self.world, "groups": self.info.groups, "backend": self.cfg.backend,
            "test_accuracy": last["center_accuracy"], "test_loss": last["center_loss"],
            "leader_test_accuracy": _none_if_nan(last["leader_accuracy"]),
            "leader_rank": last["leader_rank"],
            "steps": steps, "epochs": epochs,
            "wall_seconds": time.perf_counter() - self.start,
            "train_seconds": self.train_seconds,
            "seconds_per_epoch": self.train_seconds / epochs if epochs else None,
            "data_loading_fraction": float((table[:, 2] / table[:, 3].clamp_min(1e-12)).mean()),
            "bytes_sent_per_worker": float(table[:, 0].mean()),
            "bytes_received_per_worker": float(table[:, 1].mean()),
            "comm_seconds_per_worker": float(table[:, 4].mean()),
            "rounds": stats["rounds"],
            "leader_switches": stats.get("leader_switches", 0),
            "asynchronous": self.asynchronous,
            "straggle": {str(r): f for r, f in self.cfg.straggler_factors().items()},
            "total_steps": sum(worker_steps),
            "steps_per_second": sum(worker_steps) / max(float(table[:, 3].mean()), 1e-12),
            "worker_steps": worker_steps,
            "worker_rounds": [int(v) for v in table[:, 6]],
            "worker_wait_seconds": [float(v) for v in table[:, 7]],
            "out": str(self.run_dir),
        }
        outputs.write_json(self.run_dir / "summary.json", summary)
        summary["plots"] = [str(p) for p in plots.plot_run(self.run_dir)]
        graphs = getattr(self.strategy, "graphs", None)
        if graphs:  # the communication graph(s) of a decentralized run
            try:
                summary["plots"].append(str(draw(graphs, self.run_dir / "graphs.png")))
            except ImportError:
                pass
        return summary


def _none_if_nan(value: float) -> float | None:
    return None if isinstance(value, float) and math.isnan(value) else value


def run_worker(info: lsgd.WorkerInfo, cfg: TrainConfig) -> dict[str, Any] | None:
    """Train as worker ``info.rank``; rank 0 returns the run's summary."""
    return Worker(info, cfg).run()
