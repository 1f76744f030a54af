"""PNG plots of runs: the papers' figures.

* test error of the center against wall-clock time and against steps (the
  LSGD paper's headline plot), one curve per run;
* the leader's rank over iterations (the paper's Figure 5).

matplotlib is an optional extra (``pip install 'lsgd[plot]'``); without it the
plots are skipped with a note.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from lsgd.train.outputs import read_csv


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(run: Path) -> str:
    try:
        summary = json.loads((run / "summary.json").read_text())
        return f"{summary['method']} ({summary['workers']}w)"
    except (OSError, KeyError, ValueError):
        return run.name


def plot_runs(runs: Sequence[Path], out: Path) -> Path | None:
    """Overlay the center's test error of several runs against time and steps."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, (by_time, by_steps) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        rows = [r for r in read_csv(run / "metrics.csv") if not math.isnan(r["center_accuracy"])]
        if not rows:
            continue
        error = [100 * (1 - r["center_accuracy"]) for r in rows]
        label = _label(run)
        by_time.plot([r["time"] for r in rows], error, marker=".", label=label)
        by_steps.plot([r["steps"] for r in rows], error, marker=".", label=label)
    for ax, xlabel in ((by_time, "training time (s)"), (by_steps, "local steps per worker")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test error of the center (%)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_leaders(run: Path, out: Path) -> Path | None:
    """The leader's rank at every election, by level (Figure 5 of the LSGD paper)."""
    plt = _pyplot()
    history = run / "leader_history.csv"
    if plt is None or not history.exists():
        return None
    rows = read_csv(history)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 3))
    levels = sorted({str(r["level"]) for r in rows})
    for level in levels:
        pts = [(r["step"], r["leader"]) for r in rows if r["level"] == level]
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=f"{level} leader",
                alpha=0.8)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("local steps")
    ax.set_ylabel("leader rank")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_run(run: Path) -> list[Path]:
    """A run's own figures, in its folder."""
    made = [plot_runs([run], run / "test_error.png"), plot_leaders(run, run / "leaders.png")]
    return [p for p in made if p is not None]
