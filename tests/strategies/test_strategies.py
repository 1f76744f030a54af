"""Strategy behaviour beyond the single rules: equivalences, resume, buffers, errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from tests import scenarios
from tests.scenarios import METHODS, SmallNet, batches


def _final(spec: dict[str, Any], world: int = 4, groups: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    return lsgd.simulate(scenarios.train_small, world, groups, args=(spec,), seed=seed)


def test_lsgd_without_pulls_is_independent_sgd_bit_for_bit() -> None:
    base = {"steps": 8, "dropout": 0.3}
    # (bn_buffers="pull": the pulls of zero leave the statistics alone too; the
    # default "average" would average them at every round.)
    lsgd_run = _final({**base, "method": "lsgd", "kwargs": {"pull": 0.0, "scope": 0.0, "period": 2,
                                                             "bn_buffers": "pull"}})
    sgd_run = _final({**base, "method": "sgd"})
    for a, b in zip(lsgd_run, sgd_run):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
    # ...while the pulls do change the result.
    pulled = _final({**base, "method": "lsgd", "kwargs": {"pull": 0.5, "scope": 0.1, "period": 2}})
    assert not torch.equal(pulled[1]["state"]["fc1.weight"], sgd_run[1]["state"]["fc1.weight"])


@pytest.mark.parametrize("method", sorted(METHODS))
def test_simulated_runs_are_reproducible_with_dropout(method: str) -> None:
    spec = {"method": method, "steps": 6, "dropout": 0.5, "kwargs": {}, "reseed": False}
    first, second = _final(spec, groups=2, seed=5), _final(spec, groups=2, seed=5)
    for a, b in zip(first, second):
        assert a["losses"] == b["losses"]
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
    other = _final(spec, groups=2, seed=6)
    assert other[0]["losses"] != first[0]["losses"], "the seed must matter"


def _resume(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], stop: int | None) -> dict:
    """Train 8 steps; with ``stop``, rebuild everything from state dicts at that step."""
    torch.manual_seed(info.rank)
    data = batches(info.rank, 8)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
        model = SmallNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, METHODS[method](model, opt, **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(data):
        if step == stop:
            saved = [model.state_dict(), opt.state_dict(), strategy.state_dict()]
            saved = [{k: v for k, v in s.items()} for s in saved]
            model, opt, strategy = build()
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
            strategy.load_state_dict(saved[2])
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    return {"state": model.state_dict(), "stats": strategy.report().as_dict()}


@pytest.mark.parametrize(
    "method,kwargs",
    [
        ("lsgd", {"period": 2, "global_period": 4, "scope": 0.2, "pull": 0.3, "init": "independent"}),
        ("lsgd", {"period": 2, "scope": 0.2, "leader_momentum": 0.5, "scope_pull": "algorithm-1",
                  "init": "independent"}),
        ("easgd", {"period": 3, "init": "independent"}),
        ("local-sgd", {"period": 3, "hierarchical": True, "global_period": 6}),
    ],
)
def test_resuming_from_state_dicts_gives_the_same_run(method: str, kwargs: dict[str, Any]) -> None:
    straight = lsgd.simulate(_resume, 4, 2, args=(method, kwargs, None), seed=0)
    resumed = lsgd.simulate(_resume, 4, 2, args=(method, kwargs, 3), seed=0)
    for a, b in zip(straight, resumed):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
        for key in ("steps", "rounds", "bytes_sent", "bytes_received"):
            assert a["stats"][key] == b["stats"][key], key


def _buffers_after_average(info: lsgd.WorkerInfo, bn_buffers: str) -> dict[str, Any]:
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    strategy = lsgd.LocalSGD(model, opt, period=1, bn_buffers=bn_buffers, init="independent")
    model.bn.running_mean.fill_(float(info.rank))
    model.bn.num_batches_tracked.fill_(10 + info.rank)
    strategy.step()
    return {"mean": model.bn.running_mean.clone(), "count": int(model.bn.num_batches_tracked),
            "center": strategy.center().bn.running_mean.clone()}


def test_float_buffers_follow_the_average_and_integer_buffers_stay_local() -> None:
    synced = lsgd.simulate(_buffers_after_average, 4, args=("average",))
    local = lsgd.simulate(_buffers_after_average, 4, args=("local",))
    for rank in range(4):
        assert torch.equal(synced[rank]["mean"], torch.full((16,), 1.5))
        assert torch.equal(local[rank]["mean"], torch.full((16,), float(rank)))
        assert synced[rank]["count"] == local[rank]["count"] == 10 + rank
        # The center always averages floating buffers, for evaluation.
        assert torch.equal(local[rank]["center"], torch.full((16,), 1.5))


def _center(info: lsgd.WorkerInfo) -> dict[str, Any]:
    model = scenarios.Vector([float(info.rank), 2.0 * info.rank])
    strategy = lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.0), init="independent")
    center = strategy.center()
    return {"center": center.w.tolist(), "mine": model.w.tolist(), "stats": strategy.report().as_dict()}


def test_center_is_the_average_and_counts_as_evaluation_traffic() -> None:
    for rank, r in enumerate(lsgd.simulate(_center, 4)):
        assert r["center"] == [1.5, 3.0]
        assert r["mine"] == [float(rank), 2.0 * rank], "center() must not change the worker"
        assert r["stats"]["bytes_sent"] == 0
        assert r["stats"]["eval_bytes_sent"] == 2 * 3 * 16 // 4


def _eval_metric(info: lsgd.WorkerInfo) -> int | None:
    # Worker r predicts logits (r - 1.5)^2 away from the truth: rank 1 and 2 tie, rank 1 wins.
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2) * (1.0 + (info.rank - 1.5) ** 2))
    batch = (torch.tensor([[0.0, 1.0]]), torch.tensor([0]))
    strategy = lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.0), period=1, scope=0.0,
                         leader_metric="eval", eval_batch=batch, init="independent")
    strategy.step()
    return strategy.leader_rank


def test_eval_metric_scores_the_held_out_batch() -> None:
    # Loss on target 0 with logits [0, w] grows with w; ranks 1 and 2 have the smallest w.
    assert lsgd.simulate(_eval_metric, 4) == [1] * 4


def _leaders(info: lsgd.WorkerInfo) -> list[tuple[int, str, int]]:
    torch.manual_seed(info.rank)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    strategy = lsgd.LSGD(model, opt, period=2, global_period=4, init="independent")
    for x, y in batches(info.rank, 12):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    return strategy.leader_history


def test_multi_leader_elects_local_leaders_inside_each_group() -> None:
    histories = lsgd.simulate(_leaders, 6, groups=3)
    for rank, history in enumerate(histories):
        group = set(range(rank // 2 * 2, rank // 2 * 2 + 2))
        local = [leader for _, level, leader in history if level == "local"]
        global_ = [(step, leader) for step, level, leader in history if level == "global"]
        assert len(local) == 1 + 6 and set(local) <= group  # initial election + 6 rounds
        assert [s for s, _ in global_] == [1, 4, 8, 12]
        assert global_ == [(s, l) for s, lv, l in histories[0] if lv == "global"], "one global leader"


def _small_strategy(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any]) -> None:
    model = nn.Linear(2, 2)
    METHODS[method](model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


@pytest.mark.parametrize(
    "method,kwargs,message",
    [
        ("lsgd", {"pull": 1.5}, r"LSGD: pull must be a number in \[0, 1\], got 1.5"),
        ("lsgd", {"scope": -0.1}, r"scope must be a number in \[0, 1\], got -0.1"),
        ("lsgd", {"period": 0}, "period must be a positive integer, got 0"),
        ("lsgd", {"period": 2.5}, "period must be a positive integer, got 2.5"),
        ("lsgd", {"period": 4, "global_period": 6}, "global_period must be a multiple of period=4"),
        ("lsgd", {"leader_window": 0}, "leader_window must be a positive integer, got 0"),
        ("lsgd", {"leader_metric": "acc"}, "leader_metric must be one of 'train', 'eval', got 'acc'"),
        ("lsgd", {"leader_metric": "eval"}, "needs eval_batch"),
        ("lsgd", {"init": "zeros"}, "init must be one of 'broadcast', 'independent', got 'zeros'"),
        ("easgd", {"moving_rate": 2}, r"EASGD: moving_rate must be a number in \[0, 1\], got 2"),
        ("easgd", {"period": -1}, "EASGD: period must be a positive integer, got -1"),
        ("local-sgd", {"period": 2, "hierarchical": True, "global_period": 3},
         "global_period must be a multiple of period=2"),
    ],
)
def test_bad_hyperparameters_name_the_parameter_and_value(
    method: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(lsgd.SimulationError) as caught:
        lsgd.simulate(_small_strategy, 4, groups=2, args=(method, kwargs))
    assert isinstance(caught.value.__cause__, ValueError)
    assert re.search(message, str(caught.value.__cause__)), str(caught.value.__cause__)


def test_single_leader_is_set_by_the_plain_knobs_only() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    (level,) = lsgd.LSGD(model, opt, pull=0.3, period=8).levels
    assert (level.pull, level.period) == (0.3, 8)
    with pytest.raises(ValueError, match="got pull_global=0.3: pass the plain knobs"):
        lsgd.LSGD(model, opt, pull=0.3, pull_global=0.3)  # even when equal


def test_step_without_a_loss_is_explained() -> None:
    model = nn.Linear(2, 2)
    strategy = lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=r"needs the training loss \(strategy.step\(loss\)\)"):
        strategy.step()
