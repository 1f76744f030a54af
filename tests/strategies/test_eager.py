"""DiLoCo with eager outer steps (``outer="eager"``): every worker's θ_g^m against a
plain-torch reference of the rule (simulator and gloo processes), fragments, the
standard form unchanged, resume with a transfer in flight, diverged workers, bad input."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import lsgd
from lsgd.bench.common import train_step
from lsgd.cli import main
from lsgd.train.build import knobs_from_config
from lsgd.train.config import make_config
from tests.scenarios import SmallNet, Vector, batches, through_a_checkpoint

WORLD, PERIOD, LR, OUTER_LR, MU = 4, 3, 0.1, 0.7, 0.9
STEPS = 3 * PERIOD + 1  # three rounds, and a step after the third


def _net() -> nn.Module:
    """Linear -> ReLU -> Linear in float64, the same on every worker."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).double()


def _data(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.double(), y) for x, y in batches(rank, STEPS)]



def eager_run(info: lsgd.WorkerInfo, fragments: int) -> dict[str, Any]:
    """:func:`_net` with plain SGD under eager DiLoCo: x and θ_g^m after every step."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    strategy = lsgd.DiLoCo(model, opt, period=PERIOD, outer_lr=OUTER_LR, outer_momentum=MU,
                           fragments=fragments, outer="eager")
    xs, thetas = [], []
    for x, y in _data(info.rank):
        train_step(model, opt, x, y, strategy)
        xs.append(parameters_to_vector(model.parameters()).detach().clone())
        thetas.append(strategy.global_state.buffers[0].clone())
    strategy.settle()
    return {"x": xs, "theta": thetas, "rounds": strategy.report().rounds}


def _reference(world: int, fragments: int) -> tuple[list[list[torch.Tensor]],
                                                   list[list[torch.Tensor]]]:
    """The eager rule by hand on flat parameter vectors: part f of the vector (f of
    ``fragments`` equal slices) has its round at the steps s with s mod H = (f+1) H / F
    mod H; there, with the mean of the part's previous round landed as Δ̄,

        Δ = θ_g^m - x^m,  all-reduce Δ (lands at the part's next round),
        g = Δ̄ + (Δ - Δ_prev^m) / M,  Δ_prev^m = Δ,
        v = μ v + g (v = g the first time),  θ_g^m -= lr_out (g + μ v),  x^m = θ_g^m.
    """
    models = [_net() for _ in range(world)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    data = [_data(r) for r in range(world)]
    n = sum(p.numel() for p in models[0].parameters())
    bounds = [(n * f // fragments, n * (f + 1) // fragments) for f in range(fragments)]
    theta = [parameters_to_vector(m.parameters()).detach().clone() for m in models]
    own = [torch.zeros(n, dtype=torch.float64) for _ in range(world)]
    mean = torch.zeros(n, dtype=torch.float64)
    velocity: list[list[torch.Tensor | None]] = [[None] * fragments for _ in range(world)]
    flying: list[torch.Tensor | None] = [None] * fragments
    xs: list[list[torch.Tensor]] = [[] for _ in range(world)]
    thetas: list[list[torch.Tensor]] = [[] for _ in range(world)]
    for step in range(1, STEPS + 1):
        for r in range(world):
            train_step(models[r], opts[r], *data[r][step - 1])
        for f, (lo, hi) in enumerate(bounds):
            if step % PERIOD != (f + 1) * PERIOD // fragments % PERIOD:
                continue
            if flying[f] is not None:
                mean[lo:hi] = flying[f]
            with torch.no_grad():
                x = [parameters_to_vector(m.parameters()) for m in models]
                fresh = [theta[r][lo:hi] - x[r][lo:hi] for r in range(world)]
                flying[f] = torch.stack(fresh).mean(0)
                for r in range(world):
                    g = mean[lo:hi] + (fresh[r] - own[r][lo:hi]) / world
                    own[r][lo:hi] = fresh[r]
                    v = velocity[r][f]
                    v = g.clone() if v is None else MU * v + g
                    velocity[r][f] = v
                    theta[r][lo:hi] -= OUTER_LR * (g + MU * v)
                    x[r][lo:hi] = theta[r][lo:hi]
                    vector_to_parameters(x[r], models[r].parameters())
        for r in range(world):
            xs[r].append(parameters_to_vector(models[r].parameters()).detach().clone())
            thetas[r].append(theta[r].clone())
    return xs, thetas


def _assert_matches(results: list[dict[str, Any]], fragments: int) -> None:
    xs, thetas = _reference(len(results), fragments)
    for r, res in enumerate(results):
        for step in range(STEPS):
            torch.testing.assert_close(res["x"][step], xs[r][step], rtol=0, atol=1e-12,
                                       msg=f"rank {r}, x after step {step + 1}")
            torch.testing.assert_close(res["theta"][step], thetas[r][step], rtol=0,
                                       atol=1e-12, msg=f"rank {r}, θ_g after step {step + 1}")
    # The workers' θ_g^m differ after the first round (each stepped on its own Δ).
    assert not torch.allclose(results[0]["theta"][-1], results[1]["theta"][-1])


@pytest.mark.parametrize("fragments", [1, 3])
def test_every_workers_global_state_matches_a_reference_of_the_rule(fragments: int) -> None:
    results = lsgd.simulate(eager_run, WORLD, args=(fragments,), seed=0)
    _assert_matches(results, fragments)
    due = [s for s in range(1, STEPS + 1) for f in range(fragments)
           if s % PERIOD == (f + 1) * PERIOD // fragments % PERIOD]
    assert results[0]["rounds"] == len(due) == {1: 3, 3: 10}[fragments]


def test_the_first_round_steps_on_its_own_pseudo_gradient_over_m() -> None:
    """Round 1: Δ̄_0 = 0, Δ_0 = 0, so the outer step takes Δ_1^m / M (v = Δ_1^m / M)."""
    results = lsgd.simulate(eager_run, WORLD, args=(1,), seed=0)
    start = parameters_to_vector(_net().parameters()).detach()
    models = [_net() for _ in range(WORLD)]
    for r, model in enumerate(models):
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for x, y in _data(r)[:PERIOD]:
            train_step(model, opt, x, y)
        delta = (start - parameters_to_vector(model.parameters()).detach()) / WORLD
        expected = start - OUTER_LR * (delta + MU * delta)
        torch.testing.assert_close(results[r]["theta"][PERIOD - 1], expected, rtol=0,
                                   atol=1e-12)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gloo_processes_match_the_reference_of_the_rule() -> None:
    results = lsgd.launch(eager_run, 2, args=(1,), timeout=60)
    _assert_matches(results, 1)


# -- the standard form is unchanged ------------------------------------------------------
def _plain(info: lsgd.WorkerInfo, kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    torch.manual_seed(info.rank)
    model = SmallNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = lsgd.DiLoCo(model, opt, period=2, **kwargs)
    for x, y in batches(info.rank, 6):
        train_step(strategy.model, opt, x, y, strategy)
    return model.state_dict()


def test_outer_standard_is_the_default_bit_for_bit() -> None:
    default = lsgd.simulate(_plain, WORLD, args=({},), seed=0)
    given = lsgd.simulate(_plain, WORLD, args=({"outer": "standard"},), seed=0)
    for a, b in zip(default, given):
        for key in a:
            assert torch.equal(a[key], b[key]), key


# -- resume with a transfer in flight ------------------------------------------------------
def _resume(info: lsgd.WorkerInfo, kwargs: dict[str, Any], stop: int | None) -> dict[str, Any]:
    torch.manual_seed(info.rank)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.DiLoCo]:
        model = SmallNet(batchnorm=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, lsgd.DiLoCo(model, opt, outer="eager", **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, 11)):
        if step == stop:
            model, opt, strategy = through_a_checkpoint(model, opt, strategy, build)
        train_step(strategy.model, opt, x, y, strategy)
    return {"state": model.state_dict(), "eager": strategy.state_dict()["eager"],
            "global": [b.clone() for b in strategy.global_state.buffers],
            "report": strategy.report().as_dict()}


@pytest.mark.parametrize("kwargs", [
    {"period": 3},
    {"period": 4, "fragments": 2, "compress": "int8", "error_feedback": True},
])
def test_resuming_with_a_transfer_in_flight_gives_the_same_run(kwargs: dict[str, Any]) -> None:
    straight = lsgd.simulate(_resume, WORLD, args=(kwargs, None), seed=0)
    resumed = lsgd.simulate(_resume, WORLD, args=(kwargs, 5), seed=0)  # a round in flight
    for a, b in zip(straight, resumed):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
        assert all(torch.equal(x, y) for x, y in zip(a["global"], b["global"]))
        for key in ("own", "mean"):
            assert all(torch.equal(x, y) for x, y in zip(a["eager"][key], b["eager"][key]))
        for key in ("steps", "rounds", "bytes_sent"):
            assert a["report"][key] == b["report"][key], key


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_compressed_fragmented_eager_rounds_under_gloo_equal_the_simulator() -> None:
    """Compressed all-reduces add in rank order under both backends: bit for bit."""
    kwargs = {"period": 4, "fragments": 2, "compress": "int8", "error_feedback": True}
    processes = lsgd.launch(_resume, 2, args=(kwargs, None), timeout=60)
    simulated = lsgd.simulate(_resume, 2, args=(kwargs, None), seed=0)
    for p, s in zip(processes, simulated):
        for key in p["state"]:
            assert torch.equal(p["state"][key], s["state"][key]), key
    assert not torch.equal(processes[0]["global"][0], processes[1]["global"][0])


def test_a_state_of_the_other_outer_form_is_refused() -> None:
    comm = lsgd.comm.LocalCommunicator()
    model = Vector([1.0, 2.0])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    standard = lsgd.DiLoCo(model, opt, comm=comm).state_dict()
    eager = lsgd.DiLoCo(model, opt, comm=comm, outer="eager")
    with pytest.raises(ValueError, match="saved with outer='standard'.*outer='eager'"):
        eager.load_state_dict(standard)
    with pytest.raises(ValueError, match="saved with outer='eager'.*resume with outer='eager'"):
        lsgd.DiLoCo(model, opt, comm=comm).load_state_dict(eager.state_dict())


# -- diverged workers -------------------------------------------------------------------------
X0 = [[1.0, 8.0], [2.0, 4.0], [3.0, 0.0], [4.0, -4.0]]


def _diverge(info: lsgd.WorkerInfo, nan: dict[int, list[int]], steps: int) -> dict[str, Any]:
    """A float64 vector per worker, no gradient, eager period 2 from independent starts;
    ``nan[step]``: the ranks whose state turns NaN right before that step."""
    model = Vector(X0[info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    strategy = lsgd.DiLoCo(model, opt, period=2, init="independent", outer="eager")
    out: dict[str, Any] = {"x": [], "theta": [], "error_step": None}
    for step in range(1, steps + 1):
        if info.rank in nan.get(step, []):
            with torch.no_grad():
                model.w.fill_(math.nan)
        model.w.grad = torch.zeros(2, dtype=torch.float64)
        try:
            strategy.step(0.0)
        except lsgd.DivergedError:
            out["error_step"] = step
            break
        out["x"].append(model.w.detach().clone())
        out["theta"].append(strategy.global_state.views[0].clone())
    out["report"] = strategy.report()
    return out


def _nesterov(theta: torch.Tensor, g: torch.Tensor, v: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    v = g.clone() if v is None else 0.9 * v + g
    return theta - 0.7 * (g + 0.9 * v), v


def test_a_diverged_worker_is_reset_to_the_healthy_workers_mean_when_its_mean_lands() -> None:
    """Rank 1 turns NaN before step 1: its Δ_1 and θ_g^1 are NaN from round 1 (step 2);
    the mean of round 1 lands NaN at step 4, is redone over ranks 0, 2, 3, and rank 1
    takes their mean θ_g (and Δ_1, outer momentum), then round 2 steps as usual."""
    results = lsgd.simulate(_diverge, WORLD, args=({1: [1]}, 4), seed=0)
    x0 = torch.tensor(X0, dtype=torch.float64)
    start = x0.mean(0)  # init="independent": θ_g starts at the mean
    healthy = [0, 2, 3]
    theta, v, own = {}, {}, {}
    for r in healthy:  # round 1: g = Δ_1 / M
        own[r] = start - x0[r]
        theta[r], v[r] = _nesterov(start, own[r] / WORLD, None)
    mean_theta = torch.stack([theta[r] for r in healthy]).mean(0)
    mean_v = torch.stack([v[r] for r in healthy]).mean(0)
    mean_own = torch.stack([own[r] for r in healthy]).mean(0)  # Δ̄_1 over the healthy
    theta[1], v[1], own[1] = mean_theta, mean_v, mean_own
    for r, res in enumerate(results):
        assert res["error_step"] is None
        assert torch.isnan(res["x"][1]).all() == (r == 1)
        # round 2 at step 4: x = θ_g^m (lr 0), so Δ_2 = 0 and g = Δ̄_1 + (0 - Δ_1^m) / M
        expected, _ = _nesterov(theta[r], mean_own - own[r] / WORLD, v[r])
        torch.testing.assert_close(res["theta"][3], expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(res["x"][3], expected, rtol=0, atol=1e-12)
        assert res["report"].resets == (1 if r == 1 else 0)


def test_every_worker_diverged_raises_everywhere_when_the_mean_lands() -> None:
    results = lsgd.simulate(_diverge, WORLD, args=({1: [0, 1, 2, 3]}, 6), seed=0)
    assert [res["error_step"] for res in results] == [4] * WORLD


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"outer": "lazy"}, "DiLoCo: outer must be one of 'standard', 'eager', got 'lazy'"),
    ({"outer": "eager", "overlap": 2}, r"outer='eager' .* takes no overlap; got overlap=2: "
                                       "leave it at 0"),
    ({"outer": "eager", "merge": "keep"}, "merge='keep' .* outer='eager' steps at once: "
                                          "drop merge"),
])
def test_bad_outer_values_name_the_keyword(kwargs: dict[str, Any], message: str) -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=message):
        lsgd.DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), period=4,
                    comm=lsgd.comm.LocalCommunicator(), **kwargs)


def test_the_trainer_passes_outer_and_refuses_it_elsewhere(capsys: Any) -> None:
    assert knobs_from_config(make_config({"method": "diloco", "outer": "eager"}))["outer"] == \
        "eager"
    assert "outer" not in knobs_from_config(make_config({"method": "diloco"}))
    common = ["train", "--backend", "threads", "--workers", "2", "--steps", "4", "--quiet"]
    for extra, message in [
        (["--method", "local-sgd", "--outer", "eager"], "--outer eager: an option of "
                                                        "--method diloco, not of local-sgd"),
        (["--method", "diloco", "--outer", "lazy"], "argument --outer: invalid choice: "
                                                    "'lazy'"),
        (["--method", "diloco", "--outer", "eager", "--overlap", "2", "--merge", "keep"],
         "--outer eager with --overlap 2 --merge keep: .* drop --overlap 2 --merge keep"),
    ]:
        assert main([*common, *extra]) == 2
        assert re.search(message, capsys.readouterr().err), extra


def _replica_diverge(info: lsgd.WorkerInfo, replica: str) -> tuple[list[float], int]:
    """3 replicas (of 1 or 2 processes), a linear model at ``X0``-like starts, lr 0;
    replica 1 turns NaN before step 1: θ_g^m and resets after 6 steps."""
    comm = lsgd.get_communicator(replica=replica)
    model = nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 8.0, 3.0], [2.0, 4.0, -1.0],
                                         [3.0, 0.0, 5.0]][comm.rank]))
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    strategy = lsgd.DiLoCo(model, opt, period=2, init="independent", outer="eager", comm=comm)
    for step in range(1, 7):
        if comm.rank == 1 and step == 1:
            with torch.no_grad():
                model.weight.fill_(math.nan)
        loss = strategy.model(torch.ones(2, 3, dtype=torch.float64)).sum() * 0
        opt.zero_grad()
        loss.backward()
        strategy.step(0.0)
    return strategy.global_state.views[0].flatten().tolist(), strategy.resets


def test_replicas_apply_the_rule_and_its_recovery_per_share() -> None:
    """Replicas of two processes (each process: its share) end where one process per
    replica ends, a diverged replica reset by the healthy ones' mean."""
    shares = lsgd.simulate(_replica_diverge, 6, groups=3, args=("node",), replica="node")
    whole = lsgd.simulate(_replica_diverge, 3, groups=3, args=("process",))
    assert [r for _, r in whole] == [0, 1, 0]
    assert all(math.isfinite(v) for theta, _ in whole for v in theta)
    for rank, got in enumerate(shares):
        assert got == whole[rank // 2], rank


def test_lsgd_train_resumes_an_eager_run_exactly(tmp_path: Any) -> None:
    """Through the trainer's checkpoints, cut mid-period with an all-reduce in flight."""
    from tests.strategies.test_diloco import same_diloco_ends

    common = ["train", "--method", "diloco", "--outer", "eager", "--backend", "threads",
              "--workers", "2", "--dataset", "digits", "--model", "mlp", "--period", "4",
              "--quiet"]
    assert main([*common, "--steps", "14", "--out", str(tmp_path / "straight")]) == 0
    assert main([*common, "--steps", "6", "--out", str(tmp_path / "resumed")]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--steps", "14",
                 "--quiet"]) == 0
    for a, b in same_diloco_ends(tmp_path / "straight", tmp_path / "resumed", 2):
        assert a["strategy"]["rounds"] == b["strategy"]["rounds"] == 3
        for key in ("own", "mean"):
            assert all(torch.equal(x, y) for x, y in zip(a["strategy"]["eager"][key],
                                                         b["strategy"]["eager"][key]))
