"""What every strategy shares: the worker state, initialization, the center, stats.

A strategy wraps one worker's model and optimizer. The user's loop stays plain
PyTorch::

    loss = loss_fn(strategy.model(x), y)
    optimizer.zero_grad(); loss.backward()
    strategy.step(loss)          # inner optimizer step, then the method's rules

The worker state ``x`` is the model's parameters and, with
``sync_buffers=True``, its floating-point buffers (BatchNorm running mean and
variance). Integer buffers (``num_batches_tracked``) are never communicated.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import CommStats, Communicator, get_communicator
from lsgd.flat import FlatBuffer

INITS = ("broadcast", "independent")
TRAFFIC = ("train", "eval")


def state_tensors(model: nn.Module, sync_buffers: bool = True) -> list[torch.Tensor]:
    """The tensors that make up a worker's state ``x``: parameters, then float buffers."""
    tensors = [p.data for p in model.parameters()]
    if sync_buffers:
        tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


def on_state_(model: nn.Module, collective: Callable[[torch.Tensor], Any]) -> None:
    """Run ``collective`` in place on ``model``'s whole state, flattened.

    The state is the parameters and floating buffers (integer buffers stay
    local); each flat buffer (one per dtype and device) is one collective call.
    """
    tensors = state_tensors(model, sync_buffers=True)
    flat = FlatBuffer(tensors).copy_from(tensors)
    with torch.no_grad():
        for buffer in flat.buffers:
            collective(buffer)
    flat.copy_to(tensors)


def as_loss_tensor(loss: torch.Tensor | float, owner: str) -> torch.Tensor:
    """``loss`` as a detached 0-d tensor (no device sync: kept lazily on device)."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise ValueError(f"{owner}.step: loss must be a scalar, got shape {tuple(loss.shape)}")
        return loss.detach().reshape(())
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return torch.tensor(float(loss), dtype=torch.float64)
    raise ValueError(f"{owner}.step: loss must be a tensor or a number, got {loss!r}")


class Strategy:
    """Base class: wraps ``model`` and ``optimizer`` and owns the communication.

    Args:
        model: this worker's model.
        optimizer: this worker's inner optimizer over ``model``'s parameters.
        comm: the communicator; found from the environment when omitted.
        init: ``"broadcast"`` (every worker starts from rank 0's state, one
            broadcast at construction) or ``"independent"`` (each keeps its own).
        sync_buffers: also pull/average floating-point buffers.
    """

    name = "strategy"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        comm: Communicator | None = None,
        init: str = "broadcast",
        sync_buffers: bool = True,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"{self.name}: model must be a torch.nn.Module, got {type(model)!r}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(
                f"{self.name}: optimizer must be a torch.optim.Optimizer, got {type(optimizer)!r}"
            )
        self.init = _validate.choice(self.name, "init", init, INITS)
        self.sync_buffers = bool(sync_buffers)
        self.comm = comm if comm is not None else get_communicator()
        self.optimizer = optimizer
        self._module = model
        self.x = state_tensors(model, self.sync_buffers)
        self.steps = 0
        self.rounds = 0
        if self.init == "broadcast":
            self._broadcast_initial_state()
        # The communicator may outlive several strategies: count from here.
        self._baseline = {c: self.comm.stats(c) for c in TRAFFIC}

    # -- the user-facing surface ----------------------------------------
    @property
    def model(self) -> nn.Module:
        """The module to call in the forward pass (the DDP wrapper for AllReduce)."""
        return self._module

    @property
    def module(self) -> nn.Module:
        """The user's own model (never a wrapper)."""
        return self._module

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    def step(self, loss: torch.Tensor | float | None = None) -> None:
        """Inner optimizer step, then this method's pulls and rounds when due."""
        self.optimizer.step()
        self.steps += 1
        with torch.no_grad():
            self._after_step(loss)

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        """The method's rules after the ``self.steps``-th optimizer step."""

    def center(self) -> nn.Module:
        """A copy of the model holding the average of all workers' states.

        Collective: every worker must call it. Parameters and floating buffers
        are averaged (one all-reduce, counted as ``"eval"`` traffic); integer
        buffers are this worker's.
        """
        replica = copy.deepcopy(self._module)
        with self.comm.category("eval"):
            on_state_(replica, lambda buffer: self.comm.all_reduce_(buffer, op="mean"))
        return replica

    @property
    def stats(self) -> dict[str, Any]:
        """Steps, rounds and traffic of this worker (``eval_*``: evaluation traffic)."""
        train, evaluation = self.traffic("train"), self.traffic("eval")
        return {
            "method": self.name,
            "rank": self.rank,
            "world_size": self.world_size,
            "groups": self.comm.groups,
            "steps": self.steps,
            "rounds": self.rounds,
            "bytes_sent": train.bytes_sent,
            "bytes_received": train.bytes_received,
            "comm_seconds": train.seconds,
            "comm_calls": train.calls,
            "eval_bytes_sent": evaluation.bytes_sent,
            "eval_bytes_received": evaluation.bytes_received,
        }

    def traffic(self, category: str = "train") -> CommStats:
        """What this strategy moved in ``category`` (``"train"`` or ``"eval"``)."""
        return self.comm.stats(category).minus(self._baseline.get(category, CommStats()))

    def state_dict(self) -> dict[str, Any]:
        """Everything of the strategy's own needed to resume (not model or optimizer)."""
        return {
            "name": self.name,
            "steps": self.steps,
            "rounds": self.rounds,
            "traffic": {c: dataclasses.asdict(self.traffic(c)) for c in TRAFFIC},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(
                f"{self.name}.load_state_dict: the state was saved by {state.get('name')!r}"
            )
        self.steps = int(state["steps"])
        self.rounds = int(state["rounds"])
        for c in TRAFFIC:
            saved = CommStats(**state["traffic"][c])
            self._baseline[c] = self.comm.stats(c).minus(saved)

    # -- helpers for subclasses -----------------------------------------
    def _broadcast_initial_state(self) -> None:
        with self.comm.category("init"):
            on_state_(self._module, lambda buffer: self.comm.broadcast_(buffer, src=0))

    def _average_into(self, flat: FlatBuffer, scope: str = "world") -> None:
        """``flat <- mean over scope of x`` (one all-reduce per buffer)."""
        flat.copy_from(self.x)
        for buffer in flat.buffers:
            self.comm.all_reduce_(buffer, op="mean", scope=scope)  # type: ignore[arg-type]

