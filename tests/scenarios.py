"""Worker functions shared by the simulator tests and the gloo process tests.

Each takes ``(info, spec)`` and returns plain data, so the same scenario runs
under :func:`lsgd.simulate` and :func:`lsgd.launch` and the tests compare or
check the results the same way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import lsgd

METHODS = {
    "lsgd": lsgd.LSGD,
    "easgd": lsgd.EASGD,
    "local-sgd": lsgd.LocalSGD,
    "allreduce": lsgd.AllReduce,
    "sgd": lsgd.Independent,
    "diloco": lsgd.DiLoCo,
}


class Vector(nn.Module):
    """A model that is one float64 parameter vector (exact arithmetic in tests)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(values, dtype=torch.float64))


def scripted(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """Drive a strategy with scripted losses and gradients on a :class:`Vector`.

    ``spec``: ``method``, ``kwargs``, ``x0[rank]``, ``losses[step][rank]``,
    optional ``grads[rank]`` (a constant gradient) and ``lr`` (default 0).
    Returns the state after every step, the leaders and the traffic per step.
    """
    model = Vector(spec["x0"][info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=spec.get("lr", 0.0))
    kwargs = dict(spec.get("kwargs", {}))
    if spec["method"] != "allreduce":
        kwargs.setdefault("init", "independent")
    strategy = METHODS[spec["method"]](model, opt, **kwargs)
    out: dict[str, Any] = {"x": [], "sent": [], "received": [], "leader": [], "local_leader": []}
    for step_losses in spec["losses"]:
        before = strategy.report().as_dict()
        if "grads" in spec:
            model.w.grad = torch.tensor(spec["grads"][info.rank], dtype=torch.float64)
        strategy.step(torch.tensor(step_losses[info.rank], dtype=torch.float64))
        after = strategy.report().as_dict()
        out["x"].append(model.w.detach().clone().tolist())
        out["sent"].append(after["bytes_sent"] - before["bytes_sent"])
        out["received"].append(after["bytes_received"] - before["bytes_received"])
        out["leader"].append(getattr(strategy, "leader_rank", None))
        out["local_leader"].append(getattr(strategy, "local_leader_rank", None))
    out["center"] = strategy.center().w.detach().clone().tolist()
    out["stats"] = strategy.report().as_dict()
    return out


class SmallNet(nn.Module):
    """Linear -> BatchNorm -> ReLU -> Dropout -> Linear, for training scenarios."""

    def __init__(self, dropout: float = 0.0, batchnorm: bool = True) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.bn = nn.BatchNorm1d(16) if batchnorm else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


def batches(rank: int, steps: int, size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same per-rank data under every backend (its own generator)."""
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(steps):
        x = torch.randn(size, 6, generator=g)
        out.append((x, (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()))
    return out


def train_small(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """A few SGD steps of :class:`SmallNet` under a strategy; final state by name."""
    if spec.get("reseed", True):  # else the simulator's per-worker seeds rule
        torch.manual_seed(spec.get("seed", 0) + info.rank)
    model = SmallNet(spec.get("dropout", 0.0), spec.get("batchnorm", True))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = METHODS[spec["method"]](model, opt, **spec.get("kwargs", {}))
    losses = []
    for x, y in batches(info.rank, spec["steps"]):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
        losses.append(loss.item())
    strategy.settle()  # rounds still in flight arrive (and are counted)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"state": state, "losses": losses, "stats": strategy.report().as_dict(),
            "rng": float(torch.rand(()))}


def ddp_reference(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """Torch's own DistributedDataParallel on the data of :func:`train_small`."""
    torch.manual_seed(spec.get("seed", 0) + info.rank)
    model = SmallNet(0.0, spec.get("batchnorm", True))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(info.rank, spec["steps"]):
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def chain(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """Broadcasts among all workers from each source in ``spec["sources"]``: the values
    every worker ends with and the bytes it counted for each."""
    comm = lsgd.get_communicator()
    out: dict[str, Any] = {"ok": [], "sent": [], "received": []}
    for src in spec["sources"]:
        x = torch.arange(spec["n"], dtype=torch.float32) + 1000.0 * info.rank
        before = comm.stats()
        comm.broadcast_(x, src=src)
        moved = comm.stats().minus(before)
        expected = torch.arange(spec["n"], dtype=torch.float32) + 1000.0 * src
        out["ok"].append(bool(torch.equal(x, expected)))
        out["sent"].append(moved.bytes_sent)
        out["received"].append(moved.bytes_received)
    return out


def sparse_scripted(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """SparseLoCo, DeMo and MuLoCo on scripted gradients (tests/cases_sparse.py)."""
    from tests.cases_sparse import worker

    return worker(info, spec)


def bundle(info: lsgd.WorkerInfo, specs: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Run several scenarios in one launch (process start-up is the slow part)."""
    functions = {"scripted": scripted, "train_small": train_small, "ddp_reference": ddp_reference,
                 "chain": chain, "sparse_scripted": sparse_scripted}
    return {name: functions[fn](info, spec) for name, (fn, spec) in specs.items()}


def through_a_checkpoint(model: Any, opt: Any, strategy: Any, build: Any,
                         on_disk: bool = True) -> tuple[Any, Any, Any]:
    """What a resume gives: the states of ``model``, ``opt`` and ``strategy`` saved
    (through ``torch.save`` and a weights-only load when ``on_disk``), then loaded
    into fresh ones from ``build()``."""
    import io

    saved: Any = (model.state_dict(), opt.state_dict(), strategy.state_dict())
    if on_disk:
        file = io.BytesIO()
        torch.save(list(saved), file)
        file.seek(0)
        saved = torch.load(file, weights_only=True)
    model, opt, strategy = build()
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    strategy.load_state_dict(saved[2])
    return model, opt, strategy
