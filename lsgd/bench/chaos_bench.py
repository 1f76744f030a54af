"""Chaos: runs under a seeded schedule of faults at random, against the same run unfailed.

Four nodes behind shaped 100 Mbit/s links (quick: the loopback) train for a fixed number
of steps (:func:`_setup`). For each mode (:data:`MODES`), method and kind of round, the
run is made without faults, then once per seed under the faults ``--chaos SEED`` draws
(:mod:`lsgd.train.chaos`), each ``lsgd train`` in a process of its own (docs/reliability.md,
"The chaos benchmark"). Per run the table's :data:`COLUMNS`: a **hang** is the run folder
unchanged for ``--timeout`` + join timeout + 10 s (the run is then stopped), a **silent
exit** a worker ended by a signal no fault sent, or with an error code and no error written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from itertools import product
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, write
from lsgd.train import chaos, faults
from lsgd.train.config import make_config
from lsgd.train.ranges import flag

NAME = "chaos"
TITLE = "Chaos: faults at random, nothing lost"
COLUMNS = ["method", "mode", "rounds", "seed", "faults", "survived", "finished", "hangs",
           "silent exits", "steps redone", "time lost s", "accuracy", "vs unfailed, points"]
TIMEOUT = 30.0  #: the runs' --timeout (a collective's patience)
JOIN = 30.0  #: the elastic runs' --join-timeout
RESTARTS = 3  #: fatal faults each node may take
FAULTS = 12  #: faults in each run's schedule
#: the share of the unfailed run's training time the faults are drawn over; quick runs
#: take half, so that all fire though a run may train twice as fast as its unfailed one
HORIZON = {False: 0.9, True: 0.5}
KINDS = ("kill", "segv", "stop", "kill-node", "nan", "link-down", "slow")
ROUNDS: dict[str, dict[str, Any]] = {"blocking": {},
                                     "hidden int8": {"overlap": 1, "compress": "int8"}}
MODES = ("elastic", "restart")  #: on torchft, or restartable from checkpoints


def _setup(quick: bool, link: str | None) -> dict[str, Any]:
    if quick:
        return {"model": "mlp", "dataset": "digits", "steps": 240, "period": 8,
                "batch_size": 32, "every": 40, "link": link}
    return {"model": "cnn7", "dataset": "fashion-mnist", "steps": 400, "period": 16,
            "batch_size": 64, "every": 50, "link": link}


def _settings(setup: dict[str, Any], method: str, mode: str, rounds: str) -> dict[str, Any]:
    """The ``lsgd train`` settings of one run (keys as TrainConfig's fields)."""
    settings: dict[str, Any] = {
        "method": method, "workers": 4, "eval_every": str(setup["every"]), "seed": 0,
        **{key: setup[key] for key in ("model", "dataset", "steps", "period", "batch_size")},
        "timeout": TIMEOUT, "restarts": RESTARTS, "quiet": True, **ROUNDS[rounds]}
    if setup["link"]:
        settings.update(groups=4, link=setup["link"])
    if mode == "elastic":
        settings.update(elastic=True, join_timeout=JOIN)
    else:
        settings["checkpoint_every"] = setup["every"]
    return settings


def _flags(settings: dict[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in settings.items():
        flags += [f"--{flag(key)}"] if value is True else [f"--{flag(key)}", str(value)]
    return flags


def schedule(settings: dict[str, Any], seed: int, seconds: float, share: float) -> list[str]:
    """The ``--fault`` items of ``--chaos seed`` for the run of ``settings`` whose unfailed
    run trained for ``seconds``: :data:`FAULTS` faults over the first ``share`` of them."""
    kinds = [k for k in KINDS if settings.get("link") or k not in ("link-down", "slow")]
    if not settings.get("elastic"):
        kinds.append("corrupt-checkpoint")
    horizon = share * seconds
    cfg = make_config(settings | {"chaos": seed, "chaos_kinds": ",".join(kinds),
                                  "chaos_mtbf": max(0.01, horizon / FAULTS),
                                  "minutes": horizon / 60})
    return chaos.draw(cfg, count=FAULTS)


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
            time.sleep(1.0)
            if time.time() - _newest(run) > TIMEOUT + JOIN + 10.0:
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
    silent, why = silent_exits(run)
    return {"code": code, "finished": finished, "hung": hung, "wall": wall,
            "faults": len(fired), "survived": len(fired) if finished else max(0, len(fired) - 1),
            "kinds": sorted({e["kind"] for e in fired}), "silent": silent, "silent_why": why,
            "redone": summary.get("steps_redone") or 0,
            "train_seconds": summary.get("train_seconds", float("nan")),
            "accuracy": summary.get("test_accuracy", float("nan")),
            "tail": "" if finished else (run / "bench.log").read_text(errors="replace")[-1500:]}


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    from lsgd.links.netns import shaping_problem

    links = options.get("links") or ([] if quick or shaping_problem() else ["100mbit"])
    setup = _setup(quick, links[0] if links else None)
    first = 1 if options.get("first_seed") is None else options["first_seed"]
    seeds = range(first, first + (options.get("seeds") or (1 if quick else 3)))
    methods = options.get("methods") or (["diloco"] if quick else ["lsgd", "diloco"])
    sets = options.get("sets") or []
    modes = ["restart"] if quick else _picked(MODES, sets)
    if not quick and importlib.util.find_spec("torchft") is None:
        modes = [m for m in modes if m != "elastic"]
    rounds_kinds = ["blocking"] if quick else _picked(list(ROUNDS), sets)
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"setup": setup, "runs": {}}
    done = _done(out / f"{NAME}.json", setup) if options.get("reuse") else {}
    for method, mode, rounds in product(methods, modes, rounds_kinds):
        settings = _settings(setup, method, mode, rounds)
        flags = _flags(settings)
        key = f"{method}/{mode}/{rounds}"
        folder = out / "chaos-runs" / key.replace(" ", "-")
        base = done.get(f"{key}/unfailed") or run_one(folder / "unfailed", flags, [])
        data["runs"][f"{key}/unfailed"] = base
        rows.append(_row(method, mode, rounds, "-", base, base))
        for seed in seeds if base["finished"] else ():
            specs = schedule(settings, seed, base["train_seconds"], HORIZON[quick])
            got = done.get(f"{key}/{seed}") or run_one(folder / f"seed-{seed}", flags, specs)
            got["schedule"] = specs
            data["runs"][f"{key}/{seed}"] = got
            rows.append(_row(method, mode, rounds, seed, got, base))
            write(Result(NAME, TITLE, COLUMNS, rows, ["(in progress)"], data), out)
    where = f"4 nodes behind {setup['link']} shaped links" if setup["link"] else "on the loopback"
    notes = [f"4 workers, {where}, {setup['model']} on {setup['dataset']}, {setup['steps']} "
             f"steps, period {setup['period']}, --timeout {TIMEOUT:.0f}, --restarts {RESTARTS}; "
             f"faults drawn by --chaos SEED, {FAULTS} at uniform times over "
             f"{HORIZON[quick]:.0%} of the unfailed run's training time. "
             "Hang: the run folder unchanged for timeout + join timeout + 10 s. Silent exit: a "
             "worker that ended by a signal no fault sent, or with an error code and no error "
             "written (the agents' logs in each run's logs/)."]
    notes += [f"did not finish: {k}: {v['tail'][-300:]!r}" for k, v in data["runs"].items()
              if not v["finished"]]
    return Result(NAME, TITLE, COLUMNS, rows, notes, data)


def _picked(names: list[str] | tuple[str, ...], sets: list[str]) -> list[str]:
    """The names ``--sets`` picks (its words spell a space as ``-``), or all if it picks none."""
    return [n for n in names if n.replace(" ", "-") in sets] or list(names)


def _done(path: Path, setup: dict[str, Any]) -> dict[str, Any]:
    """With ``--reuse``: the runs already recorded under ``--out`` with the same setup
    (a benchmark that was stopped goes on where it was)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text()).get("data") or {}
    return dict(data.get("runs", {})) if data.get("setup") == setup else {}


def _row(method: str, mode: str, rounds: str, seed: Any, got: dict[str, Any],
         base: dict[str, Any]) -> list[Any]:
    return [method, mode, rounds, seed, got["faults"], got["survived"],
            "yes" if got["finished"] else "no", int(got["hung"]), got["silent"], got["redone"],
            got["wall"] - base["wall"], got["accuracy"],
            round(100 * (got["accuracy"] - base["accuracy"]), 2)]
