"""Evaluation of the center and the leader, shared among the workers: each evaluates its own
interleaved slice of the task's evaluation set, and the sums are all-gathered by name
(:func:`gather_named`), never by position; all of it counts as ``"eval"`` traffic.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import lsgd
from lsgd.strategies.strategy import on_state_


def model_copy(comm: lsgd.Communicator, model: nn.Module, src: int | None) -> nn.Module:
    """A copy of worker ``src``'s model on every worker (one broadcast of its state), or
    with ``src=None`` of the mean of every worker's state (one all-reduce): the center
    of workers without an lsgd :class:`~lsgd.Strategy` (whose ``center()`` it is)."""
    replica = copy.deepcopy(model)
    with comm.category("eval"):
        on_state_(replica, lambda buffer: comm.all_reduce_(buffer, op="mean") if src is None
                  else comm.broadcast_(buffer, src=src))
    return replica


@torch.no_grad()
def recalibrate_bn(model: nn.Module, batches: list[torch.Tensor]) -> None:
    """Recompute BatchNorm running statistics as the plain average over ``batches``."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms or not batches:
        return
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for x in batches:
        model(x)
    for m, momentum in zip(norms, saved):
        m.momentum = momentum


def gather_named(comm: lsgd.Communicator, values: dict[str, float],
                 device: torch.device) -> dict[str, torch.Tensor]:
    """Every worker's ``values`` (the same names everywhere), by name: one tensor of ``W``
    each, from one all-gather of a float64 vector (``"eval"`` traffic)."""
    mine = torch.tensor([float(v) for v in values.values()], dtype=torch.float64, device=device)
    with comm.category("eval"):
        table = comm.all_gather(mine).cpu()
    return {name: table[:, i] for i, name in enumerate(values)}
