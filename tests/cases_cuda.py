"""Worker functions of the CUDA tests (module-level: spawned workers import them)."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

import lsgd
from lsgd.topology import ring

#: Every method, with knobs that give it rounds within a few steps.
METHODS = ["lsgd", "lsgd-int8", "easgd", "local-sgd", "diloco", "diloco-streaming-int8",
           "diloco-replicas", "diloco-topk", "sparseloco", "demo", "muloco", "allreduce",
           "dpsgd", "matcha", "al-dsgd", "sgd"]
KNOBS: dict[str, tuple[str, dict[str, Any]]] = {
    "lsgd": ("lsgd", {"period": 2}),
    "lsgd-int8": ("lsgd", {"period": 2, "overlap": 1, "compress": "int8"}),
    "easgd": ("easgd", {"period": 2}),
    "local-sgd": ("local-sgd", {"period": 2}),
    "diloco": ("diloco", {"period": 2}),
    "diloco-streaming-int8": ("diloco", {"period": 2, "fragments": 2, "overlap": 1,
                                         "compress": "int8"}),
    "diloco-replicas": ("diloco", {"period": 2}),
    "diloco-topk": ("diloco", {"period": 2, "overlap": 1, "compress": "topk", "density": 0.1,
                               "values": "int8", "error_feedback": True}),
    "sparseloco": ("sparseloco", {"period": 2, "density": 0.1, "leader": "pull"}),
    "demo": ("demo", {"overlap": 1, "topk": 8, "chunk": 8}),
    "muloco": ("muloco", {"period": 2}),
    "allreduce": ("allreduce", {}),
    "dpsgd": ("dpsgd", {"topology": ring(4)}),
    "matcha": ("matcha", {"topology": ring(4)}),
    "al-dsgd": ("al-dsgd", {"topology": ring(4)}),
    "sgd": ("sgd", {}),
}


def _model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4)).to(device)


def _batch(step: int, rank: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(32, 16, generator=generator)
    return x.to(device), (x[:, :4].argmax(1)).to(device)  # a learnable rule


def train_on(info: lsgd.WorkerInfo, method: str, device: str, steps: int = 16
             ) -> tuple[float, float, str, bool]:
    """(first loss, mean of the last four, the state's device type, whether finite)."""
    name, knobs = KNOBS[method]
    if name == "matcha":
        import importlib.util

        if importlib.util.find_spec("cvxpy") is None:  # MATCHA's probabilities need it
            knobs = {**knobs, "budget": 1.0}
    model = _model(device)
    opt: torch.optim.Optimizer = (
        lsgd.MuonAdamW(model, lr=0.02, weight_decay=0.0) if name == "muloco" else
        torch.optim.SGD(model.parameters(), lr=0.01) if name == "demo" else
        torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9))
    strategy = lsgd.make_strategy(name, model, opt, **knobs)
    losses = []
    for step in range(steps):
        x, y = _batch(step, info.rank, device)
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
        losses.append(float(loss.detach()))
    strategy.settle()
    params = list(model.parameters())
    return (losses[0], sum(losses[-4:]) / 4, params[0].device.type,
            all(bool(torch.isfinite(p).all()) for p in params))


def _six_steps(name: str, rank: int, device: str) -> tuple[torch.nn.Module, lsgd.Strategy]:
    """``name`` with rounds every 2 steps, 6 steps on ``device``: the model and strategy."""
    model = _model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    strategy = lsgd.make_strategy(name, model, opt, period=2)
    for step in range(6):
        x, y = _batch(step, rank, device)
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    return model, strategy


def shared_gpu(info: lsgd.WorkerInfo, device: str) -> dict[str, Any]:
    """DiLoCo and LSGD on CUDA tensors over gloo: each one's center after a few rounds."""
    out = {}
    for name in ("diloco", "lsgd"):
        model, strategy = _six_steps(name, info.rank, device)
        center = strategy.center()
        out[name] = {"device": next(model.parameters()).device.type,
                     "center": torch.cat([p.detach().reshape(-1).cpu()
                                          for p in center.parameters()])}
    return out


def with_nccl_inside(info: lsgd.WorkerInfo, device: str) -> torch.Tensor:
    """One replica of two processes, a GPU each: its model after DiLoCo's rounds."""
    where = f"cuda:{info.rank}" if device == "cuda" else device
    model, _ = _six_steps("diloco", info.rank, where)
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
