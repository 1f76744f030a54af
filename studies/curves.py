"""Lines against time, one panel per figure side by side: the studies' figures of
time to accuracy or loss (matplotlib, the optional extra ``lsgd[plot]``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: A line of :func:`draw_curves`: its label, its (x, y) points, and whether it is a
#: reference (drawn black and dash-dotted, after the others).
Curve = tuple[str, Sequence[tuple[float, float]], bool]


def draw_curves(panels: Sequence[tuple[str, Sequence[Curve]]], path: str | Path, *,
                xlabel: str, ylabel: str, target: float | None = None) -> Path:
    """Lines against time to a PNG, one panel per ``(title, curves)`` side by side,
    ``target`` a dotted horizontal line in each. Ten colours, then the same ten
    dashed. ``ImportError`` without matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not panels:
        raise ValueError("draw_curves: no panel to draw")
    fig = Figure(figsize=(7.5 if len(panels) == 1 else 3.9 * len(panels), 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, curves) in zip(axes, panels):
        for i, (label, points, _) in enumerate(curve for curve in curves if not curve[2]):
            ax.plot(*zip(*points), label=label, color=f"C{i % 10}",
                    linestyle="-" if i < 10 else "--", marker=".", markersize=3, linewidth=1.2)
        for label, points, _ in (curve for curve in curves if curve[2]):
            ax.plot(*zip(*points), label=label, color="black", linestyle="-.", linewidth=1.2)
        if target is not None:
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(curves) > 6 else 1)
    axes[0].set_ylabel(ylabel, fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return Path(path)
