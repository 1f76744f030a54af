"""The LSGD paper's low-rank matrix factorization: EAGD slows down near the minimizers,
LGD does not (the paper's Figure 1).

``F(X) = 1/4 ||M - X X^T||_F^2`` with ``M = U U^T``, 8 workers from the same N(0, 1)
starts for both methods (:func:`methods`), a round every step; reported: the best
worker's ``F / F(0)`` against steps. docs/algorithms.md ("The papers' own small
experiments") gives the setup. Two engines compute the same thing (the tests check them
to 1e-9): :func:`run_strategy`, the real strategies on the simulator, and
:func:`run_batched` (the default), all workers of all trials as one tensor.

``F`` and its gradient cost ``O(d r^2)``, never forming ``d x d``: with ``U = Q R``
(thin QR) and ``X = Q B + P`` (``B = Q^T X``, ``Q^T P = 0``)::

    4 F = ||R R^T - B B^T||^2 + 2 <B^T B, P^T P> + ||P^T P||^2
    grad F = X (B^T B + P^T P) - Q (R R^T B)

a sum of squares and PSD products, accurate to rounding even at ``F / F(0) ~ 1e-30``,
where expanding ``||M - X X^T||^2`` would cancel at 1e-16.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lsgd.plots import pyplot, save
from lsgd.repro import Method, Progress, eagd, lgd, run_full_batch
from lsgd.repro.defaults import (ENGINES, MATRIX_DIM as DIM, MATRIX_LR as LR, MATRIX_PULL as PULL,
                                 MATRIX_RANKS as RANKS, MATRIX_STEPS as STEPS,
                                 MATRIX_TRIALS as TRIALS, MATRIX_WORKERS as WORKERS)

_BATCH_BYTES = 256 * 2**20  # the [T, W, d, r] state of one chunk of trials
# F / F(0) below ~eps^2 is rounding-level in X coordinates; the batched engine
# (which keeps the part of X outside span(U) apart) can go lower at r = 1.
_PLOT_FLOOR = 1e-34


@dataclasses.dataclass(frozen=True)
class Factorization:
    """``F(X) = 1/4 ||M - X X^T||_F^2`` with ``M = Q (R R^T) Q^T`` (``U = Q R``): ``q`` is
    ``[..., d, r]``, ``rrt`` ``[..., r, r]`` and ``f0 = F(0)`` has the leading shape, which
    broadcasts against that of ``X`` (:meth:`stack`)."""

    q: torch.Tensor
    rrt: torch.Tensor
    f0: torch.Tensor

    @classmethod
    def from_factor(cls, u: torch.Tensor) -> Factorization:
        """The problem of ``M = U U^T``."""
        q, r = torch.linalg.qr(u)
        rrt = r @ r.mT
        return cls(q, rrt, 0.25 * _sq(rrt))

    @classmethod
    def stack(cls, problems: Sequence[Factorization]) -> Factorization:
        """Trials ``[T]`` batched against workers: ``q`` becomes ``[T, 1, d, r]``."""
        return cls(*(torch.stack([getattr(p, name) for p in problems]).unsqueeze(1)
                     for name in ("q", "rrt", "f0")))

    def dense(self) -> torch.Tensor:
        """``M`` itself (``d x d``; for tests)."""
        return self.q @ self.rrt @ self.q.mT

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``X = Q B + P``: ``B = Q^T X`` (``[..., r, r]``) and ``P = X - Q B``, orthogonal to U."""
        b = self.q.mT @ x
        return b, x - self.q @ b

    def objective(self, x: torch.Tensor) -> torch.Tensor:
        """``F(X)`` for ``X`` of shape ``[..., d, r]`` (differentiable)."""
        return self.value_and_grad_split(*self.split(x))[0]

    def value_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``F(X)`` and ``grad F(X) = Q grad_B + grad_P`` (see :meth:`value_and_grad_split`)."""
        value, grad_b, grad_p = self.value_and_grad_split(*self.split(x))
        return value, self.q @ grad_b + grad_p

    def value_and_grad_split(self, b: torch.Tensor, p: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``F`` and the gradient's two parts at ``X = Q B + P``.

        With ``S = X^T X = B^T B + P^T P`` and ``M X = Q R R^T B``::

            grad F = X S - M X = Q (B S - R R^T B) + P S
        """
        btb, ptp = b.mT @ b, p.mT @ p
        s = btb + ptp
        value = 0.25 * (_sq(self.rrt - b @ b.mT) + 2.0 * (btb * ptp).sum(dim=(-2, -1)) + _sq(ptp))
        return value, b @ s - self.rrt @ b, p @ s


def _sq(a: torch.Tensor) -> torch.Tensor:
    return (a * a).sum(dim=(-2, -1))


def draw_trial(dim: int, rank: int, workers: int, seed: int, trial: int,
               dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"
               ) -> tuple[Factorization, torch.Tensor]:
    """One trial's problem and the workers' starts ``[W, d, r]``, drawn in float64 on the
    CPU from a generator seeded by ``(seed, rank, trial)``: a trial is the same on every
    device and dtype, and both methods start from the same points."""
    state = np.random.SeedSequence([seed, rank, trial]).generate_state(2, dtype=np.uint32)
    generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
    u = torch.randn(dim, rank, generator=generator, dtype=torch.float64)
    starts = torch.randn(workers, dim, rank, generator=generator, dtype=torch.float64)
    problem = Factorization.from_factor(u.to(device))
    cast = Factorization(problem.q.to(dtype), problem.rrt.to(dtype), problem.f0.to(dtype))
    return cast, starts.to(device, dtype)


def methods(lr: float = LR, pull: float = PULL, workers: int = WORKERS) -> list[Method]:
    """LGD and EAGD with the paper's simultaneous update mapped onto the strategies:
    ``LSGD(pull = eta lambda)`` and ``EASGD(moving_rate = W eta lambda)``."""
    return [lgd(lr * pull), eagd(min(1.0, workers * lr * pull))]


def run_strategy(problem: Factorization, starts: torch.Tensor, method: Method, lr: float,
                 steps: int, progress: Progress | None = None) -> torch.Tensor:
    """``F / F(0)`` of every worker, ``[steps + 1, W]``, through the real strategy."""
    run = run_full_batch(method, problem.value_and_grad, starts, lr, steps,
                         record_positions=False, progress=progress)
    return run.losses / problem.f0


def run_batched(problem: Factorization, starts: torch.Tensor, method: Method, lr: float,
                steps: int, progress: Progress | None = None) -> torch.Tensor:
    """``F / F(0)`` of every worker, ``[steps + 1, T, W]``, for starts ``[T, W, d, r]`` and
    ``problem`` the :meth:`Factorization.stack` of the ``T`` trials.

    Only LGD and EAGD (:func:`methods`) are supported: each step is ``SGD``'s
    ``X <- X - lr grad F(X)`` followed by exactly the strategy's pull. The state is held as
    ``X = Q B + P`` (:meth:`Factorization.split`) once for all: every operation of a step
    (the gradient step, the lerp toward the leader, EASGD's means and center) is linear in
    ``X``, so it acts on ``B`` and ``P`` apart, and ``grad F`` splits the same way. A step
    then costs two ``d x r x r`` products per worker (``P^T P`` and ``P S``) instead of five.
    """
    b, p = problem.split(starts)
    update = _batched_update(method, [b, p])
    losses = torch.empty(steps + 1, *starts.shape[:2], dtype=starts.dtype, device=starts.device)
    for step in range(steps):
        loss, grad_b, grad_p = problem.value_and_grad_split(b, p)
        losses[step] = loss
        b.add_(grad_b, alpha=-lr)  # torch.optim.SGD without momentum
        p.add_(grad_p, alpha=-lr)
        update(loss)
        if progress is not None:
            progress.update(step + 1)
    losses[steps] = problem.value_and_grad_split(b, p)[0]
    return losses / problem.f0


def _batched_update(method: Method, state: list[torch.Tensor]
                    ) -> Callable[[torch.Tensor], None]:
    """The strategy's rule after the gradient step, on ``state``'s tensors ``[T, W, ...]``."""
    options = dict(method.options)
    if method.kind == "lsgd" and options.get("scope") == 0 and options.get("period") == 1 \
            and options.get("leader_window") == 1:
        pull = float(options["pull"])

        def leader_pull(loss: torch.Tensor) -> None:
            # lsgd.functional.elect: lowest finite score, ties to the lowest rank.
            scores = torch.where(torch.isfinite(loss), loss, torch.inf)
            leaders = torch.argmin(scores, dim=1)
            trials = torch.arange(loss.shape[0], device=loss.device)
            for x in state:
                target = x[trials, leaders].unsqueeze(1)  # a copy: advanced indexing
                if pull != 0.0:  # the leader's own row: lerp(x, x) = x exactly
                    x.lerp_(target, pull)

        return leader_pull
    if method.kind == "easgd" and options.get("period") == 1:
        beta = float(options["moving_rate"])
        alpha = beta / state[0].shape[1]
        centers = [_rank_order_mean(x) for x in state]

        def elastic(loss: torch.Tensor) -> None:
            for x, center in zip(state, centers):
                mean = _rank_order_mean(x)  # the simulator's all-reduce, rank by rank
                if alpha != 0.0:
                    x.lerp_(center.unsqueeze(1), alpha)  # the center before its update
                if beta != 0.0:
                    center.lerp_(mean, beta)

        return elastic
    raise ValueError(f"the batched engine runs LGD and EAGD only (period 1, no scope pull); "
                     f"got {method.describe()}; use engine='strategy'")


def _rank_order_mean(x: torch.Tensor) -> torch.Tensor:
    total = x[:, 0].clone()
    for i in range(1, x.shape[1]):
        total.add_(x[:, i])
    return total.div_(x.shape[1])


@dataclasses.dataclass
class Result:
    """The best worker's ``F / F(0)`` per step and trial: ``curves[rank][label]``,
    ``[steps + 1, T]``."""

    setup: dict[str, Any]
    curves: dict[int, dict[str, torch.Tensor]]
    seconds: dict[int, float]


def run(*, dim: int = DIM, ranks: Sequence[int] = RANKS, trials: int = TRIALS,
        steps: int = STEPS, seed: int = 0, workers: int = WORKERS, lr: float = LR,
        pull: float = PULL, device: str = "cpu", dtype: torch.dtype = torch.float64,
        engine: str = "batched", progress: Progress | None = None) -> Result:
    """Every rank and trial, LGD and EAGD from the same starts."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    bad = [r for r in ranks if not 1 <= r <= dim]
    if bad:
        raise ValueError(f"every rank must be between 1 and dim={dim}; got {bad}")
    pair = methods(lr, pull, workers)
    setup = {"dim": dim, "ranks": list(ranks), "trials": trials, "steps": steps, "seed": seed,
             "workers": workers, "lr": lr, "pull_lambda": pull, "device": str(device),
             "dtype": str(dtype).removeprefix("torch."), "engine": engine,
             "methods": {m.label: m.describe() for m in pair}}
    curves: dict[int, dict[str, torch.Tensor]] = {}
    seconds: dict[int, float] = {}
    for rank in ranks:
        start = time.perf_counter()
        drawn = [draw_trial(dim, rank, workers, seed, t, dtype, device) for t in range(trials)]
        fits = _BATCH_BYTES // (workers * dim * rank * dtype.itemsize)
        size = max(1, fits) if engine == "batched" else 1  # trials at once
        curves[rank] = {}
        for method in pair:
            best = []
            for lo in range(0, trials, size):
                chunk = drawn[lo : lo + size]
                if progress is not None:
                    progress.start(f"rank {rank} {method.label} trials {lo + 1}-"
                                   f"{lo + len(chunk)}/{trials}", steps)
                if engine == "batched":
                    rel = run_batched(Factorization.stack([p for p, _ in chunk]),
                                      torch.stack([s for _, s in chunk]), method, lr, steps,
                                      progress)
                else:
                    rel = run_strategy(*chunk[0], method, lr, steps, progress).unsqueeze(1)
                best.append(rel.min(dim=2).values.cpu().to(torch.float64))
            curves[rank][method.label] = torch.cat(best, dim=1)
        seconds[rank] = time.perf_counter() - start
    return Result(setup, curves, seconds)


def report_steps(steps: int) -> list[int]:
    """A few step counts for the table: 1-3-10 values up to ``steps``, and ``steps``."""
    nice = [m * 10**e for e in range(1, 8) for m in (1, 3) if m * 10**e < steps]
    return nice[-4:] + [steps]


def summarize(result: Result, at: Sequence[int] | None = None) -> dict[str, Any]:
    """Median and spread over trials of the best worker's ``F / F(0)`` at step counts ``at``."""
    at = list(at) if at is not None else report_steps(result.setup["steps"])
    ranks: dict[str, Any] = {}
    for rank, by_method in result.curves.items():
        entry: dict[str, Any] = {"seconds": result.seconds[rank]}
        for label, curve in by_method.items():
            values = curve[at]  # [len(at), T]
            entry[label] = {stat: getattr(values, stat)(dim=1).values.tolist()
                            for stat in ("median", "min", "max")}
        ranks[str(rank)] = entry
    return {"setup": result.setup, "steps": at, "ranks": ranks,
            "seconds": sum(result.seconds.values())}


def table(summary: dict[str, Any]) -> str:
    """Per rank and method: median [min, max] over trials at each reported step."""
    head = f"{'rank':>4} {'method':<6}" + "".join(f" {f'step {s}':>30}" for s in summary["steps"])
    lines = [f"best worker's F/F(0): median [min, max] over {summary['setup']['trials']} trials",
             head, "-" * len(head)]
    for rank, entry in summary["ranks"].items():
        for label in summary["setup"]["methods"]:
            stats = entry[label]
            cells = "".join(f" {f'{m:.2e} [{lo:.1e}, {hi:.1e}]':>30}"
                            for m, lo, hi in zip(stats["median"], stats["min"], stats["max"]))
            lines.append(f"{rank:>4} {label:<6}{cells}")
        lines.append(f"{'':>4} ({entry['seconds']:.1f} s)")
    lines.append(f"total {summary['seconds']:.1f} s")
    return "\n".join(lines)


def plot(result: Result, out: str) -> list[str]:
    """The paper's Figure 1 as ``figure1.png``: one panel per rank, log scale."""
    plt = pyplot(note=True)
    if plt is None:
        return []
    ranks = list(result.curves)
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.2 * len(ranks), 3.8), squeeze=False)
    colors = {"LGD": "tab:red", "EAGD": "tab:blue"}
    for ax, rank in zip(axes[0], ranks):
        for label, curve in result.curves[rank].items():
            steps = np.arange(curve.shape[0])
            c = curve.clamp_min(_PLOT_FLOOR).numpy()
            color = colors.get(label)
            ax.plot(steps, np.median(c, axis=1), color=color, label=label, lw=1.5)
            ax.fill_between(steps, c.min(axis=1), c.max(axis=1), color=color, alpha=0.2, lw=0)
        ax.set(yscale="log", ylim=(_PLOT_FLOOR, None), xlabel="iteration")
        ax.set_title(f"r = {rank}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("best worker's F / F(0)")
    axes[0][0].legend()
    s = result.setup
    fig.suptitle(f"Low-rank factorization, d = {s['dim']}, {s['workers']} workers, "
                 f"{s['trials']} trials (median, min-max shaded)", fontsize=11)
    return [str(save(fig, Path(out) / "figure1.png"))]


__all__ = ["Factorization", "Result", "draw_trial", "methods", "plot", "report_steps", "run",
           "run_batched", "run_strategy", "summarize", "table"]
