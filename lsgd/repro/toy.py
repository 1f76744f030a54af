"""The LSGD paper's 2-D toy landscape: LGD reaches a better optimum than EAGD.

``L(x, y) = sin(pi r) / (pi r)``, ``r = sqrt(x^2 + y^2)``: a radial "sinc" whose minima
are rings, each shallower than the one inside it (the deepest at r ~ 1.430, L ~ -0.2172).
Four workers take full gradient steps under LGD and EAGD, communicating every step
(:func:`~lsgd.repro.lgd`, :func:`~lsgd.repro.eagd`), and for comparison LSGD with a scope
pull and period above 1, local SGD and independent gradient descent, until no worker
moves more than ``tol`` (:func:`~lsgd.repro.run_full_batch`) or ``max_steps``.
docs/algorithms.md ("The papers' own small experiments") gives the setup.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from lsgd.plots import pyplot, save
from lsgd.repro import FullBatchRun, Method, Progress, eagd, lgd, run_full_batch
from lsgd.repro.defaults import TOY_LR as LR, TOY_MOVING_RATE as MOVING_RATE, TOY_PULL as PULL

STARTS: tuple[tuple[float, float], ...] = ((-6.0, -4.0), (-15.0, -18.0), (20.0, 11.0), (17.0, 8.0))

_SMALL_R = 1e-4  # below this radius use the Taylor series (no 0/0)


def objective(point: torch.Tensor) -> torch.Tensor:
    """``L(x, y) = sin(pi r) / (pi r)`` for ``point = [..., 2]`` (1 at the origin)."""
    return torch.sinc(torch.linalg.vector_norm(point, dim=-1))  # sin(pi t) / (pi t), 1 at 0


def gradient(point: torch.Tensor) -> torch.Tensor:
    """``grad L = L'(r) / r * (x, y)`` with ``L'(r) = (pi r cos(pi r) - sin(pi r)) / (pi r^2)``.

    ``L'(r) / r = (pi r cos(pi r) - sin(pi r)) / (pi r^3)``, which near the
    origin is ``-pi^2/3 + pi^4 r^2 / 30 + O(r^4)`` (used below ``r = 1e-4``).
    """
    r = torch.linalg.vector_norm(point, dim=-1, keepdim=True)
    pr = math.pi * r
    safe = torch.where(r < _SMALL_R, torch.ones_like(r), r)
    exact = (pr * torch.cos(pr) - torch.sin(pr)) / (math.pi * safe**3)
    series = -(math.pi**2) / 3 + math.pi**4 * r**2 / 30
    return torch.where(r < _SMALL_R, series, exact) * point


def value_and_grad(point: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``L`` and its gradient at ``point``."""
    return objective(point), gradient(point)


def methods(pull: float = PULL, moving_rate: float = MOVING_RATE, period: int = 4,
            scope: float = 0.1) -> list[Method]:
    """LGD and EAGD (the paper's pair), then the comparisons."""
    lsgd = {"pull": pull, "scope": scope, "period": period, "leader_window": 1}
    return [lgd(pull), eagd(moving_rate), Method("LSGD", "lsgd", lsgd),
            Method("LocalSGD", "local-sgd", {"period": period}), Method("GD", "sgd", {})]


def starts() -> torch.Tensor:
    """The four workers' starts (:data:`STARTS`)."""
    return torch.tensor(STARTS, dtype=torch.float64)


def summarize(run: FullBatchRun) -> dict[str, Any]:
    """Best objective at the end, where, which worker, after how many steps
    (``steps_to_best``: the first from which the best worker of each step stayed within
    1e-6 of it); ``lowest_visited``: the lowest L any worker passed through on the way."""
    final = run.losses[-1]
    best = int(torch.argmin(final))
    best_value = float(final[best])
    above = (run.losses.min(dim=1).values > best_value + 1e-6).nonzero()  # the best per step
    steps_to_best = int(above[-1]) + 1 if len(above) else 0
    assert run.positions is not None
    where = run.positions[-1, best].tolist()
    switches = sum(a != b for a, b in zip(run.leaders, run.leaders[1:])) if run.leaders else None
    return {"method": run.method.describe(), "best_objective": best_value, "where": where,
            "radius": math.hypot(*where), "worker": best, "steps_to_best": steps_to_best,
            "steps": run.steps, "stopped": run.stopped,
            "lowest_visited": float(run.losses.min()), "final_objectives": final.tolist(),
            "final_points": run.positions[-1].tolist(), "leader_switches": switches}


def run(*, max_steps: int = 20_000, tol: float = 1e-10, pull: float = PULL,
        moving_rate: float = MOVING_RATE, lr: float = LR, progress: Progress | None = None
        ) -> tuple[dict[str, dict[str, Any]], list[FullBatchRun]]:
    """Run every method from the paper's starts; returns (summary by label, runs)."""
    runs = []
    for method in methods(pull, moving_rate):
        if progress is not None:
            progress.start(f"toy {method.label}", max_steps)
        runs.append(run_full_batch(method, value_and_grad, starts(), lr, max_steps,
                                   stop_tol=tol, progress=progress))
    return {r.method.label: summarize(r) for r in runs}, runs


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The summary as a plain-text table."""
    head = f"{'method':<9} {'best L':>10} {'where (x, y)':>20} {'r':>7} {'worker':>6} " \
           f"{'steps to best':>13} {'steps run':>9} {'lowest seen':>11}"
    lines = [head, "-" * len(head)]
    for label, s in summary.items():
        x, y = s["where"]
        lines.append(f"{label:<9} {s['best_objective']:>10.5f} {f'({x:.3f}, {y:.3f})':>20} "
                     f"{s['radius']:>7.3f} {s['worker']:>6} {s['steps_to_best']:>13} "
                     f"{s['steps']:>9}{'' if s['stopped'] else '*'} {s['lowest_visited']:>11.5f}")
    if not all(s["stopped"] for s in summary.values()):
        lines.append("* still moving at the step limit")
    lines.append("")
    lines.extend(f"{label:<9} = {s['method']}" for label, s in summary.items())
    return "\n".join(lines)


def plot(runs: list[FullBatchRun], out: str) -> list[str]:
    """Write ``trajectories.png`` and ``objective.png`` into ``out``; returns the paths."""
    plt = pyplot(note=True)
    if plt is None:
        return []
    grid = torch.linspace(-25, 25, 501, dtype=torch.float64)
    gx, gy = torch.meshgrid(grid, grid, indexing="xy")
    landscape = objective(torch.stack([gx, gy], dim=-1)).numpy()

    n = len(runs)
    rows = math.ceil((n + 1) / 3)  # and a panel for the legend
    fig, axes = plt.subplots(rows, 3, figsize=(3 * 4.6, 4.6 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, r in zip(flat, runs):
        inset = ax.inset_axes([0.60, 0.02, 0.38, 0.38])
        for a, half in ((ax, 25.0), (inset, 8.0)):
            a.contourf(gx.numpy(), gy.numpy(), landscape, levels=40, cmap="viridis", vmax=0.25)
            a.contour(gx.numpy(), gy.numpy(), landscape, levels=[-0.2, -0.09, -0.05],
                      colors="white", linewidths=0.5, alpha=0.7, linestyles="solid")
            assert r.positions is not None
            for i in range(r.positions.shape[1]):
                path = r.positions[:, i].numpy()
                c = f"C{i}"  # matplotlib's own colour cycle
                a.plot(path[:, 0], path[:, 1], "-", color=c, lw=1.2, label=f"worker {i}")
                a.plot(*path[0], "o", color=c, mec="black", ms=6)
                a.plot(*path[-1], "*", color=c, mec="black", ms=13 if a is ax else 10)
            a.set(xlim=(-half, half), ylim=(-half, half), aspect="equal")
        inset.set(xticks=[], yticks=[])
        ax.indicate_inset_zoom(inset, edgecolor="white")
        ax.set_title(f"{r.method.label}: best L = {float(r.losses[-1].min()):.4f} "
                     f"({r.steps} steps)\n{r.method.describe()}", fontsize=9)
    handles, labels = flat[0].get_legend_handles_labels()
    for ax in flat[n:]:
        ax.axis("off")
    flat[n].legend(handles, labels, loc="center", title="o start, * end; inset: |x|,|y| <= 8")
    fig.suptitle("L = sin(pi r)/(pi r), 4 workers, full gradients, lr 0.1", fontsize=12)
    paths = [str(save(fig, Path(out) / "trajectories.png"))]

    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False, sharey=True)
    for ax, r in zip(axes[0], runs):
        steps = torch.arange(r.losses.shape[0]) + 1
        for i in range(r.losses.shape[1]):
            ax.plot(steps.numpy(), r.losses[:, i].numpy(), color=f"C{i}", label=f"worker {i}")
        ax.set(xscale="log", xlabel="step + 1")
        ax.set_title(r.method.label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("L(x, y)")
    axes[0][0].legend(fontsize=7)
    return paths + [str(save(fig, Path(out) / "objective.png"))]


__all__ = ["STARTS", "gradient", "methods", "objective", "plot", "run", "summarize", "table",
           "value_and_grad"]
