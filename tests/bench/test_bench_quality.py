"""The tuning grid and the quality studies: quick runs, their numbers, and the tuned
defaults that ``lsgd train`` takes from the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsgd.names import METHODS

from lsgd.train import tuned
from lsgd.train.config import TEXT_DEFAULTS, make_config
from studies import equal_tokens, quality, study, tuning

ROOT = Path(__file__).resolve().parents[2]


def test_apart_needs_the_spreads_not_to_overlap() -> None:
    assert study.apart([1.0, 1.1, 1.2], [1.3, 1.4])
    assert not study.apart([1.0, 1.35], [1.3, 1.4])
    assert study.spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert study.spread([1.0, None]) == (None, None, None)  # a seed missed the target


def test_every_study_starts_from_its_methods_pinned_point() -> None:
    for name in quality.STUDIES:
        for task in quality.TASKS:
            for label, settings in quality._variants(name, task).items():
                method = settings["method"]
                for key, value in quality.BASE[task][method].items():  # or named in the label
                    assert settings[key] == value or key in label, (name, label, key)
    # the tuning grid holds the language model's pinned points, so the studies share runs
    grid = {study.slug(base | p) for base, points in tuning.GRIDS["language"].values()
            for p in points}
    assert {study.slug(s) for s in quality.BASE["language"].values()} <= grid


def test_tuning_top_screens_on_one_seed_and_chooses_among_the_points_run_on_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], list[int]]] = []

    def fake(out: Path, task: str, variants: dict, seeds: list, options: dict) -> list:
        calls.append((list(variants), list(seeds)))
        # seed 0: the later a point in the grid, the lower its loss; seeds 1 and 2 reverse it
        return [{"label": label, "seed": seed, "steps": None, "time": None, "bytes": 1e6,
                 "final": 2.0 + (1 if seed else -1) * list(variants).index(label) / 100}
                for seed in seeds for label in variants]

    monkeypatch.setattr(tuning.study, "run_variants", fake)
    result = tuning.run(tmp_path, False, {"seeds": 3, "top": 2, "tasks": ["language"]})
    grid = tuning.GRIDS["language"]
    assert calls[0][1] == [0] and len(calls[0][0]) == sum(len(p) for _, p in grid.values())
    # the screen's two best (the last two) of each method, and only they, on seeds 1 and 2
    kept = [tuning.label(m, p) for m, (_, points) in grid.items() for p in points[-2:]]
    assert calls[1] == (kept, [1, 2])
    # on three seeds the earlier of the two wins (its median: seeds 1 and 2 reverse)
    chosen = result.data["chosen"]["language"]
    assert all(chosen[m] == {k: v for k, v in (base | points[-2]).items()
                             if k not in ("method", "compress")}
               for m, (base, points) in grid.items())
    marks = {row[1]: row[5] for row in result.rows}
    assert sum(v == "screened out" for v in marks.values()) == len(marks) - len(kept)
    assert sum(v == "chosen" for v in marks.values()) == len(grid)


@pytest.mark.slow
def test_a_quick_study_reports_each_variant_and_reads_its_runs_back(tmp_path: Path) -> None:
    result = quality.run_study("leader-force", tmp_path, True, {})
    assert [row[1] for row in result.rows] == list(quality._variants("leader-force",
                                                                     "language"))
    runs = result.data["tasks"]["language-quick"]["runs"]
    assert all(4.0 < r["final"] < 5.6 for r in runs)  # 5.55 untrained, a one-block GPT
    again = quality.run_study("leader-force", tmp_path, True, {"reuse": "only"})
    assert again.rows == result.rows


def test_lsgd_train_takes_the_tuned_point_of_its_task_and_method() -> None:
    for method, point in tuned.TUNED["text"].items():
        cfg = make_config({"dataset": "kjv", "model": "gpt", "method": method})
        for key, value in (TEXT_DEFAULTS | tuned.METHOD.get(method, {}) | point).items():
            assert cfg.setting(key) == value, (method, key)
        if cfg.option("outer_lr") is not None:
            given = make_config({"dataset": "kjv", "model": "gpt", "method": method,
                                 "outer_lr": 0.9})
            assert given.options.outer_lr == 0.9  # what the user gives wins
    assert make_config({"dataset": "kjv", "model": "gpt", "method": "diloco"}).options.outer_lr \
        == 0.35
    assert make_config({"model": "cnn7", "method": "diloco"}).options.outer_lr == 0.35
    assert make_config({"model": "mlp", "method": "diloco"}).options.outer_lr == 0.7  # untuned
    assert make_config({"model": "mlp"}).optim.lr == 0.05


def test_the_studies_run_what_lsgd_train_gives_by_default() -> None:
    """The documented numbers are what a user gets: each study's pinned point of a method
    holds lsgd train's defaults for the task (the learning rate, the warm-up, the
    tuned entries), and the equal-tokens rows of the tuned text defaults are lsgd train's
    all-reduce, DiLoCo and LSGD with nothing given."""
    for table, task in tuned.STUDY_TASK.items():
        for method, base in quality.BASE[task].items():
            given = {"dataset": "kjv", "model": "gpt"} if table == "text" else {"model": "cnn7"}
            cfg = make_config(given | {"method": method})
            for key in ("lr", "warmup_epochs", "outer_lr", "pull"):
                if key in base:
                    assert cfg.setting(key) == base[key], (task, method, key)
    # the equal-tokens study's tuned rows are lsgd train's all-reduce and DiLoCo on text
    for method, row in (("allreduce", "allreduce, lr 0.002"),
                        ("diloco", "diloco, period 16, lr 0.002"),
                        ("lsgd", "lsgd, period 16, lr 0.002")):
        bench = make_config(equal_tokens.FULL | equal_tokens.VARIANTS[row], siblings=METHODS)
        plain = make_config({"dataset": "kjv", "model": "gpt", "method": method})
        assert bench == plain, method
    assert make_config({"dataset": "kjv", "model": "gpt", "method": "diloco"}).option(
        "outer_lr") == 0.35
