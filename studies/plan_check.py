"""The studies plan-check and plan-crossing: ``lsgd plan`` against the shaped lab.

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

    python studies/plan_check.py plan-check --out records/plan-check

The study plan-crossing trains DiLoCo at five shaped link rates and sets the measured
compute share of a step beside the planner's: where each crosses 90% (root and iproute2):

    python studies/plan_check.py plan-crossing --out records/plan-crossing
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


RATES = ("25mbit", "50mbit", "100mbit", "200mbit", "400mbit")


def crossing(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """DiLoCo (period 8, blocking) on the 842k GPT, 4 nodes behind shaped links at each of
    :data:`RATES`: the measured compute share of a step (1 - seconds waited in collectives
    over training seconds) against the planner's at that rate, and where each crosses 90%."""
    import lsgd
    from lsgd.bench.common import train
    from lsgd.links.spec import parse_link

    rates, steps = (RATES[2:4], 16) if quick else (RATES, 48)
    settings = {"dataset": "kjv", "model": "gpt", "method": "diloco", "period": 8,
                "workers": 4, "groups": 4, "steps": steps, "eval_every": str(10 * steps)}
    summaries = {rate: train(out / "runs" / rate, options.get("reuse") or False,
                             link=rate, **settings) for rate in rates}
    compute = statistics.median(_per_step(s)[1] for s in summaries.values())
    rows, measured, planned = [], [], []
    for rate, summary in summaries.items():
        row = lsgd.plan("gpt", step_time=compute, workers=4, groups=4, link=rate,
                        methods=["diloco"], knobs={"period": 8}).rows[0]
        used = 1 - summary["comm_seconds_per_worker"] / summary["train_seconds"]
        measured.append(used)
        planned.append(row["utilization"])
        rows.append([rate, _per_step(summary)[0], 1 / row["step_seconds"], 100 * used,
                     100 * row["utilization"], row["rate_90"]])
    bits = [parse_link(rate).rate for rate in rates]
    lab = next((f"{rates[i - 1]}-{rates[i]}" for i in range(1, len(rates))
                if measured[i - 1] < 0.9 <= measured[i]), "not bracketed")
    plan_rate = rows[0][5]
    notes = [f"compute per step {compute:.3f} s (the runs' median, training seconds less "
             f"waits over steps); the lab's utilization crosses 90% between {lab}; the "
             f"planner's 90% rate: {plan_rate / 1e6:.1f} Mbit/s."]
    return Result("plan-crossing", "Where DiLoCo's utilization crosses 90%: the shaped lab "
                  "against lsgd plan", ["link", "steps/s", "planned steps/s", "util %",
                                         "planned util %", "planned 90% rate bit/s"],
                  rows, notes, {"rates": bits, "lab": lab, "planned_90": plan_rate,
                                "compute": compute, "steps": steps})


#: The studies this script runs, by name.
STUDIES = {NAME: run, "plan-crossing": crossing}

if __name__ == "__main__":
    sys.exit(script(sys.modules[__name__]).main())
