"""The loop API cannot be misused silently: one optimizer step per strategy.step, and
AllReduce's forward through strategy.model, identically under both backends."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd


def _setup(method: str) -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, lsgd.make_strategy(method, model, opt)


def _loss(module: nn.Module) -> torch.Tensor:
    return F.mse_loss(module(torch.ones(4, 3)), torch.zeros(4, 2))


@pytest.mark.parametrize("method", ["lsgd", "allreduce", "easgd"])
def test_calling_the_optimizer_step_yourself_is_an_error(method: str) -> None:
    model, opt, strategy = _setup(method)
    loss = _loss(strategy.model)
    loss.backward()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match=r"call strategy\.step\(loss\) instead"):
        opt.step()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), "no step was taken"
    strategy.step(loss)  # the strategy's own step goes through, once
    assert strategy.steps == 1
    assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def _bare_forward(info: lsgd.WorkerInfo, through_strategy: bool) -> str:
    model, opt, strategy = _setup("allreduce")
    loss = _loss(strategy.model if through_strategy else model)
    opt.zero_grad()
    loss.backward()
    try:
        strategy.step(loss)
    except RuntimeError as error:
        return str(error)
    return f"stepped {strategy.steps}"


EXPECTED = r"did not go through strategy\.model, so the gradients were not averaged"


def test_allreduce_forward_through_the_bare_model_is_detected_in_the_simulator() -> None:
    assert lsgd.simulate(_bare_forward, 2, args=(True,)) == ["stepped 1"] * 2
    for message in lsgd.simulate(_bare_forward, 2, args=(False,)):
        assert re.search(EXPECTED, message), message


@pytest.mark.timeout(180)
def test_allreduce_forward_through_the_bare_model_is_detected_under_gloo() -> None:
    assert lsgd.launch(_bare_forward, 2, args=(True,), timeout=60) == ["stepped 1"] * 2
    for message in lsgd.launch(_bare_forward, 2, args=(False,), timeout=60):
        assert re.search(EXPECTED, message), message
