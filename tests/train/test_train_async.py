"""`lsgd train --async` and `--straggle`: per-worker accounting, validation, exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from lsgd.cli import main
from lsgd.train import checkpoint, runner
from lsgd.train.config import make_config
from lsgd.train.tomlfile import read_toml
from lsgd.train.outputs import read_csv

SMALL = dict(dataset="digits", model="mlp", workers=4, period=16, seed=0, quiet=True)


def _train(tmp: Path, name: str, **settings: Any) -> dict[str, Any]:
    cfg = make_config({"out": str(tmp / name), **SMALL, **settings})
    return runner.train(cfg)


@pytest.mark.timeout(120)
def test_async_threads_run_with_a_straggler_reports_every_worker(tmp_path: Path) -> None:
    summary = _train(tmp_path, "run", backend="threads", asynchronous=True, straggle=["3:3"],
                     steps=300, eval_every="100")
    steps = summary["worker_steps"]
    assert all(2.5 <= n / steps[3] <= 3.2 for n in steps[:3]), steps  # ~2.7x at period 16
    assert len(set(summary["worker_rounds"])) == 1
    assert summary["asynchronous"] is True and summary["straggle"] == {"3": 3.0}
    assert summary["steps"] == pytest.approx(sum(steps) / 4) and summary["steps"] >= 300
    assert summary["total_steps"] == sum(steps)
    assert summary["test_accuracy"] > 0.93
    # The straggler never waits in a round; the others do (on the virtual clock).
    waits = summary["worker_wait_seconds"]
    assert waits[3] < min(waits[:3])
    rows = read_csv(tmp_path / "run" / "metrics.csv")
    assert len(rows) >= 3
    last = rows[-1]
    assert [last[f"worker{r}_steps"] for r in range(4)] == steps
    assert [last[f"worker{r}_rounds"] for r in range(4)] == summary["worker_rounds"]
    # Evaluations happen at sync points: the mean steps column grows.
    assert [r["steps"] for r in rows] == sorted(r["steps"] for r in rows)


@pytest.mark.timeout(120)
def test_a_resumed_async_run_ends_exactly_where_an_uninterrupted_one_does(tmp_path: Path) -> None:
    common = dict(backend="threads", asynchronous=True, straggle=["1:2"], groups=2,
                  global_period=32, scope=0.05)
    straight = _train(tmp_path, "straight", steps=120, **common)
    _train(tmp_path, "resumed", steps=50, **common)
    settings = read_toml(tmp_path / "resumed" / "config.toml")
    cfg = make_config({**settings, "steps": 120, "resume": str(tmp_path / "resumed")})
    resumed = runner.train(cfg)
    assert resumed["worker_steps"] == straight["worker_steps"]
    assert resumed["worker_rounds"] == straight["worker_rounds"]
    for r in range(4):
        a = torch.load(checkpoint.complete(tmp_path / "straight")[0].file(r), weights_only=True)
        b = torch.load(checkpoint.complete(tmp_path / "resumed")[0].file(r), weights_only=True)
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (r, key)
    assert resumed["test_accuracy"] == straight["test_accuracy"]


@pytest.mark.parametrize("argv, message", [
    (["--method", "allreduce", "--async"], "--async: an option of --method lsgd or easgd or local-sgd, not of allreduce"),
    (["--straggle", "4:2"], "--straggle '4:2': give RANK:FACTOR with a rank in [0, 4)"),
    (["--straggle", "1:0.5"], "a factor >= 1"),
    (["--straggle", "one"], "e.g. 3:2.5"),
])
def test_bad_async_options_exit_2_with_the_fix(tmp_path: Path, capsys, argv, message) -> None:
    code = main(["train", "--dataset", "digits", "--out", str(tmp_path / "x"), *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_async_is_accepted_in_toml_under_either_name(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('async = true\nstraggle = ["2:1.5"]\nmethod = "easgd"\n')
    settings = read_toml(config)
    cfg = make_config(settings)
    assert cfg.options.asynchronous and cfg.straggler_factors() == {2: 1.5}
    assert make_config(read_toml(_saved(tmp_path, cfg))).options.asynchronous


def _saved(tmp: Path, cfg) -> Path:
    path = tmp / "saved.toml"
    path.write_text(cfg.to_toml())
    return path
