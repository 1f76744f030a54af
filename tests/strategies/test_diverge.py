"""A diverging worker (NaN or infinite loss or state) and workers that built different models.

Every case runs in the in-process simulator on a one-vector float64 model, so
the expected states are exact binary fractions. A worker's parameters are set
to NaN right before a chosen step; the tests check who leads, what every
worker holds afterwards, the counters (``resets``, ``skipped_steps``,
``skipped_rounds``, ``dropped_neighbours``), the traffic, and that
``DivergedError`` is raised on every worker at the same step when no worker
is left healthy (each worker catches it, so a worker left waiting in a
collective would show up as the simulator's deadlock error).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd import topology as T

NAN = math.nan
X0 = [[1.0, 8.0], [2.0, 4.0], [3.0, 0.0], [4.0, -4.0]]
METHODS = {
    "lsgd": lsgd.LSGD, "easgd": lsgd.EASGD, "local-sgd": lsgd.LocalSGD,
    "allreduce": lsgd.AllReduce, "dpsgd": lsgd.DPSGD, "matcha": lsgd.MATCHA,
    "aldsgd": lsgd.ALDSGD,
}


class Quadratic(nn.Module):
    """One float64 parameter vector ``w``; the loss ``||w - x||^2 / 2`` has gradient ``w - x``."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(values, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (self.w - x).pow(2).sum()


def lerp(a: list[float], b: list[float], weight: float) -> list[float]:
    return [x + weight * (y - x) for x, y in zip(a, b)]


def run(info: lsgd.WorkerInfo, spec: dict[str, Any]) -> dict[str, Any]:
    """Drive a strategy for ``steps`` steps; ``nan[step]`` lists the ranks whose
    parameters turn NaN right before that step (1-based).

    ``losses[step][rank]`` (default 0; cycled) are the scripted losses,
    ``grads[rank]`` a constant gradient (default 0), ``lr`` (default 0) and
    ``momentum`` (default 0.9) the SGD's. AllReduce instead runs the
    :class:`Quadratic` loss of ``targets[step][rank]`` through
    ``strategy.model`` (a NaN target makes a NaN gradient). A
    ``DivergedError`` is caught and reported with its step.
    """
    model = Quadratic(spec["x0"][info.rank])
    opt = torch.optim.SGD(model.parameters(), lr=spec.get("lr", 0.0),
                          momentum=spec.get("momentum", 0.9))
    kwargs = dict(spec.get("kwargs", {}))
    if spec["method"] != "allreduce":
        kwargs.setdefault("init", "independent")
    strategy = METHODS[spec["method"]](model, opt, **kwargs)
    out: dict[str, Any] = {"x": [], "sent": [], "leader": [], "opt_state": [], "best": [],
                           "error": None, "error_step": None}
    grads = spec.get("grads", [[0.0] * len(spec["x0"][0])] * info.world_size)
    for step in range(1, spec["steps"] + 1):
        if info.rank in spec.get("nan", {}).get(step, []):
            with torch.no_grad():
                model.w.fill_(NAN)
        before = strategy.report().as_dict()["bytes_sent"]
        if spec["method"] == "allreduce":
            targets = spec["targets"][(step - 1) % len(spec["targets"])]
            opt.zero_grad()
            strategy.model(torch.tensor(targets[info.rank], dtype=torch.float64)).backward()
        else:
            model.w.grad = torch.tensor(grads[info.rank], dtype=torch.float64)
        losses = spec.get("losses")
        loss = losses[(step - 1) % len(losses)][info.rank] if losses else 0.0
        try:
            strategy.step(torch.tensor(loss, dtype=torch.float64))
        except lsgd.DivergedError as error:
            out["error"], out["error_step"] = str(error), step
            break
        out["x"].append(model.w.detach().clone())
        out["sent"].append(strategy.report().as_dict()["bytes_sent"] - before)
        out["leader"].append(getattr(strategy, "leader_rank", None))
        out["best"].append(getattr(strategy, "best_rank", None))
        out["opt_state"].append(len(opt.state))
    out["report"] = strategy.report()
    out["saved"] = strategy.state_dict()
    out["center"] = strategy.center_state.views[0].clone() if spec["method"] == "easgd" else None
    return out


def _sim(spec: dict[str, Any], world: int = 4, groups: int = 1) -> list[dict[str, Any]]:
    return lsgd.simulate(run, world, groups, args=(spec,), seed=0)


def _finite(x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all())


def _assert_raised_everywhere(results: list[dict[str, Any]], step: int) -> None:
    for r, res in enumerate(results):
        assert res["error_step"] == step, r
        assert re.search(rf"every worker's .* is NaN or infinite at step {step}: lower the "
                         "learning rate", res["error"]), res["error"]


# -- LSGD ------------------------------------------------------------------------------
def test_lsgd_diverged_worker_never_leads_and_is_reset_to_the_leader() -> None:
    # Worker 2 has the lowest loss but its parameters (and losses) go NaN at step 3.
    losses = [[3, 1, 0.5, 4], [3, 1, 0.5, 4], [3, 1, NAN, 4], [3, 1, NAN, 4],
              [3, 1, 0.5, 4], [3, 1, 0.5, 4]]
    results = _sim({"method": "lsgd", "x0": X0, "steps": 6, "losses": losses, "nan": {3: [2]},
                    "kwargs": dict(pull=0.5, scope=0.0, period=2)})
    for r, res in enumerate(results):
        # Rounds at steps 2, 4, 6: worker 2 leads while healthy, never at step 4, and
        # leads again at step 6 because its reset emptied the window of NaN losses.
        assert res["leader"] == [None, 2, 2, 1, 1, 2], r
        assert res["report"].resets == (1 if r == 2 else 0)
        assert res["saved"]["resets"] == res["report"].resets
        # The diverged round costs what a healthy one does: the score all-gather
        # (3 x 8 bytes) and the leader's 16 bytes along the tree from worker 1.
        assert res["sent"][3] == 24 + {1: 32, 2: 16}.get(r, 0), r
        assert all(_finite(x) for x in res["x"][3:]), r
    leader = results[1]["x"][3]
    assert torch.equal(results[2]["x"][3], leader), "reset: an exact copy of the leader"
    assert leader.tolist() == lerp(X0[1], X0[2], 0.5)  # pulled toward 2 at step 2
    assert [res["opt_state"][3] for res in results] == [1, 1, 0, 1], "reset clears momentum"
    for r in (0, 3):  # the healthy workers pulled as usual: toward 2 at step 2, then 1
        assert results[r]["x"][3].tolist() == lerp(lerp(X0[r], X0[2], 0.5), leader.tolist(), 0.5)


def test_lsgd_a_diverged_group_waits_for_the_global_round() -> None:
    # Group 1 (workers 2, 3) is NaN from step 1: its local rounds find no finite score
    # and are skipped; the global round at step 2 resets both to the global leader.
    losses = [[2, 1, 0.5, 3]]
    results = _sim({"method": "lsgd", "x0": X0, "steps": 3, "losses": losses, "nan": {1: [2, 3]},
                    "kwargs": dict(pull=0.5, pull_global=0.25, scope=0.0, period=1,
                                   global_period=2)}, groups=2)
    for r, res in enumerate(results):
        assert res["leader"][1] == 1
        assert res["report"].resets == (1 if r >= 2 else 0)
        assert res["error"] is None
    assert not _finite(results[2]["x"][0]) and not _finite(results[3]["x"][0])
    for r in (2, 3):
        assert torch.equal(results[r]["x"][1], results[1]["x"][1])
    # Step 3: a local round; group 1 elects again among its (identical) reset states.
    assert torch.equal(results[2]["x"][2], results[3]["x"][2])


def test_lsgd_every_worker_diverged_raises_everywhere_at_once() -> None:
    losses = [[3, 1, 2, 4]] * 3 + [[NAN] * 4]
    results = _sim({"method": "lsgd", "x0": X0, "steps": 6, "losses": losses,
                    "kwargs": dict(pull=0.5, scope=0.1, period=2)})
    _assert_raised_everywhere(results, 4)
    assert "every worker's state or training loss is NaN" in results[0]["error"]


# -- AllReduce ---------------------------------------------------------------------------
def test_allreduce_skips_a_non_finite_step_on_every_worker() -> None:
    # Gradient w - target: the workers' targets average to [2, 4]; worker 3's is infinite
    # at step 2, so that step is skipped by everyone and steps 1 and 3 halve the way.
    targets = [[0.0, 2.0], [2.0, 4.0], [2.0, 4.0], [4.0, 6.0]]
    bad = [t if r != 3 else [math.inf, 6.0] for r, t in enumerate(targets)]
    spec = {"method": "allreduce", "x0": X0, "steps": 3, "lr": 0.5, "momentum": 0.0,
            "targets": [targets, bad, targets]}
    results = _sim(spec)
    after_one = lerp(X0[0], [2.0, 4.0], 0.5)  # every replica starts from rank 0's state
    after_three = lerp(after_one, [2.0, 4.0], 0.5)
    for res in results:
        assert [x.tolist() for x in res["x"]] == [after_one, after_one, after_three]
        assert res["report"].details["skipped_steps"] == 1
        assert res["saved"]["skipped_steps"] == 1
        assert res["report"].steps == 3 and res["report"].resets == 0


def test_allreduce_with_non_finite_parameters_raises_everywhere() -> None:
    spec = {"method": "allreduce", "x0": X0, "steps": 3, "lr": 0.5, "nan": {2: [0, 1, 2, 3]},
            "targets": [[[1.0, 1.0]] * 4]}
    _assert_raised_everywhere(_sim(spec), 2)


# -- Local SGD -----------------------------------------------------------------------------
def test_local_sgd_averages_the_healthy_workers_only() -> None:
    results = _sim({"method": "local-sgd", "x0": X0, "steps": 2, "nan": {2: [1]},
                    "kwargs": dict(period=2)})
    # The simulator sums in rank order; worker 1 contributes zeros; then / 3.
    mean = [(X0[0][i] + 0.0 + X0[2][i] + X0[3][i]) / 3 for i in range(2)]
    ring = 2 * 3 * 16 // 4  # a ring all-reduce of the 16-byte state among 4
    for r, res in enumerate(results):
        assert res["x"][1].tolist() == mean, r
        assert res["report"].resets == (1 if r == 1 else 0)
        assert res["saved"]["resets"] == res["report"].resets
        assert res["opt_state"][1] == (0 if r == 1 else 1)
        assert res["sent"] == [0, 2 * ring], "the rare path: one more state all-reduce"
        assert res["report"].details["skipped_rounds"] == 0


def test_hierarchical_local_sgd_leaves_a_diverged_group_to_the_global_average() -> None:
    results = _sim({"method": "local-sgd", "x0": X0, "steps": 2, "nan": {1: [2, 3]},
                    "kwargs": dict(period=1, hierarchical=True, global_period=2)}, groups=2)
    group0 = [(a + b) / 2 for a, b in zip(X0[0], X0[1])]
    for r, res in enumerate(results):
        assert res["report"].details["skipped_rounds"] == (1 if r >= 2 else 0)
        assert res["report"].resets == (1 if r >= 2 else 0)
        assert res["x"][1].tolist() == group0, r
    assert results[0]["x"][0].tolist() == group0
    assert not _finite(results[2]["x"][0])


def test_local_sgd_every_worker_diverged_raises_everywhere() -> None:
    _assert_raised_everywhere(_sim({"method": "local-sgd", "x0": X0, "steps": 4,
                                    "nan": {3: [0, 1, 2, 3]}, "kwargs": dict(period=2)}), 4)


# -- EASGD ----------------------------------------------------------------------------------
def test_easgd_center_moves_by_the_healthy_workers_elastic_forces_only() -> None:
    x0 = [[1.0], [2.0], [3.0], [4.0]]
    results = _sim({"method": "easgd", "x0": x0, "steps": 1, "nan": {1: [3]},
                    "grads": [[0.0]] * 4, "kwargs": dict(moving_rate=0.4, period=1)})
    # alpha = 0.1, the center starts at the mean 2.5 (init="independent").
    c = 2.5
    center = c + 0.1 * sum(x[0] - c for x in x0[:3])  # 2.35: worker 3 exerts no force
    for r, res in enumerate(results):
        assert res["center"].tolist() == pytest.approx([center], abs=1e-12)
        if r < 3:
            assert res["x"][0].tolist() == pytest.approx([x0[r][0] - 0.1 * (x0[r][0] - c)],
                                                          abs=1e-12)
    assert torch.equal(results[3]["x"][0], results[3]["center"]), "reset to the new center"
    assert [res["report"].resets for res in results] == [0, 0, 0, 1]
    assert results[3]["opt_state"][0] == 0
    assert all(torch.equal(res["center"], results[0]["center"]) for res in results)


def test_easgd_every_worker_diverged_raises_everywhere() -> None:
    _assert_raised_everywhere(_sim({"method": "easgd", "x0": X0, "steps": 3,
                                    "nan": {2: [0, 1, 2, 3]}, "kwargs": dict(period=1)}), 2)


# -- Decentralized --------------------------------------------------------------------------
def test_dpsgd_resets_a_diverged_worker_to_its_finite_neighbours_mean() -> None:
    results = _sim({"method": "dpsgd", "x0": X0, "steps": 2, "nan": {1: [0]},
                    "kwargs": dict(mixing_weight=0.25)})
    # Ring 0-1-2-3-0. Worker 0 takes the mean of 1 and 3; 1 and 3 drop 0's state and
    # give its weight to themselves; 2 mixes as usual.
    assert results[0]["x"][0].tolist() == [3.0, 0.0]
    assert results[1]["x"][0].tolist() == [0.75 * 2 + 0.25 * 3, 0.75 * 4 + 0.25 * 0]
    assert results[2]["x"][0].tolist() == [0.5 * 3 + 0.25 * (2 + 4), 0.5 * 0 + 0.25 * (4 - 4)]
    assert results[3]["x"][0].tolist() == [0.75 * 4 + 0.25 * 3, 0.75 * -4 + 0.25 * 0]
    assert [res["report"].resets for res in results] == [1, 0, 0, 0]
    assert [res["report"].details["dropped_neighbours"] for res in results] == [0, 1, 0, 1]
    assert [res["opt_state"][0] for res in results] == [0, 1, 1, 1]
    for res in results:
        assert all(_finite(x) for x in res["x"])
        assert res["sent"] == [2 * 16, 2 * 16], "the same exchange as a healthy step"
        assert res["saved"]["dropped_neighbours"] == res["report"].details["dropped_neighbours"]


def test_aldsgd_never_follows_a_diverged_neighbour() -> None:
    # Worker 0 has the best loss but a NaN state: its neighbours 1 and 3 must not pick it.
    losses = [[0.1, 1.0, 2.0, 3.0]]
    results = _sim({"method": "aldsgd", "x0": X0, "steps": 3, "nan": {1: [0]}, "losses": losses,
                    "kwargs": dict(mixing_weight=0.25)})
    assert results[1]["best"][0] == 1 and results[3]["best"][0] == 2
    assert results[0]["x"][0].tolist() == [3.0, 0.0]
    assert [res["report"].resets for res in results] == [1, 0, 0, 0]
    for res in results:
        assert all(_finite(x) for x in res["x"])
    # From step 2 worker 0 is healthy again and, with the best loss, leads its neighbours.
    assert results[1]["best"][1] == 0 and results[3]["best"][1] == 0


def test_matcha_keeps_healthy_workers_finite() -> None:
    results = _sim({"method": "matcha", "x0": X0, "steps": 6, "nan": {1: [2]},
                    "kwargs": dict(budget=0.5, seed=3, mixing_weight=0.25)})
    assert results[2]["report"].resets == 1
    assert all(_finite(res["x"][-1]) for res in results)
    for r in (0, 1, 3):
        assert all(_finite(x) for x in results[r]["x"]), r


def test_decentralized_all_diverged_raises_only_on_a_complete_graph() -> None:
    nan_all = {1: [0, 1, 2]}
    complete = _sim({"method": "dpsgd", "x0": X0[:3], "steps": 3, "nan": nan_all,
                     "kwargs": dict(topology=T.complete(3), mixing_weight=0.25)}, world=3)
    _assert_raised_everywhere(complete, 1)
    # On a ring nobody sees everyone: the workers keep waiting for a finite neighbour.
    ring = _sim({"method": "dpsgd", "x0": X0, "steps": 2, "nan": {1: [0, 1, 2, 3]},
                 "kwargs": dict(mixing_weight=0.25)})
    for res in ring:
        assert res["error"] is None and res["report"].resets == 0
        assert res["report"].details["dropped_neighbours"] == 4


# -- mismatched workers ---------------------------------------------------------------------
def _mismatched(info: lsgd.WorkerInfo, method: str, shapes: dict[int, tuple[int, Any]]) -> str:
    inputs, dtype = shapes.get(info.rank, (2, torch.float32))
    model = nn.Linear(inputs, 2).to(dtype)
    try:
        METHODS[method](model, torch.optim.SGD(model.parameters(), lr=0.1))
    except ValueError as error:
        return str(error)
    return ""


@pytest.mark.parametrize("method", ["lsgd", "allreduce", "dpsgd"])
def test_mismatched_models_raise_on_every_worker_naming_the_ranks(method: str) -> None:
    messages = lsgd.simulate(_mismatched, 3, args=(method, {2: (3, torch.float32)}))
    for message in messages:
        assert "worker 2's model differs from worker 0's: 2 tensors / 8 values vs 2 / 6" in message
        assert "every worker must build the same model" in message
        assert "worker 1's" not in message
    # Same sizes, another dtype: still caught.
    messages = lsgd.simulate(_mismatched, 3, args=(method, {1: (2, torch.float64)}))
    assert all("worker 1's model differs from worker 0's: 2 tensors / 6 values vs 2 / 6"
               in m for m in messages)


def test_matching_models_pass_and_the_check_is_not_training_traffic() -> None:
    messages = lsgd.simulate(_mismatched, 3, args=("lsgd", {}))
    assert messages == ["", "", ""]
    results = _sim({"method": "lsgd", "x0": X0, "steps": 1, "losses": [[3, 1, 2, 4]],
                    "kwargs": dict(pull=0.5, scope=0.0, period=1)})
    for res in results:
        assert res["report"].eval_bytes_sent == 0
        assert res["sent"][0] == res["report"].bytes_sent


# -- checkpoints -----------------------------------------------------------------------------
@pytest.mark.parametrize("method,key", [("lsgd", None), ("local-sgd", "skipped_rounds"),
                                        ("allreduce", "skipped_steps"),
                                        ("dpsgd", "dropped_neighbours")])
def test_the_counters_survive_a_checkpoint(method: str, key: str | None) -> None:
    def build() -> lsgd.Strategy:
        model = Quadratic([1.0])
        return METHODS[method](model, torch.optim.SGD(model.parameters(), lr=0.1))

    state = build().state_dict()
    state["resets"] = 2
    if key is not None:
        state[key] = 3
    resumed = build()
    resumed.load_state_dict(state)
    report = resumed.report()
    assert report.resets == 2 and report.as_dict()["resets"] == 2
    if key is not None:
        assert report.details[key] == 3
