"""What a run leaves in its folder, written by rank 0 only.

* ``config.toml``: the resolved configuration;
* ``metrics.csv``: one row per evaluation (time, steps, epoch, lr, losses and
  accuracies of the center, the leader and optionally every worker, the
  leader's rank, the mean training loss, bytes sent per worker, rounds);
* ``leader_history.csv``: every election (step, level, leader rank);
* ``summary.json``: the final figures;
* ``checkpoints/``: one file per worker plus ``meta.json`` (see checkpoint.py);
* PNG plots (see run_plots.py) and, with ``--tensorboard``, TensorBoard events.

Files are rewritten whole and atomically (temporary file, then rename) so a
crash never leaves half a file, and a resumed run continues the same rows.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

METRIC_FIELDS = [
    "time", "wall_time", "steps", "epoch", "lr",
    "center_loss", "center_accuracy", "leader_rank", "leader_loss", "leader_accuracy",
    "train_loss", "bytes_sent_per_worker", "rounds",
]


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in fields})
    atomic_write(path, buffer.getvalue())


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def read_csv(path: Path) -> list[dict[str, float | str]]:
    """Rows of a metrics file, numbers as floats (empty cells as NaN)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        parsed: dict[str, float | str] = {}
        for key, value in row.items():
            try:
                parsed[key] = float(value) if value != "" else math.nan
            except ValueError:
                parsed[key] = value
        out.append(parsed)
    return out


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {value!r}")


class TensorBoard:
    """Optional TensorBoard scalars (needs the ``tensorboard`` package)."""

    def __init__(self, folder: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # tensorboard not installed
            raise ImportError(
                "--tensorboard needs the tensorboard package: pip install tensorboard"
            ) from error
        self._writer = SummaryWriter(str(folder / "tensorboard"))

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["steps"])
        for key, value in row.items():
            if key != "steps" and isinstance(value, (int, float)) and not (
                isinstance(value, float) and math.isnan(value)
            ):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
