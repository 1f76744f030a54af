"""One study's runs: variants of a method trained from the same seeds on one task, each
run's loss (or accuracy) at equal steps and its steps and modeled time to a target.

A *task* is the model, the data and the number of workers (:data:`TASKS`: lsgd's GPT on
the King James Bible, CNN7 on Fashion-MNIST; 4 workers as 4 nodes, in the simulator). A
run trains ``steps`` steps on the simulator's clock (``step_seconds`` per step plus the
transfers of the modeled ``link``), the center evaluated every ``eval_every`` steps, and
never stops early, so one run gives both numbers: the center's metric at the end (equal
tokens) and the first evaluation that reaches the task's target (steps and modeled
seconds). The variants of a study run seed by seed, interleaved (:func:`run_variants`),
and :func:`summarize` gives each variant's median [min-max] over the seeds.

A difference between two variants is called one only where their seeds' spreads do not
overlap (:func:`apart`). The studies :mod:`studies.tuning` and :mod:`studies.quality` are
made of such runs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsgd.bench.common import in_parallel, median, train

#: task -> the settings every run of it shares, its metric, which way is better, its target.
TASKS: dict[str, dict[str, Any]] = {
    "language": {"settings": {"dataset": "kjv", "model": "gpt", "eval_tokens": 16384},
                 "metric": "center_loss", "lower": True, "target": 2.2, "steps": 300,
                 "eval_every": 10},
    "cnn7": {"settings": {"dataset": "fashion-mnist", "model": "cnn7"},
             "metric": "center_accuracy", "lower": False, "target": 0.85, "steps": 200,
             "eval_every": 20},
    # the regime study's GPT (studies/regime.py): 120,576 parameters
    "language-small": {"settings": {"dataset": "kjv", "model": "gpt", "context": 64,
                                    "layers": 2, "width": 64, "heads": 2,
                                    "eval_tokens": 16384},
                       "metric": "center_loss", "lower": True, "target": 2.6, "steps": 300,
                       "eval_every": 10},
    # studies/regime_gpu.py's GPT: 1,853,568 parameters, 20 tokens per parameter in
    # 2,263 steps of 32 windows of 128 bytes per worker
    "language-gpu": {"settings": {"dataset": "kjv", "model": "gpt", "context": 128,
                                  "layers": 4, "width": 192, "heads": 4,
                                  "eval_tokens": 65536, "batch_size": 32},
                     "metric": "center_loss", "lower": True, "target": 1.6, "steps": 2263,
                     "eval_every": 226},
    # the quick forms, for tests: a one-block GPT, an MLP on the digits
    "language-quick": {"settings": {"dataset": "kjv", "model": "gpt", "context": 32,
                                    "layers": 1, "width": 32, "heads": 2, "batch_size": 8,
                                    "eval_tokens": 2048},
                       "metric": "center_loss", "lower": True, "target": 5.0, "steps": 12,
                       "eval_every": 4},
    "digits-quick": {"settings": {"dataset": "digits", "model": "mlp", "batch_size": 32},
                     "metric": "center_accuracy", "lower": False, "target": 0.5,
                     "steps": 12, "eval_every": 4},
}
WORKERS = 4
#: The simulator's clock: seconds per step, and the link of the periodic methods (all-reduce
#: runs on the free network, :data:`FREE`).
STEP_SECONDS = 0.135
LINK, FREE = "20mbit", "1gbit"


def slug(settings: dict[str, Any]) -> str:
    """A run folder's name from its settings."""
    return "-".join(f"{k}{v}".replace("/", "_") for k, v in sorted(settings.items()))


def one_run(out: Path, task: str, label: str, settings: dict[str, Any], seed: int,
            reuse: bool | str = False, steps: int | None = None,
            device: str | None = None) -> dict[str, Any]:
    """Train one variant on one seed (on ``device``, default train's); its metric at the
    end, its first evaluation at the target (steps, modeled seconds), the bytes each
    worker sent and its curve. ``settings`` may name its own ``steps`` (a point of
    another batch size at equal tokens)."""
    spec = TASKS[task]
    settings = dict(settings)
    steps = settings.pop("steps", None) or steps or spec["steps"]
    link = settings.get("link") or (FREE if settings.get("method") == "allreduce" else LINK)
    every = settings.pop("eval_every", None) or spec["eval_every"]
    run = out / "runs" / task / f"{slug(settings)}-s{steps}-seed{seed}"
    if device:  # where it runs, not what: not in the run's name
        settings = settings | {"device": device}
    summary = train(run, reuse=reuse, workers=WORKERS, groups=WORKERS, backend="threads",
                    step_seconds=STEP_SECONDS, steps=steps, eval_every=str(every),
                    eval_leader=False, seed=seed,
                    **(spec["settings"] | {"link": link} | settings))
    rows = [r for r in summary["rows"] if r.get(spec["metric"]) is not None]
    metric, lower, target = spec["metric"], spec["lower"], spec["target"]
    hit = next((r for r in rows if (r[metric] <= target if lower else r[metric] >= target)),
               None)
    final = rows[-1][metric] if rows else math.nan
    print(f"  {task} {label} seed {seed}: {metric} {final:.4f} at {steps} steps; target "
          + (f"at step {hit['steps']}" if hit else "missed"), file=sys.stderr, flush=True)
    return {"label": label, "seed": seed, "final": final,
            "steps": int(hit["steps"]) if hit else None,
            "time": float(hit["time"]) if hit else None,
            "bytes": summary["bytes_sent_per_worker"],
            "curve": [(r["steps"], r["time"], r[metric]) for r in rows]}


def run_variants(out: Path, task: str, variants: dict[str, dict[str, Any]],
                 seeds: Sequence[int], options: dict[str, Any], steps: int | None = None
                 ) -> list[dict[str, Any]]:
    """Every variant on every seed, seed by seed (interleaved), ``--jobs`` at a time (the
    study's ``options``: ``jobs``, ``reuse``, ``device``)."""
    calls = [(out, task, label, dict(settings), seed, options.get("reuse") or False, steps,
              options.get("device")) for seed in seeds for label, settings in variants.items()]
    jobs = options.get("jobs") or 1
    return in_parallel(one_run, calls, jobs)


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) of the values; ``None`` where any is missing (a missed target)."""
    if not values or any(v is None or (isinstance(v, float) and math.isnan(v))
                         for v in values):
        return None, None, None
    return median(list(values)), min(values), max(values)  # type: ignore[type-var]


def apart(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the seeds' spreads of ``a`` and ``b`` do not overlap."""
    return max(a) < min(b) or max(b) < min(a)


def summarize(task: str, results: list[dict[str, Any]], labels: Sequence[str]
              ) -> list[dict[str, Any]]:
    """Per variant: the metric at the end, steps and modeled time to the target (median,
    min, max over its seeds) and the MB each worker sent (median)."""
    out = []
    for label in labels:
        runs = [r for r in results if r["label"] == label]
        out.append({"label": label, "seeds": [r["seed"] for r in runs],
                    "final": spread([r["final"] for r in runs]),
                    "finals": [r["final"] for r in runs],
                    "steps": spread([r["steps"] for r in runs]),
                    "time": spread([r["time"] for r in runs]),
                    "mb": median([r["bytes"] / 1e6 for r in runs])})
    return out


def cell(value: tuple[float | None, float | None, float | None], digits: int = 3) -> str:
    """``median [min-max]``, or '-' for a missed target."""
    mid, lo, hi = value
    if mid is None:
        return "-"
    return f"{mid:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"
