"""The simulator's speed: W simulated workers against W models in a plain loop.

W workers (1, 4, 8 and 16; quick: 1 and 4) each train a small model (``mlp``, and
``cnn7`` in full mode; batch 32 of random batches made beforehand) for S steps under
LSGD (period 8) inside one ``lsgd.simulate`` call, against the same W models trained one
after another in a plain loop: steps per second over the wall time of each, and the
ratio (what an exact simulated experiment costs over the bare work), also in process CPU
time (which leaves out the waits for a core). Both run on one intra-op thread after an
untimed warm-up, each pair a few times, taking turns to go first; the fastest is kept.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

import lsgd
from lsgd.bench.common import Result, train_step
from lsgd.models import build_model

NAME = "simulator"
TITLE = "The simulator: steps per second of simulated workers against a plain loop"
COLUMNS = ["model", "workers", "simulated steps/s", "plain steps/s", "ratio", "CPU ratio"]
SHAPE = (1, 28, 28)
BATCH = 32
PERIOD = 8
#: model -> (steps per worker, repeats); full mode, then quick mode
FULL = {"mlp": (128, 3), "cnn7": (16, 2)}
QUICK = {"mlp": (64, 3)}
Batches = list[tuple[torch.Tensor, torch.Tensor]]


def batches(seed: int, workers: int, steps: int) -> list[Batches]:
    """Each worker's ``steps`` random batches, made before any timing."""
    g = torch.Generator().manual_seed(seed)
    return [[(torch.randn(BATCH, *SHAPE, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
             for _ in range(steps)] for _ in range(workers)]


def worker(info: lsgd.WorkerInfo, name: str, data: list[Batches], seed: int) -> int:
    """One simulated worker: its model under LSGD (period 8); the rounds it held."""
    torch.manual_seed(seed)
    model = build_model(name, SHAPE, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    strategy = lsgd.make_strategy("lsgd", model, opt, period=PERIOD)
    for x, y in data[info.rank]:
        train_step(strategy.model, opt, x, y, strategy)
    return strategy.rounds


def plain(name: str, data: list[Batches], seed: int) -> None:
    """The same models trained one after another, no strategy, no simulator."""
    for mine in data:
        torch.manual_seed(seed)
        model = build_model(name, SHAPE, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in mine:
            train_step(model, opt, x, y)


def measure(plan: dict[str, tuple[int, int]], counts: list[int], seed: int
            ) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """The table's rows and the raw timings of every model and number of workers."""
    runs: list[dict[str, Any]] = []
    for name, (steps, repeats) in plan.items():
        warm = batches(seed, 1, 2)  # untimed: the first steps pay for lazy setup
        lsgd.simulate(worker, 1, 1, args=(name, warm, seed), seed=seed)
        plain(name, warm, seed)
        for workers in counts:
            data = batches(seed, workers, steps)
            times: dict[str, list[tuple[float, float]]] = {"simulated": [], "plain": []}
            jobs = [("simulated", lambda: lsgd.simulate(worker, workers, 1, seed=seed,
                                                        args=(name, data, seed))),
                    ("plain", lambda: plain(name, data, seed))]
            rounds: list[int] = []
            for repeat in range(repeats):  # take turns to go first: load hits both alike
                for kind, job in jobs if repeat % 2 == 0 else jobs[::-1]:
                    start, cpu = time.perf_counter(), time.process_time()
                    result = job()
                    times[kind].append((time.perf_counter() - start, time.process_time() - cpu))
                    rounds = result if kind == "simulated" else rounds
            simulated, loop = times["simulated"], times["plain"]
            sim_rate = workers * steps / min(w for w, _ in simulated)
            plain_rate = workers * steps / min(w for w, _ in loop)
            runs.append({"model": name, "workers": workers, "steps": steps, "batch": BATCH,
                         "simulated_seconds": simulated, "plain_seconds": loop,
                         "rounds_per_worker": rounds, "simulated_steps_per_s": sim_rate,
                         "plain_steps_per_s": plain_rate, "ratio": sim_rate / plain_rate,
                         "cpu_ratio": min(c for _, c in loop) / min(c for _, c in simulated)})
    keys = ("model", "workers", "simulated_steps_per_s", "plain_steps_per_s", "ratio", "cpu_ratio")
    return [[run[key] for key in keys] for run in runs], runs


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Time the simulator and the plain loop for every model and number of workers."""
    seed = int(options.get("seed") or 0)
    plan = QUICK if quick else FULL
    counts = [1, 4] if quick else [1, 4, 8, 16]
    threads, load = torch.get_num_threads(), os.getloadavg()
    torch.set_num_threads(1)
    try:
        rows, runs = measure(plan, counts, seed)
    finally:
        torch.set_num_threads(threads)
    sizes = ", ".join(f"{n} {s} steps per worker, best of {r}" for n, (s, r) in plan.items())
    notes = [f"Steps per second of all workers together ({sizes}; batch {BATCH}; LSGD, "
             f"period {PERIOD}, in the simulator). A ratio near 1 means a simulated run costs "
             "about what training the same models one after another costs; below 1 is the "
             "price of the threads' turns, the strategy and its rounds.",
             "'CPU ratio' is the same ratio in process CPU time, which leaves out waiting "
             f"for a core (load average {load[0]:.1f} on {os.cpu_count()} cores at the "
             "start): where it is well above 'ratio', the gap is the machine's load (every "
             "step hands the turn to another thread), not work the simulator does."]
    return Result(NAME, TITLE, COLUMNS, rows, notes,
                  {"seed": seed, "period": PERIOD, "batch": BATCH, "intra_op_threads": 1,
                   "load_before": load, "load_after": os.getloadavg(), "runs": runs},
                  figure(out, rows))


def figure(out: Path, rows: list[list[Any]]) -> list[str]:
    """Steps per second against workers, simulated and plain, one pair of lines per model."""
    from lsgd.plots import log_log_axes, pyplot, save

    plt = pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name]
        line, = ax.plot([r[1] for r in mine], [r[2] for r in mine], marker="o",
                        label=f"{name}, simulated")
        ax.plot([r[1] for r in mine], [r[3] for r in mine], marker="x", linestyle="--",
                color=line.get_color(), label=f"{name}, plain loop")
    log_log_axes(ax, "workers", "steps per second (all workers)")
    return [str(save(fig, out / f"{NAME}.png"))]
