"""Drawing with matplotlib (the optional extra ``lsgd[plot]``): the figure helpers the
benchmarks and reproductions use, communication graphs (:func:`draw_graphs`). A run
folder's own figures are :mod:`lsgd.train.run_plots`'.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsgd.topology import Topology

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


def log_log_axes(ax: Any, xlabel: str, ylabel: str) -> None:
    """Log axes (x in powers of two), labels, a small legend and a light grid."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def save(fig: Any, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG, its folder made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    _write(fig, path, dpi=110)
    plt.close(fig)
    return path


def _write(fig: Any, path: str | Path, dpi: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def draw_graphs(graphs: Topology | Sequence[Topology], path: str | Path, *,
                title: str | None = None) -> Path:
    """Draw one graph, or several side by side (dynamic graphs), to a PNG: workers on a
    circle (a grid for a torus), each matching in its own colour. Drawn on a Figure of
    its own, leaving any interactive backend alone. ``ImportError`` without matplotlib.
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
    for ax, graph in zip(fig.subplots(1, len(graphs), squeeze=False)[0], graphs):
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
        ax.scatter(*zip(*pos), s=260, c="white", edgecolors="black", zorder=2)
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
    return _write(fig, path, dpi=110)


def _layout(graph: Topology) -> list[tuple[float, float]]:
    if graph.name.startswith("torus("):
        cols = int(graph.name[6:-1].split("x")[1])
        return [(float(i % cols), -float(i // cols)) for i in range(graph.size)]
    n = graph.size
    return [(math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n)) for i in range(n)]
