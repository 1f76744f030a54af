"""Time to a target on slow links, every method side by side (the headline).

Each method trains the same model on the same data with the same learning rate, batch
size and time budget, behind links of a given rate between nodes. The center is
evaluated off the training clock every ``eval`` seconds of training (or every
``--eval-steps N`` steps, a run then stopping at the target); :func:`ranking.table` ranks
the runs. Runs go seed by seed, every method of a seed before the next. Knobs are tuned
per method on a seed of their own (``TUNING_SEED``) on the first link, unless
``--knobs`` gives them. Settings: :data:`SETTINGS` (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

from lsgd.bench import peer, ranking
from lsgd.bench.common import Result, in_parallel, train
from lsgd.bench.ranking import headline_of
from lsgd.tasks.headline import best, of_metric, reaches
from lsgd.train.errors import UsageError

TUNING_SEED = 1000


def _and_int8(name: str, method: str, fixed: dict[str, Any], grid: list[dict[str, Any]]
              ) -> dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """``name`` and ``name-int8``, its rounds compressed to int8."""
    int8 = fixed | {"compress": "int8"}
    return {name: (method, fixed, grid), f"{name}-int8": (method, int8, grid)}


# label: (method, fixed settings, grid of knobs to tune)
METHODS: dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]] = {
    "lsgd": ("lsgd", {}, [{"period": 16}, {"period": 4}]),
    "lsgd-multi": ("lsgd", {}, [{"period": 4, "global_period": 16},
                                {"period": 16, "global_period": 64}]),
    # LSGD whose round pull is an outer Nesterov step toward the leader (--leader-momentum).
    "lsgd-momentum": ("lsgd", {"leader_momentum": 0.9}, [{"period": 16}, {"period": 4}]),
    "easgd": ("easgd", {}, [{"period": 16}, {"period": 4}]),
    "local-sgd": ("local-sgd", {}, [{"period": 16}, {"period": 4}]),
    "diloco": ("diloco", {}, [{"period": 16}, {"period": 4}]),
    "allreduce": ("allreduce", {}, [{}]),
    # All-reduce with PyTorch's own DDP communication hooks (worker processes only).
    "allreduce-bf16": ("allreduce", {"compress": "bf16"}, [{}]),
    "allreduce-powersgd": ("allreduce", {"powersgd": 4}, [{}]),
    "dpsgd": ("dpsgd", {}, [{"gossip_period": 1}, {"gossip_period": 4}]),
    "matcha": ("matcha", {}, [{"gossip_period": 1}, {"gossip_period": 4}]),
    "al-dsgd": ("al-dsgd", {}, [{"gossip_period": 1}, {"gossip_period": 4}]),
    # Hidden and shrunk rounds at each method's tuned period, the overlap covering a
    # round's transfer at 20 Mbit/s (the equal-steps study measures their cost per step).
    **_and_int8("lsgd-overlap", "lsgd", {"overlap": 3}, [{"period": 4}]),
    # ... with the early valley: the pull decays from a full copy over the first 32 rounds.
    "lsgd-valley-overlap-int8": ("lsgd", {"overlap": 3, "compress": "int8",
                                          "pull_decay_rounds": 32}, [{"period": 4}]),
    **_and_int8("lsgd-multi-overlap", "lsgd", {"overlap": 3}, [{"period": 4, "global_period": 16}]),
    **_and_int8("diloco-overlap", "diloco", {"overlap": 4}, [{"period": 16}]),
    **_and_int8("diloco-streaming", "diloco", {"fragments": 2, "overlap": 2}, [{"period": 16}]),
    **_and_int8("local-sgd-overlap", "local-sgd", {"overlap": 4}, [{"period": 16}]),
    # Each periodic method's hidden forms as one family, tuned over a grid recorded at
    # 20 Mbit/s (docs/studies.md, "LSGD in front").
    "lsgd-hidden": ("lsgd", {}, [
        {"period": 4, "overlap": 3, "compress": "int8"},
        {"period": 8, "overlap": 6, "compress": "int8"},
        {"period": 8, "overlap": 3, "fragments": 2},
        {"period": 8, "overlap": 3, "fragments": 2, "compress": "int8"},
        {"period": 16, "overlap": 6, "fragments": 2},
        {"period": 16, "overlap": 3, "fragments": 4, "compress": "int8"},
        {"period": 8, "overlap": 3, "fragments": 2, "pull": 0.25},
        {"period": 8, "overlap": 3, "fragments": 2, "scope": 0.04}]),
    "diloco-hidden": ("diloco", {}, [
        {"period": 16, "overlap": 2, "fragments": 2},
        {"period": 16, "overlap": 4, "compress": "int8"},
        {"period": 16, "overlap": 2, "fragments": 2, "compress": "int8"},
        {"period": 8, "overlap": 3, "fragments": 2}]),
    "local-sgd-hidden": ("local-sgd", {}, [
        {"period": 16, "overlap": 4, "compress": "int8"},
        {"period": 16, "overlap": 2, "fragments": 2}]),
    "lsgd-multi-hidden": ("lsgd", {}, [
        {"period": 4, "global_period": 16, "overlap": 3, "compress": "int8"},
        {"period": 4, "global_period": 16, "overlap": 1, "fragments": 2}]),
    # The sparse, error-corrected methods (docs/algorithms.md). The first learning rate is
    # the language model's (time-to-loss does not tune; DeMo's sign step: 0.002 reached 2.51
    # nats/byte in 366 steps where 0.004 stood at 2.70 after 300), the second CNN7's scale
    # (SGD inner steps), which time-to-accuracy's tuning picks between.
    **{name: ("sparseloco", fixed, [{"period": 16, "lr": lr} for lr in (0.001, 0.05)])
       for name, fixed in (("sparseloco", {}), ("sparseloco-overlap", {"overlap": 4}),
                           ("sparseloco-leader", {"overlap": 4, "leader": "pull"}))},
    **{name: ("muloco", fixed, [{"period": 16, "lr": lr} for lr in (0.001, 0.003)])
       for name, fixed in (("muloco", {}), ("muloco-overlap", {"overlap": 4}))},
    **{name: ("demo", fixed, [{"lr": lr} for lr in (0.002, 0.001)])
       for name, fixed in (("demo", {}), ("demo-overlap", {"overlap": 1}))},
    # The peer, torchft 0.2.0 (lsgd.bench.peer): its DiLoCo and Streaming DiLoCo.
    "torchft-diloco": ("torchft-diloco", {}, [{"period": 16}]),
    "torchft-streaming": ("torchft-streaming", {}, [{"period": 16}])}
#: Left out where every node has one worker (multi-leader LSGD's local level).
ONE_WORKER_NODES = dict.fromkeys(("lsgd-multi", "lsgd-multi-overlap", "lsgd-multi-overlap-int8",
                                  "lsgd-multi-hidden"), "one worker per node: no local level")
HOOKS = ("allreduce-bf16", "allreduce-powersgd")  # PyTorch's hooks: worker processes only
#: The quick mode's methods: the plain ones (MATCHA's rotation has its own quick
#: benchmark, decentralized), and one hidden and shrunk form of two.
QUICK = ["lsgd", "lsgd-multi", "easgd", "local-sgd", "diloco", "allreduce",
         "dpsgd", "al-dsgd", "lsgd-overlap-int8", "diloco-streaming-int8"]
#: The language model's quick mode: the periodic methods and all-reduce.
QUICK_TEXT = ["lsgd", "diloco", "diloco-streaming-int8", "local-sgd", "allreduce"]
#: What the language-model runs share besides the model and data: AdamW (the text
#: defaults) at a constant learning rate after a warm-up, so that every method takes the
#: same step at the same step count whatever its speed; DiLoCo's outer learning rate
#: (its and torchft's) at 0.35, which a sweep in the simulator chose (docs/language.md);
#: 16,384 validation bytes per evaluation, so that a fine grid of them stays cheap.
TEXT_TRAINING = {"schedule": "constant", "lr": 0.001, "warmup_epochs": 0.1, "outer_lr": 0.35,
                 "eval_tokens": 16384}
SETTINGS = {
    # name: (workers, groups, default backend, methods left out and why)
    "time-to-accuracy": (4, 4, "processes", ONE_WORKER_NODES),
    "twelve-workers": (12, 3, "threads", {
        "lsgd": "several workers per node make LSGD multi-leader: lsgd-multi",
        "lsgd-overlap": "several workers per node: lsgd-multi-overlap",
        "lsgd-overlap-int8": "several workers per node: lsgd-multi-overlap-int8",
        "lsgd-valley-overlap-int8": "several workers per node: lsgd-multi-overlap-int8",
        "lsgd-hidden": "several workers per node: lsgd-multi-hidden",
        "lsgd-momentum": "an option of LSGD, measured at 4 nodes",
        **dict.fromkeys(peer.METHODS, "torchft runs as processes on shaped links")}),
    "time-to-loss": (4, 4, "processes", ONE_WORKER_NODES)}


def _defaults(quick: bool, setting: str) -> dict[str, Any]:
    """The settings of ``setting``; quick ones step at a fixed time on the modeled clock
    (about this machine's compute for their model), so they do not depend on its load."""
    text = setting == "time-to-loss"
    if quick and text:  # a one-block GPT on the Bible, seconds long
        return {"links": ["20mbit"], "seeds": 1, "budget": 10.0, "target": 3.3,
                "model": "gpt", "dataset": "kjv", "backend": "threads", "batch_size": 8,
                "tune": False, "methods": QUICK_TEXT, "eval_steps": 5, "step_seconds": 0.008,
                "task": {**TEXT_TRAINING, "lr": 0.003, "context": 32, "layers": 1,
                         "width": 32, "heads": 2, "eval_tokens": 2048}}
    if quick:  # time-to-accuracy's runs stop at the target (a grid of 10 steps)
        grid = {"eval_steps": 10} if setting == "time-to-accuracy" else {}
        return {"links": ["20mbit"], "seeds": 1, "budget": 6.0, "target": 0.8,
                "model": "mlp", "dataset": "digits", "backend": "threads", "batch_size": 32,
                "tune": False, "methods": QUICK, "step_seconds": 0.003} | grid
    workers, groups, backend, _ = SETTINGS[setting]
    if text:
        return {"links": ["20mbit", "100mbit"], "seeds": 3, "budget": 240.0, "target": 2.2,
                "model": "gpt", "dataset": "kjv", "backend": backend, "batch_size": 16,
                "tune": False, "eval_steps": 10, "task": dict(TEXT_TRAINING)}
    return {"links": ["1gbit", "100mbit", "20mbit"], "seeds": 2, "budget": 240.0,
            "target": 0.88, "model": "cnn7", "dataset": "fashion-mnist",
            "backend": backend, "batch_size": 128, "tune": True}


#: lsgd's DiLoCo on images at the paper's outer lr, as the records were made (train's: 0.35).
PAPER_OUTER = {"diloco": {"outer_lr": 0.7}}


def _one(out: Path, name: str, link: str, seed: int, knobs: dict[str, Any],
         opts: dict[str, Any], layout: tuple[int, int], where: str) -> dict[str, Any]:
    """One training run and what the table needs of it; prints a line when it ends
    (``where``: its place in the benchmark, e.g. "run 3 of 16")."""
    method, fixed, _ = METHODS[name]
    headline = headline_of(opts)
    metric, column = headline.metric, headline.column
    slug = "-".join(f"{k}{v}" for k, v in knobs.items()) or "default"
    start = time.perf_counter()
    trainer = peer.train if method in peer.METHODS else train
    # On a step grid a run stops at the target and tests the center only (no leader: a
    # second transfer of a state on a slow link at every evaluation, off the clock but
    # not off the benchmark's hours); on a clock grid it trains the budget.
    grid: dict[str, Any] = {"eval_every": f"{opts['eval']:g}s"}
    if opts.get("eval_steps"):
        grid = {"eval_every": str(opts["eval_steps"]), "target": opts["target"]}
        if method not in peer.METHODS:  # torchft's runs test no leader anyway
            grid["eval_leader"] = False
    summary = trainer(out / "runs" / link / f"{name}-{slug}-seed{seed}",
                      method=method, workers=layout[0], groups=layout[1], link=link,
                      backend=opts["backend"], model=opts["model"], dataset=opts["dataset"],
                      batch_size=opts["batch_size"], minutes=opts["budget"] / 60, seed=seed,
                      reuse=opts.get("reuse", False), step_seconds=opts.get("step_seconds"),
                      **(grid | opts.get("task", PAPER_OUTER.get(method, {})) | fixed | knobs))
    rows = summary.pop("rows")
    evaluated = [r for r in rows if not math.isnan(r[column])]
    time_, steps = next(((r["time"], r["steps"]) for r in rows  # the first at the target
                         if reaches(metric, r[column], opts["target"])), (None, None))
    top = best(metric, [r[column] for r in rows])
    reached = (f"{headline.show(opts['target'])} at {time_:.1f} s" if time_ is not None
               else "target missed")
    knobs_text = "".join(f" {key} {value}" for key, value in knobs.items())
    took = ("read back" if summary.get("reused")
            else f"{(time.perf_counter() - start) / 60:.1f} min")
    print(f"  [{where}, {took}] {name}{knobs_text}, {link}, seed {seed}: "
          f"{reached}, best {headline.show(round(top, 4))}", file=sys.stderr, flush=True)
    return {"method": name, "link": link, "seed": seed, "knobs": knobs, "time": time_,
            "steps": steps, "best": top, "metric": metric, "run": summary["run"],
            "curve": [(r["time"], headline.falling(r[column])) for r in evaluated],
            "sent_curve": [(r["bytes_sent_per_worker"], r[column]) for r in evaluated
                           if not math.isnan(r.get("bytes_sent_per_worker", math.nan))],
            "bytes_per_worker": summary["bytes_sent_per_worker"],
            "comm_seconds": summary.get("comm_seconds_per_worker"),
            "steps_done": summary["steps"], "seconds": summary.get("train_seconds")}


def _score(run: dict[str, Any]) -> tuple[float, float]:
    """Smaller is better: time to target, then the best value (accuracy: the highest)."""
    higher = of_metric(run.get("metric", "accuracy")).higher_is_better
    return (run["time"] if run["time"] is not None else math.inf,
            -run["best"] if higher else run["best"])


def run(out: Path, quick: bool, options: dict[str, Any], setting: str = "time-to-accuracy"
        ) -> Result:
    """The benchmark ``setting`` (:data:`SETTINGS`): tune, run every seed, rank."""
    opts = _defaults(quick, setting) | {k: v for k, v in options.items() if v is not None}
    opts.setdefault("eval", opts["budget"] / 12)  # seconds of training between evaluations
    if opts.get("step_seconds") is not None and opts["backend"] != "threads":
        raise UsageError(f"--step-seconds {opts['step_seconds']:g}: sets the step time of "
                         "the simulator's modeled clock; add --backend threads")
    jobs = opts.get("jobs") or 1
    if jobs > 1 and opts.get("step_seconds") is None:  # runs at once need the modeled clock
        raise UsageError(f"--jobs {jobs}: runs at once share this machine's cores, so a clock "
                         "of measured time would count each other's load; add --backend "
                         "threads --step-seconds S (a fixed step time, e.g. 0.12 for CNN7 on "
                         "a 2-core CPU) or run with --jobs 1")
    workers, groups, _, left_out = SETTINGS[setting]
    if opts["backend"] != "processes":  # (a copy: SETTINGS stay as they are)
        left_out = left_out | dict.fromkeys(peer.METHODS, "torchft runs as processes "
                                            "(--backend processes)")
        left_out |= dict.fromkeys(HOOKS, "PyTorch's DDP hooks run in worker processes "
                                         "(--backend processes)")
    elif not peer.available() and opts.get("reuse") != "only":
        left_out = left_out | dict.fromkeys(peer.METHODS, "torchft is not installed "
                                            "(pip install 'lsgd[torchft]')")
    headline = headline_of(opts)
    if not headline.target_ok(opts["target"]):
        raise UsageError(f"--target {opts['target']}: give {headline.target_text}")
    methods = [m for m in opts.get("methods") or METHODS if m not in left_out]
    layout = (workers, groups)
    given = _given_knobs(opts.get("knobs") or {}, methods, left_out, layout)
    tuned = [m for m in methods if opts["tune"] and len(METHODS[m][2]) > 1 and m not in given]
    tuning = in_parallel(_one, _numbered("tuning run", [
        (out / "tuning", name, opts["links"][0], TUNING_SEED, knobs, opts, layout)
        for name in tuned for knobs in METHODS[name][2]]), jobs)
    chosen = {name: METHODS[name][2][0] for name in methods} | given
    for name in tuned:
        chosen[name] = min((t for t in tuning if t["method"] == name), key=_score)["knobs"]
    seeds = _seeds(opts)
    runs = in_parallel(_one, _numbered("run", [(out, name, link, seed, chosen[name], opts, layout)
                                               for seed in seeds for link in opts["links"]
                                               for name in methods]), jobs)
    rows, summary = ranking.table(runs, methods, opts,
                                  ranking.simulated_steps(opts.get("steps_from")))
    grid = (f"every {opts['eval_steps']} steps, a run stopping at the target"
            if opts.get("eval_steps") else f"every {opts['eval']:g} s of training")
    notes = [
        f"{workers} workers as {groups} nodes, {opts['model']} on {opts['dataset']}, batch "
        f"{opts['batch_size']} per worker, {opts['budget']:g} s of training per run, "
        f"seed(s) {', '.join(map(str, seeds))}, backend {opts['backend']} ({_clock(opts)}); "
        f"the center evaluated {grid}"
        + (f"; {', '.join(f'{k} {v}' for k, v in opts['task'].items())}"
           if opts.get("task") else "") + ".",
        "time/steps: until the center first reaches the target (median over seeds, "
        "[min-max]); '-' when a run did not reach it within the budget; best: the best "
        f"{headline.what} within the budget (median); MB sent: per worker in the whole "
        "run (median); steps/s: local steps per worker and second of training (median); "
        "predicted s: the median steps at the median steps/s, against the measured time. "
        "ratio: LSGD's time to the target divided by the method's (below 1: LSGD is faster; "
        "multi-leader LSGD's in the 12-worker setting; its hidden family's when plain LSGD "
        "is not in the run).",
        "knobs: " + "; ".join(f"{m} {chosen[m] or 'defaults'}"
                              + (" (given)" if m in given else "") for m in methods)
        + (f" (tuned on seed {TUNING_SEED}, link {opts['links'][0]})" if tuned else "")]
    notes += [f"{m}: left out ({why})" for m, why in left_out.items()
              if m in (opts.get("methods") or METHODS)]
    return Result(setting, headline.time_to.format(target=headline.show(opts["target"])),
                  ["link", "method", "time s", "spread s", "steps", headline.best_label,
                   "ratio lsgd/method", "MB sent/worker", "steps/s", "steps spread",
                   "predicted s"], rows, notes,
                  {"options": opts, "chosen": chosen, "summary": summary, "runs": runs,
                   "tuning": tuning}, ranking.figures(out, setting, runs, opts))


def _numbered(what: str, calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(*call, f"{what} {i} of {len(calls)}") for i, call in enumerate(calls, 1)]


def _seeds(opts: dict[str, Any]) -> list[int]:
    first = opts.get("first_seed") or 0
    return list(range(first, first + opts["seeds"]))


def _given_knobs(given: dict[str, dict[str, int]], methods: list[str], left_out: dict[str, str],
                 layout: tuple[int, int]) -> dict[str, dict[str, int]]:
    """``given`` (method: knobs, from ``--knobs``), checked before any run starts: each
    method runs in this benchmark, each knob is one that the method's grid tunes (or an
    lsgd method's learning rate), and ``lsgd train`` accepts the settings. The knobs come
    back in the grid's order, which names the run's folder, so ``--reuse`` finds a run
    whatever order they were given in."""
    from lsgd.train.config import make_config

    ordered: dict[str, dict[str, int]] = {}
    for name, knobs in given.items():
        if name in left_out:
            raise UsageError(f"--knobs {name}: left out of this benchmark ({left_out[name]})")
        if name not in methods:
            raise UsageError(f"--knobs {name}: not among the methods run "
                             f"({', '.join(methods)}); add it to --methods or drop its knobs")
        method, fixed, grid = METHODS[name]
        # every lsgd method's learning rate may be set, beside its grid's knobs
        shared = [] if method in peer.METHODS else ["lr"]
        tunable = list(dict.fromkeys([*(key for point in grid for key in point), *shared]))
        unknown = sorted(set(knobs) - set(tunable))
        if unknown:
            raise UsageError(f"--knobs {name}: unknown {unknown}; its knobs are "
                             f"{', '.join(tunable)}")
        try:
            if method not in peer.METHODS:
                make_config({"method": method, "workers": layout[0], "groups": layout[1],
                             **fixed, **knobs})
        except ValueError as error:
            raise UsageError(f"--knobs {name}: {error}") from None
        ordered[name] = {key: knobs[key] for key in tunable if key in knobs}
    return ordered


def _clock(opts: dict[str, Any]) -> str:
    if opts["backend"] == "processes":
        return "shaped links, wall-clock time"
    compute = (f"{opts['step_seconds']:g} s per step" if opts.get("step_seconds") is not None
               else "measured compute")
    return f"modeled links, simulated time: {compute} plus modeled transfers"


def run_twelve(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """The paper's 12-worker setting (3 nodes of 4) on the modeled link."""
    return run(out, quick, options, setting="twelve-workers")


def run_text(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """The language model's time to a target validation loss (4 nodes)."""
    return run(out, quick, options, setting="time-to-loss")
