"""The paper-fidelity choices measured on Fashion-MNIST, side by side.

Each set trains the same model on the same shards from the same seeds, in the
simulator (``--backend threads``: 4 workers, exact and independent of the
machine's load), for a fixed number of steps, and reports the test accuracy
of the center and of the leader at the end (median over the seeds, and each
seed's value):

* ``bn``: what a round does with the BatchNorm statistics (``--bn-buffers
  average|pull|local``), LSGD and EASGD on ResNet-20 (CNN7 has no BatchNorm).
* ``pull-form``: LSGD's every-step pull after the optimizer step against the
  paper's Algorithm 1 (``--scope-pull``), at the default scope 0.01 and at
  the paper's larger 0.1, CNN7.
* ``leader-momentum``: LSGD with a Nesterov momentum on the round's pull
  (``--leader-momentum``) against LSGD and DiLoCo, CNN7.

    python benchmarks/fidelity.py leader-momentum --steps 200 --seeds 2
    python benchmarks/fidelity.py bn --steps 100 --seeds 2
    python benchmarks/fidelity.py pull-form --steps 400 --seeds 2
    python benchmarks/fidelity.py pull-form --steps 100 --seeds 1   # a quick look

The numbers these gave are in docs/algorithms.md ("Which form is the default").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from lsgd.bench.common import train

CNN7 = {"model": "cnn7", "method": "lsgd", "period": 16}
SETS: dict[str, tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "bn": ({"model": "resnet20"}, [
        ("lsgd average", {"method": "lsgd", "bn_buffers": "average"}),
        ("lsgd pull", {"method": "lsgd", "bn_buffers": "pull"}),
        ("lsgd local", {"method": "lsgd", "bn_buffers": "local"}),
        ("easgd average", {"method": "easgd", "bn_buffers": "average"}),
        ("easgd pull", {"method": "easgd", "bn_buffers": "pull"}),
        ("easgd local", {"method": "easgd", "bn_buffers": "local"}),
    ]),
    "pull-form": (CNN7, [
        ("after-step, scope 0.01", {}),
        ("algorithm-1, scope 0.01", {"scope_pull": "algorithm-1"}),
        ("after-step, scope 0.1", {"scope_pull": "after-step", "scope": 0.1}),
        ("algorithm-1, scope 0.1", {"scope_pull": "algorithm-1", "scope": 0.1}),
    ]),
    "leader-momentum": (CNN7, [
        ("lsgd", {}),
        ("lsgd, leader momentum 0.9", {"leader_momentum": 0.9}),
        ("diloco (outer lr 0.7, momentum 0.9)", {"method": "diloco"}),
        ("lsgd, leader momentum 0.5", {"leader_momentum": 0.5}),
        ("local sgd", {"method": "local-sgd"}),
    ]),
}


def run_set(name: str, out: Path, seeds: int, steps: int, workers: int) -> list[dict[str, Any]]:
    common, variants = SETS[name]
    rows = []
    for label, settings in variants:
        per_seed = []
        for seed in range(seeds):
            merged = {**common, **settings}
            # One folder per settings: a run shared by two sets is trained once (--reuse).
            slug = "-".join(f"{k}{v}" for k, v in sorted(merged.items()))
            start = time.perf_counter()
            summary = train(out / "runs" / f"{slug}-w{workers}-s{steps}-seed{seed}",
                            reuse=True, dataset="fashion-mnist", workers=workers,
                            backend="threads", steps=steps, eval_every="1000000", seed=seed,
                            **merged)
            last = summary["rows"][-1]
            per_seed.append({"seed": seed, "center": last["center_accuracy"],
                             "leader": last.get("leader_accuracy"),
                             "seconds": time.perf_counter() - start})
            print(f"  {name}: {label}, seed {seed}: center {100 * per_seed[-1]['center']:.2f}%"
                  f" ({per_seed[-1]['seconds']:.0f} s)", flush=True)
        rows.append({"set": name, "variant": label, "runs": per_seed,
                     "center": statistics.median(r["center"] for r in per_seed),
                     "leader": statistics.median(r["leader"] for r in per_seed
                                                 if r["leader"] is not None)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", choices=list(SETS))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", default="bench-results/fidelity")
    args = parser.parse_args()
    out = Path(args.out)
    for name in args.sets:
        rows = run_set(name, out, args.seeds, args.steps, args.workers)
        print(f"\n{name}: {args.workers} workers, {args.steps} steps, seeds 0-{args.seeds - 1}")
        print("| variant | center accuracy | leader accuracy | center, each seed |")
        print("|---|---|---|---|")
        for row in rows:
            each = " / ".join(f"{100 * r['center']:.2f}" for r in row["runs"])
            print(f"| {row['variant']} | {100 * row['center']:.2f}% | "
                  f"{100 * row['leader']:.2f}% | {each} |")
        (out / f"{name}.json").write_text(json.dumps(
            {"set": name, "steps": args.steps, "workers": args.workers, "seeds": args.seeds,
             "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
