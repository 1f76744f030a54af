"""What every benchmark shares: its result, the table, the files, a training run and step.

A benchmark's ``run(out, quick, options)`` returns a :class:`Result`; :func:`write` puts
its ``NAME.json`` (everything measured) and ``NAME.txt`` (the table) under ``out``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import platform
import shutil
import statistics
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lsgd.method_options import OPTIONS
from lsgd.names import METHODS
from lsgd.train import runner
from lsgd.train.config import REMOVED, defaults_of, from_legacy, make_config
from lsgd.train.errors import UsageError
from lsgd.train.outputs import read_csv, table

if TYPE_CHECKING:
    from lsgd.strategies.strategy import Strategy


@dataclasses.dataclass
class Result:
    """One benchmark's outcome: a table, notes under it, raw data and figures."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = dataclasses.field(default_factory=list)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    figures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def text(self) -> str:
        """The title, the table and the notes, as printed."""
        lines = [self.title, "", table(self.columns, self.rows)]
        if self.notes:
            lines += [""] + self.notes
        return "\n".join(lines)


def read_result(path: Path) -> Result:
    """A benchmark's result as :func:`write` stored it (``NAME.json``)."""
    stored = json.loads(path.read_text())
    return Result(**{field.name: stored[field.name] for field in dataclasses.fields(Result)})


def machine() -> dict[str, Any]:
    """Where the numbers were taken."""
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "platform": platform.platform()}


def write(result: Result, out: Path) -> Path:
    """``out/NAME.json`` and ``out/NAME.txt``; returns the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    payload = dataclasses.asdict(result) | {"machine": machine(),
                                            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = out / f"{result.name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    (out / f"{result.name}.txt").write_text(result.text() + "\n")
    return path


def run_and_write(run: Callable[[Path, bool, dict[str, Any]], Result], out: Path, quick: bool,
                  options: dict[str, Any]) -> Result:
    """Run one benchmark, print its table and write its files under ``out`` (:func:`write`);
    the result, its ``seconds`` measured. A run that ``--reuse-only`` does not find is a
    :class:`~lsgd.train.errors.UsageError` that names it."""
    start = time.perf_counter()
    try:
        result = run(out, quick, dict(options))
    except MissingRecord as error:
        raise UsageError(f"--reuse-only: {error}; the records under --out {out} are of "
                         "other settings, or drop --reuse-only to train the missing "
                         "runs") from None
    result.seconds = time.perf_counter() - start
    path = write(result, out)
    print(result.text())
    print(f"({result.seconds:.0f} s) wrote {path}"
          + "".join(f", {figure}" for figure in result.figures) + "\n", flush=True)
    return result


#: What a benchmark keeps of a training run: its record, enough for ``--reuse`` to read
#: it back and re-derive every table (no checkpoints, no figures).
RECORD_FILES = ("config.toml", "summary.json", "metrics.csv", "leader_history.csv")


class MissingRecord(Exception):
    """``--reuse-only``: a run the benchmark needs is not among the records."""


def train(run: Path, reuse: bool | str = False, **settings: Any) -> dict[str, Any]:
    """``lsgd train`` in this process with ``settings`` (quiet, into a fresh ``run``, then
    cut down to its record); its summary, with the metrics rows under ``"rows"``. An option
    of another method is left out (a study gives every method of a table the same settings).

    With ``reuse``, a finished run in ``run`` with the same settings (:func:`finished`) is
    read back instead; with ``reuse="only"`` a missing one raises :class:`MissingRecord`.
    """
    cfg = make_config({"out": str(run), "quiet": True, **settings}, siblings=METHODS)
    if reuse and (done := finished(run, cfg.to_toml())) is not None:
        return done | {"rows": read_csv(run / "metrics.csv"), "run": str(run), "reused": True}
    if reuse == "only":
        raise MissingRecord(f"no finished run with these settings in {run}")
    shutil.rmtree(run, ignore_errors=True)
    summary = runner.train(cfg)
    assert summary is not None
    for path in run.iterdir():  # all but the record
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name not in RECORD_FILES:
            path.unlink()
    return dict(summary) | {"rows": read_csv(run / "metrics.csv"), "run": str(run)}


def finished(run: Path, wanted_toml: str) -> dict[str, Any] | None:
    """The summary of the finished run in ``run`` if it was trained with the settings of
    ``wanted_toml`` (a config's TOML), else ``None``. A setting the stored run lacks (added
    to lsgd since) must be at its default, and so must one lsgd no longer takes
    (:data:`~lsgd.train.config.REMOVED`); ``out``, ``quiet`` and ``device`` do not count.
    """
    if (record := read_record(run)) is None:
        return None
    stored, done = record
    wanted = tomllib.loads(wanted_toml)
    method = str(wanted.get("method"))
    defaults = defaults_of(method if method in OPTIONS else "lsgd")
    stored = from_legacy(stored, method)
    defaults |= {name: default for name, (default, _) in REMOVED.items()}
    # another method's options (an older run's config.toml held them all) cannot matter
    for key in (stored.keys() | wanted.keys()) & defaults.keys() - {"out", "quiet", "device"}:
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        if stored.get(key, default) != wanted.get(key, default):
            return None
    return done


def read_record(run: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The settings (``config.toml``) and summary of the finished run in ``run``; ``None``
    where it is not there whole."""
    try:
        stored = tomllib.loads((run / "config.toml").read_text())
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return (stored, summary) if (run / "metrics.csv").is_file() else None


def in_parallel(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], jobs: int
                ) -> list[Any]:
    """``[fn(*call) for call in calls]``, ``jobs`` calls at a time, each in a spawned
    process with an equal share of this process's torch threads (one job: here, in turn);
    ``fn`` must be a module-level function and the calls' arguments picklable."""
    if jobs <= 1 or len(calls) <= 1:
        return [fn(*call) for call in calls]
    threads = max(1, torch.get_num_threads() // jobs)
    pool = ProcessPoolExecutor(min(jobs, len(calls)),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=torch.set_num_threads, initargs=(threads,))
    try:
        futures = [pool.submit(fn, *call) for call in calls]
        return [future.result() for future in futures]
    finally:  # on an error or Ctrl-C, start no further call
        pool.shutdown(wait=True, cancel_futures=True)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               strategy: Strategy | None = None) -> None:
    """One classification step on the batch ``(x, y)``: the cross-entropy's gradients, then
    ``strategy.step(loss)`` (without a strategy, the optimizer's own step)."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    if strategy is None:
        opt.step()
    else:
        strategy.step(loss)


def median(values: Sequence[float]) -> float:
    """The median of ``values``, None and NaN left out (NaN if none is left)."""
    known = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(known) if known else math.nan
