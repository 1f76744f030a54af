"""MuLoCo (Thérien, Huang, Rish, Belilovsky, "MuLoCo: Muon is a practical inner
optimizer for DiLoCo", 2025, https://arxiv.org/abs/2505.23725; docs/algorithms.md,
"MuLoCo").

DiLoCo with Muon as the inner optimizer (:class:`lsgd.optim.MuonAdamW`: Muon on the
2-D weights, AdamW on the rest) and error-corrected, compressed pseudo-gradients (by
default 2-bit values, all-gathered); the outer step is DiLoCo's Nesterov step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lsgd.optim.muon import MuonAdamW
from lsgd.strategies.diloco import DiLoCo


class MuLoCo(DiLoCo):
    """DiLoCo with Muon inside and error-corrected 2-bit pseudo-gradients.

    Args:
        optimizer: a :class:`lsgd.optim.MuonAdamW` over the model.
        compress, error_feedback: the message's codec (any of DiLoCo's) and feedback.
        period, outer_lr, outer_momentum, options: DiLoCo's.
    """

    name = "muloco"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 period: int = 16, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 compress: str = "2bit", error_feedback: bool = True, **options: Any) -> None:
        if not isinstance(optimizer, MuonAdamW):
            raise ValueError(f"MuLoCo: the inner optimizer is Muon: give "
                             f"lsgd.optim.MuonAdamW(model, lr=...) (Muon on the matrices, AdamW "
                             f"on the rest), got {type(optimizer).__name__}; for another "
                             "inner optimizer use DiLoCo")
        super().__init__(model, optimizer, period=period, outer_lr=outer_lr,
                         outer_momentum=outer_momentum, compress=compress,
                         error_feedback=error_feedback and compress != "none", **options)
