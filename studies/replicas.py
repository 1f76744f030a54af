"""Replicas of several processes, measured: the language model with eight processes as
8, 4 or 2 replicas (``--replica node``), against all-reduce of the eight.

The study ``replicas`` (equal tokens): every layout trains lsgd's GPT in the
simulator for the same 300 steps, 64 windows a step in all, from the same seeds, with
DiLoCo, local SGD and LSGD and all-reduce of all eight processes; reported: the
center's validation loss at the end, its difference from all-reduce's, and the MB that
crossed each node's link and that stayed inside it. ``replicas-time``: 4
nodes of 2 processes on a modeled 20 Mbit/s link, the time until the center's
validation loss reaches 2.2 nats per byte, as 4 replicas of 2 and as 8 replicas.
docs/benchmarks.md ("Replicas: a node's processes as one worker") gives the settings.
The quick modes train a one-block GPT for a few steps.

    python studies/replicas.py replicas --jobs 2 --out records/replicas
    python studies/replicas.py replicas-time --jobs 2 --out records/replicas-time
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result, in_parallel, median, train
from lsgd.plots import pyplot, save
from studies.common import above_zero, link, positive, script
from studies.equal_tokens import FULL, SMALL

NAME = "replicas"
PROCESSES = 8
STEPS = 300
#: Layouts of the eight processes: label -> (groups, replica).
LAYOUTS = {"8 x 1": (8, "process"), "4 x 2": (4, "node"), "2 x 4": (2, "node")}
METHODS = {"diloco": {"method": "diloco", "period": 16},
           "local-sgd": {"method": "local-sgd", "period": 16},
           "lsgd": {"method": "lsgd", "period": 16}}
REFERENCE = {"method": "allreduce"}
#: replicas-time: the variants, each (settings, replica).
TIME_VARIANTS: dict[str, tuple[dict[str, Any], str]] = {
    "allreduce": ({"method": "allreduce"}, "process"),
    "diloco-int8, node": ({"method": "diloco", "period": 8, "overlap": 4,
                           "compress": "int8"}, "node"),
    "diloco-int8, process": ({"method": "diloco", "period": 8, "overlap": 4,
                              "compress": "int8"}, "process"),
    "lsgd-hidden, node": ({"method": "lsgd", "period": 8, "overlap": 3, "fragments": 2,
                           "compress": "int8"}, "node"),
    "lsgd-multi-hidden, process": ({"method": "lsgd", "period": 4, "global_period": 16,
                                    "overlap": 3, "compress": "int8"}, "process"),
}
TIME_TRAINING = {"schedule": "constant", "lr": 0.001, "warmup_epochs": 0.1,
                 "outer_lr": 0.35, "eval_tokens": 16384}
#: The flags of replicas-time (replicas has none of its own).
FLAGS: dict[str, dict[str, Any]] = {
    "--link": {"type": link, "help": "replicas-time: the nodes' modeled link (default 20mbit)"},
    "--step-seconds": {"type": above_zero, "metavar": "S", "help": "replicas-time: the "
                       "seconds a step costs on the modeled clock (default 0.135)"},
    "--target": {"type": above_zero, "help": "replicas-time: the center's validation loss to "
                 "reach, in nats per byte (default 2.2; quick: 5.5)"},
    "--eval-steps": {"type": positive, "metavar": "N", "help": "replicas-time: evaluate the "
                     "center every N steps (default 10; quick: 4)"}}


def _one(out: Path, layout: str, label: str, settings: dict[str, Any], steps: int,
         seed: int, quick: bool, reuse: bool | str) -> dict[str, Any]:
    """The center's validation loss after ``steps`` steps, and the bytes per node."""
    groups, replica = LAYOUTS[layout]
    slug = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    where = "all" if label == "allreduce" else f"{groups}x{PROCESSES // groups}"
    summary = train(out / "runs" / f"{slug}-{where}-s{steps}-seed{seed}", reuse=reuse,
                    workers=PROCESSES, groups=groups, replica=replica, backend="threads",
                    steps=steps, eval_every=str(steps), eval_leader=False, seed=seed,
                    **(SMALL | {"batch_size": 4} if quick else FULL | {"batch_size": 8}),
                    **settings)
    loss = summary["rows"][-1]["center_loss"]
    took = "read back" if summary.get("reused") else "trained"
    print(f"  [{took}] {label}, {layout}, seed {seed}: validation loss {loss:.4f}",
          file=sys.stderr, flush=True)
    return {"layout": layout, "label": label, "seed": seed, "loss": loss,
            "link_mb": summary["link_bytes_sent_per_node"] / 1e6,
            "inside_mb": summary["bytes_sent_inside_per_node"] / 1e6}


def _spread(values: list[float]) -> str:
    return f"{min(values):.4f}-{max(values):.4f}"


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Equal tokens: each method at each layout, and all-reduce (see the module text)."""
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    steps = 32 if quick else STEPS
    methods = ["diloco"] if quick else list(METHODS)
    reuse = options.get("reuse") or False
    calls = [(out, "8 x 1", "allreduce", REFERENCE, steps, seed, quick, reuse)
             for seed in seeds]
    calls += [(out, layout, name, METHODS[name], steps, seed, quick, reuse)
              for seed in seeds for name in methods for layout in LAYOUTS]
    results = in_parallel(_one, calls, options.get("jobs") or 1)
    reference = [r for r in results if r["label"] == "allreduce"]
    base = statistics.fmean(r["loss"] for r in reference)
    rows: list[list[Any]] = []
    for label in ["allreduce", *methods]:
        for layout in (["8 x 1"] if label == "allreduce" else LAYOUTS):
            runs = [r for r in results if r["label"] == label and r["layout"] == layout]
            losses = [r["loss"] for r in runs]
            mean = statistics.fmean(losses)
            rows.append([label, "all 8" if label == "allreduce" else layout,
                         " / ".join(f"{v:.4f}" for v in losses), mean, _spread(losses),
                         round(100 * (mean - base) / base, 2),
                         statistics.fmean(r["link_mb"] for r in runs),
                         statistics.fmean(r["inside_mb"] for r in runs)])
    figures = _figure(out, results, methods, base)
    model = ("a one-block GPT (context 32, width 32)" if quick
             else "lsgd's GPT (4 blocks, width 128, 4 heads, context 128)")
    notes = [f"{PROCESSES} processes, {model} on the King James Bible in the simulator, "
             f"{steps} steps of {4 if quick else 8} windows per process (the same tokens in "
             f"every layout), seeds {', '.join(map(str, seeds))}; layout R x P: R replicas "
             "of P processes (P > 1: --replica node, the P processes of a node averaging "
             "their gradients every step); rounds every 16 steps, blocking, float32. "
             "loss: the center's validation loss at the end (nats per byte); vs allreduce: "
             "the mean's difference from all-reduce's (%); MB per node: what crossed a "
             "node's link and what stayed inside it (mean of the nodes and seeds; all-reduce "
             "has 8 nodes of one process)."]
    return Result(NAME, f"Eight processes as 8, 4 or 2 replicas: validation loss after "
                  f"{steps} steps (equal tokens)",
                  ["method", "layout", "loss each seed", "mean loss", "spread",
                   "vs allreduce %", "MB link/node", "MB inside/node"], rows, notes,
                  {"runs": results, "steps": steps, "seeds": seeds}, figures)


def _figure(out: Path, results: list[dict[str, Any]], methods: list[str],
            base: float) -> list[str]:
    """The mean loss of each method against the number of replicas, min-max bars, and
    all-reduce's mean as a line."""
    plt = pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for offset, name in enumerate(methods):
        xs, means, low, high = [], [], [], []
        for layout, (groups, _) in LAYOUTS.items():
            losses = [r["loss"] for r in results
                      if r["label"] == name and r["layout"] == layout]
            mean = statistics.fmean(losses)
            xs.append(groups * (1 + 0.03 * (offset - 1)))
            means.append(mean)
            low.append(mean - min(losses))
            high.append(max(losses) - mean)
        ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=name)
    ax.axhline(base, color="grey", linestyle="--", label="allreduce (8 processes)")
    ax.set_xscale("log", base=2)
    ax.set_xticks([groups for groups, _ in LAYOUTS.values()],
                  [f"{groups} x {PROCESSES // groups}" for groups, _ in LAYOUTS.values()])
    ax.set_xlabel("replicas x processes per replica")
    ax.set_ylabel("validation loss at the end (nats/byte)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return [str(save(fig, out / f"{NAME}.png"))]


# -- time to the target on the modeled link ------------------------------------------
def _timed(out: Path, label: str, steps: int, seed: int, quick: bool,
           opts: dict[str, Any]) -> dict[str, Any]:
    settings, replica = TIME_VARIANTS[label]
    slug = "-".join(f"{k}{v}" for k, v in sorted(settings.items())) + f"-{replica}"
    task = (SMALL | {"batch_size": 4, "schedule": "constant", "warmup_epochs": 0.1,
                     "outer_lr": 0.35} if quick
            else TIME_TRAINING | {"batch_size": 8, "model": "gpt", "dataset": "kjv"})
    summary = train(out / "runs" / f"{slug}-seed{seed}", reuse=opts.get("reuse") or False,
                    workers=PROCESSES, groups=4, replica=replica, backend="threads",
                    link=opts["link"], step_seconds=opts["step_seconds"], steps=steps,
                    eval_every=str(opts["eval_steps"]), target=opts["target"],
                    eval_leader=False, seed=seed, **task, **settings)
    reached = summary.get("reached_target")
    rows = summary["rows"]
    print(f"  {label}, seed {seed}: " + (f"{opts['target']:g} at {reached['time']:.1f} s"
                                        if reached else "target missed"),
          file=sys.stderr, flush=True)
    return {"label": label, "seed": seed, "time": reached["time"] if reached else None,
            "steps": reached["steps"] if reached else None,
            "best": min(r["center_loss"] for r in rows),
            "link_mb": summary["link_bytes_sent_per_node"] / 1e6,
            "curve": [(r["time"], r["center_loss"]) for r in rows]}


def run_time(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Time to the target on the modeled link (see the module text)."""
    opts = {"link": options.get("link") or "20mbit",
            "step_seconds": options.get("step_seconds") or 0.135,
            "target": options.get("target") or (5.5 if quick else 2.2),
            "eval_steps": options.get("eval_steps") or (4 if quick else 10),
            "reuse": options.get("reuse")}
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    steps = 24 if quick else 500
    labels = list(TIME_VARIANTS)
    calls = [(out, label, steps, seed, quick, opts) for seed in seeds for label in labels]
    results = in_parallel(_timed, calls, options.get("jobs") or 1)
    rows = []
    for label in labels:
        runs = [r for r in results if r["label"] == label]
        times = [r["time"] for r in runs if r["time"] is not None]
        spread = f"{min(times):.0f}-{max(times):.0f}" if times else "-"
        steps_to = [r["steps"] for r in runs if r["steps"] is not None]
        rows.append([label, median(times) if len(times) == len(runs) else None, spread,
                     median(steps_to) if steps_to else None,
                     median([r["best"] for r in runs]), median([r["link_mb"] for r in runs])])
    notes = [f"{PROCESSES} processes on 4 nodes behind a modeled {opts['link']} link, "
             f"{opts['step_seconds']:g} s per step on the simulator's clock plus the modeled "
             f"transfers; lsgd's GPT, 8 windows per process and step; seeds "
             f"{', '.join(map(str, seeds))}, interleaved; the center evaluated every "
             f"{opts['eval_steps']} steps. time: until its validation loss first reaches "
             f"{opts['target']:g} (median [min-max]); node: 4 replicas of 2 processes; "
             "process: 8 replicas (LSGD's multi-leader form: a leader per node and one "
             "across); MB link/node: what crossed a node's link in the run (median)."]
    return Result("replicas-time", f"Time to a validation loss of {opts['target']:g}, "
                  "4 nodes of 2 processes: replicas of a node against replicas of a process",
                  ["variant", "time s", "spread s", "steps", "best loss", "MB link/node"],
                  rows, notes, {"runs": results, "options": opts, "seeds": seeds},
                  _time_figure(out, results, labels, opts))


def _time_figure(out: Path, results: list[dict[str, Any]], labels: list[str],
                 opts: dict[str, Any]) -> list[str]:
    """The validation loss against the modeled time of each variant's median run."""
    if pyplot() is None:
        return []
    from studies.curves import draw_curves

    curves = []
    for label in labels:
        runs = sorted((r for r in results if r["label"] == label),
                      key=lambda r: (r["time"] is None, r["time"] or 0.0, r["best"]))
        curves.append((label, runs[(len(runs) - 1) // 2]["curve"], False))
    path = draw_curves([(f"lsgd's GPT, 4 nodes of 2 processes, {opts['link']} modeled, "
                         "the median run", curves)], out / "replicas-time.png",
                       xlabel="training time (s, modeled)",
                       ylabel="validation loss of the center (nats/byte)",
                       target=opts["target"])
    return [str(path)]


#: The studies this script runs, by name.
STUDIES = {NAME: run, "replicas-time": run_time}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
