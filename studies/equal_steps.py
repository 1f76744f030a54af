"""What hiding and shrinking communication costs in accuracy: every overlapped or
compressed form of a method against its plain form, after the same number of steps.

Each variant trains CNN7 on Fashion-MNIST with 4 simulated workers (``--backend
threads``: 4 single-worker nodes, batch 128, lr 0.05) for 240 local steps from the
same seeds and shards, and reports the test accuracy of the center at the end:
each seed's, their mean, and the difference from the plain form's mean in points.
A step budget makes every number exact for its seed, whatever the machine's
load, so ``--jobs`` runs them side by side. The question it answers is the cost
in accuracy per step of a delayed or lossy round; what the link saves is
measured in time by ``lsgd bench time-to-accuracy``.

Each method keeps the period it was tuned to on slow links (LSGD 4, DiLoCo and
local SGD 16, EASGD 16); ``overlap`` is the steps that cover a round's transfer
at 20 Mbit/s there. LSGD's hidden forms elect early (one step before the
round) unless a row says "election at the round", its form before lsgd 0.6.
Overlapped DiLoCo and local SGD are run with each merge (``merge``): these runs chose
the defaults, mix for DiLoCo, keep for local SGD.
``--seeds N`` takes seeds 0 to N-1 (default 2), ``--methods`` some of the methods. The
quick mode: an MLP on the digits, 40 steps, one seed, a few variants.

    python studies/equal_steps.py --jobs 2 --out records/equal-steps
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result, in_parallel, train
from lsgd.train.errors import UsageError
from studies.common import listed, script

NAME = "equal-steps"
STEPS = 240
WORKERS = 4
#: LSGD's hidden form that the 20 Mbit/s sweep chose (docs/benchmarks.md, section 3)
TUNED_LSGD = {"period": 8, "fragments": 2, "overlap": 3, "compress": "int8"}
#: method label -> (its plain settings, [(variant, its settings)]); the plain form first
VARIANTS: dict[str, tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "lsgd": ({"method": "lsgd", "period": 4}, [
        ("plain", {}),
        ("overlap 3, election at the round", {"overlap": 3, "election": "round"}),
        ("overlap 3", {"overlap": 3}),
        ("bf16", {"compress": "bf16"}),
        ("int8", {"compress": "int8"}),
        ("overlap 3 + int8, election at the round", {"overlap": 3, "compress": "int8",
                                                     "election": "round"}),
        ("overlap 3 + int8", {"overlap": 3, "compress": "int8"}),
        ("early election, no overlap", {"election": "early"}),
        ("2 fragments, overlap 1", {"fragments": 2, "overlap": 1}),
        ("2 fragments, overlap 1 + int8", {"fragments": 2, "overlap": 1, "compress": "int8"}),
        ("4 fragments, no overlap", {"fragments": 4}),
        ("period 8", {"period": 8}),
        ("period 8, 2 fragments, overlap 3 + int8 (tuned)", TUNED_LSGD),
        ("tuned, pull 0.5", TUNED_LSGD | {"pull": 0.5}),
        ("tuned, leader momentum 0.9", TUNED_LSGD | {"leader_momentum": 0.9}),
    ]),
    "diloco": ({"method": "diloco", "period": 16}, [
        ("plain", {}),
        ("overlap 4, keep", {"overlap": 4, "merge": "keep"}),
        ("overlap 4, replace", {"overlap": 4, "merge": "replace"}),
        ("overlap 4, mix", {"overlap": 4, "merge": "mix"}),
        ("no overlap, outer lr 0.35 (control)", {"outer_lr": 0.35}),
        ("bf16", {"compress": "bf16"}),
        ("int8", {"compress": "int8"}),
        ("int8, error feedback", {"compress": "int8", "error_feedback": True}),
        ("overlap 4, keep + int8", {"overlap": 4, "compress": "int8", "merge": "keep"}),
        ("overlap 4, mix + int8", {"overlap": 4, "merge": "mix", "compress": "int8"}),
        ("2 fragments, overlap 2, keep", {"fragments": 2, "overlap": 2, "merge": "keep"}),
        ("2 fragments, overlap 2, keep + int8", {"fragments": 2, "overlap": 2,
                                                 "compress": "int8", "merge": "keep"}),
        ("2 fragments, overlap 2, mix", {"fragments": 2, "overlap": 2, "merge": "mix"}),
    ]),
    "local-sgd": ({"method": "local-sgd", "period": 16}, [
        ("plain", {}),
        ("overlap 4", {"overlap": 4}),
        ("bf16", {"compress": "bf16"}),
        ("int8", {"compress": "int8"}),
        ("int8, error feedback", {"compress": "int8", "error_feedback": True}),
        ("overlap 4 + int8", {"overlap": 4, "compress": "int8"}),
        ("overlap 4, replace", {"overlap": 4, "merge": "replace"}),
        ("overlap 4, mix", {"overlap": 4, "merge": "mix"}),
    ]),
    "easgd": ({"method": "easgd", "period": 16}, [
        ("plain", {}),
        ("overlap 4", {"overlap": 4}),
        ("int8", {"compress": "int8"}),
    ]),
}
QUICK = {"lsgd": ["plain", "overlap 3 + int8"], "diloco": ["plain", "overlap 4, keep", "int8"]}
#: ``--methods``: the methods whose forms are compared.
FLAGS = {"--methods": listed(list(VARIANTS), "all; quick: lsgd, diloco")}


def _one(out: Path, settings: dict[str, Any], steps: int, seed: int, quick: bool,
         reuse: bool | str) -> dict[str, Any]:
    """The center's accuracy and the bytes per worker after ``steps`` steps."""
    slug = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    data = {"dataset": "digits", "model": "mlp", "batch_size": 32} if quick else {
        "dataset": "fashion-mnist", "model": "cnn7", "batch_size": 128,
        "outer_lr": 0.7}  # the paper's, as these records were made (CNN7's default: 0.35)
    summary = train(out / "runs" / f"{slug}-s{steps}-seed{seed}", reuse=reuse,
                    workers=WORKERS, groups=WORKERS, backend="threads", steps=steps,
                    eval_every=str(steps), seed=seed, **(data | settings))
    return {"seed": seed, "center": summary["rows"][-1]["center_accuracy"],
            "bytes": summary["bytes_sent_per_worker"]}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    seeds = list(range(options.get("seeds") or (1 if quick else 2)))
    steps = 40 if quick else STEPS
    chosen = options.get("methods") or list(QUICK if quick else VARIANTS)
    unknown = [m for m in chosen if m not in VARIANTS]
    if unknown:
        raise UsageError(f"--methods {','.join(unknown)}: equal-steps compares the forms of "
                         f"{', '.join(VARIANTS)}")
    calls, where = [], []
    for method in chosen:
        plain, variants = VARIANTS[method]
        for label, settings in variants:
            if quick and label not in QUICK.get(method, []):
                continue
            for seed in seeds:
                calls.append((out, {**plain, **settings}, steps, seed, quick,
                              options.get("reuse") or False))
                where.append((method, label))
    results = in_parallel(_one, calls, options.get("jobs") or 1)
    rows: list[list[Any]] = []
    data: list[dict[str, Any]] = []
    plain_mean: dict[str, float] = {}  # each method's plain form, its first variant
    for key in dict.fromkeys(where):
        runs = [r for r, w in zip(results, where) if w == key]
        mean = statistics.fmean(r["center"] for r in runs)
        plain_mean.setdefault(key[0], mean)
        rows.append([key[0], key[1], " / ".join(f"{100 * r['center']:.2f}" for r in runs),
                     mean, round(100 * (mean - plain_mean[key[0]]), 2),
                     statistics.fmean(r["bytes"] for r in runs) / 1e6])
        data.append({"method": key[0], "variant": key[1], "runs": runs})
    notes = [f"{WORKERS} simulated workers as {WORKERS} nodes, "
             f"{'mlp on digits' if quick else 'cnn7 on fashion-mnist'}, {steps} steps, "
             f"seeds {', '.join(map(str, seeds))}; the center's test accuracy at the end "
             "(each seed, in %), their mean, its difference from the plain form's mean "
             "(points), MB sent per worker (mean)."]
    return Result(NAME, f"Accuracy after {steps} steps: overlapped and compressed rounds "
                  "against the plain ones",
                  ["method", "variant", "center acc each seed", "mean acc",
                   "vs plain (points)", "MB sent/worker"], rows, notes, {"runs": data})


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
