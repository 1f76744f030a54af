"""AL-DSGD's claims, measured: D-PSGD, MATCHA and AL-DSGD on rings, sparse Erdos-Renyi
graphs and imbalanced graphs, with several seeds, on the simulator's modeled link.

docs/decentralized.md ("AL-DSGD's claims, measured") says what runs, on which graphs
(:func:`graphs_for`), tasks (:data:`TASKS`) and methods (:data:`METHODS`), what is
reported and how to run the full study. In short: every method trains the same model
from the same seed for the same local steps, gossiping every step, each worker a node
behind a modeled link, each local step costing a fixed ``--step-seconds``; reported
per setting and method, median [min-max] over the seeds: the modeled time until the
center first reaches the task's target, the center's test accuracy (validation loss
for the GPT) after the same steps, and the lowest-degree workers' own models' at the
end. :func:`studies.aldsgd_claims.claims` judges the claims from these numbers.
The quick mode (the test suite's): the MLP on the digits, 4 workers, 16 steps, the
imbalanced graph of 4, D-PSGD and AL-DSGD on one and on two graphs, 2 seeds.

    python studies/aldsgd.py --tasks mlp-16i --out records/aldsgd
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result, in_parallel, median, train
from lsgd.tasks.headline import HEADLINES, reaches
from lsgd.topology import from_spec
from lsgd.train.errors import UsageError
from studies.common import DEVICE, above_zero, link, listed, positive, script
from studies.equal_tokens import FULL

NAME = "aldsgd"
#: The paper's AL-DSGD weights (lsgd's defaults, as in configs/al-dsgd-paper/).
PAPER = {"c_b": 0.3, "c_d": 0.1, "p_b": 0.1, "p_d": 0.1}
#: method label -> (lsgd method, dynamic graphs, knobs)
METHODS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "D-PSGD": ("dpsgd", False, {}),
    "MATCHA 0.5": ("matcha", False, {"budget": 0.5}),
    "MATCHA 0.25": ("matcha", False, {"budget": 0.25}),
    "AL-DSGD": ("al-dsgd", False, PAPER),
    "AL-DSGD p 0.3": ("al-dsgd", False, PAPER | {"p_b": 0.3, "p_d": 0.3}),
    "AL-DSGD budget 0.5": ("al-dsgd", False, PAPER | {"budget": 0.5}),
    "AL-DSGD dynamic": ("al-dsgd", True, PAPER),
    "D-PSGD dynamic": ("dpsgd", True, {}),
}
GRAPH_FOLDER = "configs/graphs"
#: task -> its workers, graphs, target, clock, steps and training settings.
TASKS: dict[str, dict[str, Any]] = {
    "cnn7-8": {"workers": 8, "graphs": ["ring", "erdos-renyi", "imbalanced"],
               "metric": "accuracy", "target": 0.85, "step_seconds": 0.06, "steps": 300,
               "train": {"model": "cnn7", "dataset": "fashion-mnist", "batch_size": 64,
                         "lr": 0.05}},
    "mlp-16": {"workers": 16, "graphs": ["ring", "erdos-renyi", "imbalanced"],
               "metric": "accuracy", "target": 0.82, "step_seconds": 0.02, "steps": 300,
               "train": {"model": "mlp", "dataset": "fashion-mnist", "batch_size": 32,
                         "lr": 0.05}},
    # the study as far as 2 cores allowed: the imbalanced graph, every method
    "mlp-16i": {"workers": 16, "graphs": ["imbalanced"], "metric": "accuracy",
                "target": 0.82, "step_seconds": 0.02, "steps": 300,
                "train": {"model": "mlp", "dataset": "fashion-mnist", "batch_size": 32,
                          "lr": 0.05}},
    "gpt-8": {"workers": 8, "graphs": ["ring"], "metric": "loss", "target": 2.4,
              "step_seconds": 0.135, "steps": 300,
              "train": FULL | {"batch_size": 8, "eval_tokens": 16384}},
}
QUICK_TASK = {"quick-4": {"workers": 4, "graphs": ["imbalanced"], "metric": "accuracy",
                          "target": 0.5, "step_seconds": 0.01, "steps": 16,
                          "train": {"model": "mlp", "dataset": "digits", "batch_size": 32,
                                    "lr": 0.05}}}
QUICK_METHODS = ["D-PSGD", "AL-DSGD", "AL-DSGD dynamic"]
#: The script's own flags (run it from the repository's root, where configs/graphs is).
FLAGS: dict[str, dict[str, Any]] = {
    "--tasks": listed(list(TASKS), "all"),
    "--link": {"type": link, "help": "each worker's modeled link (default 100mbit)"},
    "--step-seconds": {"type": above_zero, "metavar": "S", "help": "the seconds each local "
                       "step costs on the modeled clock (default: the task's)"},
    "--eval-steps": {"type": positive, "metavar": "N", "help": "evaluate the center every N "
                     "steps (default 25; quick: 4)"},
    "--target": {"type": above_zero, "help": "the center's target of the one task --tasks "
                 "gives (default: the task's)"},
    "--device": DEVICE}


def graphs_for(graph: str, workers: int) -> tuple[str, str, str]:
    """``graph``'s (first graph, its dynamic partner, mixing weight) for ``workers``, as
    ``lsgd train --topology`` spells them."""
    if graph == "ring":
        return "ring", "ring:stride=3", "auto"
    if graph == "erdos-renyi":
        return (f"erdos-renyi:edges={workers},seed=0", f"erdos-renyi:edges={workers},seed=1",
                "max-degree")
    if graph == "imbalanced":
        first, second = (f"{GRAPH_FOLDER}/imbalanced-{workers}{tail}.edges" for tail in ("", "b"))
        missing = [f for f in (first, second) if not Path(f).is_file()]
        if missing:
            raise UsageError(f"aldsgd: graph file(s) {missing} not found from {Path.cwd()}: "
                             "run python studies/aldsgd.py from the repository's root")
        return first, second, "max-degree"
    raise UsageError(f"aldsgd: unknown graph {graph!r}; choose ring, erdos-renyi or imbalanced")


def lowest_degree(spec: str, workers: int) -> list[int]:
    """The workers of the smallest degree in the graph ``spec``."""
    degrees = from_spec(spec, workers).degrees
    return [rank for rank, degree in enumerate(degrees) if degree == min(degrees)]


def _one(out: Path, task: str, graph: str, label: str, seed: int, setting: dict[str, Any],
         opts: dict[str, Any]) -> dict[str, Any]:
    """One run: its center's curve, its center and lowest-degree workers at the end."""
    method, dynamic, knobs = METHODS[label]
    first, second, weight = graphs_for(graph, setting["workers"])
    where = {"graphs": [first, second]} if dynamic else {"topology": first}
    slug = label.lower().replace(" ", "-")
    extra = {"device": opts["device"]} if opts.get("device") else {}
    summary = train(out / "runs" / task / graph / f"{slug}-seed{seed}",
                    reuse=opts.get("reuse") or False, method=method,
                    workers=setting["workers"], groups=setting["workers"], backend="threads",
                    link=opts["link"], step_seconds=opts["step_seconds"] or
                    setting["step_seconds"], steps=setting["steps"],
                    eval_every=str(opts["eval_steps"] or (4 if opts["quick"] else 25)),
                    eval_workers=True, eval_leader=False, seed=seed, mixing_weight=weight,
                    **setting["train"], **where, **knobs, **extra)
    rows, metric = summary["rows"], setting["metric"]
    column = HEADLINES[metric][0]
    low = lowest_degree(first, setting["workers"])
    own = [float(rows[-1][f"worker{r}_{metric}"]) for r in low]
    took = "read back" if summary.get("reused") else "trained"
    print(f"  [{took}] {task} {graph} {label}, seed {seed}: center {metric} "
          f"{rows[-1][column]:.4f}", file=sys.stderr, flush=True)
    return {"task": task, "graph": graph, "method": label, "seed": seed, "metric": metric,
            "final": float(rows[-1][column]), "lowest": sum(own) / len(own),
            "lowest_workers": low, "bytes_per_worker": summary["bytes_sent_per_worker"],
            "curve": [(float(r["time"]), float(r["steps"]), float(r[column])) for r in rows],
            "run": summary["run"]}


def time_to(run: dict[str, Any], target: float) -> float | None:
    """The modeled time of the first evaluation at which the run's center reached
    ``target`` (``None``: never)."""
    return next((time for time, _, value in run["curve"]
                 if reaches(run["metric"], value, target)), None)


def span(values: list[float | None], digits: int = 3) -> str:
    """``median [min-max]`` of ``values`` (``None``: missed, counted as slowest)."""
    got = [v for v in values if v is not None]
    if not got:
        return "missed"
    text = (f"{median(got):.{digits}f} [{min(got):.{digits}f}-{max(got):.{digits}f}]"
            if len(got) > 1 else f"{got[0]:.{digits}f}")
    return text + (f", {len(values) - len(got)} missed" if len(got) < len(values) else "")


def _settings(quick: bool, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tasks to run, with ``--target`` applied (one task only)."""
    if quick:
        chosen = dict(QUICK_TASK)
    else:
        picked = options.get("tasks") or list(TASKS)
        unknown = [n for n in picked if n not in TASKS]
        if unknown:
            raise UsageError(f"aldsgd: unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
        chosen = {n: dict(TASKS[n]) for n in picked}
    if options.get("target") is not None:
        if len(chosen) > 1:
            raise UsageError(f"--target {options['target']}: the tasks {list(chosen)} have "
                             "targets of their own; give one task (--tasks cnn7-8)")
        next(iter(chosen.values()))["target"] = options["target"]
    return chosen


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Every task, graph, method and seed (see the module text); one row per setting
    and method."""
    settings = _settings(quick, options)
    opts = {"link": options.get("link") or "100mbit", "step_seconds": options.get("step_seconds"),
            "eval_steps": options.get("eval_steps"), "device": options.get("device"),
            "reuse": options.get("reuse"), "quick": quick}
    methods = QUICK_METHODS if quick else list(METHODS)
    seeds = list(range(options.get("seeds") or (2 if quick else 3)))
    calls = [(out, task, graph, label, seed, setting, opts) for seed in seeds
             for task, setting in settings.items() for graph in setting["graphs"]
             for label in setting.get("methods", methods)]  # interleaved, seed by seed
    runs = in_parallel(_one, calls, options.get("jobs") or 1)
    rows = []
    for task, setting in settings.items():
        for graph in setting["graphs"]:
            for label in setting.get("methods", methods):
                mine = [r for r in runs if (r["task"], r["graph"], r["method"])
                        == (task, graph, label)]
                digits = 3 if setting["metric"] == "accuracy" else 4
                rows.append([f"{task} {graph}", label,
                             span([time_to(r, setting["target"]) for r in mine], 1),
                             span([r["final"] for r in mine], digits),
                             span([r["lowest"] for r in mine], digits),
                             median([r["bytes_per_worker"] / 1e6 for r in mine])])
    notes = [f"{task}: {s['train']['model']} on {s['train']['dataset']}, {s['workers']} workers, "
             f"{s['steps']} steps, {opts['step_seconds'] or s['step_seconds']:g} s per step; "
             f"target: center {s['metric']} {s['target']:g}" for task, s in settings.items()]
    notes += [f"Each worker a node behind a modeled {opts['link']} link; seeds "
              f"{', '.join(map(str, seeds))}, median [min-max]. time s: modeled time until "
              "the center reaches the target; center: its test accuracy (GPT: validation "
              "loss) at the end; lowest-degree: the mean of the lowest-degree workers' own "
              "models (of the first graph) at the end; MB: sent per worker (median)."]
    return Result(NAME, "AL-DSGD against D-PSGD and MATCHA: time to a target, the center "
                  "at equal steps, the lowest-degree workers",
                  ["setting", "method", "time s", "center", "lowest-degree", "MB/worker"],
                  rows, notes, {"runs": runs, "seeds": seeds, "options": opts,
                                "settings": settings})


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
