"""Decentralized training: D-PSGD, MATCHA and AL-DSGD on one graph and on two in turn.

8 workers, each a node behind a modeled 1 Gbit/s link, train CNN7 on
Fashion-MNIST for the same local steps from the same start, gossiping every
step, on two graphs of average degree 2: ``ring`` (``ring(8)``, rotated with
``ring(8, stride=3)``; the methods' own weights) and ``erdos-renyi``
(``G(8, m=8)`` of seed 0, rotated with seed 1's; weight ``max-degree``, since
the methods' own made D-PSGD diverge on the two graphs). Rows: D-PSGD, MATCHA
at budget 0.5, AL-DSGD on one graph and on two, and D-PSGD on two (the
control). Reported: the center's test accuracy, the spread, the bytes each
worker sent, and the simulator's clock (``--step-seconds`` per step plus the
modeled transfers); one figure per graph. Quick mode: an MLP on the digits,
4 workers, 40 steps, the ring only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, in_parallel, train
from lsgd.plots import pyplot, save

NAME = "decentralized"
#: graph -> (the graph, the second graph of the dynamic runs, mixing weight)
GRAPHS = {
    "ring": ("ring", "ring:stride=3", "auto"),
    "erdos-renyi": ("erdos-renyi:edges=8,seed=0", "erdos-renyi:edges=8,seed=1", "max-degree"),
}
#: row label -> (method, dynamic, knobs)
ROWS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "D-PSGD": ("dpsgd", False, {}),
    "MATCHA (budget 0.5)": ("matcha", False, {"budget": 0.5}),
    "AL-DSGD, one graph": ("al-dsgd", False, {}),
    "AL-DSGD, two rotating graphs": ("al-dsgd", True, {}),
    "D-PSGD, two rotating graphs": ("dpsgd", True, {}),
}


def _defaults(quick: bool) -> dict[str, Any]:
    if quick:
        return {"graphs": ["ring"], "rows": ["D-PSGD", "AL-DSGD, two rotating graphs"],
                "workers": 4, "steps": 40, "batch_size": 32, "eval": 10, "model": "mlp",
                "dataset": "digits", "step_seconds": 0.01, "link": "1gbit"}
    return {"graphs": list(GRAPHS), "rows": list(ROWS), "workers": 8, "steps": 400,
            "batch_size": 64, "eval": 50, "model": "cnn7", "dataset": "fashion-mnist",
            "step_seconds": 0.06, "link": "1gbit"}


def _one(out: Path, graph: str, label: str, opts: dict[str, Any]) -> dict[str, Any]:
    """One run (a row of one graph's table), as the table and the figure need it."""
    method, dynamic, knobs = ROWS[label]
    first, second, weight = GRAPHS[graph]
    topology = {"graphs": [first, second]} if dynamic else {"topology": first}
    slug = f"{method}{'-dynamic' if dynamic else ''}"
    summary = train(out / "runs" / graph / slug, method=method, workers=opts["workers"],
                    groups=opts["workers"], backend="threads", link=opts["link"],
                    step_seconds=opts["step_seconds"], model=opts["model"],
                    dataset=opts["dataset"], batch_size=opts["batch_size"], lr=0.05,
                    steps=opts["steps"], eval_every=str(opts["eval"]), seed=0,
                    mixing_weight=weight, reuse=opts.get("reuse", False), **topology, **knobs)
    rows = summary.pop("rows")
    return {"graph": graph, "label": label, "accuracy": summary["test_accuracy"],
            "spread": rows[-1].get("spread", math.nan),
            "bytes_per_worker": summary["bytes_sent_per_worker"],
            "seconds": summary["train_seconds"], "run": summary["run"],
            "curve": [(r["time"], 1 - r["center_accuracy"]) for r in rows]}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    opts = _defaults(quick) | {k: v for k, v in options.items()
                               if v is not None and k in ("step_seconds", "reuse")}
    calls = [(out, graph, label, opts) for graph in opts["graphs"] for label in opts["rows"]]
    runs = in_parallel(_one, calls, options.get("jobs") or 1)
    rows = [[r["graph"], r["label"], r["accuracy"], r["spread"], r["bytes_per_worker"] / 1e6,
             r["seconds"]] for r in runs]
    notes = [f"{opts['workers']} workers, each a node behind a modeled {opts['link']} link; "
             f"{opts['model']} on {opts['dataset']}, batch {opts['batch_size']}, lr 0.05, "
             f"{opts['steps']} local steps, gossip every step, seed 0; clock: "
             f"{opts['step_seconds']:g} s per local step plus modeled transfers.",
             "spread: mean distance of the workers' states to the center at the end."]
    figures = [_figure(out / f"decentralized-{graph}.png", graph,
                       [r for r in runs if r["graph"] == graph]) for graph in opts["graphs"]]
    return Result(NAME, "Decentralized methods on one graph and on two rotating graphs",
                  ["graph", "method", "center acc", "spread", "MB sent/worker", "time s"],
                  rows, notes, {"options": opts, "runs": runs},
                  [f for f in figures if f is not None])


def _figure(path: Path, graph: str, runs: list[dict[str, Any]]) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        xs, ys = zip(*run["curve"])
        ax.plot(xs, [100 * y for y in ys], marker=".", label=run["label"])
    ax.set_xlabel("simulated time (s): steps plus modeled transfers")
    ax.set_ylabel("test error of the center (%)")
    ax.set_title(f"decentralized methods, {graph} graphs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return str(save(fig, path))
