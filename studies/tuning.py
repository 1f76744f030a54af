"""Tuning as a study: the points behind the defaults of ``lsgd train``.

Every point of a small grid per method trains the language model on three seeds (0, 1,
2, interleaved); the point with the lowest median validation loss at the end is each
method's chosen point (``chosen`` in ``tuning.json``): its best with int8 rounds every
32 steps, beside :data:`lsgd.train.tuned.TUNED`'s entries, which are measured at
``lsgd train``'s own period of 16. Every run is a :mod:`studies.study` run: 4 workers
as 4 nodes in the simulator, 300 steps, the loss at the end (equal tokens) and the
steps to 2.2 nats/byte. ``--top K``: every point is screened on the first seed, and
only each method's K best go on to every seed (the chosen point is among those). The
grids (a point names the knobs that differ from its method's base) vary the learning
rates, all-reduce's batch (at equal tokens), DiLoCo's outer learning rate and
momentum, period and inner optimizer (Muon at one point), local SGD's period and
batch, LSGD's pull, scope, period, leader momentum and early valley, and the learning
rates of SparseLoCo, DeMo and MuLoCo at batch 8; a point of another batch names its own
``steps``, for the same tokens. The periodic methods send
int8 rounds every 32 steps unless a point says otherwise. ``--quick``: a one-block
GPT, two points per method.

    python studies/tuning.py --seeds 3 --top 1 --jobs 2 --out records/tuning
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result
from lsgd.train.errors import UsageError
from studies import study
from studies.common import DEVICE, listed, positive, script

NAME = "tuning"


def _grid(**axes: list[Any]) -> list[dict[str, Any]]:
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*axes.values())]


#: The language model's base: lsgd's GPT with AdamW, cosine decay over the run after a
#: 0.1-epoch warm-up (the text defaults otherwise); int8 rounds every 32 steps.
LM = {"warmup_epochs": 0.1}
ROUNDS = {"compress": "int8", "period": 32}
#: task -> method -> (the base every point shares, the points).
GRIDS: dict[str, dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]] = {
    "language": {
        # batches of 32 and 8 windows at equal tokens: 150 and 600 steps
        "allreduce": ({"method": "allreduce"} | LM,
                      [*_grid(lr=[0.001, 0.002]),
                       {"lr": 0.002, "batch_size": 32, "steps": 150},
                       {"lr": 0.003, "batch_size": 32, "steps": 150},
                       {"lr": 0.002, "batch_size": 8, "steps": 600},
                       {"lr": 0.002, "batch_size": 4, "steps": 1200},
                       # MuLoCo's inner optimizer on all-reduce: Muon's share of its gain
                       {"lr": 0.004, "batch_size": 4, "steps": 1200, "optimizer": "muon"}]),
        "diloco": ({"method": "diloco"} | LM | ROUNDS,
                   [{"lr": 0.001, "outer_lr": 0.35}, {"lr": 0.002, "outer_lr": 0.35},
                    {"lr": 0.001, "outer_lr": 0.7}, {"lr": 0.002, "outer_lr": 0.7},
                    {"lr": 0.002, "outer_lr": 0.7, "period": 16},
                    {"lr": 0.002, "outer_lr": 0.35, "period": 16},
                    {"lr": 0.001, "outer_lr": 0.35, "outer_momentum": 0.8},
                    {"lr": 0.001, "outer_lr": 0.35, "optimizer": "muon"}]),
        "local-sgd": ({"method": "local-sgd"} | LM | ROUNDS,
                      [*_grid(lr=[0.001, 0.002]), {"lr": 0.001, "period": 16},
                       # all-reduce's best batch, at equal tokens and bytes
                       {"lr": 0.001, "batch_size": 8, "steps": 600, "period": 64}]),
        "lsgd": ({"method": "lsgd"} | LM | ROUNDS,
                 [{"lr": 0.001, "pull": 0.1}, {"lr": 0.002, "pull": 0.1},
                  {"lr": 0.002, "pull": 0.3}, {"lr": 0.001, "pull": 0.1, "scope": 0.04},
                  {"lr": 0.001, "pull": 0.1, "period": 16},
                  {"lr": 0.001, "pull": 0.1, "leader_momentum": 0.5},
                  {"lr": 0.001, "pull": 0.1, "pull_decay_rounds": 4}]),
        # the sparse, error-corrected methods, at all-reduce's best batches (the regime
        # study's lesson on the small GPT: every method gains from them at this budget),
        # and at lsgd train's own batch of 16 (its text defaults, TUNED["text"])
        "sparseloco": ({"method": "sparseloco", "period": 16, "density": 0.1} | LM,
                       [{"lr": lr, "batch_size": 8, "steps": 600} for lr in (0.002, 0.004, 0.008)]
                       + [{"lr": 0.004, "batch_size": 4, "steps": 1200}]),
        "demo": ({"method": "demo", "values": "int8", "batch_size": 4, "steps": 1200} | LM,
                 [{"lr": 0.004}, {"lr": 0.008}]
                 + [{"lr": 0.004, "batch_size": 16, "steps": 300}]),
        "muloco": ({"method": "muloco", "period": 16, "batch_size": 4, "steps": 1200} | LM,
                   [{"lr": 0.002}, {"lr": 0.004}]
                   + [{"lr": 0.004, "batch_size": 16, "steps": 300}]),
    },
}
FLAGS: dict[str, dict[str, Any]] = {
    "--top": {"type": positive, "metavar": "K", "help": "screen every point on the first "
              "seed, then run only each method's K best points on every seed"},
    "--tasks": listed(list(GRIDS), "all"), "--device": DEVICE}
def _quick(settings: dict[str, Any]) -> dict[str, Any]:
    """A point in the quick mode: its own steps and batch are the quick task's."""
    return {k: v for k, v in settings.items() if k not in ("steps", "batch_size")}


QUICK = {"language-quick": {m: (_quick(base) | {"warmup_epochs": 0.0, "period": 4},
                                [_quick(p) for p in points[:2]])
                            for m, (base, points) in GRIDS["language"].items()}}


def label(method: str, point: dict[str, Any]) -> str:
    """A point's name: the method and its knobs."""
    return method + " " + " ".join(f"{k}={v}" for k, v in point.items())


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    unknown = set(options.get("tasks") or []) - set(GRIDS)
    if unknown:
        raise UsageError(f"tuning: unknown task(s) {sorted(unknown)}; choose from "
                         f"{', '.join(GRIDS)}")
    grids = QUICK if quick else {t: GRIDS[t] for t in (options.get("tasks") or GRIDS)}
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    top = options.get("top")
    rows: list[list[Any]] = []
    chosen: dict[str, dict[str, dict[str, Any]]] = {}
    data: dict[str, Any] = {"tasks": {}, "chosen": chosen, "seeds": seeds}
    for task, methods in grids.items():
        lower = study.TASKS[task]["lower"]

        def score(s: dict[str, Any], lower: bool = lower) -> float:  # lower is better
            return math.inf if s["final"][0] is None else s["final"][0] * (1 if lower else -1)

        variants = {label(m, p): base | p for m, (base, points) in methods.items()
                    for p in points}
        results = study.run_variants(out, task, variants, seeds[:1] if top else seeds, options)
        if top and len(seeds) > 1:
            screen = study.summarize(task, results, list(variants))
            kept = {s["label"] for m in methods for s in sorted(
                (s for s in screen if s["label"].split()[0] == m), key=score)[:top]}
            results += study.run_variants(out, task, {k: v for k, v in variants.items()
                                                      if k in kept}, seeds[1:], options)
        summary = study.summarize(task, results, list(variants))
        data["tasks"][task] = {"runs": results, "summary": summary}
        chosen[task] = {}
        for method, (base, points) in methods.items():
            mine = [s for s in summary if s["label"].split()[0] == method]
            best = min((s for s in mine if len(s["seeds"]) == len(seeds)), key=score)
            point = next(p for p in points if label(method, p) == best["label"])
            chosen[task][method] = {k: v for k, v in (base | point).items()
                                    if k not in ("method", "compress")}
            for s in mine:
                rows.append([task, s["label"], study.cell(s["final"], 4),
                             study.cell(s["steps"], 0), round(s["mb"], 2),
                             "chosen" if s is best else "" if len(s["seeds"]) == len(seeds)
                             else "screened out"])
    where = f"screened on seed 0, each method's {top} best on" if top else "on"
    notes = [f"Every point {where} seeds {', '.join(map(str, seeds))}, interleaved (median "
             "[min-max]); 4 workers as 4 nodes in the simulator; the center's validation "
             "loss (nats/byte) after 300 steps of 16 windows of 128 bytes per worker (a point "
             "with another batch: the same tokens, in its steps), and the "
             "steps to 2.2 nats/byte. The chosen point: the lowest median at the end among "
             "the points run on every seed."]
    return Result(NAME, "Tuning: each method's points on the language model, three seeds",
                  ["task", "point", "loss at the end", "steps to 2.2", "MB sent/worker",
                   ""], rows, notes, data)


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
