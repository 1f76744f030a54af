"""Elastic training on torchft: survivors keep stepping, a lost worker rejoins from a live peer.

The multi-process tests run real worker processes, each a torchft replica
group with its own elastic agent, and a lighthouse; they need the extra
``lsgd[torchft]`` (``scripts/test.sh --all`` installs it) and are skipped
without it. The checks of bad input and of the missing extra run everywhere.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import lsgd
from lsgd.comm.base import LocalCommunicator

HAVE_TORCHFT = importlib.util.find_spec("torchft") is not None
needs_torchft = pytest.mark.skipif(not HAVE_TORCHFT, reason="torchft is not installed "
                                   "(pip install 'lsgd[torchft]')")

STEPS, PERIOD, SLOTS = 96, 8, 3


class _Elastic(LocalCommunicator):
    """Looks elastic to a strategy (for the checks made at construction)."""

    elastic = True

    def add_state(self, name: str, save: Any, load: Any) -> None:
        self.registered = (name, save, load)


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("method, knobs, message", [
    ("easgd", {}, "runs LSGD, DiLoCo and local SGD"),
    ("allreduce", {}, "runs LSGD, DiLoCo and local SGD"),
    ("lsgd", {"overlap": 2}, "drop overlap, fragments and compress"),
    ("diloco", {"compress": "int8"}, "drop overlap, fragments and compress"),
    ("local-sgd", {"asynchronous": True}, "drop asynchronous=True"),
])
def test_what_elastic_rounds_refuse(method: str, knobs: dict[str, Any], message: str) -> None:
    model, optimizer = _model()
    with pytest.raises(ValueError, match=message):
        lsgd.make_strategy(method, model, optimizer, comm=_Elastic(), **knobs)


def test_an_elastic_strategy_sends_nothing_at_construction() -> None:
    comm = _Elastic()
    model, optimizer = _model()
    strategy = lsgd.make_strategy("lsgd", model, optimizer, comm=comm, period=4)
    assert comm.stats("init").calls == 0 and hasattr(comm, "registered")
    assert not strategy._joined  # it joins at its first step


def test_without_torchft_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lsgd.comm import elastic

    real = importlib.util.find_spec
    monkeypatch.setattr(elastic.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchft" else real(name, *a))
    with pytest.raises(RuntimeError, match=r"pip install 'lsgd\[torchft\]'"):
        elastic.ElasticCommunicator(0, 2, lighthouse="http://127.0.0.1:1")


@pytest.mark.parametrize("kwargs, message", [
    ({"slot": 3, "slots": 3}, r"slot must be in \[0, 3\)"),
    ({"slot": 0, "slots": 3, "min_members": 4}, r"min_members must be in \[1, 3\]"),
])
def test_bad_slots(kwargs: dict[str, Any], message: str) -> None:
    from lsgd.comm.elastic import ElasticCommunicator

    with pytest.raises(ValueError, match=message):
        ElasticCommunicator(lighthouse="http://127.0.0.1:1", **kwargs)


# -- real processes ----------------------------------------------------------------

def _job(method: str, faults: list[tuple[Any, ...]], tmp: Path, *, restarts: int = 1,
         join_timeout: float = 30.0, steps: int = STEPS) -> list[dict[str, Any]]:
    from lsgd.train.config import make_config
    from lsgd.train.elastic import train_elastic
    from lsgd.train.runner import prepare

    cfg = make_config({"method": method, "model": "mlp", "dataset": "digits",
                       "workers": SLOTS, "period": PERIOD, "batch_size": 32, "seed": 0,
                       "steps": steps, "elastic": True, "restarts": restarts,
                       "join_timeout": join_timeout, "timeout": 10.0, "quiet": True,
                       "out": str(tmp / "run")})
    prepare(cfg, cfg.out_dir)
    summary, records = train_elastic(cfg, faults)
    assert summary["steps"] == steps and (tmp / "run" / "metrics.csv").is_file()
    return records


def _steps(record: dict[str, Any]) -> list[int]:
    return [steps for _, steps in record["trace"]]


def _survivor_checks(records: list[dict[str, Any]], survivors: list[int]) -> None:
    """Survivors took every step once, in order, with no restart."""
    for slot in survivors:
        assert records[slot]["attempt"] == 0
        assert _steps(records[slot]) == list(range(1, STEPS + 1))


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lsgd_survives_its_leader_and_then_another_worker(tmp_path: Path) -> None:
    """The leader of step 30 (worker 0 with these seeds) dies, then worker 2 before
    step 60 (two failures in a row); each is restarted by its own agent, rejoins
    within two rounds as an exact copy of the elected leader, and the job ends with
    every worker, the survivors never going back a step."""
    records = _job("lsgd", [("kill", "leader", 30), ("kill", 2, 60)], tmp_path)
    restarted = [r["slot"] for r in records if r["attempt"] == 1]
    assert restarted == [0, 2]
    _survivor_checks(records, [1])
    for slot, died in ((0, 30), (2, 60)):
        record = records[slot]
        steps = _steps(record)
        assert steps == list(range(steps[0], STEPS + 1))
        assert steps[0] <= died + 2 * PERIOD  # it joined within two rounds of its death
        assert record["heals"] == 1 and record["resets"] >= 1
        assert record["join_gap"] == 0.0  # exactly the leader's state
        assert record["join_bytes"] > 0
    assert all(r["steps"] == STEPS for r in records)
    assert min(r["accuracy"] for r in records) > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_diloco_survives_a_kill_and_every_copy_of_the_global_state_agrees(tmp_path: Path) -> None:
    records = _job("diloco", [("kill", 1, 44)], tmp_path)
    _survivor_checks(records, [0, 2])
    joined = records[1]
    assert joined["attempt"] == 1 and joined["heals"] == 1
    assert _steps(joined)[0] in (48, 56)  # it joined at the next round, or the one after
    assert joined["join_gap"] == 0.0  # reset exactly to the global parameters
    # The global parameters and outer momentum it received keep every copy identical.
    assert len({r["accuracy"] for r in records}) == 1 and records[0]["accuracy"] > 0.8


@needs_torchft
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hung_worker_is_left_behind_and_healed_when_it_returns(tmp_path: Path) -> None:
    """Worker 0 sleeps 2 s at step 20 (its heartbeats go on): after the lighthouse's
    join timeout (0.5 s) the others go on without it; when it wakes it is behind,
    is healed from a live peer at its next round and jumps to the job's step."""
    steps = 2000
    records = _job("local-sgd", [("hang", 0, 20, 2.0)], tmp_path, restarts=0, join_timeout=0.5,
                   steps=steps)
    for record in records:
        taken = _steps(record)
        assert record["attempt"] == 0 and taken[-1] == steps
        assert all(b > a for a, b in zip(taken, taken[1:]))  # never back
    hung = _steps(records[0])
    assert records[0]["heals"] >= 1 and records[0]["join_bytes"] > 0
    assert max(b - a for a, b in zip(hung, hung[1:])) > PERIOD  # the heal moved it forward
