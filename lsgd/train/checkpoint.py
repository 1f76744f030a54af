"""Checkpoints: every worker's full state, written atomically.

``checkpoints/rank-R.pt`` holds worker R's model, optimizer and strategy state,
its data position, its random states, the schedule, and (rank 0) the metrics
so far. ``checkpoints/meta.json`` is written by rank 0 after every worker has
saved (a barrier), so it only ever names a complete set. Checkpoints are
loaded with ``weights_only=True``: tensors and plain values, never code.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import torch

from lsgd.train.outputs import atomic_write


def folder(run: Path) -> Path:
    return run / "checkpoints"


def save(run: Path, rank: int, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(folder(run) / f"rank-{rank}.pt", buffer.getvalue())


def write_meta(run: Path, steps: int, world_size: int) -> None:
    atomic_write(folder(run) / "meta.json",
                 json.dumps({"steps": steps, "world_size": world_size}) + "\n")


def load(run: Path, rank: int, world_size: int) -> dict[str, Any]:
    """Worker ``rank``'s last checkpoint, or ``FileNotFoundError`` saying what is missing."""
    meta_path = folder(run) / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"--resume {run}: no complete checkpoint ({meta_path} is missing)")
    meta = json.loads(meta_path.read_text())
    if meta["world_size"] != world_size:
        raise ValueError(
            f"--resume {run}: the checkpoint has {meta['world_size']} workers, "
            f"this run {world_size}; resume with --workers {meta['world_size']}"
        )
    path = folder(run) / f"rank-{rank}.pt"
    try:  # tensors and plain values only: a checkpoint is data and never runs code
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(f"--resume {run}: {path} holds more than tensors and plain values; "
                         f"refused to load it ({str(error).splitlines()[0]})") from None
    steps = round(state.get("shared_steps", state["steps"]))  # async: the workers' mean
    if steps != meta["steps"]:
        raise ValueError(f"--resume {run}: rank {rank}'s checkpoint is from step "
                         f"{steps}, the run's from step {meta['steps']}")
    return state
