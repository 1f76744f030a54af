"""What the two reproductions share: a one-parameter model, a method as a strategy
(:func:`lsgd.make_strategy`), the full-batch worker loop on the simulator and the
progress bars (re-exported by :mod:`lsgd.repro`, with :mod:`lsgd.plots`' ``pyplot``)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

import torch
from torch import nn
from tqdm import tqdm

import lsgd
from lsgd.registry import strategy_class
from lsgd.strategies.strategy import Strategy


#: ``value_and_grad(x) -> (F(x), grad F(x))`` for one worker's point ``x``.
ValueAndGrad = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

#: The methods the reproductions compare, by their command-line names.
KINDS = ("lsgd", "easgd", "local-sgd", "sgd")


class Point(nn.Module):
    """A "model" that is one point ``x`` of the search space (one parameter)."""

    def __init__(self, x: torch.Tensor) -> None:
        super().__init__()
        self.x = nn.Parameter(x.detach().clone())


@dataclasses.dataclass(frozen=True)
class Method:
    """One method of a comparison: a label and the strategy that implements it, ``kind``
    (one of :data:`KINDS`; ``"sgd"``: independent workers) with the keyword arguments
    ``options``. Every worker keeps its own start (``init="independent"``)."""

    label: str
    kind: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def build(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Strategy:
        """The strategy of this method for one worker's ``model`` and ``optimizer``."""
        if self.kind not in KINDS:
            raise ValueError(f"Method {self.label!r}: kind must be one of {', '.join(KINDS)}, "
                             f"got {self.kind!r}")
        return lsgd.make_strategy(self.kind, model, optimizer, init="independent", **self.options)

    def describe(self) -> str:
        """``"LSGD(pull=0.1, scope=0.0, period=1)"``: the strategy as constructed."""
        args = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{strategy_class(self.kind).__name__}({args})"


def lgd(pull: float) -> Method:
    """Leader GD: LSGD with a pull toward the leader every step, no scope pull, and the
    objective at the current point as the score (``leader_window=1``)."""
    return Method("LGD", "lsgd", {"pull": pull, "scope": 0.0, "period": 1, "leader_window": 1})


def eagd(moving_rate: float) -> Method:
    """Elastic averaging GD: EASGD with a round every step (``alpha = beta / W``)."""
    return Method("EAGD", "easgd", {"moving_rate": moving_rate, "period": 1})


@dataclasses.dataclass
class FullBatchRun:
    """What :func:`run_full_batch` records: ``losses[t, i]``, F at worker ``i``'s point after
    ``t`` steps (row 0: the starts); ``positions[t, i]`` that point, when recorded;
    ``leaders[t]`` the leader elected at step ``t + 1`` (LSGD only, else empty)."""

    method: Method
    losses: torch.Tensor
    positions: torch.Tensor | None
    leaders: list[int | None]
    steps: int
    stopped: bool
    seconds: float


def run_full_batch(method: Method, value_and_grad: ValueAndGrad, starts: torch.Tensor,
                   lr: float, max_steps: int, *, stop_tol: float | None = None,
                   check_every: int = 10, record_positions: bool = True,
                   progress: Progress | None = None) -> FullBatchRun:
    """Full-batch gradient descent with ``method`` on the simulator, one worker per start.

    Worker ``i`` starts at ``starts[i]`` and runs plain ``torch.optim.SGD(lr)`` under
    ``method``'s strategy: each step it sets ``grad F`` at its point and calls
    ``strategy.step(F)``, so LSGD elects its leader on the objective *before* the step and
    pulls toward it *after*. With ``stop_tol``, every ``check_every`` steps the workers
    all-gather the largest coordinate any of them moved in a step (``"repro"`` traffic, not
    training traffic) and all stop when it is below ``stop_tol``; else after ``max_steps``.
    """
    def worker(info: lsgd.WorkerInfo) -> tuple[torch.Tensor, torch.Tensor | None, list, bool]:
        model = Point(starts[info.rank])
        strategy = method.build(model, torch.optim.SGD(model.parameters(), lr=lr))
        comm = lsgd.get_communicator()
        x = model.x
        losses: list[torch.Tensor] = []
        positions: list[torch.Tensor] = []
        moved = torch.zeros((), dtype=torch.float64)
        stopped = False
        for step in range(1, max_steps + 1):
            loss, grad = value_and_grad(x.detach())
            losses.append(loss.detach().reshape(()))
            if record_positions:
                positions.append(x.detach().clone())
            before = x.detach().clone() if stop_tol is not None else None
            x.grad = grad
            strategy.step(loss)
            if before is not None:
                moved = torch.maximum(moved, (x.detach() - before).abs().max().to(torch.float64))
                if step % check_every == 0:
                    with comm.category("repro"):
                        stopped = bool(comm.all_gather(moved.reshape(1)).max() < stop_tol)
                    moved.zero_()
            if progress is not None and info.rank == 0:
                progress.update(step)
            if stopped:
                break
        if progress is not None and info.rank == 0:
            progress.update(step, force=True)
        final, _ = value_and_grad(x.detach())
        losses.append(final.detach().reshape(()))
        if record_positions:
            positions.append(x.detach().clone())
        leaders = [h[2] for h in strategy.report().leader_history]
        stacked = torch.stack(positions) if record_positions else None
        return torch.stack(losses), stacked, leaders, stopped

    start = time.perf_counter()
    results = lsgd.simulate(worker, world_size=int(starts.shape[0]), seed=0)
    seconds = time.perf_counter() - start
    losses = torch.stack([r[0] for r in results], dim=1)
    positions = torch.stack([r[1] for r in results], dim=1) if record_positions else None
    return FullBatchRun(method, losses, positions, leaders=results[0][2],
                        steps=losses.shape[0] - 1, stopped=results[0][3], seconds=seconds)


class Progress:
    """Progress of the reproductions' runs: one tqdm bar per task, on stderr, shown only on
    a terminal and when ``enabled`` (so that logs stay free of redraws)."""

    def __init__(self, enabled: bool = True, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar: tqdm | None = None

    def start(self, label: str, total: int) -> None:
        """Begin a task of ``total`` units called ``label`` (ending the previous one)."""
        self.close()
        if self.enabled:
            self._bar = tqdm(total=total, desc=label, file=self.stream, leave=False,
                             dynamic_ncols=True)

    def update(self, done: int, force: bool = False) -> None:
        """``done`` units of the task are done (``force``: redraw now)."""
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            if force:
                self._bar.refresh()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the current task's bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
