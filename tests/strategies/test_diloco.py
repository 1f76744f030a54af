"""DiLoCo: the rule step by step against a plain reference, its traffic, resume,
diverged workers, its knobs, and a short ``lsgd train`` run."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd.bench.common import train_step
from lsgd import registry
from lsgd.cli import main
from lsgd.train import checkpoint
from lsgd.train.build import knobs_from_config
from lsgd.train.config import make_config
from tests.scenarios import SmallNet, Vector, batches, through_a_checkpoint

WORLD = 4


def _tiny() -> nn.Module:
    """Linear -> BatchNorm -> ReLU -> Linear in float64, the same on every worker."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(),
                         nn.Linear(5, 3)).double()


def _data(rank: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.double(), y) for x, y in batches(rank, steps)]



# -- (1) the rule, against a reference written from the definition ---------------------------
PERIOD, STEPS, LR, OUTER_LR, MU = 3, 10, 0.1, 0.7, 0.9


def _diloco_states(info: lsgd.WorkerInfo) -> dict[str, Any]:
    """Train :func:`_tiny` with plain SGD under DiLoCo; the state after every step."""
    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    strategy = lsgd.DiLoCo(model, opt, period=PERIOD, outer_lr=OUTER_LR, outer_momentum=MU)
    states = []
    for x, y in _data(info.rank, STEPS):
        train_step(model, opt, x, y, strategy)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    return {"states": states, "global": [t.clone() for t in strategy.global_state.views]}


def _reference() -> tuple[list[list[dict[str, torch.Tensor]]], list[torch.Tensor]]:
    """DiLoCo by hand: 4 replicas with their own SGD; every PERIOD steps
    ``Δ = θ_g - mean θ_i``, ``v = μ v + Δ``, ``θ_g -= lr (Δ + μ v)`` (torch's Nesterov
    SGD without dampening or weight decay: b_1 = g_1, b_t = μ b_{t-1} + g_t,
    θ -= lr (g_t + μ b_t)), every replica set to θ_g, the BatchNorm statistics averaged."""
    models = [_tiny() for _ in range(WORLD)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    data = [_data(r, STEPS) for r in range(WORLD)]
    theta = [p.detach().clone() for p in models[0].parameters()]
    velocity = [torch.zeros_like(t) for t in theta]
    states: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(WORLD)]
    for step in range(1, STEPS + 1):
        for r in range(WORLD):
            train_step(models[r], opts[r], *data[r][step - 1])
        if step % PERIOD == 0:
            with torch.no_grad():
                params = [list(m.parameters()) for m in models]
                for i, t in enumerate(theta):
                    delta = t - torch.stack([params[r][i] for r in range(WORLD)]).mean(0)
                    velocity[i] = MU * velocity[i] + delta
                    t -= OUTER_LR * (delta + MU * velocity[i])
                    for r in range(WORLD):
                        params[r][i].copy_(t)
                for name in ("running_mean", "running_var"):
                    buffers = [getattr(m[1], name) for m in models]
                    mean = torch.stack(buffers).mean(0)
                    for b in buffers:
                        b.copy_(mean)
        for r in range(WORLD):
            states[r].append({k: v.clone() for k, v in models[r].state_dict().items()})
    return states, theta


def test_matches_a_reference_written_from_the_definition_step_by_step() -> None:
    results = lsgd.simulate(_diloco_states, WORLD, seed=0)
    expected, theta = _reference()
    for r, res in enumerate(results):
        for step, (got, want) in enumerate(zip(res["states"], expected[r]), start=1):
            for key in want:
                torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-10,
                                           msg=f"rank {r}, step {step}, {key}")
        for got, want in zip(res["global"], theta):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    # The outer step did move the replicas away from plain averaging, and between
    # rounds the replicas differ.
    assert not torch.equal(results[0]["states"][PERIOD]["0.weight"],
                           results[1]["states"][PERIOD]["0.weight"])


def _final_state(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(info.rank)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = lsgd.make_strategy(method, model, opt, **kwargs)
    for x, y in batches(info.rank, 8):
        train_step(strategy.model, opt, x, y, strategy)
    return {"state": {k: v.clone() for k, v in model.state_dict().items()},
            "report": strategy.report(), "control": strategy.traffic("control").bytes_sent}


def test_outer_lr_one_without_momentum_is_local_sgd_and_sends_the_same_bytes() -> None:
    diloco = lsgd.simulate(_final_state, WORLD, args=("diloco", {"period": 2, "outer_lr": 1.0,
                                                                 "outer_momentum": 0.0}))
    local = lsgd.simulate(_final_state, WORLD, args=("local-sgd", {"period": 2}))
    nesterov = lsgd.simulate(_final_state, WORLD, args=("diloco", {"period": 2}))
    # BatchNorm's running statistics are in the state: 2 * 16 floats more than the parameters.
    state_bytes = 4 * sum(v.numel() for k, v in local[0]["state"].items()
                          if not k.endswith("num_batches_tracked"))
    ring = 2 * (WORLD - 1) * state_bytes // WORLD
    for a, b, c in zip(diloco, local, nesterov):
        for key in a["state"]:
            torch.testing.assert_close(a["state"][key], b["state"][key], rtol=0, atol=1e-6)
        # (2) one all-reduce of the state per round and nothing else, as local SGD.
        for res in (a, c):
            assert res["report"].rounds == b["report"].rounds == 4
            assert res["report"].bytes_sent == b["report"].bytes_sent == 4 * ring
            assert res["report"].bytes_received == b["report"].bytes_received
            assert res["report"].comm_calls == b["report"].comm_calls
            assert res["control"] == 0
    assert not torch.allclose(nesterov[0]["state"]["fc1.weight"], local[0]["state"]["fc1.weight"])


# -- (3) resume ---------------------------------------------------------------------------------
def _resume(info: lsgd.WorkerInfo, kwargs: dict[str, Any], stop: int | None) -> dict[str, Any]:
    """Train 8 steps; with ``stop``, rebuild everything at that step from state dicts
    written and read as the trainer's checkpoints are (``weights_only``)."""
    torch.manual_seed(info.rank)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.DiLoCo]:
        model = SmallNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, lsgd.DiLoCo(model, opt, **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, 8)):
        if step == stop:
            model, opt, strategy = through_a_checkpoint(model, opt, strategy, build)
        train_step(strategy.model, opt, x, y, strategy)
    return {"state": model.state_dict(), "stats": strategy.report().as_dict(),
            "global": [b.clone() for b in strategy.global_state.buffers],
            "outer": copy.deepcopy(strategy.outer_optimizers[0].state_dict()["state"])}


@pytest.mark.parametrize("kwargs", [{"period": 3}, {"period": 2, "init": "independent"}])
def test_resuming_from_state_dicts_gives_the_same_run_bit_for_bit(kwargs: dict[str, Any]) -> None:
    straight = lsgd.simulate(_resume, WORLD, args=(kwargs, None), seed=0)
    resumed = lsgd.simulate(_resume, WORLD, args=(kwargs, 5), seed=0)  # after a round, mid-period
    for a, b in zip(straight, resumed):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
        assert all(torch.equal(x, y) for x, y in zip(a["global"], b["global"]))
        momentum = [s["momentum_buffer"] for s in a["outer"].values()]
        assert momentum and all(torch.equal(x, b["outer"][i]["momentum_buffer"])
                                for i, x in enumerate(momentum))
        for key in ("steps", "rounds", "bytes_sent", "bytes_received"):
            assert a["stats"][key] == b["stats"][key], key


# -- (5) diverged workers ------------------------------------------------------------------------
X0 = [[1.0, 8.0], [2.0, 4.0], [3.0, 0.0], [4.0, -4.0]]


def _diverge(info: lsgd.WorkerInfo, nan: dict[int, list[int]], steps: int) -> dict[str, Any]:
    """A float64 vector per worker, no gradient; ``nan[step]``: the ranks whose state
    turns NaN right before that step."""
    model = Vector(X0[info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    strategy = lsgd.DiLoCo(model, opt, period=2, init="independent")
    out: dict[str, Any] = {"x": [], "sent": [], "opt_state": [], "error_step": None}
    for step in range(1, steps + 1):
        if info.rank in nan.get(step, []):
            with torch.no_grad():
                model.w.fill_(math.nan)
        model.w.grad = torch.zeros(2, dtype=torch.float64)
        before = strategy.report().bytes_sent
        try:
            strategy.step(0.0)
        except lsgd.DivergedError:
            out["error_step"] = step
            break
        out["x"].append(model.w.detach().clone())
        out["sent"].append(strategy.report().bytes_sent - before)
        out["opt_state"].append(len(opt.state))
    out["report"] = strategy.report()
    out["global"] = strategy.global_state.views[0].clone()
    return out


def test_a_diverged_worker_is_left_out_of_the_mean_reset_and_counted() -> None:
    results = lsgd.simulate(_diverge, WORLD, args=({2: [1]}, 2), seed=0)
    theta = torch.tensor(X0, dtype=torch.float64).mean(0)  # init="independent": the mean
    healthy = (torch.tensor(X0[0]) + torch.tensor(X0[2]) + torch.tensor(X0[3])).double() / 3
    delta = theta - healthy
    expected = theta - 0.7 * (delta + 0.9 * delta)  # the first outer step: v = Δ
    ring = 2 * 3 * 16 // 4  # a ring all-reduce of the 16-byte state among 4
    for r, res in enumerate(results):
        torch.testing.assert_close(res["x"][1], expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(res["global"], expected, rtol=0, atol=1e-12)
        assert res["report"].resets == (1 if r == 1 else 0)
        assert res["opt_state"][1] == (0 if r == 1 else 1), "the reset clears the optimizer"
        assert res["sent"] == [0, 2 * ring], "the rare path: one more state all-reduce"


def test_every_worker_diverged_raises_everywhere_at_the_same_round() -> None:
    results = lsgd.simulate(_diverge, WORLD, args=({3: [0, 1, 2, 3]}, 4), seed=0)
    assert [res["error_step"] for res in results] == [4] * WORLD


# -- knobs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"period": 0}, "DiLoCo: period must be a positive integer, got 0"),
    ({"outer_lr": 0}, "DiLoCo: outer_lr must be a finite number > 0, got 0"),
    ({"outer_lr": math.nan}, "DiLoCo: outer_lr must be a finite number > 0, got nan"),
    ({"outer_momentum": 1.0}, r"DiLoCo: outer_momentum must be a number in \[0, 1\), got 1.0"),
    ({"outer_momentum": "0.9"}, r"outer_momentum must be a number in \[0, 1\), got '0.9'"),
    ({"init": "zeros"}, "init must be one of 'broadcast', 'independent', got 'zeros'"),
    ({"asynchronous": True}, "asynchronous=True is available for easgd, local-sgd, lsgd only"),
])
def test_bad_knobs_name_the_parameter_and_value(kwargs: dict[str, Any], message: str) -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=message):
        lsgd.make_strategy("diloco", model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


def test_the_trainer_passes_period_and_the_outer_knobs() -> None:
    cfg = make_config({"method": "diloco", "period": 8, "outer_lr": 0.5, "outer_momentum": 0.8})
    knobs = knobs_from_config(cfg)
    assert {k: knobs[k] for k in ("period", "outer_lr", "outer_momentum")} == {
        "period": 8, "outer_lr": 0.5, "outer_momentum": 0.8}
    assert set(knobs) <= set(registry.accepted_knobs("diloco"))
    with pytest.raises(ValueError) as caught:
        make_config({"method": "diloco", "outer_lr": 0.0, "outer_momentum": 1.0})
    assert re.search(r"--outer-lr must be a finite number > 0, got 0.0", str(caught.value))
    assert re.search(r"--outer-momentum must be in \[0, 1\), got 1.0", str(caught.value))


# -- (4) lsgd train ---------------------------------------------------------------------------
def test_lsgd_train_learns_digits_as_well_as_local_sgd(tmp_path: Path) -> None:
    # Measured with these settings (64 steps of 4 threads, period 16, seed 0): test
    # accuracy 98.44% for both diloco and local-sgd (seeds 1-3: diloco 96.2/96.7/95.6%,
    # local-sgd 97.8/97.8/98.0%); chance is 10%.
    out = tmp_path / "run"
    assert main(["train", "--method", "diloco", "--backend", "threads", "--workers", "4",
                 "--dataset", "digits", "--model", "mlp", "--steps", "64", "--period", "16",
                 "--outer-lr", "0.7", "--outer-momentum", "0.9", "--quiet",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "diloco" and summary["rounds"] == 4
    assert summary["test_accuracy"] >= 0.95, summary["test_accuracy"]


def test_lsgd_train_resumes_a_diloco_run_exactly(tmp_path: Path) -> None:
    """Through the trainer's checkpoints (``torch.load(weights_only=True)``): θ_g and
    the outer momentum come back, and the run ends where an uninterrupted one does."""
    common = ["train", "--method", "diloco", "--backend", "threads", "--workers", "4",
              "--dataset", "digits", "--model", "mlp", "--period", "8", "--quiet"]
    assert main([*common, "--steps", "40", "--out", str(tmp_path / "straight")]) == 0
    assert main([*common, "--steps", "17", "--out", str(tmp_path / "resumed")]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--steps", "40", "--quiet"]) == 0
    for a, b in same_diloco_ends(tmp_path / "straight", tmp_path / "resumed", 4):
        assert a["strategy"]["rounds"] == b["strategy"]["rounds"] == 5


def same_diloco_ends(one: Path, other: Path, workers: int) -> list[tuple[Any, Any]]:
    """Every worker's last checkpoint of two DiLoCo runs, asserted equal (model and θ_g);
    the pairs of states."""
    ends = [checkpoint.complete(run)[0] for run in (one, other)]
    pairs = []
    for rank in range(workers):
        a, b = (torch.load(end.file(rank), weights_only=True) for end in ends)
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), key
        assert all(torch.equal(x, y) for x, y in zip(a["strategy"]["global"],
                                                     b["strategy"]["global"]))
        pairs.append((a, b))
    return pairs


def test_a_state_of_another_shape_is_refused_naming_why() -> None:
    comm = lsgd.comm.LocalCommunicator()
    bn = _tiny()
    strategy = lsgd.DiLoCo(bn, torch.optim.SGD(bn.parameters(), lr=0.1), comm=comm)
    state = strategy.state_dict()
    parameters = sum(p.numel() for p in bn.parameters())
    state["global"] = [state["global"][0][:parameters]]  # the parameters only
    with pytest.raises(ValueError, match="saved global parameters have other shapes"):
        strategy.load_state_dict(state)
