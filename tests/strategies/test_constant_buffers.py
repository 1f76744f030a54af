"""A model whose constant buffers hold -inf (a causal mask) trains with every method and
round kind: constants (non-persistent, or non-finite when the model is first seen) are
never averaged, and no health check looks at them (lsgd.strategies.state)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd.strategies.state import constant_buffers, state_tensors

STEPS = 8


class Masked(nn.Module):
    """Causal attention of each input over its own entries: the usual float mask, -inf
    above the diagonal, as a buffer (``persistent`` or not)."""

    def __init__(self, persistent: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(4),
                             persistent=persistent)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(x[:, None, :] + self.mask, dim=-1)  # [B, 4, 4]
        return self.lin(self.norm((weights * x[:, None, :]).sum(-1)))


def _train(info: lsgd.WorkerInfo, method: str, knobs: dict[str, Any],
           persistent: bool) -> dict[str, Any]:
    torch.manual_seed(info.rank)
    model = Masked(persistent)
    opt = (lsgd.MuonAdamW(model, lr=0.01) if method == "muloco"
           else torch.optim.SGD(model.parameters(), lr=0.05))
    strategy = lsgd.make_strategy(method, model, opt, **knobs)
    g = torch.Generator().manual_seed(info.rank)
    for _ in range(STEPS):
        x = torch.randn(8, 4, generator=g)
        loss = F.cross_entropy(strategy.model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    strategy.settle()
    return {"finite": all(bool(torch.isfinite(p).all()) for p in model.parameters()),
            "mask": model.mask.clone(), "weight": model.lin.weight.detach().clone(),
            "resets": strategy.report().resets}


ROUNDS = [("lsgd", {"period": 2}), ("lsgd", {"period": 4, "overlap": 1, "compress": "int8"}),
          ("easgd", {"period": 2}), ("easgd", {"period": 4, "overlap": 1, "fragments": 2}),
          ("local-sgd", {"period": 2}), ("local-sgd", {"period": 4, "compress": "int8"}),
          ("diloco", {"period": 2}), ("diloco", {"period": 4, "overlap": 1}),
          ("diloco", {"period": 4, "fragments": 2}), ("diloco", {"period": 2, "outer": "eager"}),
          ("diloco", {"period": 2, "leader": "pull"}),
          ("diloco", {"period": 2, "compress": "topk", "density": 0.1, "error_feedback": True}),
          ("local-sgd", {"period": 2, "compress": "2bit", "overlap": 1}),
          ("sparseloco", {"period": 2}), ("sparseloco", {"period": 4, "overlap": 2}),
          ("demo", {}), ("demo", {"overlap": 1}), ("muloco", {"period": 2}),
          ("allreduce", {}), ("sgd", {}), ("dpsgd", {"topology": "ring"}),
          ("al-dsgd", {"topology": "ring"})]


@pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
@pytest.mark.parametrize("method,knobs", ROUNDS,
                         ids=[f"{m}-{'-'.join(map(str, k.values())) or 'plain'}"
                              for m, k in ROUNDS])
def test_a_causal_mask_trains_with_every_method(method: str, knobs: dict[str, Any],
                                                persistent: bool) -> None:
    results = lsgd.simulate(_train, 4, 2, args=(method, knobs, persistent), seed=0)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    for r in results:
        assert r["finite"] and r["resets"] == 0
        assert torch.equal(r["mask"], mask)  # never averaged into NaN, never reset


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_causal_mask_trains_in_gloo_processes() -> None:
    results = lsgd.launch(_every, 4, 2, args=(True,), timeout=60)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    for per_method in results:
        for r in per_method:
            assert r["finite"] and r["resets"] == 0 and torch.equal(r["mask"], mask)


def _every(info: lsgd.WorkerInfo, persistent: bool) -> list[dict[str, Any]]:
    """Every method and round kind of :data:`ROUNDS` in one launch."""
    return [_train(info, method, knobs, persistent) for method, knobs in ROUNDS
            if method != "allreduce" or persistent]


def test_constants_are_decided_once_and_kept_out_of_the_state() -> None:
    model = Masked(persistent=True)
    assert constant_buffers(model) == {"mask"}
    state = state_tensors(model)
    assert all(t is not model.mask for t in state)
    assert len(state) == 2 + 2 + 2  # lin, norm's weight and bias, its running mean and var
    model.norm.running_var.fill_(float("nan"))  # diverged later: still part of the state
    assert len(state_tensors(model)) == 6
    copy = __import__("copy").deepcopy(model)
    assert constant_buffers(copy) == {"mask"}
