"""What a run leaves in its folder (docs/train.md lists it), written by rank 0 only: each file
rewritten whole and atomically (a temporary file, then a rename), so that a crash never leaves
half a file and a resumed run continues the same rows.
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

METRIC_FIELDS = ["time", "wall_time", "steps", "epoch", "lr", "center_loss", "center_accuracy",
                 "leader_rank", "leader_loss", "leader_accuracy", "train_loss",
                 "bytes_sent_per_worker", "rounds"]


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str]) -> None:
    """``rows`` as a CSV file of the columns ``fields`` (NaN and None as empty cells)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), extrasaction="ignore")
    writer.writeheader()
    writer.writerows({k: _cell(row.get(k)) for k in fields} for row in rows)
    atomic_write(path, buffer.getvalue())


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def read_csv(path: Path) -> list[dict[str, float | str]]:
    """Rows of a metrics file, numbers as floats (empty cells as NaN)."""
    with open(path, newline="") as f:
        return [{key: _number(value) for key, value in row.items()} for row in csv.DictReader(f)]


def _number(cell: str) -> float | str:
    try:
        return float(cell) if cell != "" else math.nan
    except ValueError:
        return cell


def cell(value: Any) -> str:
    """A table cell: floats to 3 significant digits, None as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if magnitude >= 0.01 else f"{value:.2e}"
    return str(value)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, columns padded to their widest cell."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    return "\n".join([line(list(columns)), line(["-" * w for w in widths])]
                     + [line(r) for r in cells])


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON, keys sorted (paths as text)."""
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
            raise ImportError("--tensorboard needs the tensorboard package: pip install "
                              "tensorboard") from error
        self._writer = SummaryWriter(str(folder / "tensorboard"))

    def log(self, row: dict[str, Any]) -> None:
        """Every number of an evaluation's ``row`` at its step (NaN left out)."""
        for key, value in row.items():
            if key != "steps" and isinstance(value, (int, float)) and not math.isnan(value):
                self._writer.add_scalar(key, value, int(row["steps"]))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
