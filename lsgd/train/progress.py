"""What a run shows while it trains: a progress bar in a terminal, else a line per evaluation.

Only rank 0 shows anything, and nothing with ``--quiet``.
"""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from lsgd.strategies import Report
from lsgd.tasks import Task
from lsgd.train.clock import Pace


def bar(pace: Pace, disable: bool) -> tqdm:
    """The bar of a run: steps of a step budget, else seconds of a time budget."""
    return tqdm(total=pace.max_steps if pace.by_steps else pace.max_seconds,
                unit="step" if pace.by_steps else "s", initial=0, dynamic_ncols=True,
                disable=disable,
                bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} {unit} "
                           "[{elapsed}<{remaining}{postfix}]")


def fields(task: Task, report: Report, rows: list[dict[str, Any]], epochs: float,
           loss: float) -> dict[str, str]:
    """What the bar shows besides progress (computed only when it redraws)."""
    shown = {"epoch": f"{epochs:.2f}", "loss": f"{loss:.3f}"}
    if rows:
        shown[task.headline.label] = f"{rows[-1][task.column]:.4f}"
    if report.leader_rank is not None:
        shown["leader"] = str(report.leader_rank)
    shown["sent"] = f"{report.bytes_sent / 1e6:.1f} MB"
    return shown


def line(task: Task, pace: Pace, row: dict[str, Any]) -> str:
    """One evaluation as a line: where the run is, the center's headline, the bytes sent."""
    where = (f" of {pace.max_steps:g}" if pace.by_steps
             else f" ({row['time']:.1f} of {pace.max_seconds:g} s of training)")
    return (f"step {row['steps']:g}{where}: {task.headline.sentence(row)}, "
            f"{row['bytes_sent_per_worker'] / 1e6:.1f} MB sent per worker")
