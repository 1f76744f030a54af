"""A run folder's figures, and several runs overlaid (``lsgd plot``): the center's test
error or loss against time and steps (the LSGD paper's headline plot and Figures 9-12;
a language model's validation loss also against bytes sent), and the leaders (Figure 5),
drawn from the run's files with :mod:`lsgd.plots` (imported when a figure is drawn).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from lsgd.tasks.headline import shared
from lsgd.train.outputs import read_csv


def _summary(run: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _label(run: Path) -> str:
    summary = _summary(run)
    try:
        return f"{summary['method']} ({summary['workers']}w)"
    except KeyError:
        return run.name


#: What ``plot_runs`` can draw: metric -> (metrics.csv column, transform, whether also
#: against the bytes each worker sent). The y-axis labels are the headline's
#: (:attr:`lsgd.tasks.headline.Headline.axis_labels`).
METRICS: dict[str, tuple[str, Callable[[float], float], bool]] = {
    "error": ("center_accuracy", lambda acc: 100 * (1 - acc), False),
    "loss": ("center_loss", lambda loss: loss, True)}


def _curve(run: Path, metric: str, x: str = "steps"
           ) -> tuple[list[float], list[float], list[float]]:
    """(times, ``x`` (steps), values) of one run's ``metric``, rows without a value left out."""
    column, transform, _ = METRICS[metric]
    rows = [r for r in read_csv(run / "metrics.csv")
            if isinstance(r.get(column), float) and math.isfinite(r[column])
            and isinstance(r.get(x), float) and math.isfinite(r[x])]
    return [r["time"] for r in rows], [r[x] for r in rows], [transform(r[column]) for r in rows]


def plot_runs(runs: Sequence[Path], out: Path, metric: str | None = None,
              zoom: float | None = None) -> Path | None:
    """Overlay the center's test error (``metric="error"``) or test loss (``"loss"``) of
    several runs against time and steps (default: their headline), a loss also against the
    bytes each worker sent; with ``zoom`` in (0, 1), a panel of the last ``zoom`` of the time
    axis with its own y range, where the curves of long runs bunch up."""
    headline = shared(_summary(run).get("metric") for run in runs)  # text's if any is text
    metric = metric or headline.figure
    if metric not in METRICS:
        raise ValueError(f"plot_runs: unknown metric {metric!r}; choose one of "
                         f"{', '.join(METRICS)}")
    if zoom is not None and not 0 < zoom < 1:
        raise ValueError(f"plot_runs: zoom {zoom} must lie strictly between 0 and 1")
    from lsgd.plots import pyplot, save

    plt = pyplot()
    if plt is None:
        return None
    by_bytes = METRICS[metric][2]
    xlabels = ["training time (s)", "local steps per worker",
               *["MB sent per worker"] * by_bytes, *["training time (s)"] * (zoom is not None)]
    fig, axes = plt.subplots(1, len(xlabels), figsize=(5.5 * len(xlabels), 4))
    drawn = []  # (times, values) of every run with a curve
    for run in runs:
        times, steps, values = _curve(run, metric)
        if not values:
            continue
        drawn.append((times, values))
        lines = [(times, values), (steps, values)]
        if by_bytes:
            _, sent, values_by_sent = _curve(run, metric, "bytes_sent_per_worker")
            lines.append(([b / 1e6 for b in sent], values_by_sent))
        label = _label(run)
        for ax, (x, y) in zip(axes, lines + [(times, values)]):  # the last: the zoom's
            ax.plot(x, y, marker=".", label=label)
    if by_bytes:
        axes[2].set_xscale("symlog", linthresh=1.0)
    if zoom is not None:
        _zoom(axes[-1], drawn, zoom)
    for ax, xlabel in zip(axes, xlabels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(headline.axis_labels[metric])
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend()
    return save(fig, out)


def _zoom(ax: Any, drawn: list[tuple[list[float], list[float]]], zoom: float) -> None:
    """The last ``zoom`` of the time axis of the curves ``drawn``, with its own y range."""
    if drawn:
        times = [t for every, _ in drawn for t in every]
        end = max(times)
        start = end - zoom * (end - min(times))
        shown = [v for every, values in drawn for t, v in zip(every, values) if t >= start]
        low, high = min(shown), max(shown)
        pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
        margin = 0.02 * (end - start) or 0.5
        ax.set_xlim(start - margin, end + margin)
        ax.set_ylim(low - pad, high + pad)
    ax.set_title(f"last {zoom:.0%} of the time axis", fontsize=9)


def leader_counts(history: Iterable[tuple[Any, Any, Any]], workers: int,
                  level: str = "global") -> dict[int, int]:
    """How many elections of ``level`` each worker won, of the (step, level, leader)
    rows of ``history``: {rank: count} for every rank in ``range(workers)`` and any
    other that led; elections without a leader (None or NaN) are not counted."""
    counts = dict.fromkeys(range(workers), 0)
    for _, row_level, leader in history:
        if str(row_level) != level or leader is None or (
                isinstance(leader, float) and math.isnan(leader)):
            continue
        counts[int(leader)] = counts.get(int(leader), 0) + 1
    return counts


def plot_leaders(run: Path, out: Path) -> Path | None:
    """The leader's rank at every election, by level, and how many *global* elections each
    worker won (Figure 5 of the LSGD paper): leader_history.csv, written by rank 0, holds
    the local elections of rank 0's group alone."""
    from lsgd.plots import pyplot, save

    plt, history = pyplot(), run / "leader_history.csv"
    rows = read_csv(history) if plt is not None and history.exists() else []
    if not rows:  # no matplotlib, or no election
        return None
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": (2, 1)})
    for level in sorted({str(r["level"]) for r in rows}):
        mine = [r for r in rows if r["level"] == level]
        ax.step([r["step"] for r in mine], [r["leader"] for r in mine], where="post",
                label=f"{level} leader", alpha=0.8)
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.yaxis, bars.xaxis, bars.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("local steps")
    ax.set_ylabel("leader rank")
    ax.grid(alpha=0.3)
    ax.legend()
    workers = _summary(run).get("workers")
    if not isinstance(workers, int) or workers < 1:
        workers = 1 + max((int(r["leader"]) for r in rows if isinstance(r["leader"], float)
                           and math.isfinite(r["leader"])), default=-1)
    counts = leader_counts([(r["step"], r["level"], r["leader"]) for r in rows], workers)
    bars.bar(list(counts), list(counts.values()), color="tab:blue")
    bars.set_xlabel("worker rank")
    bars.set_ylabel("global elections won")
    bars.grid(alpha=0.3, axis="y")
    return save(fig, out)


def plot_run(run: Path) -> list[Path]:
    """A run's own figures, in its folder: test_error.png and test_loss.png (a language
    model: validation_loss.png), leaders.png."""
    made = [plot_runs([run], run / name, metric=figure)
            for name, figure in shared([_summary(run).get("metric")]).run_figures.items()]
    made.append(plot_leaders(run, run / "leaders.png"))
    return [p for p in made if p is not None]
