"""LSGD's early valley (``pull_decay_rounds=R``): each level's round ``r`` pulls
``pull + (1 - pull) max(0, 1 - r/R)``, checked against references written from the rule
(docs/algorithms.md, "The early valley: a round pull that decays from 1") in the
simulator and in gloo processes; the counts across a checkpoint; bad values.

The exact cases reuse the hidden-round reference of ``tests/cases_hidden.py`` (plain
floats, the rule step by step) with its ``decay`` argument; R = 2 and pulls 0.5 and
0.25 keep every value a short binary fraction, so the comparisons are exact."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd.strategies.pull_decay import copied_share
from lsgd.train.build import knobs_from_config
from lsgd.train.config import TrainConfig
from tests import scenarios
from tests.cases_hidden import GROUPS, SINGLE, check, spec
from tests.scenarios import SmallNet, batches

R = 2
# name: (world, groups, spec, check): single and multi-leader, blocking and hidden
CASES = {
    "single_blocking": (4, 1, spec(dict(pull=0.5, period=2, pull_decay_rounds=R)),
                        check([(2, SINGLE, 0.5)], 1, 0, "round", R)),
    "single_hidden": (4, 1, spec(dict(pull=0.5, period=4, overlap=2, pull_decay_rounds=R)),
                      check([(4, SINGLE, 0.5)], 1, 2, "early", R)),
    # parts of round r land after round r + 1's election (3 > 4 / 2): still round r's pull
    "single_fragments": (4, 1, spec(dict(pull=0.5, period=4, overlap=3, fragments=2,
                                         pull_decay_rounds=R)),
                         check([(4, SINGLE, 0.5)], 2, 3, "early", R)),
    "multi_blocking": (4, 2, spec(dict(pull=0.5, pull_global=0.25, period=2, global_period=4,
                                       pull_decay_rounds=R)),
                       check([(2, GROUPS, 0.5), (4, SINGLE, 0.25)], 1, 0, "round", R)),
    "multi_fragments": (4, 2, spec(dict(pull=0.5, pull_global=0.25, period=2, global_period=4,
                                        overlap=1, fragments=2, pull_decay_rounds=R)),
                        check([(2, GROUPS, 0.5), (4, SINGLE, 0.25)], 2, 1, "early", R)),
}
MU, PULL = 0.5, 0.25
MOMENTUM = {"method": "lsgd", "x0": [[0.0], [10.0], [10.0], [10.0]],
            "losses": [[1.0, 2.0, 3.0, 4.0]] * 5, "grads": [[0.0], [-1.0], [-1.0], [-1.0]],
            "lr": 0.5,
            "kwargs": {"scope": 0.0, "period": 1, "pull": PULL, "leader_momentum": MU,
                       "pull_decay_rounds": 3}}


def _momentum_reference() -> list[float]:
    """Workers 1-3 (worker 0 leads at 0): each round copies c_r of the way, then the
    Nesterov step with the plain pull."""
    x, v, out = 10.0, 0.0, []
    for r in range(5):
        x += 0.5  # lr 0.5, gradient -1
        c = max(0.0, 1 - r / 3)
        x = x + c * (0.0 - x)
        d = x - 0.0
        v = MU * v + d
        x = x - PULL * (d + MU * v)
        out.append(x)
    return out


def test_the_reference_decays_from_a_copy_to_the_pull() -> None:
    """The reference itself: round 0 a copy (1), round 1 half way between, then 0.5."""
    assert [0.5 + 0.5 * copied_share(r, R) for r in range(4)] == [1.0, 0.75, 0.5, 0.5]
    assert copied_share(5, 0) == 0.0 and copied_share(None, 3) == 0.0
    assert _momentum_reference()[0] == 0.0, "round 0 leaves worker 1 on the leader"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_level_pulls_by_its_own_round_count_simulated(name: str) -> None:
    world, groups, case, verify = CASES[name]
    verify(lsgd.simulate(scenarios.scripted, world, groups, args=(case,), seed=0))


def test_the_constant_pull_does_not_pass_the_decayed_reference() -> None:
    """The cases can fail: without the decay the states differ from the reference."""
    world, groups, case, verify = CASES["multi_fragments"]
    plain = {**case, "kwargs": {k: v for k, v in case["kwargs"].items()
                                if k != "pull_decay_rounds"}}
    with pytest.raises(AssertionError):
        verify(lsgd.simulate(scenarios.scripted, world, groups, args=(plain,), seed=0))


def test_with_leader_momentum_the_decayed_share_is_a_copy_before_the_nesterov_step() -> None:
    runs = lsgd.simulate(scenarios.scripted, 4, args=(MOMENTUM,), seed=0)
    _check_momentum(runs)


def _check_momentum(runs: list[dict[str, Any]]) -> None:
    for run in runs[1:]:
        assert [row[0] for row in run["x"]] == pytest.approx(_momentum_reference(), abs=1e-12)
    assert [row[0] for row in runs[0]["x"]] == [0.0] * 5, "the leader stays"


@functools.cache
def _launched(world: int, groups: int) -> list[dict[str, Any]]:
    specs = {name: ("scripted", case) for name, (w, g, case, _) in CASES.items()
             if (w, g) == (world, groups)}
    if (world, groups) == (4, 1):
        specs["momentum"] = ("scripted", MOMENTUM)
    return lsgd.launch(scenarios.bundle, world, groups, args=(specs,), timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_level_pulls_by_its_own_round_count_under_gloo(name: str) -> None:
    world, groups, _, verify = CASES[name]
    verify([r[name] for r in _launched(world, groups)])


@pytest.mark.slow  # four gloo processes, beside the other multi-process checks
@pytest.mark.timeout(240)
def test_with_leader_momentum_under_gloo() -> None:
    _check_momentum([r["momentum"] for r in _launched(4, 1)])


def _asynchronous(info: lsgd.WorkerInfo, decay: int) -> tuple[float, int]:
    """Worker r at x = r, loss r + 1 (worker 0 leads), no gradient step; rounds every
    2 steps of each worker on the shared count, until 16 steps in all (a sync point)."""
    model = scenarios.Vector([float(info.rank)])
    strategy = lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.0), scope=0.0,
                         period=2, pull=0.5, init="independent", asynchronous=True,
                         pull_decay_rounds=decay)
    while True:
        strategy.step(float(info.rank + 1))
        if strategy.should_stop(strategy.total_steps >= 16):
            return float(model.w.detach()[0]), strategy.rounds


def test_asynchronous_rounds_decay_too() -> None:
    """Asynchronous rounds count alike on every worker: the first one is a copy."""
    copied = lsgd.simulate(_asynchronous, 4, args=(3,), seed=0)
    plain = lsgd.simulate(_asynchronous, 4, args=(0,), seed=0)
    assert all(rounds >= 1 for _, rounds in copied)
    assert [x for x, _ in copied] == [0.0] * 4, "every worker on the leader"
    assert all(x > 0 for x, _ in plain[1:]), "the constant pull: half way per round"


# -- the counts across a checkpoint ------------------------------------------------------
KNOBS = [{"period": 2, "pull_decay_rounds": 5},
         # after step 7: round 1's second part in flight, with its r; two levels
         {"period": 4, "overlap": 2, "fragments": 2, "pull_decay_rounds": 4,
          "leader_momentum": 0.5},
         {"period": 2, "global_period": 4, "overlap": 1, "pull_decay_rounds": 4}]


def _interrupted(info: lsgd.WorkerInfo, kwargs: dict[str, Any], cut: int | None,
                 forget: bool) -> list[torch.Tensor]:
    """14 steps; with ``cut``, rebuilt from state dicts after step ``cut`` (``forget``:
    with the levels' round counts and the in-flight rounds' r dropped)."""
    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
        torch.manual_seed(0)
        model = SmallNet(batchnorm=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, lsgd.LSGD(model, opt, **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, 14), start=1):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
        if step == cut:
            saved = (model.state_dict(), opt.state_dict(), strategy.state_dict())
            if forget:
                for level in saved[2]["levels"].values():
                    level["rounds"] = 0
                for item in saved[2]["in_flight"]:
                    item["info"].pop("round", None)
            model, opt, strategy = build()
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
            strategy.load_state_dict(saved[2])
    strategy.settle()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kwargs", KNOBS, ids=["blocking", "fragments", "two-levels"])
def test_a_resumed_run_counts_on_as_the_uninterrupted_one(kwargs: dict[str, Any]) -> None:
    groups = 2 if "global_period" in kwargs else 1
    run = functools.partial(lsgd.simulate, _interrupted, 4, groups, seed=0)
    whole = run(args=(kwargs, None, False))
    resumed = run(args=(kwargs, 7, False))
    forgot = run(args=(kwargs, 7, True))
    for a, b in zip(whole, resumed):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    assert any(not torch.equal(x, y) for a, b in zip(whole, forgot) for x, y in zip(a, b)), \
        "the counts matter: a run that forgot them pulls otherwise"


# -- off by default, and bad values ------------------------------------------------------
def test_zero_is_the_constant_pull_bit_for_bit() -> None:
    spec_ = {"method": "lsgd", "steps": 8, "dropout": 0.0}
    for extra in ({}, {"overlap": 1, "fragments": 2}):
        kwargs = {"period": 2, **extra}
        plain = lsgd.simulate(scenarios.train_small, 4, args=({**spec_, "kwargs": kwargs},))
        zero = lsgd.simulate(scenarios.train_small, 4, args=(
            {**spec_, "kwargs": {**kwargs, "pull_decay_rounds": 0}},))
        decayed = lsgd.simulate(scenarios.train_small, 4, args=(
            {**spec_, "kwargs": {**kwargs, "pull_decay_rounds": 2}},))
        for a, b in zip(plain, zero):
            for key in a["state"]:
                assert torch.equal(a["state"][key], b["state"][key]), key
        assert not torch.equal(decayed[3]["state"]["fc1.weight"],
                               plain[3]["state"]["fc1.weight"])


@pytest.mark.parametrize("value", [-1, 2.5, 3.0, "3", True, None, math.nan])
def test_a_bad_pull_decay_rounds_is_refused_naming_it(value: Any) -> None:
    model = scenarios.Vector([0.0])
    with pytest.raises(ValueError, match=r"pull_decay_rounds must be a whole number of "
                                         r"rounds >= 0.*got " + repr(value).replace(".", r"\.")):
        lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.1),
                  pull_decay_rounds=value, comm=lsgd.get_communicator())


def test_lsgd_train_passes_the_flag_to_the_strategy() -> None:
    assert knobs_from_config(TrainConfig.of(pull_decay_rounds=7))["pull_decay_rounds"] == 7
    assert TrainConfig().options.pull_decay_rounds == 0
