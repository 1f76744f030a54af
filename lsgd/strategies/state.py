"""A worker's state ``x`` as tensors, and collectives over the whole of it.

The state is the model's parameters and, where the method communicates them, its
floating-point buffers, but the *constant* ones: non-persistent (a causal mask built in
``__init__``) or not finite when the model is first seen. Every worker builds the same
constant, and averaging a mask of ``-inf`` would turn it into NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from lsgd.flat import FlatBuffer

_CONSTANTS = "_lsgd_constant_buffers"  # the names of a model's constant buffers


def constant_buffers(model: nn.Module) -> frozenset[str]:
    """The names of ``model``'s constant floating buffers, kept on the model."""
    known = model.__dict__.get(_CONSTANTS)
    if known is None:
        found = set()
        for prefix, module in model.named_modules():
            for name, buffer in module.named_buffers(recurse=False):
                if buffer is None or not buffer.is_floating_point():
                    continue
                if (name in module._non_persistent_buffers_set
                        or not bool(torch.isfinite(buffer).all())):
                    found.add(f"{prefix}.{name}" if prefix else name)
        known = frozenset(found)
        model.__dict__[_CONSTANTS] = known
    return known


def float_buffers(model: nn.Module) -> list[torch.Tensor]:
    """``model``'s floating-point buffers but the constants, in ``named_buffers`` order."""
    constants = constant_buffers(model)
    return [b for name, b in model.named_buffers()
            if b.is_floating_point() and name not in constants]


def state_tensors(model: nn.Module, with_buffers: bool = True) -> list[torch.Tensor]:
    """A worker's state ``x``: parameters, then (``with_buffers``) non-constant buffers."""
    tensors = [p.data for p in model.parameters()]
    if with_buffers:
        tensors += float_buffers(model)
    return tensors


def on_state_(model: nn.Module, collective: Callable[[torch.Tensor], Any]) -> None:
    """Run ``collective`` in place on ``model``'s whole state, once per flat buffer."""
    tensors = state_tensors(model, with_buffers=True)
    flat = FlatBuffer(tensors).copy_from(tensors)
    with torch.no_grad():
        for buffer in flat.buffers:
            collective(buffer)
    flat.copy_to(tensors)
