"""Short real trainings: 4 simulated workers on scikit-learn's digits."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["quickstart"] = module  # so dataclasses and pickling can find it
    spec.loader.exec_module(module)
    return module


quickstart = _quickstart()


@pytest.mark.parametrize("method", ["lsgd", "easgd", "local-sgd", "allreduce"])
def test_four_simulated_workers_learn_digits(method: str) -> None:
    cfg = quickstart.Config(method=method, dataset="digits", steps=150, workers=4)
    report = quickstart.run(cfg)
    # Chance is 0.10; each method reaches 0.98-0.99 with this budget.
    assert report["test_accuracy"] >= 0.95, report
    assert report["rounds"] == (150 if method == "allreduce" else 150 // cfg.period)


def test_lsgd_sends_far_less_than_allreduce() -> None:
    base = dict(dataset="digits", steps=40, workers=4)
    lsgd_bytes = quickstart.run(quickstart.Config(method="lsgd", **base))["bytes_sent_per_worker"]
    ar_bytes = quickstart.run(quickstart.Config(method="allreduce", **base))["bytes_sent_per_worker"]
    data = quickstart.load(quickstart.Config(dataset="digits"))
    state = sum(p.numel() * 4 for p in quickstart.make_model(data).parameters())
    # All-reduce: 40 steps of a ring all-reduce, 2 * 3/4 of the state each per worker.
    assert ar_bytes == 40 * 1.5 * state
    # LSGD: the initial election and 5 rounds; each broadcasts the leader's state to the
    # 3 others (3/4 of the state per worker on average: every byte received was sent
    # by someone) and all-gathers 3 scores of 8 bytes to every worker.
    assert lsgd_bytes == 6 * (3 * state / 4 + 3 * 8)
    assert ar_bytes / lsgd_bytes > 13
