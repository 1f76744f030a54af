"""D-PSGD, MATCHA, AL-DSGD and dynamic graphs: the pairwise exchange, the mixing
invariants, hand-computed AL-DSGD updates, traffic, resume, errors, training.

Most cases run in the in-process simulator; one launch of real gloo processes
runs the exchange primitive and three strategies and is compared with it.
The worker functions are module-level so the processes can import them.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import lsgd
from lsgd import data as datasets
from lsgd import topology as T
from lsgd.strategies.aldsgd import aldsgd_update_, choose
from lsgd.strategies.decentralized import mix_
from tests.scenarios import SmallNet, Vector, batches

STRATEGIES = {"dpsgd": lsgd.DPSGD, "matcha": lsgd.MATCHA, "aldsgd": lsgd.ALDSGD}
DIAMOND = T.from_edges(4, [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)], name="diamond")
PATH3 = T.from_edges(3, [(0, 1), (1, 2)], name="path3")


# -- worker functions (simulator and processes) ---------------------------------------
def scripted(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """A :class:`Vector` worker under a strategy with scripted losses and no gradient.

    ``spec``: ``method``, ``kwargs``, ``x0[rank]``, ``steps``, optional
    ``losses[step][rank]`` (default 0) and ``seed_by_rank`` (a deliberate mistake).
    """
    model = Vector(spec["x0"][info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    kwargs = {"init": "independent", **spec.get("kwargs", {})}
    if spec.get("seed_by_rank"):
        kwargs["seed"] = info.rank
    strategy = STRATEGIES[spec["method"]](model, opt, **kwargs)
    out: dict[str, Any] = {"x": [], "sent": [], "received": [], "peers": [], "active": [],
                           "best": [], "degree": []}
    for step in range(spec["steps"]):
        before = strategy.report().as_dict()
        model.w.grad = torch.zeros_like(model.w)
        losses = spec.get("losses")
        loss = losses[step % len(losses)][info.rank] if losses else 0.0
        strategy.step(torch.tensor(loss, dtype=torch.float64))
        after = strategy.report().as_dict()
        out["x"].append(model.w.detach().clone().tolist())
        out["sent"].append(after["bytes_sent"] - before["bytes_sent"])
        out["received"].append(after["bytes_received"] - before["bytes_received"])
        out["peers"].append(list(strategy.last_peers))
        out["active"].append(list(strategy.last_active))
        out["best"].append(after.get("best_rank"))
        out["degree"].append(after.get("degree_rank"))
    out["spread"] = strategy.spread()
    out["center"] = strategy.center().w.detach().tolist()
    out["stats"] = strategy.report().as_dict()
    out["probabilities"] = [list(p.probabilities) for p in strategy.plans]
    out["weights"] = [p.weight for p in strategy.plans]
    return out


def train(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """A few SGD steps of the small BatchNorm net under a strategy (same data everywhere)."""
    torch.manual_seed(info.rank)
    model = SmallNet(dropout=0.2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = STRATEGIES[spec["method"]](model, opt, **spec.get("kwargs", {}))
    for x, y in batches(info.rank, spec["steps"]):
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "stats": strategy.report().as_dict(), "spread": strategy.spread()}


def exchange(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """The raw primitive on a ring: a batched exchange with both neighbours, then
    two single exchanges in a row with the matching partner (order preserved)."""
    comm = lsgd.get_communicator()
    r, w = info.rank, info.world_size
    mine = torch.tensor([float(r), 10.0 * r], dtype=torch.float64)
    many = comm.exchange_many(mine, [(r + 1) % w, (r - 1) % w])
    partner = r ^ 1
    first = comm.exchange(torch.arange(5, dtype=torch.float32) + 100 * r, partner)
    second = comm.exchange(mine * -1, partner)
    stats = comm.stats()
    return {"many": [t.tolist() for t in many], "first": first.tolist(),
            "second": second.tolist(), "sent": stats.bytes_sent,
            "received": stats.bytes_received}


def bundle(info: lsgd.WorkerInfo, specs: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    functions = {"scripted": scripted, "train": train, "exchange": exchange}
    return {name: functions[fn](info, spec) for name, (fn, spec) in specs.items()}


def _sim(fn, world: int, spec: dict[str, Any]) -> list[dict[str, Any]]:
    return lsgd.simulate(fn, world, args=(spec,), seed=0)


# -- the exchange primitive ---------------------------------------------------------
def check_exchange(results: list[dict[str, Any]]) -> None:
    w = len(results)
    for r, res in enumerate(results):
        right, left, partner = (r + 1) % w, (r - 1) % w, r ^ 1
        assert res["many"] == [[float(right), 10.0 * right], [float(left), 10.0 * left]]
        assert res["first"] == [100.0 * partner + i for i in range(5)]
        assert res["second"] == [-float(partner), -10.0 * partner]
        # 2 peers x 16 bytes, then 20 bytes, then 16 bytes; as much received.
        assert res["sent"] == res["received"] == 2 * 16 + 20 + 16


def test_exchange_swaps_tensors_and_counts_bytes() -> None:
    check_exchange(_sim(exchange, 4, {}))


def test_exchange_rejects_bad_peers_and_reports_a_missing_partner() -> None:
    def bad(info: lsgd.WorkerInfo) -> None:
        lsgd.get_communicator().exchange(torch.zeros(1), info.rank)

    with pytest.raises(lsgd.SimulationError) as caught:
        lsgd.simulate(bad, 2)
    assert re.search(r"distinct ranks in \[0, 2\) other than this worker's 0", str(caught.value.__cause__))

    def one_sided(info: lsgd.WorkerInfo) -> None:
        if info.rank == 0:
            lsgd.get_communicator().exchange(torch.zeros(1), 1)

    with pytest.raises(lsgd.SimulationError, match=r"deadlocked: rank 0 waits in exchange #0 "
                                                   r"among ranks \[0, 1\]"):
        lsgd.simulate(one_sided, 2)


# -- D-PSGD: the mixing invariants -------------------------------------------------------
def _x0(world: int, dims: int = 3, seed: int = 0) -> list[list[float]]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(world, dims, generator=g, dtype=torch.float64) * 4).tolist()


def test_dpsgd_mixing_keeps_the_average_and_contracts_the_spread() -> None:
    graph, steps = T.ring(8), 10
    x0 = _x0(8)
    results = _sim(scripted, 8, {"method": "dpsgd", "x0": x0, "steps": steps,
                                 "kwargs": {"topology": graph}})
    start = torch.tensor(x0, dtype=torch.float64)
    states = [torch.tensor([res["x"][t] for res in results], dtype=torch.float64)
              for t in range(steps)]
    # One step is exactly x <- W x with W = I - a L, a = 2 / (lambda_2 + lambda_max).
    torch.testing.assert_close(states[0], graph.mixing_matrix() @ start, rtol=0, atol=1e-12)
    rho = graph.contraction()
    initial = previous = float((start - start.mean(0)).norm())
    for t, x in enumerate(states, start=1):
        torch.testing.assert_close(x.mean(0), start.mean(0), rtol=0, atol=1e-6)
        disagreement = float((x - x.mean(0)).norm())  # Frobenius norm of X - mean
        assert disagreement <= rho**t * initial + 1e-12, "contracts by ||W - J|| per step"
        assert disagreement < previous
        previous = disagreement
    # spread() is the mean distance to the center, the same on every worker.
    final = states[-1]
    expected = float((final - final.mean(0)).norm(dim=1).mean())
    assert [res["spread"] for res in results] == pytest.approx([expected] * 8, rel=1e-9)
    assert results[0]["center"] == pytest.approx(start.mean(0).tolist(), abs=1e-12)
    # Traffic: the 3-float64 state once to each of the 2 neighbours, every step.
    assert all(res["sent"] == [2 * 24] * steps for res in results)
    assert results[0]["stats"]["rounds"] == steps
    assert results[0]["stats"]["eval_bytes_sent"] > 0 and results[0]["stats"]["exchanges"] == 2 * steps


def test_max_degree_weight_keeps_every_self_weight_positive() -> None:
    graph = T.erdos_renyi(8, edges=8, seed=1)  # degrees 3 and 1; lambda_2 + lambda_max = 5
    assert graph.mixing_weight() == pytest.approx(0.4)
    assert 1 - 3 * graph.mixing_weight() < 0, "the spectral weight gives degree-3 workers -0.2"
    x0 = _x0(8)
    start = torch.tensor(x0, dtype=torch.float64)
    for option, a in (("max-degree", 0.25), (0.1, 0.1)):
        results = _sim(scripted, 8, {"method": "dpsgd", "x0": x0, "steps": 2,
                                     "kwargs": {"topology": graph, "mixing_weight": option}})
        assert results[0]["weights"] == [a]
        first = torch.tensor([res["x"][0] for res in results], dtype=torch.float64)
        w = graph.mixing_matrix(a)
        assert float(w.min()) >= 0, "non-negative mixing matrix"
        torch.testing.assert_close(first, w @ start, rtol=0, atol=1e-12)


def test_mix_by_hand() -> None:
    x = [torch.tensor([1.0, 2.0], dtype=torch.float64)]
    mix_(x, [[torch.tensor([3.0, 0.0], dtype=torch.float64)],
             [torch.tensor([5.0, 4.0], dtype=torch.float64)]], 0.25)
    assert x[0].tolist() == [0.5 * 1 + 0.25 * 3 + 0.25 * 5, 0.5 * 2 + 0.25 * 0 + 0.25 * 4]
    mix_(x, [], 0.25)  # no neighbour: unchanged
    assert x[0].tolist() == [2.5, 2.0]


def test_period_spaces_the_communications() -> None:
    res = _sim(scripted, 4, {"method": "dpsgd", "x0": _x0(4), "steps": 6,
                             "kwargs": {"topology": T.ring(4), "period": 3}})
    assert res[0]["sent"] == [0, 0, 48, 0, 0, 48]
    assert res[0]["stats"]["communications"] == 2


# -- MATCHA ----------------------------------------------------------------------------
def test_matcha_with_budget_one_is_dpsgd() -> None:
    spec = {"x0": _x0(8), "steps": 5, "kwargs": {"topology": T.ring(8)}}
    matcha = _sim(scripted, 8, {**spec, "method": "matcha", "kwargs": {**spec["kwargs"], "budget": 1}})
    dpsgd = _sim(scripted, 8, {**spec, "method": "dpsgd"})
    for m, d in zip(matcha, dpsgd):
        assert m["active"] == [[0, 1]] * 5, "every matching, every step"
        assert m["x"] == d["x"] and m["sent"] == d["sent"]
        assert m["probabilities"] == [[1.0, 1.0]]


def test_matcha_budget_half_sends_half_of_dpsgd() -> None:
    pytest.importorskip("cvxpy")
    steps = 400
    spec = {"x0": _x0(8), "steps": steps, "kwargs": {"topology": T.ring(8)}}
    matcha = _sim(scripted, 8, {**spec, "method": "matcha",
                                "kwargs": {**spec["kwargs"], "budget": 0.5, "seed": 3}})
    dpsgd = _sim(scripted, 8, {**spec, "method": "dpsgd"})
    p = matcha[0]["probabilities"][0]
    assert sum(p) == pytest.approx(0.5 * 2, abs=1e-4), "expected active matchings: half of 2"
    # Every worker draws the same activations from the shared seed.
    assert all(res["active"] == matcha[0]["active"] for res in matcha)
    active = sum(len(a) for a in matcha[0]["active"]) / steps
    # Mean of 400 draws of a sum of two Bernoulli(1/2): sd 0.035; allow 3 sd.
    assert abs(active - 1.0) < 0.1
    # On the even ring both matchings are perfect: every worker sends half as much.
    for m, d in zip(matcha, dpsgd):
        ratio = m["stats"]["bytes_sent"] / d["stats"]["bytes_sent"]
        assert abs(ratio - 0.5) < 0.05, ratio
    # Still an average-preserving gossip that reaches consensus.
    start = torch.tensor(spec["x0"], dtype=torch.float64)
    final = torch.tensor([res["x"][-1] for res in matcha], dtype=torch.float64)
    torch.testing.assert_close(final.mean(0), start.mean(0), rtol=0, atol=1e-9)
    assert matcha[0]["spread"] < 1e-6
    # Another seed, other draws.
    other = _sim(scripted, 8, {**spec, "steps": 20, "method": "matcha",
                               "kwargs": {**spec["kwargs"], "budget": 0.5, "seed": 4}})
    assert other[0]["active"] != matcha[0]["active"][:20]


# -- AL-DSGD ---------------------------------------------------------------------------
def _aldsgd_by_the_book(x: float, nbrs: dict[int, float], a: float, x_b: float, x_d: float,
                        c_b: float = 0.3, c_d: float = 0.1, p_b: float = 0.1, p_d: float = 0.1) -> float:
    """The three lines of docs/algorithms.md, literally."""
    x_mix = (1 - len(nbrs) * a) * x + a * sum(nbrs.values())
    y = (1 - c_b - c_d) * x_mix + c_b * x_b + c_d * x_d
    return (1 - p_b - p_d) * y + p_b * x_b + p_d * x_d


def test_choose_best_and_highest_degree_with_ties() -> None:
    # 3 workers on a path 0-1-2, scores 3, 2, 1: degrees 1, 2, 1.
    scores, degrees = {0: 3.0, 1: 2.0, 2: 1.0}, {0: 1, 1: 2, 2: 1}
    assert choose(0, {0: 3.0, 1: 2.0}, {0: 1, 1: 2}) == (1, 1)
    assert choose(1, scores, degrees) == (2, 1), "itself has the highest degree"
    assert choose(2, {2: 1.0, 1: 2.0}, {2: 1, 1: 2}) == (2, 1), "itself is best"
    # 3 workers on a triangle, all degree 2: D is always the worker itself.
    tri_scores, tri_degrees = {0: 2.0, 1: 1.0, 2: 1.0}, {0: 2, 1: 2, 2: 2}
    assert choose(0, tri_scores, tri_degrees) == (1, 0), "tie 1-2 on score: lowest rank"
    assert choose(2, tri_scores, tri_degrees) == (2, 2), "tie with itself: itself"
    # NaN never wins; no finite score at all: the worker itself.
    assert choose(3, {3: math.nan, 1: 2.0, 2: 2.0}, {3: 2, 1: 3, 2: 3}) == (1, 1)
    assert choose(1, {1: math.nan, 0: math.inf}, {1: 1, 0: 1}) == (1, 1)


def test_aldsgd_update_by_hand_on_three_workers() -> None:
    # Path 0-1-2, a = 2 / (1 + 3) = 1/2, x = 1, 2, 4, scores 3, 2, 1. Worked by hand:
    # worker 0: B = D = 1; x_mix = 1.5, y = 0.6*1.5 + 0.3*2 + 0.1*2 = 1.7, x = 0.8*1.7 + 0.4 = 1.76
    # worker 1: B = 2, D = 1; x_mix = 2.5, y = 1.5 + 1.2 + 0.2 = 2.9, x = 2.32 + 0.4 + 0.2 = 2.92
    # worker 2: B = 2, D = 1; x_mix = 3, y = 1.8 + 1.2 + 0.2 = 3.2, x = 2.56 + 0.4 + 0.2 = 3.16
    expected, who = [1.76, 2.92, 3.16], [(1, 1), (2, 1), (2, 1)]
    x0, scores = [1.0, 2.0, 4.0], [3.0, 2.0, 1.0]
    assert PATH3.mixing_weight() == pytest.approx(0.5)
    for r in range(3):
        nbrs = {j: [torch.tensor([x0[j]], dtype=torch.float64)] for j in PATH3.neighbours(r)}
        xs = [torch.tensor([x0[r]], dtype=torch.float64)]
        chosen = aldsgd_update_(xs, r, nbrs, {j: scores[j] for j in [r, *nbrs]},
                                {j: PATH3.degree(j) for j in [r, *nbrs]}, 0.5)
        assert chosen == who[r]
        assert xs[0].item() == pytest.approx(expected[r], abs=1e-12)
    # The same through the strategy, in the simulator.
    results = _sim(scripted, 3, {"method": "aldsgd", "x0": [[v] for v in x0], "steps": 1,
                                 "losses": [scores], "kwargs": {"topology": PATH3}})
    for r, res in enumerate(results):
        assert res["x"][0] == pytest.approx([expected[r]], abs=1e-12)
        assert (res["best"][0], res["degree"][0]) == who[r]
        # State (8 bytes) and score + degree (16 bytes) to each neighbour.
        assert res["sent"][0] == res["received"][0] == PATH3.degree(r) * (8 + 16)


def check_diamond(results: list[dict[str, Any]]) -> None:
    """4 workers on a diamond (K4 minus 0-3: degrees 2, 3, 3, 2; a = 2 / (2 + 4) = 1/3),
    x = 1, 2, 4, 8, scores 1, 2, 2, NaN. B: the lowest finite score (ties: itself, then
    the lowest rank); D: the highest degree (same ties)."""
    x0, a = [1.0, 2.0, 4.0, 8.0], 1 / 3
    who = [(0, 1),  # 1 and 2 tie on degree 3: lowest rank
           (0, 1),  # itself ties with 2 on degree: itself
           (0, 2),
           (1, 1)]  # NaN never wins; 1 and 2 tie on score and degree: lowest rank
    # By hand: 1.82, 2.78, 2.82, 3.28 (x_mix = 7/3, 13/3, 11/3, 14/3).
    by_hand = [1.82, 2.78, 2.82, 3.28]
    for r, res in enumerate(results):
        b, d = who[r]
        nbrs = {j: x0[j] for j in DIAMOND.neighbours(r)}
        expected = _aldsgd_by_the_book(x0[r], nbrs, a, x0[b], x0[d])
        assert expected == pytest.approx(by_hand[r], abs=1e-12)
        assert (res["best"][0], res["degree"][0]) == who[r]
        assert res["x"][0] == pytest.approx([expected], abs=1e-12)
        assert res["stats"]["led"] == int(b != r)


DIAMOND_SPEC = {"method": "aldsgd", "x0": [[1.0], [2.0], [4.0], [8.0]], "steps": 1,
                "losses": [[1.0, 2.0, 2.0, math.nan]], "kwargs": {"topology": DIAMOND}}


def test_aldsgd_update_by_hand_on_four_workers_with_ties() -> None:
    assert DIAMOND.mixing_weight() == pytest.approx(1 / 3)
    check_diamond(_sim(scripted, 4, DIAMOND_SPEC))


# -- dynamic graphs ------------------------------------------------------------------------
def _hanging(size: int, order: list[int], attach: int, name: str) -> T.Topology:
    """A cycle through ``order`` plus worker 0 hanging off ``attach`` (degree 1)."""
    cycle = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    return T.from_edges(size, cycle + [(0, attach)], name=name)


G0 = _hanging(8, [1, 2, 3, 4, 5, 6, 7], 1, "G0")
G1 = _hanging(8, [1, 4, 7, 3, 6, 2, 5], 4, "G1")


@pytest.mark.parametrize("method,kwargs", [("dpsgd", {}), ("matcha", {"budget": 0.5}),
                                           ("aldsgd", {})])
def test_dynamic_graphs_are_used_in_turn(method: str, kwargs: dict[str, Any]) -> None:
    if method == "matcha":
        pytest.importorskip("cvxpy")
    graphs = [G0, G1]
    results = _sim(scripted, 8, {"method": method, "x0": _x0(8), "steps": 6,
                                 "kwargs": {"topology": graphs, **kwargs}})
    for r, res in enumerate(results):
        for t, peers in enumerate(res["peers"]):
            graph = graphs[t % 2]
            partners = graph.partners(r)
            assert peers == [partners[j] for j in res["active"][t] if partners[j] is not None]
            if method != "matcha":
                assert sorted(peers) == list(graph.neighbours(r))
        assert res["stats"]["graphs"] == ["G0", "G1"]
        # Each graph keeps its own matchings, probabilities and weight.
        assert [len(p) for p in res["probabilities"]] == [len(G0.matchings), len(G1.matchings)]
    if method != "matcha":  # over two steps a worker meets the union of its neighbours
        union = T.union(graphs)
        for r, res in enumerate(results):
            assert sorted(set(res["peers"][0]) | set(res["peers"][1])) == list(union.neighbours(r))


def test_a_degree_one_worker_reaches_consensus_faster_with_rotating_graphs() -> None:
    assert G0.degree(0) == G1.degree(0) == 1
    x0 = [[8.0]] + [[0.0]] * 7  # worker 0 starts far from the others; the mean is 1
    steps = 12
    distance = {}
    for name, topology in {"G0": G0, "G1": G1, "rotating": [G0, G1]}.items():
        results = _sim(scripted, 8, {"method": "dpsgd", "x0": x0, "steps": steps,
                                     "kwargs": {"topology": topology}})
        distance[name] = abs(results[0]["x"][-1][0] - 1.0)
        assert sum(res["x"][-1][0] for res in results) == pytest.approx(8.0, abs=1e-9)
    # Measured: 0.27 on either graph alone, 0.0034 rotating.
    assert distance["rotating"] < 0.1 * min(distance["G0"], distance["G1"]), distance


# -- resume and errors -------------------------------------------------------------------------
RING4B = T.from_edges(4, [(0, 2), (1, 3), (0, 1), (2, 3)], name="ring4b")


def _resume(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], stop: int | None) -> dict:
    torch.manual_seed(info.rank)

    def build() -> tuple[nn.Module, torch.optim.Optimizer, lsgd.Strategy]:
        model = SmallNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, STRATEGIES[method](model, opt, **kwargs)

    model, opt, strategy = build()
    for step, (x, y) in enumerate(batches(info.rank, 9)):
        if step == stop:
            saved = [model.state_dict(), opt.state_dict(), strategy.state_dict()]
            model, opt, strategy = build()
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
            strategy.load_state_dict(saved[2])
        loss = F.cross_entropy(strategy.model(x), y)
        opt.zero_grad()
        loss.backward()
        strategy.step(loss)
    return {"state": model.state_dict(), "stats": strategy.report().as_dict()}


@pytest.mark.parametrize("method,kwargs", [
    ("matcha", {"budget": 0.5, "topology": [T.ring(4), RING4B], "seed": 7}),
    ("aldsgd", {"budget": 0.5, "topology": [T.ring(4), RING4B], "period": 2}),
])
def test_resuming_from_state_dicts_gives_the_same_run(method: str, kwargs: dict[str, Any]) -> None:
    pytest.importorskip("cvxpy")
    straight = lsgd.simulate(_resume, 4, args=(method, kwargs, None), seed=0)
    resumed = lsgd.simulate(_resume, 4, args=(method, kwargs, 5), seed=0)
    for a, b in zip(straight, resumed):
        for key in a["state"]:
            assert torch.equal(a["state"][key], b["state"][key]), key
        for key in ("steps", "rounds", "communications", "exchanges", "bytes_sent", "led"):
            assert a["stats"].get(key) == b["stats"].get(key), key


def _construct(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any]) -> None:
    model = nn.Linear(2, 2)
    kwargs = dict(kwargs)  # shared by the simulated workers
    if kwargs.pop("seed_by_rank", False):
        kwargs["seed"] = info.rank
    STRATEGIES[method](model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


@pytest.mark.parametrize("method,kwargs,message", [
    ("matcha", {"budget": 0}, r"MATCHA: budget must be a number in \(0, 1\], got 0"),
    ("matcha", {"budget": 1.5}, r"budget must be a number in \(0, 1\], got 1.5"),
    ("dpsgd", {"period": 0}, "DPSGD: period must be a positive integer, got 0"),
    ("matcha", {"seed": -1}, "MATCHA: seed must be an integer >= 0, got -1"),
    ("aldsgd", {"p_B": 2}, r"ALDSGD: p_B must be a number in \[0, 1\], got 2"),
    ("aldsgd", {"c_B": 0.8, "c_D": 0.3}, "c_B \\+ c_D must be at most 1 .*got c_B=0.8 and c_D=0.3"),
    ("aldsgd", {"leader_window": 0}, "leader_window must be a positive integer, got 0"),
    ("dpsgd", {"mixing_weight": 0}, r"DPSGD: mixing_weight must be None \(the method's own\), "
                                    r"'max-degree' or a number in \(0, 1\], got 0"),
    ("aldsgd", {"mixing_weight": "metropolis"}, "mixing_weight must be .* got 'metropolis'"),
    ("dpsgd", {"topology": T.ring(5)}, "every graph must span the 4 workers; ring\\(5\\) has 5"),
    ("dpsgd", {"topology": T.from_edges(4, [(0, 1), (1, 2)])}, r"isolated workers \[3\]"),
    ("dpsgd", {"topology": []}, "topology must be a Topology, a non-empty list"),
    ("dpsgd", {"topology": [T.from_edges(4, [(0, 1)]), T.from_edges(4, [(2, 3)])]},
     "not connected"),
    ("matcha", {"seed_by_rank": True}, r"workers \[1, 2, 3\] were given other graphs, budget, "
                                       r"period, seed or weights than worker 0"),
])
def test_bad_hyperparameters_name_the_parameter_and_value(
    method: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(lsgd.SimulationError) as caught:
        lsgd.simulate(_construct, 4, args=(method, dict(kwargs)))
    assert isinstance(caught.value.__cause__, ValueError)
    assert re.search(message, str(caught.value.__cause__)), str(caught.value.__cause__)


def test_a_single_worker_never_communicates() -> None:
    model = Vector([1.0, 2.0])
    strategy = lsgd.ALDSGD(model, torch.optim.SGD(model.parameters(), lr=0.0))
    strategy.step(1.0)
    assert model.w.tolist() == [1.0, 2.0] and strategy.report().as_dict()["bytes_sent"] == 0
    assert strategy.spread() == 0.0


# -- end to end: 8 simulated workers on a ring learn the digits ----------------------------
@functools.cache
def _digits():
    return datasets.digits()


def learn_digits(info: lsgd.WorkerInfo, method: str, kwargs: dict[str, Any], steps: int) -> dict:
    data = _digits()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    strategy = STRATEGIES[method](model, opt, topology=T.ring(info.world_size), **kwargs)
    step, epoch = 0, 0
    while step < steps:
        order = datasets.shard(len(data.train_y), info.rank, info.world_size, epoch)
        for batch in order[: len(order) // 16 * 16].split(16):
            loss = F.cross_entropy(model(data.train_x[batch]), data.train_y[batch])
            opt.zero_grad()
            loss.backward()
            strategy.step(loss)
            step += 1
            if step == steps:
                break
        epoch += 1
    center, spread = strategy.center(), strategy.spread()
    with torch.no_grad():
        accuracy = (center(data.test_x).argmax(1) == data.test_y).float().mean().item()
    return {"accuracy": accuracy, "spread": spread, "stats": strategy.report().as_dict()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method,kwargs", [("dpsgd", {}), ("matcha", {"budget": 0.5}),
                                           ("aldsgd", {})])
def test_eight_workers_on_a_ring_learn_digits(method: str, kwargs: dict[str, Any]) -> None:
    if method == "matcha":
        pytest.importorskip("cvxpy")
    pytest.importorskip("sklearn")
    steps = 100
    results = lsgd.simulate(learn_digits, 8, args=(method, kwargs, steps), seed=0)
    # Chance is 0.10; measured 0.976-0.980 for all three with 100 steps of batch 16.
    assert results[0]["accuracy"] >= 0.93, results[0]
    assert 0 < results[0]["spread"] < 1.0
    assert results[0]["stats"]["steps"] == steps


# -- the same under real gloo processes ------------------------------------------------------
TRAIN = {
    "dpsgd_train": {"method": "dpsgd", "steps": 5, "kwargs": {"topology": T.ring(4)}},
    "matcha_train": {"method": "matcha", "steps": 6,
                     "kwargs": {"topology": [T.ring(4), RING4B], "budget": 0.5, "seed": 1}},
    # Real losses pick B: the elections must agree across the backends too.
    "aldsgd_train": {"method": "aldsgd", "steps": 6, "kwargs": {"topology": T.ring(4)}},
}


@functools.cache
def _launched() -> list[dict[str, Any]]:
    specs = {"exchange": ("exchange", {}), "diamond": ("scripted", DIAMOND_SPEC),
             **{name: ("train", spec) for name, spec in TRAIN.items()}}
    return lsgd.launch(bundle, 4, args=(specs,), timeout=60)


@pytest.mark.slow  # four gloo processes, beside the other multi-process checks
@pytest.mark.timeout(240)
def test_exchange_and_aldsgd_under_gloo() -> None:
    launched = _launched()
    check_exchange([r["exchange"] for r in launched])
    check_diamond([r["diamond"] for r in launched])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(TRAIN))
def test_simulator_matches_gloo_processes(name: str) -> None:
    if "matcha" in name:
        pytest.importorskip("cvxpy")
    processes = [r[name] for r in _launched()]
    simulated = _sim(train, 4, TRAIN[name])
    for p, s in zip(processes, simulated):
        for key in p["state"]:
            torch.testing.assert_close(p["state"][key].double(), s["state"][key].double(),
                                       rtol=0, atol=1e-5, msg=key)
        for key in ("bytes_sent", "bytes_received", "rounds", "exchanges"):
            assert p["stats"][key] == s["stats"][key], key
        assert p["spread"] == pytest.approx(s["spread"], rel=1e-4)
