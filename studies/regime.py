"""The regime: each method's gap to tuned all-reduce at equal tokens, at about 3, 10
and 20 tokens per parameter.

Every budget trains a small GPT on the King James Bible (2 blocks, width 64, 2 heads,
64-byte context: 120,576 parameters; 4 workers as 4 nodes in the simulator) for the
same tokens: ``budget x parameters / (4 workers x batch x 64)`` steps of a point's
batch of windows (batch 8 takes twice the steps of batch 16, batch 4 four times), AdamW
(Muon for MuLoCo, a sign step for DeMo) with ``lsgd train``'s text schedule: a warm-up
of 0.1 epoch (about 100 steps of 16 windows), then a cosine decay to a tenth at the
end. At each budget every point of a method's grid is
screened on seed 0 and each method's best goes on to seeds 1 and 2: every method's
learning rate and batch on the same points (:data:`POINTS`): all-reduce, DiLoCo,
SparseLoCo (density 0.1), DeMo, MuLoCo and LSGD (period 16; DiLoCo's and LSGD's rounds
int8, DeMo's values int8). Then the leader on top: the best of DiLoCo, SparseLoCo and
MuLoCo again at its chosen point with ``leader="pull"``, on every seed; and all-reduce
with MuLoCo's inner optimizer (Muon) at MuLoCo's chosen point, on every seed, for
Muon's share of MuLoCo's gain. The table gives each method's chosen point per
budget, its validation loss at the end (median [min-max] of the three seeds), its gap
to all-reduce's median in percent, and the bytes each worker sent against
all-reduce's; ``regime.png`` draws each method's gap against tokens per parameter.

    python studies/regime.py --seeds 3 --jobs 2 --out records/regime
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd import plots
from lsgd.bench.common import Result
from studies import study
from studies.common import DEVICE, script

NAME = "regime"
PARAMETERS = 120_576  # the small GPT's
BATCH, WORKERS = 16, 4
BUDGETS = (3, 10, 20)  # tokens per parameter
#: the task is :data:`studies.study.TASKS` ``"language-small"`` (where worker processes
#: find it); its context in bytes
CONTEXT = study.TASKS["language-small"]["settings"]["context"]
#: lsgd train's text warm-up, in epochs of a worker's shard (about 100 steps of 16 windows
#: of 64 bytes): a tenth of the run at 10 tokens per parameter, all of it at 3. Shorter
#: warm-ups (10% of every run) left all-reduce's runs of 8 windows on the unigram
#: plateau (3.03-3.08 nats/byte after 177 steps, seed 0, every learning rate).
WARMUP = 0.1
#: Every method's learning rates and batches, at 3 tokens per parameter and above:
#: small budgets favour larger batches, larger ones smaller batches and higher rates
#: (at 10, every method's best of the first grid was at its smallest batch and
#: mostly its highest rate, so the grid moved there).
POINTS = {3: [(lr, b) for b in (4, 8, 16) for lr in (0.002, 0.004, 0.008)],
          10: [(lr, b) for b in (2, 4) for lr in (0.008, 0.016)] + [(0.004, 4), (0.008, 8)]}


def _points(budget: float, **fixed: Any) -> list[dict[str, Any]]:
    """The points of ``budget``: a learning rate and a batch each (see :data:`POINTS`)."""
    pairs = POINTS[3] if budget < 10 else POINTS[10]
    return [{"lr": lr, "batch_size": b, **fixed} for lr, b in pairs]


#: method -> (the base every point shares, its own settings at every point): the same
#: learning rates and batches for every method.
GRIDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "allreduce": ({"method": "allreduce"}, {}),
    "diloco": ({"method": "diloco", "compress": "int8", "period": 16, "outer_lr": 0.35}, {}),
    "sparseloco": ({"method": "sparseloco", "period": 16}, {"density": 0.1}),
    "demo": ({"method": "demo", "values": "int8"}, {}),
    "muloco": ({"method": "muloco", "period": 16}, {}),
    "lsgd": ({"method": "lsgd", "compress": "int8", "period": 16}, {}),
}
QUICK_BUDGETS = (1, 2)
FLAGS: dict[str, dict[str, Any]] = {"--device": DEVICE}


def steps_for(budget: float, batch: int) -> int:
    """Steps of ``batch`` windows per worker that see ``budget`` tokens per parameter."""
    return max(1, round(budget * PARAMETERS / (WORKERS * batch * CONTEXT)))


def label(method: str, point: dict[str, Any]) -> str:
    return method + " " + " ".join(f"{k}={v}" for k, v in point.items())


def _variants(budget: float, quick: bool) -> dict[str, dict[str, Any]]:
    """Every point of every grid at ``budget``, with its steps and evaluations."""
    variants = {}
    for method, (base, own) in GRIDS.items():
        points = _points(budget, **own)
        for point in points[:1] if quick else points:
            steps = steps_for(budget, point.get("batch_size", BATCH))
            settings = base | point | {"steps": steps, "eval_every": max(1, steps // 10),
                                       "warmup_epochs": WARMUP}
            variants[f"{budget:g} {label(method, point)}"] = settings
    return variants


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    seeds = list(range(options.get("seeds") or (1 if quick else 3)))
    task = "language-quick" if quick else "language-small"
    rows: list[list[Any]] = []
    gaps: dict[str, list[tuple[float, float]]] = {}
    data: dict[str, Any] = {"budgets": {}, "seeds": seeds, "parameters": PARAMETERS}
    for budget in QUICK_BUDGETS if quick else BUDGETS:
        variants = _variants(budget, quick)
        results = study.run_variants(out, task, variants, seeds[:1], options)
        screen = study.summarize(task, results, list(variants))
        best = {}
        for method in GRIDS:
            mine = [s for s in screen if s["label"].split()[1] == method]
            best[method] = min(mine, key=lambda s: s["final"][0] or math.inf)["label"]
        results += study.run_variants(out, task, {k: variants[k] for k in best.values()},
                                      seeds[1:], options)
        summary = {s["label"]: s for s in study.summarize(task, results, list(best.values()))}
        reference = summary[best["allreduce"]]
        # the leader on top: the best method that takes it (not DeMo, whose workers hold
        # one state; not LSGD, which is the leader), at its chosen point, every seed
        takers = [m for m in GRIDS if m not in ("allreduce", "demo", "lsgd")]
        top = min(takers, key=lambda m: summary[best[m]]["final"][0] or math.inf)
        led = f"{best[top]} leader=pull"
        variants[led] = variants[best[top]] | {"leader": "pull"}
        # Muon's share: all-reduce with MuLoCo's inner optimizer at MuLoCo's chosen point
        muon = f"{budget:g} allreduce {best['muloco'].split(' ', 2)[2]} optimizer=muon"
        variants[muon] = (GRIDS["allreduce"][0] | {"optimizer": "muon"}
                          | {k: v for k, v in variants[best["muloco"]].items()
                             if k not in GRIDS["muloco"][0]})
        results += study.run_variants(out, task, {led: variants[led], muon: variants[muon]},
                                      seeds, options)
        best["leader"], best["allreduce+muon"] = led, muon
        summary |= {s["label"]: s for s in study.summarize(task, results, [led, muon])}
        data["budgets"][budget] = {"runs": results, "chosen": best}
        for method, chosen in best.items():
            s = summary[chosen]  # (the leader's row: the best taker's point, pulled)
            gap = 100 * (s["final"][0] / reference["final"][0] - 1)
            fewer = reference["mb"] / s["mb"] if s["mb"] else math.inf
            gaps.setdefault(method, []).append((budget, gap))
            rows.append([budget, chosen.split(" ", 1)[1], study.cell(s["final"], 3),
                         "" if method == "allreduce" else f"{gap:+.1f}%",
                         round(s["mb"], 2), "" if method == "allreduce" else f"{fewer:.0f}x"])
    figures = _figure(out, gaps)
    notes = [f"Seeds {', '.join(map(str, seeds))}: every point screened on seed 0, each "
             "method's best on every seed (median [min-max]); the center's validation loss "
             "(nats/byte) at the end of equal tokens; the gap to all-reduce's median; MB each "
             f"worker sent, and how many times fewer than all-reduce's. {PARAMETERS:,} "
             "parameters, 4 workers as 4 nodes, 16 windows of 64 bytes per worker and step "
             "unless a point gives another batch_size (then its steps for the same tokens)."]
    data["gaps"] = gaps
    return Result(NAME, "The regime: every method's gap to tuned all-reduce at equal tokens",
                  ["tokens/param", "chosen point", "loss at the end", "gap", "MB sent/worker",
                   "fewer bytes"], rows, notes, data, figures)


def _figure(out: Path, gaps: dict[str, list[tuple[float, float]]]) -> list[str]:
    """Each method's gap to all-reduce against tokens per parameter."""
    plt = plots.pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, points in gaps.items():
        if method != "allreduce":
            name = {"leader": "the best + leader pull",
                    "allreduce+muon": "all-reduce with Muon"}.get(method, method)
            ax.plot(*zip(*points), marker="o", label=name,
                    linestyle={"leader": ":", "allreduce+muon": "--"}.get(method, "-"))
    ax.axhline(0.0, color="black", linestyle="-.", linewidth=1, label="all-reduce, tuned")
    ax.set_xlabel("tokens per parameter")
    ax.set_ylabel("validation loss above all-reduce (%)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return [str(plots.save(fig, out / f"{NAME}.png"))]


#: The studies this script runs, by name.
STUDIES = {NAME: run}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
