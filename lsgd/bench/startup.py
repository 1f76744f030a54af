"""Start-up: what a run costs before and after its work, against ``import lsgd``.

Each row (:func:`_variants`) is a fresh process timed from its start to its end (wall
clock), the variants taking turns so that a busy machine slows them alike; the median
of the repeats, and its ratio to ``import lsgd``'s. A 1-step ``lsgd train`` pays for the
imports, the dataset, its 4 workers (forked by torch's elastic launcher, or spawned),
the process group, the evaluation, checkpoint, summary and figures. The quick mode
times each variant once, on the 8x8 digits, without shaped nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, median
from lsgd.links.netns import shaping_problem


def _variants(dataset: str, shaped: bool) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, command after the interpreter, extra environment) of each row; ``shaped``:
    also 4 nodes behind shaped links (root, iproute2), their agents forked and spawned."""
    train = ["-m", "lsgd", "train", "--workers", "4", "--model", "mlp", "--steps", "1",
             "--dataset", dataset, "--quiet"]
    rows = [("import lsgd", ["-c", "from lsgd import LSGD"], {}),
            ("1 step, 4 processes", train, {}),
            ("1 step, 4 processes, spawned", train, {"LSGD_START_METHOD": "spawn"}),
            ("1 step, 4 threads (simulator)", [*train, "--backend", "threads"], {})]
    if shaped:
        nodes = [*train, "--groups", "4", "--link", "20mbit"]
        rows += [("1 step, 4 shaped nodes", nodes, {}),
                 ("1 step, 4 shaped nodes, spawned", nodes, {"LSGD_START_METHOD": "spawn"})]
    return rows


def _time(argv: list[str], env: dict[str, str], folder: Path) -> float:
    """Seconds from starting ``python argv`` to its end (a run folder of its own)."""
    out = ["--out", str(folder / f"run-{time.monotonic_ns()}")] if "train" in argv else []
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv, *out], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return seconds


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    """Time every variant, ``--repeats`` times each (default 5; quick: once)."""
    repeats = options.get("repeats") or (1 if quick else 5)
    dataset = "digits" if quick else "fashion-mnist"
    unshaped = shaping_problem() or ("the quick mode" if quick else None)
    variants = _variants(dataset, unshaped is None)
    times: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="lsgd-startup-") as folder:
        for turn in range(repeats):
            shift = turn % len(variants)  # a different variant goes first every turn
            for label, argv, env in variants[shift:] + variants[:shift]:
                times[label].append(_time(argv, env, Path(folder)))
    base = median(times["import lsgd"])
    rows = [[label, median(t), f"{min(t):.2f}-{max(t):.2f}", median(t) / base]
            for label, t in times.items()]
    notes = [f"{repeats} repeat(s) of each, taking turns; mlp on {dataset}; wall clock of "
             "the whole process, from its start to its end, on this machine "
             f"({os.cpu_count()} cores)."]
    if unshaped:
        notes.append(f"shaped nodes left out: {unshaped}")
    return Result("startup", "Start-up: a 1-step run against import lsgd",
                  ["what", "median s", "min-max s", "ratio to import"], rows, notes,
                  {"seconds": times, "dataset": dataset, "repeats": repeats})
