"""The leader's force on DiLoCo and local SGD (``leader="weights"|"pull"``): the rules
against hand-written references in the simulator and in gloo processes, compressed and
overlapped rounds, replicas, resume, bad input, and ``lsgd train``'s flags."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import lsgd
from lsgd.cli import main
from lsgd.train.build import knobs_from_config
from lsgd.train.config import make_config
from tests import cases_replicas
from tests.scenarios import Vector, through_a_checkpoint

METHODS = {"diloco": lsgd.DiLoCo, "local-sgd": lsgd.LocalSGD}
X0 = [[1.0, -2.0, 3.0], [4.0, 0.5, -1.0], [-3.0, 2.0, 0.25], [0.5, 6.0, -4.0]]
GRADS = [[1.0, 0.0, -1.0], [0.5, 2.0, 1.0], [-1.0, 1.0, 0.0], [2.0, -0.5, 0.5]]
LR, PERIOD = 0.5, 2


def _losses(rank: int, step: int, world: int) -> float:
    """Scripted training losses: the leader is rank ``world - 2`` for the first rounds
    (rank 1 of two), then the last rank, once its lower recent losses have pulled its
    window's mean below."""
    best = world - 2 if step < 6 else world - 1
    return 1.0 if rank == best else 2.0 + rank


def run(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], steps: int,
        stop: int | None = None) -> dict[str, Any]:
    """``steps`` steps of plain SGD (lr 0.5, a constant gradient per rank) on a
    :class:`Vector` starting at ``X0[rank]``; the state after every step (and ``θ_g``);
    with ``stop``, everything rebuilt at that step from state dicts."""
    world = info.world_size

    def build() -> tuple[Vector, torch.optim.Optimizer, lsgd.Strategy]:
        model = Vector(X0[info.rank])
        if kwargs.get("compress", "none") != "none":  # the codecs encode float32
            model.float()
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        return model, opt, METHODS[method](model, opt, init="independent", **kwargs)

    model, opt, strategy = build()
    xs, thetas = [], []
    for step in range(steps):
        if step == stop:
            model, opt, strategy = through_a_checkpoint(model, opt, strategy, build)
        model.w.grad = torch.tensor(GRADS[info.rank], dtype=model.w.dtype)
        strategy.step(torch.tensor(_losses(info.rank, step, world), dtype=torch.float64))
        xs.append(model.w.detach().clone())
        if method == "diloco":
            thetas.append(strategy.global_state.buffers[0].clone())  # type: ignore[attr-defined]
    report = strategy.report().as_dict()
    return {"x": xs, "theta": thetas, "sent": report["bytes_sent"], "rounds": report["rounds"]}


# -- hand-written references -------------------------------------------------------------
def _leader(step: int, world: int) -> int:
    """The leader elected at the round after step ``step`` (1-based): the lowest mean of
    the last 10 scripted losses, ties to the lowest rank."""
    means = [sum(_losses(r, s, world) for s in range(max(0, step - 10), step)) / min(step, 10)
             for r in range(world)]
    return min(range(world), key=lambda r: (means[r], r))


def _reference(method: str, world: int, steps: int, leader: str, c: float = 0.0,
               lam: float = 0.0, outer_lr: float = 0.7, mu: float = 0.9) -> list[torch.Tensor]:
    """The rule by hand: every PERIOD steps, the (weighted) mean; DiLoCo's outer Nesterov
    step on ``Δ = θ_g - θ̄``; the pull ``θ_g + λ (x_L - θ_g)``; every worker takes θ_g."""
    x = [torch.tensor(X0[r], dtype=torch.float64) for r in range(world)]
    theta = sum(x) / world  # init="independent": θ_g starts at the mean
    v = torch.zeros_like(theta)
    for step in range(1, steps + 1):
        x = [xi - LR * torch.tensor(GRADS[r], dtype=torch.float64) for r, xi in enumerate(x)]
        if step % PERIOD:
            continue
        best = _leader(step, world)
        if leader == "weights":
            mean = (sum(x) + c * x[best]) / (world + c)
        else:
            mean = sum(x) / world
        if method == "diloco":
            delta = theta - mean
            v = mu * v + delta
            theta = theta - outer_lr * (delta + mu * v)
        else:
            theta = mean
        if leader == "pull":
            theta = theta + lam * (x[best] - theta)
        x = [theta.clone() for _ in range(world)]
    return x


SIMULATED = [
    ("diloco", {"leader": "weights", "leader_weight": 4.0}, "weights", 4.0, 0.0),
    ("diloco", {"leader": "pull", "leader_pull": 0.25}, "pull", 0.0, 0.25),
    ("local-sgd", {"leader": "weights", "leader_weight": 1.5}, "weights", 1.5, 0.0),
    ("local-sgd", {"leader": "pull"}, "pull", 0.0, 0.5),
    ("diloco", {"leader": "weights"}, "weights", 1.0, 0.0),  # the default c
]


@pytest.mark.parametrize("method,kwargs,leader,c,lam", SIMULATED)
def test_the_rule_equals_the_hand_written_reference(method: str, kwargs: dict[str, Any],
                                                     leader: str, c: float, lam: float) -> None:
    results = lsgd.simulate(run, 4, args=(method, {"period": PERIOD, **kwargs}, 8))
    expected = _reference(method, 4, 8, leader, c, lam)
    for r, result in enumerate(results):
        assert torch.allclose(result["x"][-1], expected[r], rtol=0, atol=1e-12), r


def test_the_weighted_mean_is_exact_and_the_pull_moves_lambda_of_the_way() -> None:
    """With M + c = 8 the weighted mean is exact in binary; the pull of one DiLoCo round is
    exactly λ of the way from the outer step's θ_g (the run without a leader) to x_L."""
    weighted = lsgd.simulate(run, 4, args=("local-sgd", {"period": PERIOD, "leader": "weights",
                                                         "leader_weight": 4.0}, 2))
    x = [torch.tensor(X0[r], dtype=torch.float64) - LR * 2 * torch.tensor(GRADS[r],
                                                                           dtype=torch.float64)
         for r in range(4)]
    assert _leader(2, 4) == 2
    assert all(torch.equal(w["x"][-1], (sum(x) + 4.0 * x[2]) / 8) for w in weighted)
    plain = lsgd.simulate(run, 4, args=("diloco", {"period": PERIOD}, 2))
    pulled = lsgd.simulate(run, 4, args=("diloco", {"period": PERIOD, "leader": "pull",
                                                    "leader_pull": 0.25}, 2))
    after_outer = plain[0]["theta"][-1]
    for result in pulled:
        assert torch.equal(result["theta"][-1], torch.lerp(after_outer, x[2], 0.25))
        assert torch.equal(result["x"][-1], result["theta"][-1])
    # the byte counts show the leader's broadcast: its 3 float64s leave the leader, beyond
    # a round that gathers the scores too (leader="weights" with c = 0)
    gathered = lsgd.simulate(run, 4, args=("diloco", {"period": PERIOD, "leader": "weights",
                                                      "leader_weight": 0.0}, 2))
    assert pulled[2]["sent"] - gathered[2]["sent"] >= 24
    assert gathered[0]["sent"] > plain[0]["sent"]  # the score all-gather


def test_leader_none_is_todays_method_bit_for_bit() -> None:
    for method in METHODS:
        for extra in ({"overlap": 1, "compress": "bf16", "error_feedback": True}, {}):
            kwargs = {"period": PERIOD, **extra}
            today = lsgd.simulate(run, 4, args=(method, kwargs, 6))
            none = lsgd.simulate(run, 4, args=(method, {**kwargs, "leader": "none"}, 6))
            for a, b in zip(today, none):
                assert all(torch.equal(p, q) for p, q in zip(a["x"], b["x"]))
                assert a["sent"] == b["sent"]


@pytest.mark.parametrize("codec,atol", [("bf16", 0.02), ("int8", 0.05)])
def test_compressed_weighted_rounds_decode_to_the_weighted_mean(codec: str, atol: float) -> None:
    """The message r - x weighted by (1+c)/(M+c) or 1/(M+c): its decoded sum is r - θ̄,
    θ̄ the weighted mean, within the codec's rounding (and far from the plain mean)."""
    results = lsgd.simulate(run, 4, args=("local-sgd", {"period": PERIOD, "leader": "weights",
                                                        "leader_weight": 4.0,
                                                        "compress": codec}, 2))
    x = [torch.tensor(X0[r], dtype=torch.float64) - LR * 2 * torch.tensor(GRADS[r],
                                                                           dtype=torch.float64)
         for r in range(4)]
    weighted = (sum(x) + 4.0 * x[2]) / 8
    for result in results:
        got = result["x"][-1].double()
        assert torch.allclose(got, weighted, rtol=0, atol=atol)
        assert not torch.allclose(got, sum(x) / 4, rtol=0, atol=0.1)


@pytest.mark.parametrize("method,kwargs", [
    ("diloco", {"leader": "pull", "overlap": 1, "compress": "int8", "error_feedback": True}),
    ("diloco", {"leader": "weights", "fragments": 2, "overlap": 1}),
    ("local-sgd", {"leader": "pull", "fragments": 2, "compress": "bf16"}),
    ("local-sgd", {"leader": "weights"}),
])
def test_resuming_from_state_dicts_gives_the_same_run(method: str,
                                                      kwargs: dict[str, Any]) -> None:
    """Stopped at step 5 (a round in flight with overlap; the loss windows hold the
    scores that still elect the old leader) and rebuilt: the same run bit for bit."""
    kwargs = {"period": 4 if "fragments" in kwargs else PERIOD, **kwargs}
    straight = lsgd.simulate(run, 4, args=(method, kwargs, 12))
    resumed = lsgd.simulate(run, 4, args=(method, kwargs, 12, 5))
    for a, b in zip(straight, resumed):
        assert all(torch.equal(p, q) for p, q in zip(a["x"], b["x"]))
        assert a["sent"] == b["sent"] and a["rounds"] == b["rounds"]


def test_overlapped_pull_matches_the_blocking_rule_where_nothing_moves_meanwhile() -> None:
    """With overlap=1 and merge="replace" the pull lands a step later; with no gradient in
    between, θ_g ends where the blocking round puts it."""
    def still(info: lsgd.WorkerInfo, kwargs: dict[str, Any]) -> torch.Tensor:
        model = Vector(X0[info.rank])
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        strategy = lsgd.DiLoCo(model, opt, init="independent", **kwargs)
        for step in range(3):
            model.w.grad = torch.tensor(GRADS[info.rank] if step < 2 else [0.0] * 3,
                                        dtype=torch.float64)
            strategy.step(torch.tensor(_losses(info.rank, step, 4), dtype=torch.float64))
        return strategy.global_state.buffers[0].clone()

    base = {"period": PERIOD, "leader": "pull", "leader_pull": 0.25}
    blocking = lsgd.simulate(still, 4, args=(base,))
    hidden = lsgd.simulate(still, 4, args=({**base, "overlap": 1, "merge": "replace"},))
    assert torch.equal(blocking[0], hidden[0])


LEADER_VARIANTS = {
    "diloco-weights": ("diloco", {"period": 3, "leader": "weights", "leader_weight": 2.0}),
    "diloco-pull-int8": ("diloco", {"period": 3, "leader": "pull", "overlap": 1,
                                    "compress": "int8"}),
    "local-sgd-pull": ("local-sgd", {"period": 3, "leader": "pull"}),
}


@pytest.mark.parametrize("variant", sorted(LEADER_VARIANTS))
def test_replicas_of_two_processes_equal_one_process_per_node(
        variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 nodes of 2 processes (each process sends and pulls its share of the leader's
    state) end where 2 processes that read both of their node's windows end."""
    monkeypatch.setitem(cases_replicas.VARIANTS, variant, LEADER_VARIANTS[variant])
    replicas = lsgd.simulate(cases_replicas.train, 4, groups=2, args=([variant], 2, "node"),
                             replica="node")
    whole = lsgd.simulate(cases_replicas.train, 2, groups=2, args=([variant], 2, "process"))
    for rank in range(4):
        got, want = replicas[rank][variant]["params"], whole[rank // 2][variant]["params"]
        assert max(float((a - b).abs().max()) for a, b in zip(got, want)) < 2e-5


# -- gloo processes -----------------------------------------------------------------------
GLOO = {
    "diloco-weights": ("diloco", {"leader": "weights", "leader_weight": 2.0}, "weights", 2.0, 0),
    "diloco-pull": ("diloco", {"leader": "pull", "leader_pull": 0.25}, "pull", 0.0, 0.25),
    "local-weights": ("local-sgd", {"leader": "weights", "leader_weight": 2.0}, "weights", 2.0, 0),
    "local-pull": ("local-sgd", {"leader": "pull"}, "pull", 0.0, 0.5),
    # hidden rounds: against the simulator only (no hand-written reference: the codec)
    "diloco-pull-int8": ("diloco", {"leader": "pull", "overlap": 1, "compress": "int8",
                                    "error_feedback": True}, None, 0.0, 0.0),
    "local-weights-bf16": ("local-sgd", {"leader": "weights", "compress": "bf16"}, None, 0, 0),
}


def gloo_bundle(info: lsgd.WorkerInfo) -> dict[str, Any]:
    return {name: run(info, method, {"period": PERIOD, **kwargs}, 8)
            for name, (method, kwargs, *_) in GLOO.items()}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_rules_under_gloo_processes() -> None:
    """Two gloo processes: every rule equals the hand-written reference, and the
    simulator bit for bit (compressed and overlapped rounds too), bytes included."""
    results = lsgd.launch(gloo_bundle, 2, timeout=60)
    for name, (method, kwargs, leader, c, lam) in GLOO.items():
        simulated = lsgd.simulate(run, 2, args=(method, {"period": PERIOD, **kwargs}, 8))
        for r in range(2):
            got = results[r][name]
            if leader is not None:
                expected = _reference(method, 2, 8, leader, c, lam)
                assert torch.allclose(got["x"][-1], expected[r], rtol=0, atol=1e-12), name
            assert got["sent"] == simulated[r]["sent"], name
            assert all(torch.equal(p, q) for p, q in zip(got["x"], simulated[r]["x"])), name


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,named", [
    ({"leader": "best"}, "leader"),
    ({"leader": "weights", "leader_weight": -1.0}, "leader_weight"),
    ({"leader": "weights", "leader_weight": float("nan")}, "leader_weight"),
    ({"leader": "pull", "leader_pull": 1.5}, "leader_pull"),
    ({"leader_pull": 0.5}, "leader_pull"),
    ({"leader": "pull", "leader_weight": 2.0}, "leader_weight"),
])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_bad_values_raise_naming_the_keyword(method: str, kwargs: dict[str, Any],
                                             named: str) -> None:
    model = Vector([1.0])
    with pytest.raises(ValueError, match=named):
        METHODS[method](model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


@pytest.mark.parametrize("extra,named", [({"asynchronous": True}, "asynchronous=True"),
                                         ({"hierarchical": True}, "hierarchical=True")])
def test_local_sgd_refuses_rounds_it_cannot_lead(extra: dict[str, Any], named: str) -> None:
    def build(info: lsgd.WorkerInfo) -> None:
        model = Vector([1.0])
        lsgd.LocalSGD(model, torch.optim.SGD(model.parameters(), lr=0.1), leader="pull",
                      **extra)

    with pytest.raises(Exception, match=named) as raised:
        lsgd.simulate(build, 4, 2)
    assert isinstance(raised.value.__cause__, ValueError)


def test_step_needs_the_loss() -> None:
    model = Vector([1.0])
    strategy = lsgd.DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), leader="pull")
    with pytest.raises(ValueError, match="loss"):
        strategy.step()


# -- lsgd train ---------------------------------------------------------------------------
def test_the_flags_reach_the_strategy() -> None:
    cfg = make_config({"method": "diloco", "leader": "weights", "leader_weight": 2.0})
    assert knobs_from_config(cfg)["leader"] == "weights"
    assert knobs_from_config(cfg)["leader_weight"] == 2.0
    cfg = make_config({"method": "local-sgd", "leader": "pull", "leader_pull": 0.3})
    knobs = knobs_from_config(cfg)
    assert (knobs["leader"], knobs["leader_pull"]) == ("pull", 0.3)
    assert knobs_from_config(make_config({"method": "diloco"})).get("leader", "none") == "none"


@pytest.mark.parametrize("args,expected", [
    (["--method", "diloco", "--leader", "best"], ["--leader", "best"]),
    (["--method", "lsgd", "--leader", "pull"], ["--leader pull", "local-sgd or diloco or sparseloco or muloco, not of lsgd"]),
    (["--method", "diloco", "--leader-pull", "0.5"], ["--leader-pull", "--leader pull"]),
    (["--method", "diloco", "--leader", "weights", "--leader-weight", "-1"],
     ["--leader-weight", "-1"]),
    (["--method", "local-sgd", "--leader", "pull", "--leader-pull", "2"], ["--leader-pull"]),
    (["--method", "local-sgd", "--leader", "pull", "--hierarchical", "--groups", "2"],
     ["--leader pull", "--hierarchical"]),
])
def test_lsgd_train_exits_2_naming_the_flag(args: list[str], expected: list[str],
                                            tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def start(*a: object, **k: object) -> None:
        raise AssertionError("workers would start")

    monkeypatch.setattr(lsgd, "launch", start)
    monkeypatch.setattr(lsgd, "simulate", start)
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--dataset", "synthetic", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    for part in expected:
        assert part in err, f"{part!r} not in {err!r}"
