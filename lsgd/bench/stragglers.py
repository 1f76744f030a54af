"""Stragglers: synchronous against asynchronous LSGD with one slow worker.

LSGD trains CNN7 on Fashion-MNIST with 4 worker processes for the same training time,
synchronously and asynchronously (``--async``: rounds fall due by the total steps of all
workers, so the fast ones do not wait for the slow one), the last worker slowed by a
factor of 2 and 3 (it sleeps ``factor - 1`` times its compute after every step).
Reported: the steps per second of all workers, async over sync, each worker's steps and
seconds in rounds, and the center's accuracy at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, train
from lsgd.plots import pyplot, save


def _defaults(quick: bool) -> dict[str, Any]:
    if quick:
        return {"factors": [3.0], "budget": 3.0, "model": "mlp", "dataset": "digits",
                "backend": "processes", "period": 8, "batch_size": 32}
    return {"factors": [2.0, 3.0], "budget": 90.0, "model": "cnn7", "dataset": "fashion-mnist",
            "backend": "processes", "period": 16, "batch_size": 128}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Each straggler factor, synchronous then asynchronous LSGD."""
    opts = _defaults(quick) | {k: v for k, v in options.items() if v is not None}
    workers = 4
    rows: list[list[Any]] = []
    runs: list[dict[str, Any]] = []
    for factor in opts["factors"]:
        sync_rate = None
        for mode, asynchronous in (("sync", False), ("async", True)):
            summary = train(out / "runs" / f"{mode}-x{factor:g}", method="lsgd",
                            workers=workers, model=opts["model"], dataset=opts["dataset"],
                            backend=opts["backend"], period=opts["period"],
                            batch_size=opts["batch_size"], asynchronous=asynchronous,
                            straggle=[f"{workers - 1}:{factor:g}"], eval_every="100000",
                            seed=opts.get("seed", 0), reuse=opts.get("reuse", False),
                            minutes=opts["budget"] / 60)
            summary.pop("rows")
            rate = summary["steps_per_second"]
            sync_rate = sync_rate or rate
            runs.append(summary | {"factor": factor, "mode": mode})
            rows.append([f"{factor:g}", mode, rate, rate / sync_rate,
                         " ".join(str(n) for n in summary["worker_steps"]),
                         " ".join(f"{t:.0f}" for t in summary["worker_wait_seconds"]),
                         summary["test_accuracy"]])
    notes = [f"LSGD, {opts['model']} on {opts['dataset']}, {workers} workers "
             f"({opts['backend']}), period {opts['period']}, worker {workers - 1} slowed by "
             f"the factor, {opts['budget']:g} s of training per run; time in rounds in "
             "wall-clock seconds.",
             "ratio: throughput over the synchronous run's with the same straggler."]
    return Result("stragglers", "Stragglers: synchronous against asynchronous LSGD",
                  ["factor", "mode", "steps/s", "ratio", "steps per worker",
                   "s in rounds per worker", "center acc"], rows, notes,
                  {"options": opts, "runs": runs},
                  _figure(out / "stragglers.png", runs, workers - 1))


def _figure(path: Path, runs: list[dict[str, Any]], slow: int) -> list[str]:
    """Bars side by side per straggler factor: throughput, and the center's accuracy."""
    plt = pyplot()
    if plt is None:
        return []
    factors = sorted({r["factor"] for r in runs})
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    panels = (("steps_per_second", "steps/s, all workers", 1.0),
              ("test_accuracy", "test accuracy of the center (%)", 100.0))
    for ax, (key, label, scale) in zip(axes, panels):
        for shift, mode in ((-0.2, "sync"), (0.2, "async")):
            values = [scale * next(r[key] for r in runs
                                   if r["factor"] == f and r["mode"] == mode) for f in factors]
            bars = ax.bar([i + shift for i in range(len(factors))], values, width=0.4, label=mode)
            ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_xticks(range(len(factors)), [f"worker {slow} {f:g}x slower" for f in factors])
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    axes[1].set_ylim(bottom=min(100 * r["test_accuracy"] for r in runs) - 5)
    return [str(save(fig, path))]
