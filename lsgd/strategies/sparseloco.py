"""SparseLoCo (Sarfi, Thérien, Lidin, Belilovsky, "Communication Efficient LLM
Pre-training with SparseLoCo", 2025, https://arxiv.org/abs/2508.15706;
docs/algorithms.md, "SparseLoCo").

DiLoCo whose outer momentum is replaced by each worker's error-feedback accumulator,
and whose pseudo-gradients travel as the top-k of every chunk in 2-bit values. Every
``period`` (H) inner steps, worker ``m`` with accumulator ``e_m``::

    Δ_m = θ_g - θ_m
    e_m <- β e_m + Δ_m
    c_m = Q_2(TopK(e_m))               the top ``density`` of each chunk, 2-bit values
    e_m <- e_m - c_m
    θ_g <- θ_g - α mean_m(c_m)         (all-gather of the c_m: each worker's kept
    θ_m <- θ_g                          entries are its own)

In the round's stages: DiLoCo's outer step (plain SGD, lr ``α``), error feedback with
decay ``β`` and the gathered top-k codec; every other DiLoCo option applies.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lsgd.strategies.diloco import DiLoCo


class SparseLoCo(DiLoCo):
    """DiLoCo on error-corrected, sparse, 2-bit pseudo-gradients.

    Args:
        period: H, inner steps between outer steps (16).
        outer_lr: α, the outer step on the mean of the messages (1.0).
        feedback_decay: β in [0, 1], the accumulator's decay (0.95).
        density: the share of each chunk's entries sent, in (0, 1] (0.1;
            docs/benchmarks.md on the paper's 1-3%).
        chunk: values per chunk (4096).
        values: the kept values' format, ``"2bit"`` (default), ``"int8"`` or ``"float32"``.
        options: DiLoCo's (:class:`~lsgd.strategies.diloco.DiLoCo`), but its codec,
            feedback and outer momentum, which are SparseLoCo's.
    """

    name = "sparseloco"
    supports_elastic = False  # its message is gathered from every worker

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 period: int = 16, outer_lr: float = 1.0, feedback_decay: float = 0.95,
                 density: float = 0.1, chunk: int = 4096, values: str = "2bit",
                 **options: Any) -> None:
        fixed = [key for key in ("compress", "error_feedback", "outer_momentum", "outer")
                 if key in options]
        if fixed:
            raise ValueError(f"SparseLoCo: {fixed[0]}={options[fixed[0]]!r} is fixed by "
                             "SparseLoCo (top-k with error feedback, no outer momentum); for "
                             "another choice use DiLoCo")
        super().__init__(model, optimizer, period=period, outer_lr=outer_lr,
                         outer_momentum=0.0, compress="topk", error_feedback=True,
                         feedback_decay=feedback_decay, density=density, chunk=chunk,
                         values=values, **options)

    @classmethod
    def option_names(cls) -> list[str]:
        fixed = {"compress", "error_feedback", "feedback_decay", "density", "chunk", "values"}
        return [key for key in super().option_names() if key not in fixed]
