"""The paper-fidelity choices, measured side by side on Fashion-MNIST
(docs/algorithms.md, "Which form is the default, and what the options did
(measured)").

Each set trains in the simulator (4 workers, batch 128, lr 0.05, period 16,
pull 0.1) for a fixed number of steps, exact for a seed whatever the load, and
reports the center's and the leader's test accuracy (median over the seeds,
and each seed's): ``bn`` (100 steps, ``--bn-buffers``, LSGD and EASGD on
ResNet-20), ``pull-form`` (400 steps, ``--scope-pull`` at scopes 0.01 and 0.1,
CNN7) and ``leader-momentum`` (200 steps, against LSGD, DiLoCo and local SGD,
CNN7). ``--sets`` picks some (default all), ``--seeds N`` the seeds 0 to N-1
(default 2). Quick: the leader-momentum set on an MLP and the digits, 40 steps,
one seed. It fills no records folder; docs/algorithms.md shows its numbers.

    python studies/fidelity.py --sets leader-momentum,bn,pull-form --seeds 2 --jobs 2
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result, in_parallel, train
from studies.common import listed, script

NAME = "fidelity"
CNN7 = {"model": "cnn7", "method": "lsgd", "period": 16}
#: set -> (steps, settings common to its variants, [(variant, its settings)])
SETS: dict[str, tuple[int, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "bn": (100, {"model": "resnet20"}, [
        ("lsgd average", {"method": "lsgd", "bn_buffers": "average"}),
        ("lsgd pull", {"method": "lsgd", "bn_buffers": "pull"}),
        ("lsgd local", {"method": "lsgd", "bn_buffers": "local"}),
        ("easgd average", {"method": "easgd", "bn_buffers": "average"}),
        ("easgd pull", {"method": "easgd", "bn_buffers": "pull"}),
        ("easgd local", {"method": "easgd", "bn_buffers": "local"}),
    ]),
    "pull-form": (400, CNN7, [
        ("after-step, scope 0.01", {}),
        ("algorithm-1, scope 0.01", {"scope_pull": "algorithm-1"}),
        ("after-step, scope 0.1", {"scope_pull": "after-step", "scope": 0.1}),
        ("algorithm-1, scope 0.1", {"scope_pull": "algorithm-1", "scope": 0.1}),
    ]),
    "leader-momentum": (200, CNN7, [
        ("lsgd", {}),
        ("lsgd, leader momentum 0.9", {"leader_momentum": 0.9}),
        ("diloco (outer lr 0.7, momentum 0.9)", {"method": "diloco"}),
        ("lsgd, leader momentum 0.5", {"leader_momentum": 0.5}),
        ("local sgd", {"method": "local-sgd"}),
    ]),
}
WORKERS = 4
FLAGS = {"--sets": listed(list(SETS), "all; quick: leader-momentum")}


def _one(out: Path, settings: dict[str, Any], steps: int, seed: int, dataset: str,
         reuse: bool | str) -> dict[str, Any]:
    """The center's and the leader's accuracy after ``steps`` steps of one variant."""
    # One folder per settings: a run shared by two sets is trained once (--reuse).
    slug = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    summary = train(out / "runs" / f"{slug}-w{WORKERS}-s{steps}-seed{seed}", reuse=reuse,
                    dataset=dataset, workers=WORKERS, backend="threads", steps=steps,
                    eval_every="1000000", seed=seed, **settings)
    last = summary["rows"][-1]
    return {"seed": seed, "center": last["center_accuracy"],
            "leader": last.get("leader_accuracy")}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    chosen = options.get("sets") or (["leader-momentum"] if quick else list(SETS))
    unknown = sorted(set(chosen) - set(SETS))
    if unknown:
        raise ValueError(f"fidelity: unknown set(s) {unknown}; choose from {', '.join(SETS)}")
    seeds = list(range(options.get("seeds") or (1 if quick else 2)))
    dataset = "digits" if quick else "fashion-mnist"
    calls, where = [], []
    for name in chosen:
        steps, common, variants = SETS[name]
        if quick:
            steps, common = 40, {**common, "model": "mlp"}
        for label, settings in variants:
            for seed in seeds:
                calls.append((out, {**common, **settings}, steps, seed, dataset,
                              options.get("reuse") or False))
                where.append((name, label, steps))
    results = in_parallel(_one, calls, options.get("jobs") or 1)
    rows, data = [], []
    for key in dict.fromkeys(where):
        runs = [r for r, w in zip(results, where) if w == key]
        center = statistics.median(r["center"] for r in runs)
        leaders = [r["leader"] for r in runs
                   if r["leader"] is not None and r["leader"] == r["leader"]]
        rows.append([key[0], key[1], key[2], center,
                     statistics.median(leaders) if leaders else None,
                     " / ".join(f"{100 * r['center']:.2f}" for r in runs)])
        data.append({"set": key[0], "variant": key[1], "steps": key[2], "runs": runs})
    notes = [f"{WORKERS} simulated workers, {dataset}, batch 128, lr 0.05, period 16, seeds "
             f"{', '.join(map(str, seeds))}; accuracies at the end, median over the seeds "
             "(each seed's center in %, in the last column)."]
    return Result(NAME, "Fidelity choices: BatchNorm statistics, pull form, leader momentum",
                  ["set", "variant", "steps", "center acc", "leader acc", "center each seed"],
                  rows, notes, {"sets": data})


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
