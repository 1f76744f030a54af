"""Quality per step: the studies of LSGD's early valley, the leader's force on DiLoCo,
DiLoCo's eager outer steps, and every method at its tuned defaults against all-reduce.

Each is a :mod:`studies.study`: the variants train from the same seeds on the
language model and on CNN7, 4 workers as 4 nodes in the simulator, behind a modeled
20 Mbit/s link; every variant starts from a pinned point of its method (:data:`BASE`).
Reported per variant: the metric at the end, the steps and the modeled seconds to the
target, the MB each worker sent (median [min-max]); ``apart`` says whether the
variant's seeds and the first variant's do not overlap at the end. The studies
(``valley``, ``leader-force``, ``eager``, ``tuned``) are described in
docs/benchmarks.md ("Quality per step").

``--tasks language,cnn7`` picks tasks; ``--quick``: a one-block GPT, 12 steps, one seed.
All four fill records/quality:

    python studies/quality.py tuned --out records/quality
    python studies/quality.py leader-force --tasks language,cnn7 --out records/quality
    python studies/quality.py eager --out records/quality
    python studies/quality.py valley --out records/quality
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result
from lsgd.train.errors import UsageError
from studies import study
from studies.common import DEVICE, listed, script

#: The points every study starts from, pinned (points of the tuning grid): the language
#: model's (AdamW, 0.1-epoch warm-up, cosine decay; int8 rounds every 32 steps, DiLoCo's
#: every 16 at lr 0.002, where the leader's force was measured at equal tokens) and CNN7's
#: (SGD with Nesterov momentum, lr 0.05, batch 128; int8 rounds).
BASE: dict[str, dict[str, dict[str, Any]]] = {
    "language": {
        "allreduce": {"method": "allreduce", "warmup_epochs": 0.1, "lr": 0.002},
        "diloco": {"method": "diloco", "warmup_epochs": 0.1, "compress": "int8",
                   "period": 16, "lr": 0.002, "outer_lr": 0.35},
        "local-sgd": {"method": "local-sgd", "warmup_epochs": 0.1, "compress": "int8",
                      "period": 32, "lr": 0.001},
        "lsgd": {"method": "lsgd", "warmup_epochs": 0.1, "compress": "int8", "period": 32,
                 "lr": 0.002, "pull": 0.1}},
    "cnn7": {
        "allreduce": {"method": "allreduce", "lr": 0.05},
        "diloco": {"method": "diloco", "compress": "int8", "period": 16, "lr": 0.05,
                   "outer_lr": 0.35},
        "lsgd": {"method": "lsgd", "compress": "int8", "period": 8, "lr": 0.05,
                 "pull": 0.1}},
}
#: A hidden round's overlap per task (a quarter of DiLoCo's period).
OVERLAP = {"language": 8, "cnn7": 4}


def _variants(name: str, task: str) -> dict[str, dict[str, Any]]:
    """The study ``name``'s variants on ``task``: label -> settings; the first is the
    reference."""
    base, k = BASE[task], OVERLAP[task]
    valley = {"lsgd": base["lsgd"], "lsgd, R=8": base["lsgd"] | {"pull_decay_rounds": 8},
              f"lsgd, R=8, overlap {k}": base["lsgd"] | {"pull_decay_rounds": 8, "overlap": k}}
    if name == "valley":
        return valley
    if name == "leader-force":
        return {"diloco": base["diloco"],
                "diloco, leader weights": base["diloco"] | {"leader": "weights"},
                "diloco, leader pull": base["diloco"] | {"leader": "pull"}}
    if name == "eager":
        return {"diloco, overlap mix": base["diloco"] | {"overlap": k},
                "diloco, eager": base["diloco"] | {"outer": "eager"},
                "diloco, blocking": base["diloco"]}
    assert name == "tuned", name
    return {"diloco": base["diloco"],
            "diloco, leader weights": base["diloco"] | {"leader": "weights"},
            "diloco, overlap mix": base["diloco"] | {"overlap": k},
            "diloco, eager": base["diloco"] | {"outer": "eager"}} | valley


TITLES = {"valley": "LSGD's early valley: a pull that decays from 1 over R rounds",
           "leader-force": "The leader's force on DiLoCo",
           "eager": "DiLoCo's eager outer steps against overlapped rounds",
           "tuned": "DiLoCo's and LSGD's forms side by side: equal steps, time to the target"}
TASKS = ("language", "cnn7")
#: The tasks each study runs by default (the language model's runs cost 3x CNN7's here).
STUDY_TASKS = {"valley": ("cnn7",), "leader-force": ("cnn7",), "eager": ("cnn7",),
               "tuned": ("cnn7",)}
FLAGS = {"--tasks": listed(TASKS, "cnn7"), "--device": DEVICE}


def run_study(name: str, out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Run the study ``name`` (see the module text)."""
    title = TITLES[name]
    tasks = ["language-quick"] if quick else list(options.get("tasks") or STUDY_TASKS[name])
    unknown = [t for t in tasks if t not in study.TASKS]
    if unknown:
        raise UsageError(f"{name}: unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"seeds": seeds, "tasks": {}}
    for task in tasks:
        spec = study.TASKS[task]
        variants = _variants(name, "language" if quick else task)
        chosen = {k: v | (_quick(v) if quick else {}) for k, v in variants.items()}
        results = study.run_variants(out, task, chosen, seeds, options)
        summary = study.summarize(task, results, list(variants))
        data["tasks"][task] = {"runs": results, "summary": summary}
        reference = summary[0]
        for s in summary:
            better = (s["final"][0] is not None and reference["final"][0] is not None
                      and (s["final"][0] < reference["final"][0]) == spec["lower"])
            verdict = ("-" if s is reference else
                       ("better" if better else "worse") if study.apart(s["finals"],
                                                                      reference["finals"])
                       else "overlap")
            rows.append([task, s["label"], study.cell(s["final"], 4), verdict,
                         study.cell(s["steps"], 0), study.cell(s["time"], 1), round(s["mb"], 2)])
    ends = "; ".join(f"{_metric(t)} after {study.TASKS[t]['steps']} steps ({t})"
                     for t in tasks)
    targets = ", ".join(f"{study.TASKS[t]['target']:g} ({t})" for t in tasks)
    notes = [f"Seeds {', '.join(map(str, seeds))}, interleaved; 4 workers as 4 nodes in the "
             f"simulator, {study.STEP_SECONDS} s per step on its clock, the rounds behind a "
             f"modeled {study.LINK} link; median [min-max]. At the end: the center's {ends}; "
             "vs first: whether its seeds and the first row's do not overlap (better/worse) "
             f"or do; steps and time: to {targets} ('-': a seed missed it)."]
    return Result(name, title, ["task", "variant", "at the end", "vs first", "steps to target",
                                "time to target s", "MB sent/worker"], rows, notes, data)


def _metric(task: str) -> str:
    return "validation loss (nats/byte)" if study.TASKS[task]["lower"] else "test accuracy"


def _quick(settings: dict[str, Any]) -> dict[str, Any]:
    """A quick run's rounds: every 4 steps (overlap 2), no warm-up."""
    return {"warmup_epochs": 0.0, "period": 4} | ({"overlap": 2} if "overlap" in settings
                                                     else {})


#: The studies this script runs, by name.
STUDIES = {name: functools.partial(run_study, name) for name in TITLES}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
