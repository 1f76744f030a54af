"""The study plan-check: ``lsgd plan`` against the shaped lab's measured steps per second.

For every headline run kept under records/ (the 842k GPT at 16 and 4 windows per step,
CNN7 on Fashion-MNIST; 4 nodes behind shaped 20 or 100 Mbit/s links), the planner is
given the run's model, workers, nodes, link and method options as its config.toml
recorded them, and one compute time per batch of runs: the free network's all-reduce
run of the same batch (1 Gbit/s), its seconds per step less what the planner says its
all-reduce waits there. Its steps per second are then set beside the median measured
over the run's seeds (steps over training seconds). Where the two differ by more than
15%, the row names the term that misses: the measured compute per step (training
seconds less the seconds the worker waited in collectives, over its steps) against the
one assumed, and the measured waits against the planned ones. It trains nothing; it
reads the records:

    python studies/plan_check.py --out records/plan-check
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:  # python studies/NAME.py: the repository's root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from lsgd.bench.common import Result, read_record
from studies.common import script

NAME = "plan-check"
ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.15
#: Each batch of runs: its name, the folders of its shaped runs, its free network's runs.
BATCHES = [
    ("GPT, 16 windows", ["time-to-loss/runs/20mbit", "time-to-loss/runs/100mbit"],
     "time-to-loss/runs/1gbit"),
    ("GPT, 4 windows", ["sparse-lm/runs/20mbit"], "sparse-lm/runs/1gbit"),
    ("CNN7", ["sparse-cnn7/runs/20mbit"], "sparse-cnn7/runs/1gbit"),
    ("CNN7, hidden", ["hidden/runs/20mbit", "hidden-100mbit/runs/100mbit"],
     "hidden-free/runs/1gbit"),
]
#: The method options that shape the traffic, as lsgd plan takes them.
TRAFFIC = ("period", "global_period", "fragments", "overlap", "compress", "density", "chunk",
           "values", "topk", "powersgd")
COLUMNS = ["batch", "link", "run", "steps/s", "planned steps/s", "error %",
           "compute s", "assumed compute s", "waits s", "planned waits s", "misses on"]


def _runs(folder: Path) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """The finished runs under ``folder`` by their name less the seed."""
    out: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for run in sorted(folder.iterdir()) if folder.is_dir() else []:
        if (record := read_record(run)) is not None:
            out.setdefault(run.name.rsplit("-seed", 1)[0], []).append(record)
    return out


def _per_step(summary: dict[str, Any]) -> tuple[float, float, float]:
    """Measured steps per second, compute seconds and waited seconds per step."""
    steps, seconds = summary["steps"], summary["train_seconds"]
    waits = summary["comm_seconds_per_worker"]
    return steps / seconds, (seconds - waits) / steps, waits / steps


def _planned(stored: dict[str, Any], compute: float) -> dict[str, Any] | None:
    """The planner's row for the run ``stored`` describes; None for a method it lacks."""
    import lsgd
    from lsgd.method_options import OPTIONS
    from lsgd.planner.planning import METHODS
    from lsgd.train.config import from_legacy

    method = stored["method"]
    planned = method
    if planned not in METHODS:
        return None
    settings = from_legacy(stored, method)
    takes = {name for name in OPTIONS[planned].__dataclass_fields__}
    knobs = {k: settings[k] for k in TRAFFIC if k in settings and k in takes
             and settings[k] is not None}
    form = planned
    if planned == "allreduce":
        form = ("allreduce-powersgd" if knobs.get("powersgd")
                else "allreduce-bf16" if knobs.get("compress") == "bf16" else "allreduce")
    elif settings.get("outer") == "eager":
        form = "diloco-eager"
    plan = lsgd.plan(stored["model"], step_time=compute, workers=stored["workers"],
                     groups=stored["groups"], link=stored["link"], methods=[planned],
                     knobs=knobs)
    return next(row for row in plan.rows if row["form"] == form)


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    rows, data = [], []
    for batch, shaped, free in BATCHES:
        free_runs = [r for runs in _runs(ROOT / "records" / free).values() for r in runs]
        if not free_runs:
            continue
        stored = free_runs[0][0]
        seconds = statistics.median(1 / _per_step(s)[0] for _, s in free_runs)
        compute = seconds - _planned(stored, 1.0)["waits"]
        for folder in shaped:
            for name, runs in _runs(ROOT / "records" / folder).items():
                row = _planned(runs[0][0], compute)
                if row is None:
                    continue
                measured = [_per_step(summary) for _, summary in runs]
                rate, used, waited = (statistics.median(m[i] for m in measured)
                                      for i in range(3))
                planned_rate, planned_waits = 1 / row["step_seconds"], round(row["waits"], 9)
                error = planned_rate / rate - 1
                misses = "-" if abs(error) <= TOLERANCE else (
                    "compute" if abs(used - compute) > abs(waited - planned_waits)
                    else "waits")
                rows.append([batch, runs[0][0]["link"], name, rate, planned_rate,
                             100 * error, used, compute, waited, planned_waits, misses])
                data.append({"batch": batch, "run": name, "seeds": len(runs), "plan": row})
    within = sum(abs(r[5]) <= 100 * TOLERANCE for r in rows)
    notes = [f"{within} of {len(rows)} runs planned within {TOLERANCE:.0%} of their measured "
             "steps per second; each run the median of its seeds. compute s and waits s: "
             "measured per step (training seconds less the seconds waited in collectives; "
             "those seconds); assumed compute s: the batch's free-network all-reduce, its "
             "seconds per step less its planned waits at 1 Gbit/s."]
    return Result(NAME, "lsgd plan against the shaped lab: steps per second", COLUMNS, rows,
                  notes, {"runs": data, "tolerance": TOLERANCE})


#: The studies this script runs, by name.
STUDIES = {NAME: run}
TRAINS = False

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
