"""Links between nodes: the modeled link of `lsgd train --backend threads --link`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsgd import cli
from lsgd.train import command
from lsgd.train.config import make_config
from lsgd.train.outputs import read_csv

RATE = 20e6  # bits per second


def _train(tmp: Path, name: str, **settings: Any) -> dict[str, Any]:
    cfg = make_config({"out": str(tmp / name), "quiet": True, "backend": "threads",
                       "dataset": "synthetic", "model": "cnn7", "workers": 4, "groups": 4,
                       "batch_size": 16, "steps": 16, "eval_every": "16", "link": "20mbit",
                       **settings})
    command._prepare(cfg, cfg.out_dir)
    summary = command.train(cfg)
    assert summary is not None
    return summary


@pytest.mark.timeout(300)
def test_modeled_link_charges_bytes_over_rate_and_lsgd_outruns_allreduce(tmp_path: Path) -> None:
    allreduce = _train(tmp_path, "allreduce", method="allreduce")
    lsgd = _train(tmp_path, "lsgd", method="lsgd", period=4)
    for summary in (allreduce, lsgd):
        assert summary["link"] == "20mbit" and summary["link_kind"] == "modeled"
        assert summary["time_axis"].startswith("simulated seconds")
        # Every byte a worker sends crosses its node's link: at least bytes / rate.
        floor = 8 * summary["bytes_sent_per_worker"] / RATE
        assert min(summary["worker_comm_seconds"]) >= 0.99 * floor, summary
        assert summary["train_seconds"] >= min(summary["worker_comm_seconds"])
    # One worker per node: period 4 is the global period, 4 rounds in 16 steps.
    assert lsgd["rounds"] == 4
    # 16 ring all-reduces (1.5 B each) against 5 tree broadcasts (2 B each, the first
    # at the start): 2.4 times the link time.
    assert allreduce["comm_seconds_per_worker"] == pytest.approx(
        2.4 * lsgd["comm_seconds_per_worker"], rel=0.02)
    assert lsgd["steps_per_second"] >= 1.8 * allreduce["steps_per_second"]
    rows = read_csv(tmp_path / "allreduce" / "metrics.csv")
    assert rows[-1]["worker0_comm_seconds"] == pytest.approx(
        allreduce["worker_comm_seconds"][0], rel=1e-4)


def test_link_is_checked_before_anything_runs(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["train", "--backend", "threads", "--link", "20 parsecs",
                     "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "--link '20 parsecs'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
