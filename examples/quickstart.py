"""Train a small CNN on Fashion-MNIST with every method, side by side.

A plain PyTorch training loop with an lsgd strategy dropped in. Each method
runs with the same workers, data shards, steps and seed, on the in-process
simulator (``--backend threads``, default) or as real gloo processes
(``--backend processes``), then prints the center's test accuracy and what
each worker sent.

    python examples/quickstart.py                      # Fashion-MNIST, 4 workers
    python examples/quickstart.py --dataset digits --steps 150
"""

from __future__ import annotations

import argparse
import functools
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd import data as datasets

METHODS = ("lsgd", "easgd", "local-sgd", "allreduce", "sgd")


@dataclass
class Config:
    method: str = "lsgd"
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    workers: int = 4
    groups: int = 1
    steps: int = 300
    batch_size: int = 64
    lr: float = 0.05
    period: int = 8
    seed: int = 0


@functools.lru_cache(maxsize=2)
def _load(dataset: str, data_dir: str | None) -> datasets.Dataset:
    return datasets.digits() if dataset == "digits" else datasets.fashion_mnist(data_dir)


def load(cfg: Config) -> datasets.Dataset:
    """The dataset, read once per process (simulated workers share it read-only)."""
    return _load(cfg.dataset, cfg.data_dir)


def make_model(data: datasets.Dataset) -> nn.Module:
    side = data.input_shape[-1]
    flat = 32 * (side // 4) ** 2
    return nn.Sequential(
        nn.Conv2d(data.input_shape[0], 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, data.classes),
    )


#: Each method's own knobs here; every method takes the common ones (init, bn_buffers).
KNOBS = {
    "lsgd": lambda cfg: {"pull": 0.1, "scope": 0.01, "period": cfg.period},
    "easgd": lambda cfg: {"moving_rate": 0.43, "period": cfg.period},
    "local-sgd": lambda cfg: {"period": cfg.period},
}


def make_strategy(cfg: Config, model: nn.Module, opt: torch.optim.Optimizer) -> lsgd.Strategy:
    """The method by its command-line name (lsgd.strategy_names()), through the registry."""
    knobs = KNOBS.get(cfg.method, lambda cfg: {})(cfg)
    return lsgd.make_strategy(cfg.method, model, opt, **knobs)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    correct = sum(int((model(x[i : i + 1000]).argmax(1) == y[i : i + 1000]).sum())
                  for i in range(0, len(x), 1000))
    return correct / len(x)


def worker(info: lsgd.WorkerInfo, cfg: Config) -> dict[str, Any]:
    """One worker's training loop: its own shard, its own optimizer, the strategy."""
    data = load(cfg)
    torch.manual_seed(cfg.seed)
    model = make_model(data)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    strategy = make_strategy(cfg, model, opt)
    torch.manual_seed(cfg.seed + 1 + info.rank)  # per-worker dropout stream
    start, steps, epoch = time.perf_counter(), 0, 0
    while steps < cfg.steps:
        order = datasets.shard(len(data.train_y), info.rank, info.world_size, epoch, cfg.seed)
        for batch in order[: len(order) // cfg.batch_size * cfg.batch_size].split(cfg.batch_size):
            model.train()
            loss = F.cross_entropy(strategy.model(data.train_x[batch]), data.train_y[batch])
            opt.zero_grad()
            loss.backward()
            strategy.step(loss)
            steps += 1
            if steps == cfg.steps:
                break
        epoch += 1
    seconds = time.perf_counter() - start
    center = strategy.center()  # collective: every worker takes part
    stats = strategy.report().as_dict()
    report = {"method": cfg.method, "bytes_sent": stats["bytes_sent"], "rounds": stats["rounds"],
              "seconds": seconds, "leader_rank": stats.get("leader_rank")}
    if info.rank == 0:  # evaluate once
        report["test_accuracy"] = accuracy(center, data.test_x, data.test_y)
        report["worker_test_accuracy"] = accuracy(model, data.test_x, data.test_y)
    return report


def run(cfg: Config, backend: str = "threads") -> dict[str, Any]:
    """Train ``cfg.method`` with ``cfg.workers`` workers; rank 0's report plus
    ``bytes_sent_per_worker``, the mean over workers (a leader sends more)."""
    if backend == "processes":
        results = lsgd.launch(worker, cfg.workers, cfg.groups, args=(cfg,))
    else:
        results = lsgd.simulate(worker, cfg.workers, cfg.groups, args=(cfg,), seed=cfg.seed)
    report = dict(results[0])
    report["bytes_sent_per_worker"] = sum(r["bytes_sent"] for r in results) / len(results)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="lsgd,easgd,local-sgd,allreduce",
                        help=f"comma-separated, from {', '.join(METHODS)}")
    parser.add_argument("--backend", choices=("threads", "processes"), default="threads")
    for field, value in asdict(Config()).items():
        if field != "method":
            kind = type(value) if value is not None else str
            parser.add_argument("--" + field.replace("_", "-"), type=kind, default=value)
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    if args.dataset not in ("fashion-mnist", "digits"):
        parser.error(f"unknown dataset {args.dataset!r}; choose fashion-mnist or digits")
    try:
        load(Config(dataset=args.dataset, data_dir=args.data_dir))
    except FileNotFoundError as error:
        parser.exit(2, f"error: {error}\n")
    fields = {k: getattr(args, k) for k in asdict(Config()) if k != "method"}
    print(f"{args.dataset}: {args.workers} workers ({args.backend}), {args.steps} steps each, "
          f"batch {args.batch_size}, period {args.period}")
    print(f"{'method':<10} {'center acc':>10} {'worker acc':>10} {'MB sent/worker':>15} "
          f"{'rounds':>7} {'seconds':>8}")
    for method in methods:
        report = run(Config(method=method, **fields), args.backend)
        print(f"{method:<10} {report['test_accuracy']:>10.4f} {report['worker_test_accuracy']:>10.4f} "
              f"{report['bytes_sent_per_worker'] / 1e6:>15.2f} {report['rounds']:>7} "
              f"{report['seconds']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
