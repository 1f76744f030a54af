"""BatchNorm statistics at a round (bn_buffers), Algorithm 1's every-step pull,
and LSGD's leader momentum: each checked against numbers from its definition."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import lsgd
from lsgd.comm.simulator import SimulationError
from lsgd.functional import ring_allreduce_bytes
from lsgd.strategies.buffers import BufferAverage
from tests import scenarios
from tests.scenarios import SmallNet


# -- bn_buffers ---------------------------------------------------------------

CLASSES = {**scenarios.METHODS, "diloco": lsgd.DiLoCo}

def _one_round(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any],
               nan_rank: int | None = None) -> dict[str, Any]:
    """One round (period 1, lr 0) after setting worker r's running mean to r."""
    torch.manual_seed(info.rank)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    strategy = CLASSES[method](model, opt, period=1, init="independent", **kwargs)
    model.bn.running_mean.fill_(math.nan if info.rank == nan_rank else float(info.rank))
    model.bn.num_batches_tracked.fill_(10 + info.rank)
    weight = model.fc1.weight.detach().clone()
    strategy.step(float(info.rank))  # the loss: worker 0 leads
    return {"mean": model.bn.running_mean.clone(), "count": int(model.bn.num_batches_tracked),
            "weight_before": weight, "weight": model.fc1.weight.detach().clone(),
            "stats": strategy.report().as_dict(), "mode": strategy.bn_buffers}


@pytest.mark.parametrize("method", ["lsgd", "easgd"])
def test_average_mode_averages_the_statistics_and_leaves_the_parameters_to_the_rule(
        method: str) -> None:
    kwargs = {"scope": 0.0, "pull": 0.5} if method == "lsgd" else {}
    runs = lsgd.simulate(_one_round, 4, args=(method, kwargs))
    local = lsgd.simulate(_one_round, 4, args=(method, {**kwargs, "bn_buffers": "local"}))
    leader_weight = runs[0]["weight_before"]
    for rank, (run, alone) in enumerate(zip(runs, local)):
        assert run["mode"] == "average", "average is the default"
        assert torch.equal(run["mean"], torch.full((16,), 1.5))
        assert torch.equal(alone["mean"], torch.full((16,), float(rank)))
        assert run["count"] == 10 + rank, "integer buffers stay local"
        assert torch.equal(run["weight"], alone["weight"]), "parameters move by the rule only"
        # The buffers' all-reduce: 16 + 16 float32 statistics and one count slot.
        extra = run["stats"]["bytes_sent"] - alone["stats"]["bytes_sent"]
        assert extra == ring_allreduce_bytes(33 * 4, 4)
    if method == "lsgd":  # half way to worker 0, the leader
        expected = runs[3]["weight_before"] + 0.5 * (leader_weight - runs[3]["weight_before"])
        assert torch.allclose(runs[3]["weight"], expected, atol=1e-7)


def test_pull_mode_pulls_the_statistics_toward_the_leader() -> None:
    runs = lsgd.simulate(_one_round, 4, args=("lsgd", {"scope": 0.0, "pull": 0.5,
                                                        "bn_buffers": "pull"}))
    for rank, run in enumerate(runs):
        assert torch.equal(run["mean"], torch.full((16,), rank / 2))


def test_a_non_finite_worker_is_left_out_of_the_average_and_receives_it() -> None:
    runs = lsgd.simulate(_one_round, 4, args=("lsgd", {"scope": 0.0}, 1))
    for run in runs:
        assert torch.allclose(run["mean"], torch.full((16,), (0 + 2 + 3) / 3))


def test_buffer_average_keeps_its_own_buffers_when_no_member_is_healthy() -> None:
    def worker(info: lsgd.WorkerInfo) -> tuple[int, list[float]]:
        tensors = [torch.full((3,), math.nan), torch.zeros(2, dtype=torch.float64)]
        count = BufferAverage(tensors)(lsgd.get_communicator())
        return count, tensors[1].tolist()
    for count, kept in lsgd.simulate(worker, 3):
        assert count == 0 and kept == [0.0, 0.0]


def test_local_sgd_and_diloco_average_the_statistics_in_their_round() -> None:
    for method in ("local-sgd", "diloco"):
        kwargs = {"outer_lr": 1.0, "outer_momentum": 0.0} if method == "diloco" else {}
        runs = lsgd.simulate(_one_round, 4, args=(method, kwargs))
        for run in runs:
            assert run["mode"] == "average"
            assert torch.equal(run["mean"], torch.full((16,), 1.5))


@pytest.mark.parametrize("cls,kwargs,message", [
    (lsgd.DPSGD, {"bn_buffers": "average", "topology": "ring"}, "choose one of pull, local"),
    (lsgd.LocalSGD, {"bn_buffers": "pull"}, "choose one of average, local"),
    (lsgd.AllReduce, {"bn_buffers": "average"}, "choose one of broadcast, local"),
    (lsgd.LSGD, {"bn_buffers": "mean"}, "is not a mode"),
])
def test_a_mode_the_method_does_not_have_is_refused(cls: type, kwargs: dict[str, Any],
                                                   message: str) -> None:
    def worker(info: lsgd.WorkerInfo) -> None:
        model = SmallNet()
        cls(model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
    with pytest.raises(SimulationError, match=f"ValueError.*{message}"):
        lsgd.simulate(worker, 2)


def test_resuming_with_another_mode_is_refused() -> None:
    def worker(info: lsgd.WorkerInfo) -> None:
        model = SmallNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        saved = lsgd.LSGD(model, opt, bn_buffers="pull").state_dict()
        lsgd.LSGD(model, opt).load_state_dict(saved)
    with pytest.raises(SimulationError, match="saved with bn_buffers='pull'.*resume with the same mode"):
        lsgd.simulate(worker, 2)


def test_a_state_saved_before_the_modes_asks_for_pull() -> None:
    def worker(info: lsgd.WorkerInfo) -> None:
        model = SmallNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        saved = lsgd.LSGD(model, opt, bn_buffers="pull").state_dict()
        del saved["bn_buffers"]
        lsgd.LSGD(model, opt, bn_buffers="pull").load_state_dict(saved)  # fine
        lsgd.LSGD(model, opt).load_state_dict(saved)
    with pytest.raises(SimulationError, match="before bn_buffers existed.*bn_buffers='pull'"):
        lsgd.simulate(worker, 2)


def test_a_removed_keyword_is_refused_naming_what_to_write() -> None:
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="lsgd: unknown keyword argument.*sync_buffers=False is "
                                        "bn_buffers='local'"):
        lsgd.LSGD(model, opt, sync_buffers=False, comm=lsgd.get_communicator())
    with pytest.raises(TypeError, match=r"diloco: unknown keyword argument\(s\) perod$"):
        lsgd.DiLoCo(model, opt, perod=3, comm=lsgd.get_communicator())
    diloco = lsgd.DiLoCo(model, opt, comm=lsgd.get_communicator())
    state = diloco.state_dict()
    state["outer"] = state.pop("outer_parts")[0]  # lsgd 0.6's key
    with pytest.raises(ValueError, match="saved by lsgd 0.6 or earlier; resume it with lsgd "
                                         "0.10 and save it again"):
        diloco.load_state_dict(state)


def test_a_global_knob_with_one_group_is_refused_naming_the_plain_one() -> None:
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="single leader, set by pull, scope and period; got "
                                         "global_period=8: pass the plain knobs"):
        lsgd.LSGD(model, opt, global_period=8, comm=lsgd.get_communicator())


# -- Algorithm 1's every-step pull ------------------------------------------------

LR, SCOPE, PERIOD, PULL = 0.5, 0.2, 2, 0.5
X0, GRADS, STEPS = [[0.0], [4.0], [-3.0]], [[1.0], [-2.0], [0.5]], 7
LOSSES = [[1.0, 2.0, 3.0]] * STEPS  # worker 0 always leads


def _reference(form: str) -> list[list[float]]:
    """Every worker's x after each step, from the definition (plain SGD, constant g)."""
    x = [row[0] for row in X0]
    g = [row[0] for row in GRADS]
    weight = SCOPE / PERIOD
    leader_x: float | None = None
    trace = []
    for step in range(1, STEPS + 1):
        pre, target = list(x), leader_x
        x = [xi - LR * gi for xi, gi in zip(x, g)]
        if step == 1:  # the initial election: a target, no pull
            leader_x = x[0]
        if form == "algorithm-1" and target is not None:  # at the pre-step point, leader too
            x = [xi - weight * (pi - target) for xi, pi in zip(x, pre)]
        elif form == "after-step" and leader_x is not None:  # after the step, leader exempt
            x = [xi if r == 0 else xi - weight * (xi - leader_x) for r, xi in enumerate(x)]
        if step % PERIOD == 0:  # a round: elect, broadcast, pull
            leader_x = x[0]
            x = [xi if r == 0 else xi - PULL * (xi - leader_x) for r, xi in enumerate(x)]
        trace.append(list(x))
    return trace


@pytest.mark.parametrize("form", ["after-step", "algorithm-1"])
def test_the_every_step_pull_matches_its_definition(form: str) -> None:
    spec = {"method": "lsgd", "x0": X0, "grads": GRADS, "lr": LR, "losses": LOSSES,
            "kwargs": {"scope": SCOPE, "period": PERIOD, "pull": PULL, "scope_pull": form}}
    runs = lsgd.simulate(scenarios.scripted, 3, args=(spec,))
    expected = _reference(form)
    for rank, run in enumerate(runs):
        got = [x[0] for x in run["x"]]
        assert got == pytest.approx([row[rank] for row in expected], abs=1e-12), rank
    # The two forms differ: by the leader's own pull, and by (scope/period) lr g elsewhere.
    other = _reference("after-step" if form == "algorithm-1" else "algorithm-1")
    assert other[-1][0] != pytest.approx(expected[-1][0], abs=1e-6)


def test_the_algorithm_1_form_sends_nothing_more() -> None:
    base = {"method": "lsgd", "x0": X0, "grads": GRADS, "lr": LR, "losses": LOSSES}
    sent = []
    for form in ("after-step", "algorithm-1"):
        spec = {**base, "kwargs": {"scope": SCOPE, "period": PERIOD, "scope_pull": form}}
        sent.append([r["stats"]["bytes_sent"] for r in lsgd.simulate(scenarios.scripted, 3,
                                                                     args=(spec,))])
    assert sent[0] == sent[1]


# -- leader momentum ----------------------------------------------------------------

def test_leader_momentum_is_a_nesterov_step_toward_the_leader() -> None:
    spec = {"method": "lsgd", "x0": [[0.0], [10.0]], "losses": [[1.0, 2.0]] * 3,
            "kwargs": {"scope": 0.0, "period": 1, "pull": 0.1, "leader_momentum": 0.9}}
    runs = lsgd.simulate(scenarios.scripted, 2, args=(spec,))
    x, v, expected = 10.0, 0.0, []
    for _ in range(3):
        d = x - 0.0
        v = 0.9 * v + d
        x = x - 0.1 * (d + 0.9 * v)
        expected.append(x)
    assert [row[0] for row in runs[1]["x"]] == pytest.approx(expected, abs=1e-12)
    assert expected[:2] == pytest.approx([8.1, 5.751])
    assert [row[0] for row in runs[0]["x"]] == [0.0, 0.0, 0.0], "the leader stays"


def test_zero_leader_momentum_is_lsgd_bit_for_bit() -> None:
    spec = {"method": "lsgd", "steps": 8, "dropout": 0.0}
    plain = lsgd.simulate(scenarios.train_small, 4, args=({**spec, "kwargs": {"period": 2}},))
    zero = lsgd.simulate(scenarios.train_small, 4, args=(
        {**spec, "kwargs": {"period": 2, "leader_momentum": 0.0}},))
    moved = lsgd.simulate(scenarios.train_small, 4, args=(
        {**spec, "kwargs": {"period": 2, "leader_momentum": 0.9}},))
    for a, b in zip(plain, zero):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
    assert not torch.equal(moved[3]["state"]["fc1.weight"], plain[3]["state"]["fc1.weight"])


@pytest.mark.parametrize("value", [1.0, -0.1, math.nan, "0.5"])
def test_a_bad_leader_momentum_is_refused(value: Any) -> None:
    model = scenarios.Vector([0.0])
    with pytest.raises(ValueError, match="leader_momentum must be a number in"):
        lsgd.LSGD(model, torch.optim.SGD(model.parameters(), lr=0.1), leader_momentum=value,
                  comm=lsgd.get_communicator())
