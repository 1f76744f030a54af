"""Overhead: what a strategy adds to a worker's own step, and what one round costs.

Two gloo worker processes on the loopback (one intra-op thread each, so what shows is
lsgd's own work) train cnn7 (and resnet20 in full mode) on one fixed random batch with
SGD (lr 0.01, momentum 0.9; DeMo without momentum, MuLoCo with Muon and AdamW): in a
plain PyTorch loop, and under each strategy of ``lsgd.strategy_names()`` at its default
knobs and ``period=8`` (one that cannot be built so is skipped), taking turns step by
step in a rotating order so that a busy machine slows them alike. Every step after a
warm-up is timed (wall and process CPU time); one in which ``strategy.rounds`` grew is a
*round step*, and one round costs the median round step minus the median local step
(the plain step's for all-reduce). Reported for rank 0 (:data:`COLUMNS`); the raw
timings of both ranks are kept.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import lsgd
from lsgd.bench.common import Result, median, train_step
from lsgd.models import build_model
from lsgd.registry import accepted_knobs

NAME = "overhead"
TITLE = "Overhead: a step under each strategy against plain PyTorch (2 gloo processes)"
COLUMNS = ["model", "method", "local step ms", "overhead %", "round step ms",
           "round cost ms", "round cost in steps", "round steps", "CPU overhead %"]
SHAPES = {"cnn7": (1, 28, 28), "resnet20": (3, 32, 32), "mlp": (1, 28, 28)}
PERIOD = 8
PLAIN = "plain PyTorch"
#: model -> (batch, timed steps, warm-up steps); full mode, then quick mode
FULL = {"cnn7": (128, 40, 3), "resnet20": (128, 24, 3)}
QUICK = {"cnn7": (16, 40, 3)}

Timings = list[tuple[float, float, bool]]  # (wall s, CPU s, a round was held) per step


def knobs(method: str) -> dict[str, Any]:
    """Default knobs, with ``period=8`` where the strategy takes a period."""
    return {"period": PERIOD} if "period" in accepted_knobs(method) else {}


#: A method's model, optimizer and strategy (None: plain PyTorch).
Stepper = tuple[nn.Module, torch.optim.Optimizer, "lsgd.Strategy | None"]


def measure(info: lsgd.WorkerInfo, name: str, batch: int, steps: int, warmup: int,
            seed: int) -> dict[str, Any]:
    """One worker process: the plain loop and every strategy, each on a model of its own,
    taking turns step by step; timings by method and, under ``"skipped"``, why a strategy
    could not be built."""
    shape = SHAPES[name]
    g = torch.Generator().manual_seed(seed + 1000 * (1 + info.rank))
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    def fresh(method: str = "") -> tuple[nn.Module, torch.optim.Optimizer]:
        """A model and its optimizer (DeMo's SGD has no momentum: DeMo's is its own)."""
        torch.manual_seed(seed)
        model = build_model(name, shape, 10)
        if method == "muloco":
            return model, lsgd.MuonAdamW(model, lr=0.01)
        return model, torch.optim.SGD(model.parameters(), lr=0.01,
                                      momentum=0.0 if method == "demo" else 0.9)

    steppers: dict[str, Stepper] = {PLAIN: (*fresh(), None)}
    skipped: dict[str, str] = {}
    for method in lsgd.strategy_names():
        model, opt = fresh(method)
        try:
            strategy = lsgd.make_strategy(method, model, opt, **knobs(method))
        except ValueError as error:  # the same on both workers: both skip it
            skipped[method] = str(error)
            continue
        steppers[method] = (strategy.model, opt, strategy)
    methods = list(steppers)
    timings: dict[str, Timings] = {m: [] for m in methods}
    gc.collect()
    for i in range(warmup + steps):  # one step of each method, in an order that rotates
        lsgd.get_communicator().barrier()  # both workers start each turn together
        for method in methods[i % len(methods):] + methods[: i % len(methods)]:
            model, opt, strategy = steppers[method]
            rounds = strategy.rounds if strategy is not None else 0
            start, cpu = time.perf_counter(), time.process_time()
            train_step(model, opt, x, y, strategy)  # forward pass to optimizer step
            if i >= warmup:  # wall and CPU seconds, and whether a round was held
                timings[method].append((time.perf_counter() - start, time.process_time() - cpu,
                                        strategy is not None and strategy.rounds != rounds))
    return {"timings": timings, "skipped": skipped, "threads": torch.get_num_threads()}


def summarize(timings: Timings, plain_ms: float, plain_cpu_ms: float) -> dict[str, Any]:
    """One method's row numbers from its timings and the plain step's medians (wall
    and CPU: the CPU time of a local step is what a busy machine disturbs least)."""
    def ms(column: int, held: bool) -> float | None:
        values = [1e3 * timing[column] for timing in timings if timing[2] == held]
        return median(values) if values else None

    local_ms, round_ms, local_cpu = ms(0, False), ms(0, True), ms(1, False)
    base = local_ms if local_ms is not None else plain_ms
    cost = round_ms - base if round_ms is not None else None
    return {"local_ms": local_ms, "round_ms": round_ms, "round_cost_ms": cost,
            "overhead_pct": 100 * (local_ms / plain_ms - 1) if local_ms is not None else None,
            "round_cost_steps": cost / plain_ms if cost is not None else None,
            "round_steps": sum(held for _, _, held in timings), "steps": len(timings),
            "local_cpu_ms": local_cpu, "round_cpu_ms": ms(1, True),
            "cpu_overhead_pct": 100 * (local_cpu / plain_cpu_ms - 1) if local_cpu else None,
            "cost_base": "local" if local_ms is not None else "plain"}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Measure every model's plain step and strategies in 2 gloo processes."""
    seed = int(options.get("seed") or 0)
    plan = QUICK if quick else FULL
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"world_size": 2, "groups": 1, "period": PERIOD, "seed": seed,
                            "models": {}, "skipped": {}, "load_before": os.getloadavg()}
    for name, (batch, steps, warmup) in plan.items():
        ranks = lsgd.launch(measure, 2, 1, args=(name, batch, steps, warmup, seed), timeout=300)
        mine = ranks[0]["timings"]
        plain_ms, plain_cpu_ms = (median([1e3 * t[i] for t in mine[PLAIN]]) for i in (0, 1))
        summary = {m: summarize(t, plain_ms, plain_cpu_ms) for m, t in mine.items() if m != PLAIN}
        data["skipped"].update(ranks[0]["skipped"])
        data["models"][name] = {
            "batch": batch, "steps": steps, "warmup": warmup, "plain_ms": plain_ms,
            "plain_cpu_ms": plain_cpu_ms, "threads_per_worker": ranks[0]["threads"],
            "summary": summary, "knobs": {m: knobs(m) for m in summary},
            "raw_seconds": [r["timings"] for r in ranks]}  # by rank, then method
        rows.append([name, PLAIN, plain_ms, 0.0, None, None, None, f"0/{steps}", 0.0])
        for method, s in summary.items():
            rows.append([name, method, s["local_ms"], s["overhead_pct"], s["round_ms"],
                         s["round_cost_ms"], s["round_cost_steps"],
                         f"{s['round_steps']}/{s['steps']}", s["cpu_overhead_pct"]])
    data["load_after"] = os.getloadavg()
    sizes = ", ".join(f"{n} batch {b}, {s} timed steps after {w}" for n, (b, s, w) in plan.items())
    notes = [f"Medians of rank 0 of 2 gloo processes on loopback ({sizes}), period {PERIOD}: "
             "'overhead %' is what a strategy adds to a step without communication, "
             "'round cost' what one round adds on top of that, in ms and in plain steps.",
             "allreduce communicates in every step, so its round cost is taken against the "
             "plain step; sgd never communicates, matcha only in some of its every-8-step "
             "turns (its budget); loopback makes rounds cheap, a slow link dearer.",
             f"Load average {data['load_before'][0]:.1f} at the start on {os.cpu_count()} "
             "cores: above the number of cores, a step's wall time jumps between running "
             "alone and sharing a core, and 'CPU overhead %' (the process's CPU time in a "
             "local step against a plain step's) is the steadier measure of the local cost."]
    notes += [f"{m}: skipped ({why})" for m, why in data["skipped"].items()]
    return Result(NAME, TITLE, COLUMNS, rows, notes, data, figure(out, rows))


def figure(out: Path, rows: list[list[Any]]) -> list[str]:
    """Bars of the local and round steps of every method, one panel per model."""
    from lsgd.plots import pyplot, save

    plt = pyplot()
    if plt is None:
        return []
    models = list(dict.fromkeys(r[0] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, name in zip(axes[0], models):
        mine = [r for r in rows if r[0] == name]
        xs = list(range(len(mine)))
        ax.bar([x - 0.2 for x in xs], [r[2] or 0 for r in mine], width=0.4, label="local step")
        ax.bar([x + 0.2 for x in xs], [r[4] or 0 for r in mine], width=0.4, label="round step")
        ax.axhline(mine[0][2], color="gray", linestyle="--", linewidth=1, label="plain step")
        ax.set_xticks(xs, [r[1] for r in mine], rotation=45, ha="right", fontsize=8)
        ax.set(ylabel="ms per step (median, rank 0)", title=name)
        ax.legend(fontsize=8)
    return [str(save(fig, out / f"{NAME}.png"))]
