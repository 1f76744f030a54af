"""A worker's state ``x`` as tensors, and collectives over the whole of it.

The state is the model's parameters and, where the method communicates them,
its floating-point buffers (BatchNorm statistics); integer buffers stay local.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lsgd.flat import FlatBuffer


def state_tensors(model: nn.Module, with_buffers: bool = True) -> list[torch.Tensor]:
    """The tensors that make up a worker's state ``x``: parameters, then (with
    ``with_buffers``) the floating buffers."""
    tensors = [p.data for p in model.parameters()]
    if with_buffers:
        tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


def on_state_(model: nn.Module, collective: Callable[[torch.Tensor], Any]) -> None:
    """Run ``collective`` in place on ``model``'s whole state, flattened.

    The state is the parameters and floating buffers (integer buffers stay
    local); each flat buffer (one per dtype and device) is one collective call.
    """
    tensors = state_tensors(model, with_buffers=True)
    flat = FlatBuffer(tensors).copy_from(tensors)
    with torch.no_grad():
        for buffer in flat.buffers:
            collective(buffer)
    flat.copy_to(tensors)
