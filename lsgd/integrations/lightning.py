"""lsgd's methods as a PyTorch Lightning strategy, ``Trainer(strategy=LSGDStrategy("diloco",
period=8))``: Lightning's DDP process start-up, group and data shards, no DDP wrapper; an
optimizer step runs Lightning's closure (forward, backward, clipping, hooks), then
``method.step(loss)``. Communicated: what the method sends, its rounds (docs/lightning.md);
at a checkpoint, every worker's model, optimizer and method state, gathered to rank 0 and
written under ``"lsgd"`` (on resume each worker takes back its own).
"""

from __future__ import annotations

from typing import Any, Callable

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from lightning_fabric.utilities import move_data_to_device
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.trainer.states import TrainerFn

from lsgd.comm import get_communicator
from lsgd.registry import check_knobs, make_strategy, strategy_class
from lsgd.strategies.strategy import Strategy


class LSGDStrategy(DDPStrategy):
    """Lightning's DDP process set-up with the lsgd method ``method`` in place of DDP.

    Args:
        method: an lsgd method's name (``lsgd.strategy_names()``) but ``"allreduce"``.
        start_method: how Lightning starts the processes (``"popen"``, ``"spawn"``, ``"fork"``).
        process_group_backend: torch.distributed's (default: gloo on CPU, NCCL on CUDA).
        knobs: the method's keyword arguments (:func:`lsgd.make_strategy`), e.g. ``period=8``.

    :attr:`method` is the lsgd strategy while fitting; its groups are Lightning's nodes.
    """

    def __init__(self, method: str, *, start_method: str = "popen",
                 process_group_backend: str | None = None, **knobs: Any) -> None:
        if strategy_class(method).name == "allreduce":  # an unknown name: ValueError
            raise ValueError("LSGDStrategy('allreduce'): a gradient all-reduce every step is "
                             "Lightning's own Trainer(strategy='ddp'); use that")
        # comm: Lightning's process group; asynchronous: all stop at max_steps
        check_knobs(method, knobs, ("comm", "asynchronous"), f"LSGDStrategy({method!r})")
        super().__init__(start_method=start_method,  # type: ignore[arg-type]
                         process_group_backend=process_group_backend)
        self.method_name, self.knobs = method, knobs
        self.method: Strategy | None = None

    def configure_ddp(self) -> None:
        """No DistributedDataParallel: the gradients stay each worker's own."""

    def setup(self, trainer: pl.Trainer) -> None:
        """Lightning's set-up, then (fitting) the method around the module and its optimizer
        (collective: the workers start from rank 0's state, ``"init"`` traffic)."""
        super().setup(trainer)
        self.method = None
        if trainer.state.fn == TrainerFn.FITTING:
            check_fit(self.lightning_module, self.optimizers, self.precision_plugin)
            self.method = make_strategy(self.method_name, self.lightning_module, self.optimizers[0],
                                        comm=get_communicator(groups=self.num_nodes), **self.knobs)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any],
                       model: Any = None, **kwargs: Any) -> Any:
        """The precision plugin's step, whose ``optimizer.step(closure)`` becomes the closure
        (forward, backward, clipping, hooks) and then ``method.step(loss)``."""
        assert (method := self.method) is not None, "LSGDStrategy.optimizer_step outside fitting"
        own = optimizer.__dict__.get("step")  # an LR scheduler's wrapper, if any

        def step(closure: Callable[[], Any], **_: Any) -> Any:
            _restore(optimizer, own)  # the method drives the optimizer's own step
            loss = closure()
            method.step(loss)
            return loss

        optimizer.step = step  # type: ignore[method-assign]
        try:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        finally:
            _restore(optimizer, own)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any,
                        storage_options: Any = None) -> None:
        """Every worker's model, optimizer and method state, gathered to rank 0 (collective,
        outside the method's traffic), go into the checkpoint under ``"lsgd"``."""
        if self.method is not None:
            mine = move_data_to_device({"model": self.lightning_module.state_dict(),
                                        "optimizer": self.optimizers[0].state_dict(),
                                        "method": self.method.state_dict()}, "cpu")
            ranks: list[Any] | None = [None] * self.world_size if self.is_global_zero else None
            dist.gather_object(mine, ranks, dst=0)
            checkpoint["lsgd"] = {"method": self.method_name, "ranks": ranks}
        super().save_checkpoint(checkpoint, filepath, storage_options)

    def load_optimizer_state_dict(self, checkpoint: Any) -> None:
        """Lightning's, then this worker's own model, optimizer and method state."""
        super().load_optimizer_state_dict(checkpoint)
        saved = checkpoint.get("lsgd")
        if self.method is None or saved is None:
            return
        held = (saved["method"], len(saved["ranks"]))
        if held != (self.method_name, self.world_size):
            raise ValueError(f"LSGDStrategy: the checkpoint holds (method, workers) {held}, this "
                             f"run is {(self.method_name, self.world_size)}; resume with the same")
        mine = saved["ranks"][self.global_rank]
        self.lightning_module.load_state_dict(mine["model"])
        self.optimizers[0].load_state_dict(mine["optimizer"])
        self.method.load_state_dict(mine["method"])


def check_fit(module: Any, optimizers: list[Any], precision: Any) -> None:
    """``ValueError`` naming what :class:`LSGDStrategy` cannot drive, and what works."""
    if not module.automatic_optimization:
        raise ValueError("LSGDStrategy: automatic_optimization=False is not supported; return the "
                         "loss from training_step (accumulate_grad_batches and clipping work)")
    if len(optimizers) != 1:
        raise ValueError(f"LSGDStrategy drives one optimizer, configure_optimizers returned "
                         f"{len(optimizers)}; return one (its param groups may differ)")
    if getattr(precision, "scaler", None) is not None:
        raise ValueError("LSGDStrategy: precision='16-mixed' (a gradient scaler) is not "
                         "supported; use '32-true', 'bf16-mixed' or 'bf16-true'")


def _restore(optimizer: torch.optim.Optimizer, own: Any) -> None:
    """The optimizer's ``step`` as it was: its class's, or the instance's own wrapper."""
    optimizer.__dict__.pop("step", None)
    if own is not None:
        optimizer.step = own  # type: ignore[method-assign]
