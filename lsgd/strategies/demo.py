"""DeMo, decoupled momentum (Peng, Quesnelle, Kingma, "DeMo: Decoupled Momentum
Optimization", 2024, https://arxiv.org/abs/2411.19870; docs/algorithms.md, "DeMo").

Every step each worker shares only the fast components of its momentum; the rest
stays in the momentum until it grows. With the optimizer's learning rate ``η``, the
momentum ``m`` (zero at the start), ``β = decay``::

    m  <- β m + η g                          the local momentum
    q  = IDCT(TopK_s,k(DCT(m)))              its fast components: the k largest DCT
                                             coefficients of every block of s values
    m  <- m - q                              what is sent leaves the momentum
    Q  = mean over workers of q              all-gather of the kept coefficients
    x  <- x - η (sign(Q) + wd x)             the optimizer's step on grad = sign(Q)

The DCT is orthonormal, over blocks of each parameter of sides up to ``chunk``
(:mod:`lsgd.dct`). In the round's stages DeMo is a message of ``η g``, error feedback
with decay ``β`` (its accumulator is ``m``) and a gathered move of DCT blocks. Workers
apply the same update, so they hold one state. Communicated per step: one all-gather of
each worker's kept coefficients; with ``overlap=1`` the gather of step ``t`` is applied
at step ``t + 1``. A worker whose momentum is not finite is left out of ``Q`` and its
momentum restarts from zero.

Unlike the reference, ``Q`` is the mean over all workers (not over the workers that
sent each coefficient); weight decay is the optimizer's (the reference's
``x <- (1 - η wd) x`` before the step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.sparse import SparseFormat
from lsgd.dct import from_blocks, to_blocks
from lsgd.flat import FlatBuffer
from lsgd.functional import finite_each
from lsgd.names import SPARSE_VALUES
from lsgd.strategies.strategy import Options, Strategy
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.stages.feedback import ErrorFeedback
from lsgd.strategies.stages.move import Gather
from lsgd.strategies.stages.parts import StateParts

Tensors = list[torch.Tensor]


class Blocks:
    """DeMo's layout of a gathered message: each parameter's DCT blocks as rows."""

    def __init__(self, flat: FlatBuffer, chunk: int, k: int, values: str) -> None:
        self.flat, self.chunk = flat, chunk
        self.shapes_ = [tuple(to_blocks(torch.zeros(v.shape), chunk).shape) for v in flat.views]
        self.formats_ = [SparseFormat(min(k, s), values) for _, s in self.shapes_]

    def formats(self, message: Sequence[torch.Tensor]) -> list[SparseFormat]:
        return self.formats_

    def shapes(self, message: Sequence[torch.Tensor]) -> list[tuple[int, int]]:
        return self.shapes_

    def split(self, message: Sequence[torch.Tensor]) -> Tensors:
        return [to_blocks(v.float(), self.chunk) for v in self.flat.views_of(message)]

    def join(self, rows: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> Tensors:
        out = [torch.empty_like(b) for b in like]
        for view, block, template in zip(self.flat.views_of(out), rows, self.flat.views):
            view.copy_(from_blocks(block, template.shape, self.chunk))
        return out


class DeMo(Strategy):
    """DeMo's sign step on the mean of every worker's fast momentum components.

    Args:
        decay: β in [0, 1), the momentum's decay (the reference's 0.999).
        topk: k, coefficients kept per DCT block (32).
        chunk: the largest block side (64): 1-D chunks, or 2-D blocks of up to 64 x 64.
        values: the kept coefficients' format, ``"float32"``, ``"int8"`` or ``"2bit"``.
        overlap: 0, or 1: each step's gather lands a step later.
        leader: ``"none"`` only: DeMo's workers hold one state, so none leads another.
        comm, init: see :class:`~lsgd.strategies.strategy.Strategy`.

    ``optimizer`` must be ``torch.optim.SGD`` without momentum (DeMo's momentum is its
    own): its learning rate and weight decay are DeMo's ``η`` and ``wd``.
    """

    name = "demo"
    bn_modes = ("local",)
    counters = ("skipped_steps",)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 decay: float = 0.999, topk: int = 32, chunk: int = 64, values: str = "float32",
                 overlap: int = 0, leader: str = "none", **options: Unpack[Options]) -> None:
        self.decay = _validate.momentum("DeMo", "decay", decay)
        self.topk = _validate.positive_int("DeMo", "topk", topk)
        self.chunk = _validate.positive_int("DeMo", "chunk", chunk)
        values = _validate.choice("DeMo", "values", values, SPARSE_VALUES)
        if not _validate.is_int(overlap) or overlap not in (0, 1):
            raise ValueError(f"DeMo: overlap must be 0 or 1 (a step's gather lands at the "
                             f"next step at the latest), got {overlap!r}")
        if leader != "none":
            raise ValueError(f"DeMo: leader={leader!r} needs workers whose states differ, "
                             "and DeMo's workers hold one state (every step applies the same "
                             "gathered update; its message is momentum, not a state "
                             "difference): use leader='none', or a leader with DiLoCo, "
                             "SparseLoCo or MuLoCo")
        if not isinstance(optimizer, torch.optim.SGD) or any(
                g.get("momentum", 0) or g.get("nesterov") for g in optimizer.param_groups):
            raise ValueError("DeMo: the optimizer must be torch.optim.SGD with momentum=0 "
                             "(DeMo's momentum is its own, compressed), got "
                             f"{type(optimizer).__name__}; give torch.optim.SGD(params, lr=..., "
                             "weight_decay=...)")
        self.overlap = int(overlap)
        super().__init__(model, optimizer, **options)
        if self.comm.share[1] > 1:
            raise ValueError("DeMo: each parameter's DCT blocks are transformed whole, and a "
                             "replica's processes each hold a slice of the state: use "
                             "replica='process'")
        self._params = [p for p in model.parameters()]
        self._parts = StateParts(self.comm, [p.data for p in self._params], 1)
        self._momentum = ErrorFeedback(self._parts, self.decay)  # m: its accumulator
        self._move = Gather(self.comm, Blocks(self._parts.work, self.chunk, self.topk, values),
                            blocking=self.overlap == 0)
        self._message = FlatBuffer(self._parts.tensors)  # η g
        self.skipped_steps = 0  # steps that applied no update (overlap: the first)

    def _before_optimizer_step(self) -> bool:
        """Send this step's message; the due update's sign becomes the gradients."""
        item = self._send()
        self.rounds += 1
        if self.overlap:
            due = self._pipeline.due(self.steps + 1)
            self._pipeline.add(item)
            if not due:
                self.skipped_steps += 1
                return False
            item = due[0]
        item.wait()
        update = self._mean(item)
        for p, u in zip(self._params, self._message.views_of(update)):
            p.grad = torch.sign(u).to(p.dtype)
        return True

    def _send(self) -> InFlight:
        """``η g`` plus ``β m`` sent, ``m`` what the codec left of it."""
        lrs = [group["lr"] for group in self.optimizer.param_groups for _ in group["params"]]
        for view, p, lr in zip(self._message.views, self._params, lrs):
            view.zero_() if p.grad is None else torch.mul(p.grad, lr, out=view)
        sent = [b.clone() for b in self._message.buffers]
        self._momentum.send(sent, 0, self._move)
        handles, tensors = self._move.start(sent, "world", False)
        return InFlight(self.steps, self.steps + 1 + self.overlap, "step", handles, tensors)

    def _mean(self, item: InFlight) -> Tensors:
        """``Q``: the mean of the finite messages; a diverged worker's momentum restarts."""
        members = self._move.decoded(item.tensors)
        healthy = finite_each(members)
        if not any(healthy):
            raise self._diverged_error("momentum")
        if not healthy[self.comm.rank]:
            torch._foreach_zero_(self._momentum.residual.buffers)
            self.resets += 1
        total = [torch.zeros_like(r) for r in members[0]]
        for rows, finite in zip(members, healthy):
            if finite:
                torch._foreach_add_(total, rows)
        torch._foreach_div_(total, float(sum(healthy)))
        return self._move.layout.join(total, item.tensors["mean"])

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"momentum": self._momentum.state()["residual"]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._momentum.load({"residual": state["momentum"]})

    @staticmethod
    def payload_fraction(model: nn.Module, topk: int = 32, chunk: int = 64,
                         values: str = "float32") -> float:
        """Bytes of one worker's message over the parameters' float32 bytes."""
        flat = FlatBuffer([p.data for p in model.parameters()])
        blocks = Blocks(flat, chunk, topk, values)
        sent = sum(f.nbytes(r, s) for f, (r, s) in zip(blocks.formats_, blocks.shapes_))
        return sent / max(1, 4 * sum(math.prod(v.shape) for v in flat.views))
