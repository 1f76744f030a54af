"""The PNG figures of a run and of `lsgd plot`, drawn from a small fake run folder."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lsgd.cli import main
from lsgd.train.run_plots import leader_counts, plot_leaders, plot_run, plot_runs
from lsgd.train.outputs import METRIC_FIELDS, write_csv, write_json

pytest.importorskip("matplotlib")

HISTORY = [(1, "global", 0), (8, "global", 2), (16, "global", 2)]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder as `lsgd train` leaves it: metrics.csv, leader_history.csv, summary.json."""
    folder = tmp_path / "run"
    rows = [
        {"time": 10.0 * i, "steps": 8 * i, "epoch": 0.1 * i, "lr": 0.05,
         "center_loss": 2.3 / (1 + i), "center_accuracy": 0.1 + 0.15 * i,
         "leader_rank": HISTORY[min(i, 2)][2], "train_loss": 2.0 / (1 + i)}
        for i in range(5)
    ]
    rows.append({**rows[-1], "time": 50.0, "steps": 40, "center_loss": math.nan,
                 "center_accuracy": math.nan})  # a row without an evaluation of the center
    write_csv(folder / "metrics.csv", rows, METRIC_FIELDS)
    write_csv(folder / "leader_history.csv",
              [{"step": s, "level": lv, "leader": ld} for s, lv, ld in HISTORY],
              ["step", "level", "leader"])
    write_json(folder / "summary.json", {"method": "lsgd", "workers": 4})
    return folder


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def test_leader_counts_count_the_global_elections_of_every_worker() -> None:
    assert leader_counts(HISTORY, 4) == {0: 1, 1: 0, 2: 2, 3: 0}
    mixed = [*HISTORY, (4, "local", 1), (12, "local", 1), (20, "global", None),
             (24, "global", math.nan), (32, "global", 3.0)]
    assert leader_counts(mixed, 4) == {0: 1, 1: 0, 2: 2, 3: 1}
    assert leader_counts(mixed, 4, level="local") == {0: 0, 1: 2, 2: 0, 3: 0}
    assert leader_counts([], 2) == {0: 0, 1: 0}


def test_plot_run_writes_error_loss_and_leader_figures(run: Path) -> None:
    made = plot_run(run)
    assert made == [run / "test_error.png", run / "test_loss.png", run / "leaders.png"]
    assert all(_nonempty(p) for p in made)


def test_leaders_figure_without_summary_guesses_the_workers(run: Path) -> None:
    (run / "summary.json").unlink()
    assert _nonempty(plot_leaders(run, run / "leaders.png"))


def test_plot_runs_rejects_bad_arguments(run: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        plot_runs([run], tmp_path / "x.png", metric="accuracy")
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        plot_runs([run], tmp_path / "x.png", zoom=0.0)


def test_lsgd_plot_loss_with_a_zoom(run: Path, tmp_path: Path) -> None:
    png = tmp_path / "out" / "comparison.png"
    assert main(["plot", str(run), str(run), "--metric", "loss", "--zoom", "0.25",
                 "--out", str(png)]) == 0
    assert _nonempty(png)


@pytest.mark.parametrize("zoom", ["1.5", "0", "1", "-0.2", "nan"])
def test_lsgd_plot_rejects_a_zoom_outside_0_1(
    zoom: str, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "zoom.png"
    assert main(["plot", str(run), "--zoom", zoom, "--out", str(png)]) == 2
    err = capsys.readouterr().err
    assert "--zoom" in err and "strictly between 0 and 1" in err
    assert "Traceback" not in err
    assert not png.exists()


def test_lsgd_plot_rejects_an_unknown_metric(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(run), "--metric", "accuracy"]) == 2
    assert "invalid choice: 'accuracy'" in capsys.readouterr().err
