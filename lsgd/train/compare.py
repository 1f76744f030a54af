"""``lsgd train --method A,B,...``: the same settings run once per method into ``--out/METHOD``,
every method checked before the first starts, one after another (none shares the machine); then a
table compares them (``--out/comparison.txt``) and ``--out/comparison.png`` draws their curves.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsgd.tasks.headline import best, of_metric, reaches
from lsgd.train.errors import UsageError
from lsgd.train.runner import (check_before_start, check_new_run, dry_run,
                               launch_from_this_process, resolve, train_and_report, under_torchrun)
from lsgd.train.config import TrainConfig
from lsgd.train.outputs import atomic_write, read_csv, table
from lsgd.train.run_plots import plot_runs


def methods_of(text: str) -> list[str]:
    """``"lsgd, allreduce"`` -> ``["lsgd", "allreduce"]``; each named once."""
    methods = [m.strip() for m in text.split(",") if m.strip()]
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise UsageError(f"--method {text}: {', '.join(repeated)} given twice; name each "
                         "method once")
    return methods


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    """One resolved configuration per method, each with ``--out/METHOD``."""
    if getattr(args, "resume", None):
        raise UsageError(f"--resume with --method {args.method}: resume one method's run "
                         "at a time, e.g. --resume RUN/lsgd --method lsgd")
    if under_torchrun():
        raise UsageError(f"--method {args.method}: under torchrun a job trains one method; "
                         "run several without torchrun, or one torchrun job per method")
    methods = methods_of(args.method)
    base = Path(getattr(args, "out", None) or f"runs/compare-{'-'.join(methods)}")
    found: list[TrainConfig] = []
    for method in methods:
        one = copy.copy(args)
        one.method, one.out = method, str(base / method)
        found.append(resolve(one, tuple(methods)))
        args.backend = found[-1].backend  # --backend auto: decided (and said) once
    return found


def run_comparison(args: argparse.Namespace) -> int:
    """Check every method's run, train them one after another, compare them."""
    runs = configs(args)
    if runs[0].output.dry_run:
        return max(dry_run(cfg) for cfg in runs)
    launch_from_this_process(runs[0])
    for cfg in runs:
        check_new_run(cfg, cfg.out_dir)
        check_before_start(cfg)
    results = []
    for number, cfg in enumerate(runs, 1):
        print(f"[{number}/{len(runs)}] {cfg.method}: training into {cfg.out_dir}",
              file=sys.stderr, flush=True)
        results.append(train_and_report(cfg))
    codes, summaries = zip(*results)
    base = runs[0].out_dir.parent
    text = comparison_text(runs, summaries)
    print(text)
    atomic_write(base / "comparison.txt", text + "\n")
    folders = [cfg.out_dir for cfg, summary in zip(runs, summaries) if summary is not None]
    figure = plot_runs(folders, base / "comparison.png") if folders else None
    print(f"figure {figure}" if figure else "figure: none (needs matplotlib)")
    return max(codes)


def comparison_text(runs: list[TrainConfig], summaries: Sequence[dict[str, Any] | None]) -> str:
    """The table of the methods side by side, and what it was measured on; "time to" is the
    training time until the center first reached the worst of the methods' best values."""
    curves = {cfg.method: read_csv(cfg.out_dir / "metrics.csv") if summary else []
              for cfg, summary in zip(runs, summaries)}
    headline = of_metric(next((s.get("metric", "accuracy") for s in summaries if s), "accuracy"))
    metric, column, higher = headline.metric, headline.column, headline.higher_is_better
    bests = [best(metric, _values(rows, column)) for rows in curves.values() if rows]
    common = math.nan
    if bests and not any(map(math.isnan, bests)):
        common = (math.floor(1000 * min(bests)) / 1000 if higher
                  else math.ceil(1000 * max(bests)) / 1000)

    def show(value: float) -> str:
        return "-" if math.isnan(value) else headline.show(value, 1)

    name = headline.short
    header = ["method", f"center {name}", f"best {name}", f"time to {show(common)}",
              "train time", "steps/worker", "MB sent/worker", "s comm/worker"]
    rows = []
    for cfg, summary in zip(runs, summaries):
        if summary is None:
            rows.append([cfg.method, "diverged", "-", "-", "-", "-", "-", "-"])
            continue
        points = curves[cfg.method]
        reached = next((row["time"] for row in points
                        if reaches(metric, _value(row, column), common)), None)
        comm = summary.get("worker_comm_seconds") or []
        rows.append([cfg.method, show(_value(points[-1], column) if points else math.nan),
                     show(best(metric, _values(points, column))),
                     f"{reached:.1f} s" if reached is not None else "-",
                     f"{summary['train_seconds']:.1f} s", f"{summary['steps']:g}",
                     f"{summary['bytes_sent_per_worker'] / 1e6:.2f}",
                     f"{sum(comm) / len(comm):.1f}" if comm else "-"])
    lines = table(header, rows).split("\n")
    first = runs[0]
    where = (f"link {first.link} between {first.groups} nodes, "
             f"{'modeled on the simulator clock' if first.backend == 'threads' else 'shaped'}"
             if first.link else f"{first.backend}, no link")
    lines += ["", f"{first.model} on {first.dataset}, {first.workers} workers, {where}; "
              f"time to {show(common)}: training time until the center first reached "
              f"{headline.common_text} (evaluated every {first.evaluation.eval_every}); "
              "s comm: seconds each worker spent in collectives."]
    return "\n".join(lines)


def _value(row: dict[str, Any], column: str) -> float:
    value = row.get(column)
    return value if isinstance(value, float) else math.nan


def _values(rows: list[dict[str, Any]], column: str) -> list[float]:
    return [v for v in (_value(row, column) for row in rows) if not math.isnan(v)]

