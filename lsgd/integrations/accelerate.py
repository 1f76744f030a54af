"""lsgd's methods in an Accelerate script (``accelerate launch``): after ``accelerator.prepare``,
``method = lsgd.integrations.accelerate.prepare(accelerator, model, optimizer, "diloco",
period=8)``, then ``method.step(loss)`` in place of ``optimizer.step()``. DDP's gradient
all-reduce is turned off: only the method's rounds are communicated (``"allreduce"`` keeps
Accelerate's DDP). The step runs through the prepared optimizer (GradScaler with fp16);
micro-steps of gradient accumulation take none; ``accelerator.save_state`` carries the method.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.optimizer import AcceleratedOptimizer
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lsgd.registry import make_strategy
from lsgd.strategies.guard import driving
from lsgd.strategies.strategy import Strategy


class AcceleratedMethod:
    """An lsgd method in an Accelerate loop: :attr:`strategy` (``None`` for ``"allreduce"``),
    :attr:`steps` (optimizer steps taken); registered for Accelerate's checkpoints."""

    def __init__(self, accelerator: Accelerator, model: nn.Module,
                 optimizer: torch.optim.Optimizer, method: str, **knobs: Any) -> None:
        kind = str(accelerator.distributed_type).rsplit(".", 1)[-1]
        if kind != "NO" and not kind.startswith("MULTI_"):
            raise ValueError(f"lsgd's methods run under data parallelism, not {kind}: launch "
                             "without DeepSpeed, FSDP, Megatron-LM or XLA")
        if not isinstance(optimizer, AcceleratedOptimizer) or (
                accelerator.num_processes > 1 and not isinstance(model, DistributedDataParallel)):
            raise ValueError("pass the model and optimizer that accelerator.prepare returned, "
                             f"got {type(model).__name__} and {type(optimizer).__name__}")
        if method == "allreduce" and knobs:
            raise ValueError("allreduce is Accelerate's own DDP and takes no knobs, got "
                             f"{', '.join(sorted(knobs))}")
        self.accelerator, self.name, self.steps = accelerator, method, 0
        self.optimizer, self._module = optimizer, accelerator.unwrap_model(model)
        self.strategy: Strategy | None = None
        if method != "allreduce":
            self.strategy = make_strategy(method, self._module, optimizer.optimizer, **knobs)
            self.strategy.optimizer = optimizer  # its step is Accelerate's (GradScaler)
            if isinstance(model, DistributedDataParallel):  # no gradient all-reduce
                model.require_backward_grad_sync = model.require_forward_param_sync = False
        accelerator.register_for_checkpointing(self)

    def step(self, loss: torch.Tensor | float | None = None) -> bool:
        """The optimizer step, then the method's rounds that fell due (``loss``: this
        worker's, for the methods that score it); on a micro-step nothing: returns False."""
        if not self.accelerator.sync_gradients:
            return False
        self.steps += 1
        if self.strategy is None:
            self.optimizer.step()
        else:
            with driving(self.optimizer.optimizer):  # the guard lets Accelerate's step in
                self.strategy.step(loss)
        return True

    def center(self) -> nn.Module:
        """A copy of the model with the workers' average state (one all-reduce)."""
        return self.strategy.center() if self.strategy else copy.deepcopy(self._module)

    def state_dict(self) -> dict[str, Any]:
        state = None if self.strategy is None else self.strategy.state_dict()
        return {"method": self.name, "steps": self.steps, "strategy": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("method") != self.name:
            raise ValueError(f"the checkpoint holds the state of {state.get('method')!r}, this "
                             f"run trains {self.name!r}: prepare it with that method")
        self.steps = int(state["steps"])
        if self.strategy is not None:
            self.strategy.load_state_dict(state["strategy"])


def prepare(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer,
            method: str, **knobs: Any) -> AcceleratedMethod:
    """The method ``method`` (``lsgd.strategy_names()``) and its ``knobs`` around what
    ``accelerator.prepare`` returned; a bad name or knob is a ``ValueError`` naming it."""
    return AcceleratedMethod(accelerator, model, optimizer, method, **knobs)
