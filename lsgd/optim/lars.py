"""LARS: Layer-wise Adaptive Rate Scaling (You, Gitman & Ginsburg, arXiv:1708.03888)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from lsgd import _validate

__all__ = ["LARS", "lars_param_groups"]

#: Each number of a param group: the values it may take, and how messages say them.
_VALID: dict[str, tuple[Callable[[float], bool], str]] = {
    "lr": (lambda v: v > 0, "a positive number"),
    "momentum": (lambda v: 0.0 <= v < 1.0, "a number in [0, 1)"),
    "weight_decay": (lambda v: v >= 0, "a number >= 0"),
    "eta": (lambda v: v > 0, "a positive number")}


def _check(group: Mapping[str, Any]) -> None:
    """``ValueError`` for a number of :data:`_VALID` in ``group`` out of its range, or
    Nesterov momentum without a momentum (as ``torch.optim.SGD``)."""
    for name, (valid, what) in _VALID.items():
        value = group.get(name)
        if name in group and not (_validate.is_number(value, finite=True) and valid(value)):
            raise ValueError(f"LARS: {name} must be {what}, got {value!r}")
    if group.get("nesterov") and group["momentum"] <= 0:
        raise ValueError(f"LARS: nesterov=True requires momentum > 0, got "
                         f"nesterov={group['nesterov']!r}, momentum={group['momentum']!r} "
                         "(pass nesterov=False for plain LARS)")


class LARS(Optimizer):
    r"""Layer-wise Adaptive Rate Scaling (LARS) with Nesterov or heavy-ball momentum.

    Y. You, I. Gitman and B. Ginsburg, "Large Batch Training of Convolutional
    Networks", 2017, https://arxiv.org/abs/1708.03888. For every parameter tensor
    ``w`` (one "layer") with gradient ``g``, with whole-tensor Euclidean norms::

        local_lr = eta * ||w|| / (||g|| + wd * ||w||)      (1 when ||w|| or ||g|| is 0)
        d = lr * local_lr * (g + wd * w)
        v <- m * v + d
        w <- w - (d + m * v)        (nesterov=True, the default)
        w <- w - v                  (nesterov=False: heavy ball)

    ``v`` starts at zero and is ``self.state[p]["momentum_buffer"]`` (with
    ``momentum == 0`` the step is ``w <- w - d``). A param group with
    ``adapt=False`` takes ``local_lr = 1`` but keeps its weight decay.
    Parameters whose ``grad`` is ``None`` are skipped (docs/algorithms.md, "LARS").

    ``lr`` > 0, ``momentum`` ``m`` in [0, 1), ``weight_decay`` ``wd`` >= 0, the trust
    coefficient ``eta`` > 0; Nesterov momentum (the default, as in the LSGD paper) needs
    ``momentum > 0``. ``exclude_bias_and_norm`` (also a param-group key) treats
    parameters with ``ndim <= 1`` as ``adapt=False``.
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float,
                 momentum: float = 0.9, weight_decay: float = 0.0, eta: float = 0.001,
                 exclude_bias_and_norm: bool = False, nesterov: bool = True) -> None:
        defaults: dict[str, Any] = {
            "lr": lr, "momentum": momentum, "nesterov": bool(nesterov),
            "weight_decay": weight_decay, "eta": eta,
            "exclude_bias_and_norm": bool(exclude_bias_and_norm), "adapt": True}
        _check(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group, validating its hyperparameters."""
        super().add_param_group(param_group)
        _check(self.param_groups[-1])

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            # a state saved before ``nesterov`` existed was heavy ball
            group.setdefault("nesterov", False)

    @torch.no_grad()
    def step(  # type: ignore[override]
            self, closure: Callable[[], float] | None = None) -> float | None:
        """One step of every param group; returns ``closure()``'s loss (run with
        gradients enabled), or ``None`` without a closure."""
        loss: float | None = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum, nesterov = group["lr"], group["momentum"], group["nesterov"]
            weight_decay = group["weight_decay"]
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    raise RuntimeError("LARS does not support sparse gradients")
                update = grad.add(p, alpha=weight_decay) if weight_decay != 0 else grad.clone()
                scale = lr
                exclude = group.get("exclude_bias_and_norm", False) and p.ndim <= 1
                if group.get("adapt", True) and not exclude:
                    w_norm = torch.linalg.vector_norm(p)
                    g_norm = torch.linalg.vector_norm(grad)
                    trust = group["eta"] * w_norm / (g_norm + weight_decay * w_norm)
                    scale = torch.where((w_norm > 0) & (g_norm > 0), trust, 1.0) * lr
                update.mul_(scale)
                if momentum == 0:
                    p.sub_(update)
                    continue
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = update.clone() if nesterov else update
                else:
                    buf.mul_(momentum).add_(update)
                p.sub_(update.add_(buf, alpha=momentum) if nesterov else buf)
        return loss


def lars_param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """``model``'s trainable parameters as the usual two LARS groups: the tensors with
    ``ndim > 1`` (``adapt=True``, ``weight_decay``), and the biases and normalization
    weights (``ndim <= 1``: ``adapt=False``, no weight decay)."""
    _check({"weight_decay": weight_decay})
    trainable = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in trainable if p.ndim > 1], "weight_decay": weight_decay,
         "adapt": True},
        {"params": [p for p in trainable if p.ndim <= 1], "weight_decay": 0.0, "adapt": False}]
