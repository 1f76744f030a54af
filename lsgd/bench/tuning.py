"""Tuning as a benchmark: the grids behind the defaults of ``lsgd train``.

``lsgd bench tuning`` screens a grid per task and method on one seed (1000), then runs
the best :data:`FINALISTS` points of each method on three seeds (0, 1, 2, interleaved);
the point with the best median metric at the end is chosen, and
:data:`lsgd.train.tuned.TUNED` holds the chosen points (a test checks that it equals
these records). Every run is a :mod:`lsgd.bench.study` run: 4 workers as 4 nodes in the
simulator, 300 steps, the metric at the end (equal tokens) and the steps to the target.

Grids (``--sets language,cnn7`` picks tasks; a point is the knobs that differ from the
task's base):

* all-reduce: the learning rate, the warm-up, the batch;
* DiLoCo: the inner and outer learning rates, the outer momentum, the period;
  one point with Muon as the inner optimizer (``--optimizer muon``);
* local SGD: the inner learning rate and the period;
* LSGD: the inner learning rate, the pull, the period, the scope and the leader's momentum.

The periodic methods send int8 rounds (the form that sends 100x fewer bytes than
all-reduce at period 32). ``--quick``: a one-block GPT, two points per method.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from lsgd.bench import study
from lsgd.bench.common import Result

NAME = "tuning"
SCREEN_SEED = 1000
FINALISTS = 3


def _grid(**axes: list[Any]) -> list[dict[str, Any]]:
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*axes.values())]


#: task -> method -> (the base every point shares, the points).
GRIDS: dict[str, dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]] = {
    "language": {
        "allreduce": ({"method": "allreduce", "warmup_epochs": 0.1},
                      _grid(lr=[0.0005, 0.001, 0.0015, 0.002, 0.003])
                      + [{"lr": 0.001, "warmup_epochs": 0.05},
                         {"lr": 0.002, "warmup_epochs": 0.05},
                         {"lr": 0.001, "batch_size": 8}, {"lr": 0.001, "batch_size": 32}]),
        "diloco": ({"method": "diloco", "compress": "int8", "warmup_epochs": 0.1},
                   _grid(lr=[0.001, 0.002, 0.003], outer_lr=[0.35, 0.7, 1.0], period=[16, 32])
                   + [{"lr": 0.002, "outer_lr": 0.7, "period": 32, "outer_momentum": 0.8},
                      {"lr": 0.001, "outer_lr": 0.35, "period": 32, "outer_momentum": 0.8},
                      {"lr": 0.002, "outer_lr": 0.7, "period": 32, "optimizer": "muon"}]),
        "local-sgd": ({"method": "local-sgd", "compress": "int8", "warmup_epochs": 0.1},
                      _grid(lr=[0.001, 0.002, 0.003], period=[16, 32])),
        "lsgd": ({"method": "lsgd", "compress": "int8", "warmup_epochs": 0.1},
                 _grid(lr=[0.001, 0.002], pull=[0.1, 0.3, 0.6], period=[16, 32])
                 + [{"lr": 0.002, "pull": 0.3, "period": 32, "scope": 0.1},
                    {"lr": 0.002, "pull": 0.3, "period": 32, "leader_momentum": 0.5}]),
    },
    "cnn7": {
        "allreduce": ({"method": "allreduce"}, _grid(lr=[0.02, 0.05, 0.1, 0.2])),
        "diloco": ({"method": "diloco", "compress": "int8"},
                   _grid(lr=[0.05, 0.1], outer_lr=[0.35, 0.7, 1.0], period=[16])),
        "local-sgd": ({"method": "local-sgd", "compress": "int8"},
                      _grid(lr=[0.05, 0.1], period=[8, 16])),
        "lsgd": ({"method": "lsgd", "compress": "int8"},
                 _grid(lr=[0.05, 0.1], pull=[0.1, 0.3, 0.6], period=[8])),
    },
}
QUICK = {"language-quick": {m: (base, points[:2]) for m, (base, points)
                            in GRIDS["language"].items()}}


def label(method: str, point: dict[str, Any]) -> str:
    """A point's name: the method and its knobs."""
    return method + " " + " ".join(f"{k}={v}" for k, v in point.items())


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    grids = QUICK if quick else {t: GRIDS[t] for t in (options.get("sets") or GRIDS)}
    jobs, reuse = options.get("jobs") or 1, options.get("reuse") or False
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    steps = None
    rows: list[list[Any]] = []
    chosen: dict[str, dict[str, dict[str, Any]]] = {}
    data: dict[str, Any] = {"screen": {}, "finals": {}, "chosen": chosen, "seeds": seeds}
    for task, methods in grids.items():
        lower = study.TASKS[task]["lower"]
        variants = {label(m, p): base | p for m, (base, points) in methods.items()
                    for p in points}
        screen = study.run_variants(out / task, task, variants, [SCREEN_SEED], jobs, reuse,
                                    steps)
        data["screen"][task] = screen
        finals: dict[str, dict[str, Any]] = {}
        for method, (base, points) in methods.items():
            mine = [r for r in screen if r["label"].split()[0] == method]
            mine.sort(key=lambda r: r["final"] if lower else -r["final"])
            for r in mine[:FINALISTS]:
                finals[r["label"]] = variants[r["label"]]
        results = study.run_variants(out / task, task, finals, seeds, jobs, reuse, steps)
        summary = study.summarize(task, results, list(finals))
        data["finals"][task] = {"runs": results, "summary": summary}
        chosen[task] = {}
        for method, (base, points) in methods.items():
            mine = [s for s in summary if s["label"].split()[0] == method]
            best = min(mine, key=lambda s: s["final"][0] if lower else -s["final"][0])
            point = next(p for p in points if label(method, p) == best["label"])
            chosen[task][method] = {k: v for k, v in (base | point).items() if k != "method"}
            for s in mine:
                rows.append([task, s["label"], study.cell(s["final"], 4),
                             study.cell(s["steps"], 0), round(s["mb"], 2),
                             "chosen" if s is best else ""])
    notes = [f"Screen: every grid point on seed {SCREEN_SEED}; the best {FINALISTS} of each "
             f"method by the metric at the end, on seeds {', '.join(map(str, seeds))} "
             "(median [min-max]); 4 workers as 4 nodes in the simulator, "
             f"{study.STEP_SECONDS} s per step; the language model's metric is the center's "
             "validation loss (nats/byte, lower is better) after 300 steps, CNN7's its test "
             "accuracy after 300 steps; steps: to 2.2 nats/byte or to 86%."]
    return Result(NAME, "Tuning: the best points of each method's grid, three seeds",
                  ["task", "point", "metric at the end", "steps to target", "MB sent/worker",
                   ""], rows, notes, data)
