"""Chaos: goodput and time to recover under faults at random, against the same run unfailed.

Four nodes behind shaped 100 Mbit/s links (quick: the loopback) train a fixed number of
steps (:data:`_SETUPS`): per mode (:data:`MODES`), method and kind of round, once unfailed,
then per seed and MTBF under the faults ``--chaos SEED`` draws (:mod:`lsgd.train.chaos`),
each ``lsgd train`` in a process of its own (docs/reliability.md). **Goodput**: useful
steps per second over the fault-free runs' (median). **Time to recover**: from a fault to
the answer that put the run back (``faults.csv``). A **hang**: the run folder unchanged
for ``--timeout`` + join timeout + 10 s (then stopped); a **silent exit**: a worker ended
by a signal no fault sent, or with an error code and no error written.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lsgd.bench.common import MissingRecord, Result, write
from lsgd.method_options import option_names
from lsgd.train import chaos, faults
from lsgd.train.config import make_config
from lsgd.train.ranges import flag

NAME = "chaos"
TITLE = "Chaos: goodput under faults at random"
COLUMNS = ["method", "mode", "rounds", "mtbf s", "seeds", "faults", "mtbf s, met", "survived",
           "finished", "hangs", "silent exits", "steps redone", "lost per fault s",
           "recover s, median", "recover s, max", "goodput", "goodput, lowest", "accuracy",
           "vs unfailed, points"]
TIMEOUT = 15.0  #: the runs' --timeout (a collective's patience)
JOIN = 30.0  #: the elastic runs' --join-timeout
RESTARTS = 3  #: fatal faults each node may take
FAULTS = 12  #: faults in each quick run's schedule
MTBFS = (10.0, 20.0, 30.0)  #: the mean seconds of training between faults, swept
#: the share of the unfailed run's training time the faults are drawn over; quick runs
#: take half, so that all fire though a run may train twice as fast as its unfailed one
HORIZON = {False: 0.9, True: 0.5}
KINDS = ("kill", "segv", "stop", "kill-node", "nan", "link-down", "slow")
ROUNDS: dict[str, dict[str, Any]] = {"blocking": {},
                                     "hidden int8": {"overlap": 1, "compress": "int8"}}
MODES = ("elastic", "restart")  #: on torchft, or restartable from checkpoints


#: The runs' settings, quick and not.
_SETUPS = {True: {"model": "mlp", "dataset": "digits", "steps": 240, "period": 8,
                  "batch_size": 32, "every": 40, "checkpoint": 40},
           False: {"model": "cnn7", "dataset": "fashion-mnist", "steps": 100, "period": 16,
                   "batch_size": 64, "every": 50, "checkpoint": 25}}


def _settings(setup: dict[str, Any], method: str, mode: str, rounds: str) -> dict[str, Any]:
    """The ``lsgd train`` settings of one run (keys as TrainConfig's fields)."""
    settings: dict[str, Any] = {
        "method": method, "workers": 4, "eval_every": str(setup["every"]), "seed": 0,
        **{key: setup[key] for key in ("model", "dataset", "steps", "batch_size")},
        "timeout": TIMEOUT, "restarts": RESTARTS, "quiet": True}
    if "period" in option_names(method):
        settings["period"] = setup["period"]
    if setup["link"]:
        settings.update(groups=4, link=setup["link"])
    if mode == "elastic":
        settings.update(elastic=True, join_timeout=JOIN)
    else:
        settings["checkpoint_every"] = setup["checkpoint"]
    settings.update(ROUNDS.get(rounds, {}))
    return settings


def _flags(settings: dict[str, Any]) -> list[str]:
    return [part for key, value in settings.items()
            for part in [f"--{flag(key)}", *([] if value is True else [str(value)])]]


def schedule(settings: dict[str, Any], seed: int, seconds: float, share: float,
             mtbf: float | None = None) -> list[str]:
    """The ``--fault`` items of ``--chaos seed`` for the run of ``settings`` whose unfailed
    run trained for ``seconds``: a Poisson process of mean gap ``mtbf`` over all of them,
    else :data:`FAULTS` faults at uniform times over the first ``share`` of them."""
    kinds = [k for k in KINDS if settings.get("link") or k not in ("link-down", "slow")]
    if not settings.get("elastic"):
        kinds.append("corrupt-checkpoint")
    horizon = seconds if mtbf else share * seconds
    cfg = make_config(settings | {"chaos": seed, "chaos_kinds": ",".join(kinds),
                                  "chaos_mtbf": mtbf or max(0.01, horizon / FAULTS),
                                  "minutes": horizon / 60})
    return chaos.draw(cfg, count=None if mtbf else FAULTS)


def run_one(run: Path, flags: list[str], specs: list[str]) -> dict[str, Any]:
    """``lsgd train flags --fault SPEC ...`` into ``run`` in a process of its own, watched
    for a hang; what the table reports of it."""
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    command = [sys.executable, "-m", "lsgd", "train", *flags, "--out", str(run)]
    for spec in specs:
        command += ["--fault", spec]
    start = time.monotonic()
    hung = False
    with open(run / "bench.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        while process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1.0)  # the wall time to the end, not to the next second
            if process.poll() is None and time.time() - _newest(run) > TIMEOUT + JOIN + 10.0:
                hung = True
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    wall = time.monotonic() - start
    shutil.rmtree(run / "checkpoints", ignore_errors=True)  # the record is the rest
    return _outcome(run, process.returncode, wall, hung)


def _newest(run: Path) -> float:
    """The newest modification time of the run folder's files (progress, logs, metrics),
    but the quorum logs: a run whose quorums all fail still writes those."""
    newest = 0.0
    for path in run.rglob("*"):
        with contextlib.suppress(OSError):  # a file removed meanwhile
            if not path.name.startswith("quorums-"):
                newest = max(newest, path.stat().st_mtime)
    return newest


_EXIT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+")
#: What each fatal kind ends a worker with (kill-node: every worker of the node).
_SIGNALS = {"kill": -9, "segv": -11, "kill-node": -9, "corrupt-checkpoint": -9}


def silent_exits(run: Path) -> tuple[int, list[str]]:
    """Workers that ended without a reason in the run folder: a signal that no fault sent,
    or an error exit with no error written. From the agents' logs in ``logs/``."""
    text = "\n".join(p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.log")))
    sent = Counter(_SIGNALS[event["kind"]] for event in faults.read_log(run)
                   if event.get("event") == "fault" and event["kind"] in _SIGNALS)
    unexplained: list[str] = []
    for code in map(int, _EXIT.findall(text)):
        if code < 0 and sent[code] > 0:
            sent[code] -= 1
        elif code > 0 and ("Traceback" in text or "Error" in text):
            continue
        else:
            unexplained.append(f"exit code {code}")
    return len(unexplained), unexplained


def _outcome(run: Path, code: int | None, wall: float, hung: bool) -> dict[str, Any]:
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    finished = code == 0 and bool(summary)
    fired = list({e["spec"]: e for e in faults.read_log(run) if e.get("event") == "fault"}
                 .values())  # kill-node: one event per worker, one fault
    table = (run / "faults.csv").read_text().splitlines()[1:] if fired and (
        run / "faults.csv").exists() else []
    recovered = [[row[1], float(row[7])] for row in csv.reader(table) if row[7:8] != [""]]
    silent, why = silent_exits(run)
    return {"code": code, "finished": finished, "hung": hung, "wall": wall,
            "faults": len(fired), "survived": len(fired) if finished else max(0, len(fired) - 1),
            "kinds": sorted({e["kind"] for e in fired}), "silent": silent, "silent_why": why,
            "redone": summary.get("steps_redone") or 0, "recovered": recovered,
            "train_seconds": summary.get("train_seconds", float("nan")),
            "accuracy": summary.get("test_accuracy", float("nan")),
            "tail": "" if finished else (run / "bench.log").read_text(errors="replace")[-1500:]}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    from lsgd.links.netns import shaping_problem

    links = options.get("links") or ([] if quick or shaping_problem() else ["100mbit"])
    setup = {**_SETUPS[quick], "link": links[0] if links else None}
    first = 1 if options.get("first_seed") is None else options["first_seed"]
    seeds = range(first, first + (options.get("seeds") or (1 if quick else 3)))
    methods = options.get("methods") or (["diloco"] if quick else ["lsgd", "diloco", "allreduce"])
    mtbfs: list[float | None] = options.get("mtbfs") or ([None] if quick else list(MTBFS))
    sets = options.get("sets") or []
    modes = ["restart"] if quick else _picked(MODES, sets)
    if not quick and importlib.util.find_spec("torchft") is None:
        modes = [m for m in modes if m != "elastic"]
    rounds_kinds = ["blocking"] if quick else _picked(list(ROUNDS), sets)
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"setup": setup, "runs": {}}
    done = _done(out / f"{NAME}.json", setup) if options.get("reuse") else {}
    baselines: dict[str, list[float]] = {}
    for method, mode, rounds in _cells(methods, modes, rounds_kinds):
        settings = _settings(setup, method, mode, rounds)
        flags = _flags(settings)
        key = f"{method}/{mode}/{rounds}"
        folder = out / "chaos-runs" / key.replace(" ", "-")
        base = (_reused(done, f"{key}/unfailed", options)
                or run_one(folder / "unfailed", flags, []))
        data["runs"][f"{key}/unfailed"] = base
        cell = [[base]]  # the unfailed run, then each MTBF's runs
        for mtbf in mtbfs if base["finished"] else ():
            cell.append([])
            for seed in seeds:
                name = f"seed-{seed}" if mtbf is None else f"mtbf-{mtbf:g}-seed-{seed}"
                specs = schedule(settings, seed, base["train_seconds"], HORIZON[quick], mtbf)
                got = (_reused(done, f"{key}/{name}", options)
                       or run_one(folder / name, flags, specs))
                got.update(schedule=specs, mtbf=mtbf or round(
                    HORIZON[quick] * base["train_seconds"] / FAULTS, 2))  # quick: its mean
                data["runs"][f"{key}/{name}"] = got
                cell[-1].append(got)
                now = [_row(method, mode, rounds, runs, base) for runs in cell]
                write(Result(NAME, TITLE, COLUMNS, [*rows, *now], ["(in progress)"], data), out)
        free = [got["wall"] for runs in cell for got in runs if not got["faults"]]
        baselines[" ".join(p for p in (method, mode, rounds) if p != "-")] = free
        rows += [_row(method, mode, rounds, runs, base, statistics.median(free) if i else None)
                 for i, runs in enumerate(cell)]
    where = f"4 nodes behind {setup['link']} shaped links" if setup["link"] else "on the loopback"
    data["recovery"] = recovery(data["runs"])
    notes = [f"4 workers, {where}, {setup['model']} on {setup['dataset']}, {setup['steps']} "
             f"steps, period {setup['period']}, a checkpoint every {setup['checkpoint']} steps "
             f"(restart), --timeout {TIMEOUT:.0f}, --restarts {RESTARTS}; "
             + (f"{FAULTS} faults drawn by --chaos SEED at uniform times over "
                f"{HORIZON[quick]:.0%} of the unfailed run's training time" if quick else
                "faults drawn by --chaos SEED --chaos-mtbf MTBF over the unfailed run's "
                "training time (a Poisson process, gaps of mean MTBF)")
             + ". Goodput: useful steps per second over the fault-free runs' (their median wall "
             "time over the failed run's; start-up, evaluations and checkpoints in both; the "
             "fault-free runs: the unfailed one and every run in which no fault fired). "
             "Recover: seconds from a fault to the answer that put the run back (faults.csv). "
             "Hang: the run folder unchanged for timeout + join timeout + 10 s. Silent exit: a "
             "worker ended by a signal no fault sent, or an error code and no error written."]
    notes += [f"fault-free runs' wall time, {cell}: {min(w):.1f}-{max(w):.1f} s, median "
              f"{statistics.median(w):.1f} ({len(w)} runs)" for cell, w in baselines.items()]
    notes += [f"time to recover, {mode}: " + ", ".join(
        f"{kind} {v['median']:.1f} s (max {v['max']:.1f}, {v['faults']} faults)"
        for kind, v in kinds.items()) for mode, kinds in data["recovery"].items()]
    notes += [f"did not finish: {k}: {v['tail'][-300:]!r}" for k, v in data["runs"].items()
              if not v["finished"]]
    return Result(NAME, TITLE, COLUMNS, rows, notes, data)


def _cells(methods: list[str], modes: list[str], rounds_kinds: list[str]
           ) -> list[tuple[str, str, str]]:
    """The (method, mode, kind of round) runs: elastic for the methods that take it, the
    kinds of round for those with rounds (``-`` for the others: all-reduce)."""
    from lsgd.registry import strategy_class

    cells = []
    for method in methods:
        elastic = strategy_class(method).supports_elastic
        for mode in modes if elastic else [m for m in modes if m != "elastic"]:
            kinds = rounds_kinds if "overlap" in option_names(method) else ["-"]
            cells += [(method, mode, rounds) for rounds in kinds]
    return cells


def recovery(runs: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Per mode and kind of fault: the median and longest seconds to recover, and how many
    faults were answered (from every run's ``faults.csv``)."""
    seconds: dict[str, dict[str, list[float]]] = {}
    for key, got in runs.items():
        for kind, took in got.get("recovered", []):
            seconds.setdefault(key.split("/")[1], {}).setdefault(kind, []).append(took)
    return {mode: {kind: {"median": statistics.median(took), "max": max(took),
                          "faults": len(took)} for kind, took in sorted(kinds.items())}
            for mode, kinds in seconds.items()}


def _picked(names: list[str] | tuple[str, ...], sets: list[str]) -> list[str]:
    """The names ``--sets`` picks (its words spell a space as ``-``), or all if it picks none."""
    return [n for n in names if n.replace(" ", "-") in sets] or list(names)


def _done(path: Path, setup: dict[str, Any]) -> dict[str, Any]:
    """With ``--reuse``: the runs already recorded under ``--out`` with the same setup
    (a benchmark that was stopped goes on where it was)."""
    data = (json.loads(path.read_text()).get("data") or {}) if path.exists() else {}
    return dict(data.get("runs", {})) if data.get("setup") == setup else {}


def _reused(done: dict[str, Any], key: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The run ``key`` recorded under ``--out`` (with ``--reuse``); with ``--reuse-only`` a
    missing one raises :class:`~lsgd.bench.common.MissingRecord`."""
    if key not in done and options.get("reuse") == "only":
        raise MissingRecord(f"chaos run {key}")
    return done.get(key)


def _row(method: str, mode: str, rounds: str, runs: list[dict[str, Any]], base: dict[str, Any],
         wall: float | None = None) -> list[Any]:
    """One row: the unfailed run, or every seed's run at one MTBF (met: the training seconds
    of the unfailed run per fault that fired), against ``wall``, the fault-free runs'
    median wall time (default: the unfailed run's)."""
    mtbf, wall = runs[0].get("mtbf"), wall or base["wall"]
    lost = [got["wall"] - wall for got in runs]
    faults = sum(got["faults"] for got in runs)
    goodput = [wall / got["wall"] for got in runs]  # useful steps per second, kept
    took = [t for got in runs for _, t in got.get("recovered", [])]
    accuracy = statistics.mean(got["accuracy"] for got in runs)
    met = len(runs) * base["train_seconds"] / faults if faults else None  # training s a fault
    return [method, mode, rounds, mtbf, len(runs) if mtbf else "-", faults, met,
            sum(got["survived"] for got in runs),
            f"{sum(got['finished'] for got in runs)}/{len(runs)}",
            sum(int(got["hung"]) for got in runs), sum(got["silent"] for got in runs),
            sum(got["redone"] for got in runs), sum(lost) / faults if faults else None,
            statistics.median(took) if took else None, max(took, default=None),
            statistics.mean(goodput), min(goodput), accuracy,
            round(100 * (accuracy - base["accuracy"]), 2)]
