"""Every picture lsgd draws, and the one place that imports matplotlib.

* test error of the center against wall-clock time and against steps (the
  LSGD paper's headline plot), one curve per run;
* the leader's rank over iterations (the paper's Figure 5);
* communication graphs, one colour per matching (:func:`draw_graphs`).

matplotlib is an optional extra (``pip install 'lsgd[plot]'``); without it the
plots are skipped with a note.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsgd.topology import Topology
from lsgd.train.outputs import read_csv


PLOT_HINT = "note: matplotlib is not installed, skipping the PNGs (pip install 'lsgd[plot]')"


def pyplot(note: bool = False) -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or None if matplotlib is not installed
    (with ``note``, saying so on standard error)."""
    try:
        import matplotlib
    except ImportError:
        if note:
            print(PLOT_HINT, file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG, its folder made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label(run: Path) -> str:
    try:
        summary = json.loads((run / "summary.json").read_text())
        return f"{summary['method']} ({summary['workers']}w)"
    except (OSError, KeyError, ValueError):
        return run.name


def plot_runs(runs: Sequence[Path], out: Path) -> Path | None:
    """Overlay the center's test error of several runs against time and steps."""
    plt = pyplot()
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
    return save(fig, out)


def plot_leaders(run: Path, out: Path) -> Path | None:
    """The leader's rank at every election, by level (Figure 5 of the LSGD paper)."""
    plt = pyplot()
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
    return save(fig, out)


def plot_run(run: Path) -> list[Path]:
    """A run's own figures, in its folder."""
    made = [plot_runs([run], run / "test_error.png"), plot_leaders(run, run / "leaders.png")]
    return [p for p in made if p is not None]


def draw_graphs(
    graphs: Topology | Sequence[Topology],
    path: str | Path,
    *,
    title: str | None = None,
) -> Path:
    """Draw one graph, or several side by side (dynamic graphs), to a PNG.

    Workers sit on a circle (a grid for a torus); each matching has its own
    colour, so a picture also shows the rounds of pairwise exchange.
    Drawn on a Figure of its own with the Agg canvas, leaving any interactive
    backend of the caller alone. ``ImportError`` without matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    graphs = [graphs] if isinstance(graphs, Topology) else list(graphs)
    if not graphs:
        raise ValueError("draw_graphs: no graph to draw")
    fig = Figure(figsize=(3.6 * len(graphs), 3.8))
    FigureCanvasAgg(fig)
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:olive", "tab:cyan", "tab:gray"]
    for k, graph in enumerate(graphs):
        ax = fig.add_subplot(1, len(graphs), k + 1)
        pos = _layout(graph)
        grid = graph.name.startswith("torus(")
        for c, matching in enumerate(graph.matchings):
            colour = palette[c % len(palette)]
            for i, j in matching:
                (xi, yi), (xj, yj) = pos[i], pos[j]
                if grid and abs(xi - xj) + abs(yi - yj) > 1:  # a wrap-around edge: an arc
                    ax.annotate("", (xj, yj), (xi, yi), zorder=1, arrowprops=dict(
                        arrowstyle="-", color=colour, lw=2, connectionstyle="arc3,rad=0.3"))
                else:
                    ax.plot([xi, xj], [yi, yj], color=colour, lw=2, zorder=1)
        xs, ys = zip(*pos)
        ax.scatter(xs, ys, s=260, c="white", edgecolors="black", zorder=2)
        for r, (x, y) in enumerate(pos):
            ax.annotate(str(r), (x, y), ha="center", va="center", fontsize=8, zorder=3)
        ax.set_title(f"{graph.name}\nlambda_2={graph.algebraic_connectivity:.3f}, "
                     f"{len(graph.matchings)} matchings (colours)", fontsize=9)
        ax.set_aspect("equal")
        ax.margins(0.12)
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94) if title else (0, 0, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _layout(graph: Topology) -> list[tuple[float, float]]:
    if graph.name.startswith("torus("):
        rows, cols = (int(v) for v in graph.name[6:-1].split("x"))
        return [(float(i % cols), -float(i // cols)) for i in range(graph.size)]
    n = graph.size
    return [(math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n)) for i in range(n)]
