"""What ``summary.json`` says of a run's evaluations and of its workers (rank 0 writes it)."""

from __future__ import annotations

import math
from typing import Any

import torch

from lsgd.tasks import Task


def of_evaluations(rows: list[dict[str, Any]], task: Task, target: float | None,
                   reached: dict[str, float] | None) -> dict[str, Any]:
    """The center's and the leader's figures at the last evaluation, the task's headline
    (its best value; a language model's validation loss, bits per byte, perplexity),
    and where the center first reached ``target``."""
    last = rows[-1]
    return {"test_accuracy": last["center_accuracy"], "test_loss": last["center_loss"],
            "leader_test_accuracy": _none_if_nan(last["leader_accuracy"]),
            "leader_test_loss": _none_if_nan(last["leader_loss"]),
            "leader_rank": last["leader_rank"], **task.summary(rows),
            "target": target, "reached_target": reached}


def of_workers(every: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Totals, means and per-worker lists of what every worker measured (``every``: one
    tensor of ``W`` values per name, from :func:`lsgd.train.evaluate.gather_named`)."""
    worker_steps = [int(v) for v in every["steps"]]
    return {
        "data_loading_fraction": float(
            (every["data_seconds"] / every["train_seconds"].clamp_min(1e-12)).mean()),
        "bytes_sent_per_worker": float(every["bytes_sent"].mean()),
        "bytes_received_per_worker": float(every["bytes_received"].mean()),
        "comm_seconds_per_worker": float(every["comm_seconds"].mean()),
        "total_steps": sum(worker_steps),
        "steps_per_second": sum(worker_steps) / max(float(every["train_seconds"].mean()), 1e-12),
        "worker_steps": worker_steps,
        "worker_rounds": [int(v) for v in every["rounds"]],
        "worker_wait_seconds": [float(v) for v in every["wait_seconds"]],
        "worker_comm_seconds": [float(v) for v in every["comm_seconds"]],
        "worker_resets": [int(v) for v in every["resets"]],
        "skipped_steps": int(every["skipped_steps"].max()),
    }


def _none_if_nan(value: float) -> float | None:
    return None if isinstance(value, float) and math.isnan(value) else value
