"""``lsgd bench scaling``: time to a target and bytes per worker from one node to sixteen.

4, 16 and 64 workers in nodes of 4, 20 Mbit/s between nodes and free links inside one,
on the modeled clock with a fixed step time (:func:`_defaults`). Per size and method:
the time until the center first reaches the target (median over the seeds, evaluated
every few steps), the steps it took and the MB each worker sent until then. Methods
(:data:`KNOBS`): all-reduce, DiLoCo and multi-leader LSGD, plain and hidden, at the
knobs of the 12-worker setting. docs/benchmarks.md ("Many nodes") shows the results.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lsgd.bench import accuracy
from lsgd.bench.common import Result, in_parallel, median
from lsgd.plots import pyplot, save

KNOBS: dict[str, dict[str, Any]] = {
    "allreduce": {},
    "diloco": {"period": 16},
    "diloco-hidden": {"period": 16, "overlap": 2, "fragments": 2},
    "lsgd-multi": {"period": 4, "global_period": 16},
    "lsgd-multi-hidden": {"period": 4, "global_period": 16, "overlap": 3, "compress": "int8"}}


def _defaults(quick: bool) -> dict[str, Any]:
    shared = {"target": 0.8, "model": "mlp", "step_seconds": 0.05, "links": ["20mbit"]}
    if quick:
        return shared | {"sizes": [2, 4, 8], "node": 2, "seeds": 1, "budget": 20.0,
                         "dataset": "digits", "batch_size": 16, "eval_steps": 5}
    return shared | {"sizes": [4, 16, 64], "node": 4, "seeds": 2, "budget": 120.0,
                     "dataset": "fashion-mnist", "batch_size": 32, "eval_steps": 10}


def _knobs(name: str, groups: int) -> dict[str, Any]:
    """The method's knobs; on one node, multi-leader LSGD's local level only."""
    return {key: value for key, value in KNOBS[name].items()
            if groups > 1 or key != "global_period"}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    opts = _defaults(quick) | {k: v for k, v in options.items() if v is not None}
    opts |= {"backend": "threads", "eval": opts["budget"] / 12}
    link = opts["links"][0]
    methods = [m for m in opts.get("methods") or KNOBS if m in KNOBS]
    seeds = accuracy._seeds(opts)
    calls = [(out / f"{size}-workers", name, link, seed, _knobs(name, size // opts["node"]),
              opts, (size, size // opts["node"]))
             for seed in seeds for size in opts["sizes"] for name in methods]
    runs = in_parallel(accuracy._one, accuracy._numbered("run", calls), opts.get("jobs") or 1)
    rows, data = [], []
    for size in opts["sizes"]:
        for name in methods:
            mine = [r for r in runs if r["method"] == name and r["run"].startswith(
                str(out / f"{size}-workers"))]
            reached = [r for r in mine if r["time"] is not None]
            time_ = median([r["time"] for r in reached]) if len(reached) == len(mine) else None
            sent = median([_sent_until(r) for r in mine])
            steps = median([r["steps"] for r in reached]) if reached else None
            rows.append([size, size // opts["node"], name,
                         "-" if time_ is None else round(time_, 1),
                         "-" if steps is None else round(steps),
                         round(median([r["best"] for r in mine]), 4),
                         "-" if math.isnan(sent) else round(sent / 1e6, 2)])
            data.append({"workers": size, "method": name, "time": time_, "steps": steps,
                         "mb_per_worker": None if math.isnan(sent) else sent / 1e6})
    notes = [
        f"{', '.join(map(str, opts['sizes']))} workers in nodes of {opts['node']}, {link} "
        f"between nodes, free inside one; {opts['model']} on {opts['dataset']}, batch "
        f"{opts['batch_size']} per worker; modeled clock at {opts['step_seconds']:g} s per "
        f"step plus modeled transfers, at most {opts['budget']:g} s; the center evaluated "
        f"every {opts['eval_steps']} steps (off the clock); seeds "
        f"{', '.join(map(str, seeds))}.",
        "time s, steps: until the center first reaches the target (median; '-' when a "
        "seed missed it); best acc: the best within the budget (median); MB/worker: sent "
        "by a worker until the target (or the whole run when missed), median.",
        "knobs: " + "; ".join(f"{m} {KNOBS[m] or 'defaults'}" for m in methods)
        + " (on one node, multi-leader LSGD has its local level only)"]
    return Result("scaling", f"Time to {100 * opts['target']:g}% test accuracy against the "
                  "number of workers (modeled)",
                  ["workers", "nodes", "method", "time s", "steps", "best acc",
                   "MB/worker"], rows, notes, {"options": opts, "rows": data, "runs": runs},
                  _figure(out, data, methods, opts))


def _sent_until(run: dict[str, Any]) -> float:
    """MB a worker sent until the run's first evaluation at the target (all it sent
    when it never got there)."""
    if run["time"] is not None:
        for (sent, _), (time_, _) in zip(run["sent_curve"], run["curve"]):
            if time_ >= run["time"]:
                return float(sent)
    return float(run["bytes_per_worker"])


def _figure(out: Path, data: list[dict[str, Any]], methods: list[str],
            opts: dict[str, Any]) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, name in enumerate(methods):
        mine = [d for d in data if d["method"] == name]
        style = {"marker": "o", "label": name, "color": f"C{i}"}
        for ax, key in ((left, "time"), (right, "mb_per_worker")):
            shown = [d for d in mine if d[key] is not None]
            ax.plot([d["workers"] for d in shown], [d[key] for d in shown], **style)
    for ax, label in ((left, f"time to {100 * opts['target']:g}% (s, modeled)"),
                      (right, "MB sent per worker until then")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(opts["sizes"], [str(s) for s in opts["sizes"]])
        ax.set_xlabel(f"workers (nodes of {opts['node']}, {opts['links'][0]} between nodes)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    right.set_yscale("log")
    return [str(save(fig, out / "scaling.png"))]
