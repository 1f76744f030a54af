"""Checkpoints: every worker's full state, as data, the last two kept and verified
(docs/reliability.md, "Checkpoints are data, kept twice and verified").

A run's ``checkpoints/`` folder holds ``step-00000200/`` (``rank-R.pt`` of each worker R,
``meta.json``) per checkpoint, and ``progress``, the last step rank 0 finished. Every worker
writes its own file atomically; their SHA-256 digests are gathered (the barrier), then rank 0
writes ``meta.json``, which completes the checkpoint. Loading takes the newest checkpoint
whose files match their digests on every worker, with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lsgd.train.outputs import atomic_write

KEPT = 2  #: complete checkpoints kept
SLOTS = 8  #: checkpoints considered on load (the newest ones)


def folder(run: Path) -> Path:
    """The run's ``checkpoints/`` folder."""
    return run / "checkpoints"


def step_folder(run: Path, steps: int) -> Path:
    """The folder of checkpoint ``steps``."""
    return folder(run) / f"step-{steps:08d}"


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its folder and its ``meta.json``."""

    path: Path
    meta: dict[str, Any]

    @property
    def steps(self) -> int:
        return int(self.meta["steps"])

    def file(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.pt"

    def problem(self, rank: int) -> str | None:
        """Why worker ``rank``'s file is not usable (None: it is)."""
        path = self.file(rank)
        if not path.exists():
            return f"{path} is missing"
        data = path.read_bytes()
        if len(data) != self.meta["sizes"][rank]:
            return (f"{path} has {len(data)} bytes, {self.meta['sizes'][rank]} were written "
                    "(truncated?)")
        if hashlib.sha256(data).hexdigest() != self.meta["sha256"][rank]:
            return f"{path} does not match its SHA-256 in meta.json (corrupt)"
        return None


def write_rank(run: Path, steps: int, rank: int, state: dict[str, Any]) -> bytes:
    """Write worker ``rank``'s state into checkpoint ``steps``; returns the record that
    :func:`commit` needs from every worker: its SHA-256 (32 bytes) and size (8)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    atomic_write(step_folder(run, steps) / f"rank-{rank}.pt", data)
    return hashlib.sha256(data).digest() + len(data).to_bytes(8, "little")


def commit(run: Path, steps: int, records: Sequence[bytes], identity: dict[str, Any]) -> Path:
    """Rank 0, once every worker wrote its file: ``meta.json`` (with the workers'
    :func:`write_rank` ``records`` and what produced the run, ``identity``), then delete
    all but the ``KEPT`` newest complete checkpoints, and older half-written ones."""
    where = step_folder(run, steps)
    meta = {"steps": steps, "world_size": len(records), **identity,
            "sha256": [bytes(r[:32]).hex() for r in records],
            "sizes": [int.from_bytes(bytes(r[32:40]), "little") for r in records]}
    atomic_write(where / "meta.json", json.dumps(meta, indent=1) + "\n")
    kept = [c.path for c in complete(run)][:KEPT]
    oldest = min(kept, default=where)
    for path in folder(run).glob("step-*"):
        if path not in kept and path.name < oldest.name:
            shutil.rmtree(path, ignore_errors=True)
    return where


class Progress:
    """The last step rank 0 finished, rewritten in place every step (no fsync: a hint)."""

    def __init__(self, run: Path) -> None:
        path = folder(run) / "progress"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def mark(self, steps: int) -> None:
        os.pwrite(self._fd, f"{steps:>12d}\n".encode(), 0)

    def close(self) -> None:
        os.close(self._fd)


def reached(run: Path) -> int | None:
    """The step the run last reached before it stopped (None: unknown)."""
    try:
        return int((folder(run) / "progress").read_text().strip() or "x")
    except (OSError, ValueError):
        return None


def complete(run: Path) -> list[Checkpoint]:
    """The complete checkpoints of ``run``, newest first (their files not yet verified)."""
    found = []
    for path in folder(run).glob("step-*"):
        try:
            meta = json.loads((path / "meta.json").read_text())
            int(meta["steps"]), int(meta["world_size"]), meta["sha256"], meta["sizes"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or damaged: not a candidate
        found.append(Checkpoint(path, meta))
    return sorted(found, key=lambda c: c.steps, reverse=True)


def usable(run: Path, world_size: int) -> tuple[Checkpoint | None, list[str]]:
    """In the launching process (which reads every worker's file): the newest
    checkpoint all of whose files verify, and one line per checkpoint skipped."""
    problems = []
    for candidate in complete(run):
        size = candidate.meta["world_size"]
        bad = ([f"{size} workers, this run has {world_size}"] if size != world_size else
               [p for p in map(candidate.problem, range(world_size)) if p])
        if not bad:
            return candidate, problems
        problems.append(f"{candidate.path.name}: " + "; ".join(bad))
    return None, problems


@dataclass(frozen=True)
class Skipped:
    """A newer checkpoint passed over on load: the workers whose file failed its check."""

    checkpoint: Checkpoint
    ranks: list[int]
    problem: str | None  #: this worker's own problem with it (None: its file was fine)


def choose(run: Path, rank: int, world_size: int,
           agree: Callable[[torch.Tensor], torch.Tensor], required: bool = True
           ) -> tuple[Checkpoint | None, list[Skipped]]:
    """Collective: the newest checkpoint whose file verifies on every worker (each checks
    its own in the newest ``SLOTS``; ``agree`` all-gathers the steps that verified), and the
    newer ones passed over; if none, ``ValueError`` naming the files, or ``None``."""
    candidates = [c for c in complete(run) if c.meta["world_size"] == world_size][:SLOTS]
    problems = {c.steps: c.problem(rank) for c in candidates}
    mine = [steps if problem is None else -1 for steps, problem in problems.items()]
    verified = [set(row.tolist()) for row in agree(
        torch.tensor(mine + [-1] * (SLOTS - len(mine)), dtype=torch.int64))]
    skipped = [Skipped(c, [r for r, ok in enumerate(verified) if c.steps not in ok],
                       problems[c.steps]) for c in candidates]
    chosen = next((s.checkpoint for s in skipped if not s.ranks), None)
    skipped = [s for s in skipped if s.ranks]
    if chosen is None and required:
        found = "; ".join(s.problem or f"{s.checkpoint.path.name}: the file of worker(s) "
                          f"{', '.join(map(str, s.ranks))} fails its check" for s in skipped)
        raise ValueError(f"--resume {run}: no usable checkpoint "
                         f"({found or f'no complete checkpoint in {folder(run)}'})")
    return chosen, [s for s in skipped if chosen is None or s.checkpoint.steps > chosen.steps]


def set_aside(run: Path, unusable: Sequence[Checkpoint]) -> None:
    """Move checkpoints that failed their check to ``checkpoints/unusable/`` (kept, not used)."""
    for checkpoint in unusable:
        target = folder(run) / "unusable" / checkpoint.path.name
        target.parent.mkdir(exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        checkpoint.path.rename(target)


def read(checkpoint: Checkpoint, rank: int) -> dict[str, Any]:
    """Worker ``rank``'s state from ``checkpoint``: tensors and plain values only."""
    path = checkpoint.file(rank)
    try:  # a checkpoint is data and never runs code
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(f"{path} holds more than tensors and plain values; refused to load "
                         f"it ({str(error).splitlines()[0]})") from None
    steps = round(state.get("shared_steps", state["steps"]))  # async: the workers' mean
    if steps != checkpoint.steps:
        raise ValueError(f"{path} is from step {steps}, its meta.json says {checkpoint.steps}")
    return state


def check_identity(run: Path, checkpoint: Checkpoint, identity: dict[str, Any]) -> None:
    """``ValueError`` when ``checkpoint`` was written by another method, model, ... than asked."""
    for key, value in identity.items():
        saved = checkpoint.meta.get(key, value)
        if saved != value:
            raise ValueError(
                f"--resume {run}: its checkpoint was written with --{key} {saved}, this run "
                f"asks for --{key} {value}; drop --{key} or start a new run with another --out")


def warn(message: str) -> None:
    """``warning: message`` on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
