"""The same scenarios through real torch.distributed gloo processes.

Worker processes start slowly (each imports torch), so each layout is launched
once and runs every scenario of that layout; the tests then check each result.
Every launch has a collective timeout, and pytest-timeout bounds the test.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

import lsgd
from tests import scenarios
from tests.cases import CASES

TRAIN = {
    # name: (world, groups, spec) -- compared against the simulator and DDP
    "lsgd_dropout": (4, 2, {"method": "lsgd", "steps": 6, "dropout": 0.3,
                            "kwargs": {"period": 2, "global_period": 4, "pull": 0.3, "scope": 0.1}}),
    "allreduce": (4, 2, {"method": "allreduce", "steps": 5}),
    "ddp": (4, 2, {"method": "ddp", "steps": 5}),
    "allreduce_2": (2, 1, {"method": "allreduce", "steps": 4}),
    "ddp_2": (2, 1, {"method": "ddp", "steps": 4}),
    "easgd_2": (2, 1, {"method": "easgd", "steps": 4, "kwargs": {"period": 2}}),
    # overlapped, fragmented, compressed rounds (and the defaults spelled out)
    "diloco_int8": (4, 2, {"method": "diloco", "steps": 10, "batchnorm": False, "kwargs": {
        "period": 4, "overlap": 2, "fragments": 2, "compress": "int8", "error_feedback": True}}),
    "lsgd_int8": (4, 2, {"method": "lsgd", "steps": 10, "batchnorm": False, "kwargs": {
        "period": 2, "global_period": 4, "overlap": 1, "compress": "int8"}}),
    "local_sgd_bf16": (4, 2, {"method": "local-sgd", "steps": 10, "batchnorm": False, "kwargs": {
        "period": 4, "overlap": 3, "compress": "bf16"}}),
    "easgd_overlap": (4, 2, {"method": "easgd", "steps": 10, "kwargs": {
        "period": 4, "overlap": 2, "fragments": 4}}),
    "diloco_defaults": (4, 2, {"method": "diloco", "steps": 10, "kwargs": {
        "period": 4, "overlap": 0, "fragments": 1, "compress": "none"}}),
    "diloco_plain": (4, 2, {"method": "diloco", "steps": 10, "kwargs": {"period": 4}}),
}
LAYOUTS = sorted({(w, g) for w, g, *_ in CASES.values()} | {(w, g) for w, g, _ in TRAIN.values()})


def _specs(world: int, groups: int) -> dict[str, tuple[str, dict[str, Any]]]:
    specs = {name: (fn, spec) for name, (w, g, fn, spec, _) in CASES.items() if (w, g) == (world, groups)}
    for name, (w, g, spec) in TRAIN.items():
        if (w, g) == (world, groups):
            specs[name] = ("ddp_reference" if spec["method"] == "ddp" else "train_small", spec)
    return specs


@functools.cache
def launched(world: int, groups: int) -> list[dict[str, Any]]:
    return lsgd.launch(scenarios.bundle, world, groups, args=(_specs(world, groups),), timeout=60)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_under_gloo(name: str) -> None:
    world, groups, _, _, check = CASES[name]
    check([r[name] for r in launched(world, groups)])


def _assert_states_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key].double(), b[key].double(), rtol=0, atol=tol, msg=key)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("suffix", ["", "_2"])
def test_allreduce_matches_ddp(suffix: str) -> None:
    """AllReduce under gloo (DDP) and in the simulator equal torch's own DDP."""
    world, groups, spec = TRAIN["allreduce" + suffix]
    reference = launched(world, groups)
    simulated = lsgd.simulate(scenarios.train_small, world, groups, args=(spec,))
    for rank in range(world):
        ddp = reference[rank]["ddp" + suffix]["state"]
        _assert_states_close(reference[rank]["allreduce" + suffix]["state"], ddp, 1e-6)
        _assert_states_close(simulated[rank]["state"], ddp, 1e-6)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["lsgd_dropout", "easgd_2"])
def test_simulator_matches_processes(name: str) -> None:
    """Same seeds, same data: the simulator reproduces the processes, dropout included."""
    world, groups, spec = TRAIN[name]
    processes = [r[name] for r in launched(world, groups)]
    simulated = lsgd.simulate(scenarios.train_small, world, groups, args=(spec,))
    for p, s in zip(processes, simulated):
        _assert_states_close(p["state"], s["state"], 1e-5)
        assert p["rng"] == s["rng"], "each simulated worker must draw its own random stream"
        for key in ("bytes_sent", "bytes_received", "rounds"):
            assert p["stats"][key] == s["stats"][key], key


@pytest.mark.timeout(240)
def test_allreduce_traffic_is_a_ring_allreduce() -> None:
    world, groups, spec = TRAIN["allreduce"]
    model = scenarios.SmallNet()
    params = sum(p.numel() * 4 for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    ring = 2 * (world - 1) * params // world
    for rank, res in enumerate(launched(world, groups)):
        stats = res["allreduce"]["stats"]
        # Rank 0's buffers go out each step along gloo's binomial tree (4 workers:
        # 0 -> 1, then 0 -> 2 and 1 -> 3): rank 0 sends them twice, rank 1 once.
        per_step = ring + buffers * [2, 1, 0, 0][rank]
        assert stats["bytes_sent"] == spec["steps"] * per_step
        assert stats["rounds"] == spec["steps"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name,exact", [("diloco_int8", True), ("lsgd_int8", True),
                                        ("local_sgd_bf16", True), ("easgd_overlap", False)])
def test_overlapped_and_compressed_rounds_under_gloo_match_the_simulator(name: str,
                                                                         exact: bool) -> None:
    """Compressed all-reduces add in rank order under both backends, so those runs agree
    bit for bit (without BatchNorm, whose statistics are averaged by gloo's own
    all-reduce, which adds plain floats in its own order)."""
    world, groups, spec = TRAIN[name]
    processes = [r[name] for r in launched(world, groups)]
    simulated = lsgd.simulate(scenarios.train_small, world, groups, args=(spec,))
    for p, s in zip(processes, simulated):
        _assert_states_close(p["state"], s["state"], 0.0 if exact else 1e-5)
        for key in ("bytes_sent", "bytes_received", "rounds"):
            assert p["stats"][key] == s["stats"][key], key


@pytest.mark.timeout(240)
def test_the_default_options_under_gloo_are_the_blocking_rounds() -> None:
    world, groups, _ = TRAIN["diloco_plain"]
    for result in launched(world, groups):
        plain, given = result["diloco_plain"], result["diloco_defaults"]
        for key in plain["state"]:
            assert torch.equal(plain["state"][key], given["state"][key]), key
        assert plain["stats"]["bytes_sent"] == given["stats"]["bytes_sent"]
