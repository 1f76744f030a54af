"""Elastic: a worker killed mid-run, survived on torchft against restarted from a checkpoint.

Four nodes behind shaped 100 Mbit/s links (``--links``; the loopback where links cannot
be shaped) train CNN7 on Fashion-MNIST for 240 steps (quick: :data:`_SETUPS`); worker 2
SIGKILLs itself before step 100 and its agent starts it again. LSGD and DiLoCo, each
**elastic** (:mod:`lsgd.launcher.elastic_jobs`: the survivors go on, the killed worker
rejoins healed from a live peer) and **restarted from a checkpoint** (all restart from
the latest one), with and without the fault; the table's :data:`COLUMNS` for each.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from itertools import product
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, write
from lsgd.comm.elastic_collectives import EXTRA
from lsgd.links.netns import shaping_problem
from lsgd.train import runner
from lsgd.train.config import make_config
from lsgd.train.elastic_run import train_elastic

NAME = "elastic"
TITLE = "Elastic: survive a killed worker, or restart from a checkpoint"
#: Restarts of the restart-from-checkpoint runs and of the elastic runs.
RESTARTS = 1
#: Seconds a restarted run's collectives and rendezvous may wait: a restart that hangs
#: on shaped links fails within minutes, and the row says so.
PATIENCE = 120.0
COLUMNS = ["method", "how", "fault", "wall s", "steps redone", "rejoin s", "heal MB",
           "heal s", "center acc"]


#: The runs' settings, quick (the restart is waited for, 10 s heartbeats: loaded, it beats
#: again past 2 s) and not.
_SETUPS = {True: {"workers": 3, "model": "mlp", "dataset": "digits", "steps": 96, "kill": 40,
                  "period": 8, "every": 16, "batch_size": 32, "heartbeat_timeout": 10.0},
           False: {"workers": 4, "model": "cnn7", "dataset": "fashion-mnist", "steps": 240,
                   "kill": 100, "period": 16, "every": 40, "batch_size": 64,
                   "heartbeat_timeout": 2.0}}


def _config(method: str, setup: dict[str, Any], fault: bool, run: Path, **extra: Any) -> Any:
    settings = {key: setup[key] for key in ("workers", "model", "dataset", "steps", "period",
                                             "batch_size", "link")}
    if setup["link"] is not None:
        settings["groups"] = setup["workers"]
    return make_config(settings | {"method": method, "out": str(run), "seed": 0, "quiet": True,
                                   "restarts": RESTARTS, "eval_every": str(setup["steps"]),
                                   "fault": [f"kill:2:{setup['kill']}"] if fault else []}
                       | extra)


def _elastic(method: str, setup: dict[str, Any], fault: bool, folder: Path) -> dict[str, Any]:
    cfg = _config(method, setup, fault, folder / f"{method}-elastic-{int(fault)}", elastic=True,
                  heartbeat_timeout=setup["heartbeat_timeout"])
    runner.prepare(cfg, cfg.out_dir)
    start = time.perf_counter()
    summary, records = train_elastic(cfg)
    wall = time.perf_counter() - start
    survivors = [r for r in records if r["attempt"] == 0]
    redone = sum(_steps_back(r["trace"]) for r in survivors)
    rejoin = float("nan")
    joined = [r for r in records if r["attempt"] > 0 and r["trace"]]  # not after the end
    if joined:
        killed_at = max(t for r in survivors for t, s in r["trace"] if s == setup["kill"] - 1)
        rejoin = joined[0]["trace"][0][0] - killed_at
    return {"wall": wall, "redone": redone, "rejoin": rejoin,
            "heal_mb": sum(r["join_bytes"] for r in records) / 1e6,
            "heal_s": sum(r["heal_seconds"] for r in records),
            "accuracy": summary["test_accuracy"]}


def _steps_back(trace: list[tuple[float, int]]) -> int:
    """Steps a worker took again: how far its step count ever went back, summed."""
    steps = [s for _, s in trace]
    return sum(a - b + 1 for a, b in zip(steps, steps[1:]) if b <= a)


def _restart(method: str, setup: dict[str, Any], fault: bool, folder: Path) -> dict[str, Any]:
    cfg = _config(method, setup, fault, folder / f"{method}-restart-{int(fault)}-{setup['link']}",
                  backend="processes", checkpoint_every=setup["every"], timeout=PATIENCE)
    start = time.perf_counter()
    no_heal = {"rejoin": float("nan"), "heal_mb": 0.0, "heal_s": 0.0}
    try:
        summary = runner.train(cfg)
    except Exception as error:  # noqa: BLE001 - the row says how it failed
        first = str(error).strip().splitlines()
        return no_heal | {"wall": time.perf_counter() - start, "redone": float("nan"),
                          "accuracy": float("nan"), "failed": " / ".join(first[1:3] or first[:1])}
    assert summary is not None
    # every worker goes back to the checkpoint before the kill
    redone = setup["workers"] * (setup["kill"] % setup["every"]) if fault else 0
    return no_heal | {"wall": time.perf_counter() - start, "redone": redone,
                      "accuracy": summary["test_accuracy"]}


def _how(kind: str, every: int, link: str | None, asked: str | None) -> str:
    how = "elastic (torchft)" if kind == "elastic" else f"restart, checkpoint every {every}"
    return how + (", loopback" if asked and link is None else "")


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    if importlib.util.find_spec("torchft") is None:
        return Result(NAME, TITLE, COLUMNS, [], [f"left out: it needs torchft ({EXTRA})"])
    links = options.get("links") or ([] if quick or shaping_problem() else ["100mbit"])
    setup = {**_SETUPS[quick], "link": links[0] if links else None}
    methods = options.get("methods") or ["lsgd", "diloco"]
    rows, data = [], {"setup": setup, "runs": {}}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lsgd-elastic-") as folder:
        for method, how, fault in product(methods, ("elastic", "restart"), (False, True)):
            if quick and how == "restart" and not fault:
                continue  # the quick mode: the elastic run is the unfailed reference
            got = (_elastic if how == "elastic" else _restart)(method, setup, fault, Path(folder))
            tries = [(setup["link"], got)]
            if "failed" in got and setup["link"]:  # the same on the loopback
                tries.append((None, _restart(method, setup | {"link": None}, fault, Path(folder))))
            label = f"kill:2:{setup['kill']}" if fault else "none"
            for link, result in tries:
                name = f"{label} (failed)" if "failed" in result else label
                if "failed" in result:
                    failures.append(f"{method}, {how}, {name}: {result['failed']}")
                data["runs"][f"{method}/{how}/{label}/{link}"] = result
                rows.append([method, _how(how, setup["every"], link, setup["link"]), name,
                             *(result[key] for key in ("wall", "redone", "rejoin", "heal_mb",
                                                       "heal_s", "accuracy"))])
            write(Result(NAME, TITLE, COLUMNS, rows, ["(in progress)"], data), out)
    where = (f"{setup['workers']} nodes behind {setup['link']} shaped links" if setup["link"]
             else f"{setup['workers']} workers on the loopback")
    notes = [f"{where}, {setup['model']} on {setup['dataset']}, {setup['steps']} steps, period "
             f"{setup['period']}, seed 0; worker 2 SIGKILLs itself before the step named and is "
             "restarted once by its agent. Wall time from the benchmark's clock (every "
             "attempt). Heals travel over the quorum's process group; heal s: the joiner's "
             "quorum, the heal's transfer included."]
    notes += [f"failed: {line}" for line in failures]
    return Result(NAME, TITLE, COLUMNS, rows, notes, data)
