"""Leader scores (shared by LSGD and AL-DSGD): the mean of a worker's last ``k``
training losses (``leader_window``) or, with ``leader_metric="eval"``, the loss on one
fixed held-out batch at election time. The leader is the lowest finite score
(:func:`lsgd.functional.elect`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lsgd import _validate

#: Where a score comes from: the window of training losses, or one held-out batch.
METRICS = ("train", "eval")


class LossWindow:
    """The last ``size`` training losses, kept as device tensors (no per-step sync)."""

    def __init__(self, size: int) -> None:
        self._losses: deque[torch.Tensor] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._losses)

    def push(self, loss: torch.Tensor) -> None:
        self._losses.append(loss.detach().reshape(()).to(torch.float64))

    def score(self, device: torch.device) -> torch.Tensor:
        """Mean of the window as a float64 tensor on ``device``; NaN if empty."""
        if not self._losses:
            return torch.tensor(float("nan"), dtype=torch.float64, device=device)
        return torch.stack([t.to(device) for t in self._losses]).mean()

    def state(self) -> list[float]:
        return [float(t) for t in self._losses]

    def load(self, values: Sequence[float]) -> None:
        self._losses.clear()
        self._losses.extend(torch.tensor(v, dtype=torch.float64) for v in values)


class Scorer:
    """Computes this worker's leader score by the chosen metric."""

    def __init__(self, owner: str, window: int, metric: str,
                 eval_batch: tuple[torch.Tensor, torch.Tensor] | None,
                 eval_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None) -> None:
        self.metric = _validate.choice(owner, "leader_metric", metric, METRICS)
        self.window = LossWindow(_validate.positive_int(owner, "leader_window", window))
        if self.scores_on_eval and eval_batch is None:
            raise ValueError(f"{owner}: leader_metric='eval' needs eval_batch=(inputs, "
                             "targets), one fixed held-out batch scored at every election")
        self.eval_batch = eval_batch
        self.eval_loss = eval_loss or F.cross_entropy

    @property
    def scores_on_eval(self) -> bool:
        """Whether the score is the loss on the held-out batch, not the training losses."""
        return self.metric == "eval"

    def record(self, loss: torch.Tensor | None, owner: str) -> None:
        if self.scores_on_eval:
            return
        if loss is None:
            raise ValueError(f"{owner}.step needs the training loss (strategy.step(loss)) to "
                             "score leaders")
        self.window.push(loss)

    def score(self, model: nn.Module, device: torch.device) -> torch.Tensor:
        if not self.scores_on_eval:
            return self.window.score(device)
        assert self.eval_batch is not None
        inputs, targets = self.eval_batch
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                value = self.eval_loss(model(inputs), targets)
        finally:
            model.train(was_training)
        return value.detach().to(device, torch.float64).reshape(())

    def state(self) -> dict[str, Any]:
        return {"window": self.window.state()}

    def load(self, state: dict[str, Any]) -> None:
        self.window.load(state["window"])
