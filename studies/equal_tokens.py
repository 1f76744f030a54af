"""The language model at equal tokens: every method's validation loss after the same
number of steps, against all-reduce's, with the bytes each sent (the DiLoCo paper's
comparison, on this machine's scale).

Each variant trains lsgd's GPT on the King James Bible with 4 single-worker nodes in
the simulator for the same number of local steps from the same seeds, so every worker
reads the same number of tokens whatever the method (docs/benchmarks.md, "A language
model at equal tokens", gives the settings). Reported: the center's validation loss at
the end (each seed, their mean), its difference from all-reduce's mean in percent, the
MB each worker sent, and how many times fewer bytes than all-reduce. The variants are
the periodic methods that send 100x fewer bytes than all-reduce (rounds every 32 steps
as int8), and lsgd train's tuned text defaults. The study ``diloco-screen`` is the
screen those defaults came from (:data:`SCREEN`, one seed). The quick mode: a one-block
GPT, 64 steps, one seed, three variants.

    python studies/equal_tokens.py equal-tokens --out records/equal-tokens
    python studies/equal_tokens.py diloco-screen --out records/diloco-screen
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
from studies.common import script

NAME = "equal-tokens"
STEPS = 300
WORKERS = 4
#: label -> settings; the first is the reference.
VARIANTS: dict[str, dict[str, Any]] = {
    "allreduce": {"method": "allreduce"},
    "lsgd, period 32, int8": {"method": "lsgd", "period": 32, "compress": "int8"},
    "diloco, period 32, int8": {"method": "diloco", "period": 32, "compress": "int8"},
    "local-sgd, period 32, int8": {"method": "local-sgd", "period": 32, "compress": "int8"},
    "diloco, period 16": {"method": "diloco"},
    "diloco, period 32, int8, leader weights": {"method": "diloco", "period": 32,
                                                "compress": "int8", "leader": "weights"},
    # lsgd train's tuned text defaults (lsgd/train/tuned.py), and LSGD's untuned one
    "allreduce, lr 0.002": {"method": "allreduce", "lr": 0.002},
    "diloco, period 16, lr 0.002": {"method": "diloco", "lr": 0.002},
    "lsgd, period 16": {"method": "lsgd"},
    "lsgd, period 16, lr 0.002": {"method": "lsgd", "lr": 0.002},
    # the quality-per-step forms on the tuned defaults: the leader's force on DiLoCo,
    # its eager outer steps, LSGD's early valley
    "diloco, period 16, lr 0.002, leader weights": {"method": "diloco", "lr": 0.002,
                                                    "leader": "weights"},
    "diloco, period 16, lr 0.002, leader pull": {"method": "diloco", "lr": 0.002,
                                                 "leader": "pull"},
    "diloco, period 16, lr 0.002, eager": {"method": "diloco", "lr": 0.002, "outer": "eager"},
    "lsgd, period 16, lr 0.002, R=8": {"method": "lsgd", "lr": 0.002, "pull_decay_rounds": 8},
}
QUICK = ["allreduce", "diloco, period 32, int8", "local-sgd, period 32, int8"]
#: ``diloco-screen``: DiLoCo at the untuned text defaults (lr 0.001; blocking
#: float32 rounds every 16 steps, outer Nesterov SGD at lr 0.35 and momentum 0.9), one knob
#: moved at a time, and the learning rates of all-reduce, local SGD and LSGD; one seed by
#: default (a screen: the points worth three seeds, which :data:`VARIANTS` then holds).
SCREEN: dict[str, dict[str, Any]] = {
    "allreduce": {"method": "allreduce"},
    "allreduce, lr 0.0015": {"method": "allreduce", "lr": 0.0015},
    "allreduce, lr 0.002": {"method": "allreduce", "lr": 0.002},
    "allreduce, lr 0.003": {"method": "allreduce", "lr": 0.003},
    "diloco, period 16": {"method": "diloco"},
    "diloco, outer lr 0.2": {"method": "diloco", "outer_lr": 0.2},
    "diloco, outer lr 0.7": {"method": "diloco", "outer_lr": 0.7},
    "diloco, outer momentum 0.5": {"method": "diloco", "outer_momentum": 0.5},
    "diloco, period 8": {"method": "diloco", "period": 8},
    "diloco, period 4": {"method": "diloco", "period": 4},
    "diloco, lr 0.0015": {"method": "diloco", "lr": 0.0015},
    "diloco, lr 0.002": {"method": "diloco", "lr": 0.002},
    "diloco, lr 0.003": {"method": "diloco", "lr": 0.003},
    "diloco, period 8, lr 0.0007": {"method": "diloco", "period": 8, "lr": 0.0007},
    "diloco, period 8, lr 0.0015": {"method": "diloco", "period": 8, "lr": 0.0015},
    "diloco, period 8, lr 0.002": {"method": "diloco", "period": 8, "lr": 0.002},
    "local-sgd, period 16": {"method": "local-sgd"},
    "local-sgd, period 16, lr 0.002": {"method": "local-sgd", "lr": 0.002},
    "lsgd, period 16": {"method": "lsgd"},
    "lsgd, period 16, lr 0.002": {"method": "lsgd", "lr": 0.002},
}
#: The GPT and its training: the text defaults at lsgd's default sizes (AdamW, cosine
#: decay over the run), at time-to-loss's learning rate, warm-up and DiLoCo outer rate.
FULL = {"dataset": "kjv", "model": "gpt", "lr": 0.001, "warmup_epochs": 0.1, "outer_lr": 0.35}
SMALL = {"dataset": "kjv", "model": "gpt", "lr": 0.003, "warmup_epochs": 0.05, "context": 32,
         "layers": 1, "width": 32, "heads": 2, "batch_size": 8, "eval_tokens": 2048}


def _one(out: Path, label: str, settings: dict[str, Any], steps: int, seed: int, quick: bool,
         reuse: bool | str) -> dict[str, Any]:
    """The center's validation loss and the bytes per worker after ``steps`` steps."""
    slug = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    summary = train(out / "runs" / f"{slug}-s{steps}-seed{seed}", reuse=reuse,
                    workers=WORKERS, groups=WORKERS,
                    backend="threads", steps=steps,
                    eval_every=str(steps), seed=seed, **((SMALL if quick else FULL) | settings))
    loss, sent = summary["rows"][-1]["center_loss"], summary["bytes_sent_per_worker"]
    took = "read back" if summary.get("reused") else "trained"
    print(f"  [{took}] {label}, seed {seed}: validation loss {loss:.4f} after {steps} steps, "
          f"{sent / 1e6:.1f} MB sent per worker", file=sys.stderr, flush=True)
    return {"seed": seed, "loss": loss, "bytes": sent}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """The periodic methods at 100x fewer bytes against all-reduce, three seeds."""
    return _compare(out, quick, options, NAME, VARIANTS, QUICK, 3)


def run_screen(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """DiLoCo's settings and every method's learning rate at the text defaults against
    all-reduce, one seed (a screen)."""
    return _compare(out, quick, options, "diloco-screen", SCREEN,
                    ["allreduce", "diloco, period 16", "diloco, lr 0.002"], 1)


def _compare(out: Path, quick: bool, options: dict[str, Any], name: str,
             table: dict[str, dict[str, Any]], quick_variants: list[str],
             default_seeds: int) -> Result:
    seeds = list(range(options.get("seeds") or (1 if quick else default_seeds)))
    steps = 64 if quick else STEPS
    chosen = options.get("variants") or (quick_variants if quick else list(table))
    unknown = [v for v in chosen if v not in table]
    if unknown:
        raise UsageError(f"{name}: unknown variant(s) {unknown}; choose from "
                         f"{', '.join(table)}")
    reference = next(iter(table))
    chosen = [reference] + [v for v in chosen if v != reference]
    calls = [(out, label, table[label], steps, seed, quick, options.get("reuse") or False)
             for seed in seeds for label in chosen]  # interleaved, seed by seed
    results = in_parallel(_one, calls, options.get("jobs") or 1)
    by_label = {label: [r for r, call in zip(results, calls) if call[1] == label]
                for label in chosen}
    base_loss = statistics.fmean(r["loss"] for r in by_label[reference])
    base_bytes = statistics.fmean(r["bytes"] for r in by_label[reference])
    rows: list[list[Any]] = []
    for label, runs in by_label.items():
        loss = statistics.fmean(r["loss"] for r in runs)
        sent = statistics.fmean(r["bytes"] for r in runs)
        rows.append([label, " / ".join(f"{r['loss']:.4f}" for r in runs), loss,
                     round(100 * (loss - base_loss) / base_loss, 2), sent / 1e6,
                     base_bytes / sent if sent else None])
    model = ("a one-block GPT (context 32, width 32)" if quick
             else "lsgd's GPT (4 blocks, width 128, 4 heads, context 128)")
    notes = [f"{WORKERS} workers as {WORKERS} nodes, {model} on the King James Bible, "
             f"{steps} steps per worker, seeds {', '.join(map(str, seeds))}: the center's "
             "validation loss at the end (nats per byte, each seed), their mean, its "
             f"difference from {reference}'s mean (%), MB sent per worker (mean), and how "
             "many times fewer bytes than all-reduce."]
    return Result(name, f"Validation loss after {steps} steps (equal tokens) against "
                  "all-reduce, and the bytes sent",
                  ["variant", "loss each seed", "mean loss", "vs allreduce %",
                   "MB sent/worker", "x fewer bytes"], rows, notes,
                  {"runs": [{"variant": label, "runs": runs} for label, runs in by_label.items()],
                   "steps": steps, "seeds": seeds})


#: The studies this script runs, by name.
STUDIES = {NAME: run, "diloco-screen": run_screen}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
