"""The aldsgd study (`python studies/aldsgd.py`): the claims' rule on hand-made numbers,
the options' checks, the records' placeholder, and the quick mode (4 workers on an
imbalanced graph, 2 seeds) with its per-worker evaluation, its read-back and its claims
table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lsgd.train.build import UsageError
from lsgd.train.outputs import read_csv
from studies import aldsgd, records
from studies.aldsgd_claims import NOT_MEASURED, claims, markdown, verdict
from studies.common import script

ROOT = Path(__file__).resolve().parents[2]


def test_a_difference_counts_only_where_the_seeds_ranges_do_not_overlap() -> None:
    # accuracy: higher is better
    assert verdict([0.90, 0.91, 0.92], [0.85, 0.86, 0.89], lower_is_better=False) == "holds"
    assert verdict([0.85, 0.86], [0.90, 0.91], lower_is_better=False) == "does not hold"
    assert verdict([0.88, 0.91], [0.85, 0.89], lower_is_better=False) == "not shown"
    # time: lower is better, a missed target is infinitely late
    assert verdict([40.0, 42.0], [50.0, math.inf], lower_is_better=True) == "holds"
    assert verdict([math.inf, math.inf], [math.inf], lower_is_better=True) == "not shown"
    assert verdict([math.inf], [10.0], lower_is_better=True) == "does not hold"
    # a gap below the digits shown does not count (0.1 s on the clock)
    assert verdict([30.01], [30.04], lower_is_better=True, digits=1) == "not shown"
    assert verdict([30.01], [30.24], lower_is_better=True, digits=1) == "holds"
    assert verdict([], [1.0], lower_is_better=True) == NOT_MEASURED


def _run(method: str, graph: str, seed: int, final: float, lowest: float,
         reached: float | None) -> dict[str, object]:
    curve = [(10.0, 25.0, 0.5), (20.0, 50.0, 0.9 if reached == 20.0 else 0.6),
             (30.0, 75.0, final)]
    return {"task": "t", "graph": graph, "method": method, "seed": seed, "metric": "accuracy",
            "final": final, "lowest": lowest, "curve": curve}


def test_the_claims_table_judges_each_claim_per_setting_with_its_numbers() -> None:
    runs = []
    for seed in range(3):
        runs += [_run("D-PSGD", "imbalanced", seed, 0.80 + 0.01 * seed, 0.70, None),
                 _run("AL-DSGD", "imbalanced", seed, 0.85 + 0.01 * seed, 0.71 + 0.01 * seed,
                      20.0),
                 _run("AL-DSGD dynamic", "imbalanced", seed, 0.85, 0.80 + 0.01 * seed, 20.0)]
    data = {"runs": runs, "settings": {"t": {"graphs": ["ring", "imbalanced"],
                                             "metric": "accuracy", "target": 0.82}}}
    rows = {(row[0], row[1]): row[2:] for row in claims(data)}
    # AL-DSGD reached 0.82 at 20 s in every seed (0.9 there), D-PSGD only at the end (30 s)
    assert rows[("(a) faster to the target than D-PSGD", "t imbalanced")] == [
        "holds", "AL-DSGD 20.0 [20.0-20.0] vs D-PSGD 30.0, 2 missed"]
    assert rows[("(a) better center at equal steps than D-PSGD", "t imbalanced")] == [
        "holds", "AL-DSGD 0.860 [0.850-0.870] vs D-PSGD 0.810 [0.800-0.820]"]
    # lowest-degree workers: dynamic 0.80-0.82 against one graph's 0.71-0.73
    assert rows[("(b) dynamic graphs: lowest-degree workers better than AL-DSGD on one graph",
                 "t imbalanced")][0] == "holds"
    assert rows[("(a) faster to the target than D-PSGD", "t ring")] == [NOT_MEASURED, "-"]
    assert not any(setting == "t ring" for claim, setting in rows if claim.startswith("(b)"))
    assert markdown(data).splitlines()[:2] == ["| claim | setting | verdict | numbers |",
                                               "|---|---|---|---|"]


def test_the_options_are_checked_before_anything_runs(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    main = script(aldsgd).main
    assert main(["--tasks", "cnn9", "--out", str(tmp_path)]) == 2
    assert "unknown ['cnn9']; choose from cnn7-8, mlp-16, mlp-16i, gpt-8" in capsys.readouterr().err
    with pytest.raises(UsageError, match="unknown task"):
        aldsgd.run(tmp_path, False, {"tasks": ["cnn9"]})
    with pytest.raises(UsageError, match="give one task"):
        aldsgd.run(tmp_path, False, {"target": 0.9})
    assert main(["--link", "fast"]) == 2
    assert "--link: link: expected RATE" in capsys.readouterr().err
    assert main(["--device", "tpu"]) == 2
    assert not list(tmp_path.iterdir())


def test_the_imbalanced_graphs_are_read_from_the_repository_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    first, second, weight = aldsgd.graphs_for("imbalanced", 8)
    assert (first, weight) == ("configs/graphs/imbalanced-8.edges", "max-degree")
    assert aldsgd.lowest_degree(first, 8) == [3, 4, 5, 6, 7]
    assert aldsgd.lowest_degree("ring", 8) == list(range(8))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="from the repository's root"):
        aldsgd.graphs_for("imbalanced", 8)


def test_a_study_without_records_shows_a_placeholder(tmp_path: Path) -> None:
    command = "python studies/aldsgd.py --device cuda --out records/aldsgd"
    assert records.pending(command, tmp_path)
    page = tmp_path / "page.md"
    page.write_text(f"<!-- claims: {command} -->\n| old |\n<!-- end claims -->\n")
    assert records.refresh(page, tmp_path, tmp_path / "scratch") == 1
    assert records.placeholder(command) in page.read_text()
    assert f"Not yet measured: `{command}`" in records.placeholder(command)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_aldsgd_quick_measures_the_lowest_degree_workers_and_reads_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "records" / "aldsgd"
    result = aldsgd.run(out, True, {"device": "cpu"})
    rows = {row[1]: row for row in result.rows}
    assert list(rows) == aldsgd.QUICK_METHODS
    assert {row[0] for row in result.rows} == {"quick-4 imbalanced"}
    runs = result.data["runs"]
    assert len(runs) == 6 and sorted({r["seed"] for r in runs}) == [0, 1]
    for run in runs:
        assert run["lowest_workers"] == [2, 3]  # the leaves of the path 2-0-1-3
        assert run["final"] > 0.6, run  # the MLP learns the digits in 16 steps
        assert [steps for _, steps, _ in run["curve"]] == [4.0, 8.0, 12.0, 16.0]
        times = [time for time, _, _ in run["curve"]]
        assert times == sorted(times) and times[-1] > 16 * 0.01  # steps plus transfers
        last = read_csv(Path(run["run"]) / "metrics.csv")[-1]  # the leaves' own models
        assert run["lowest"] == pytest.approx((last["worker2_accuracy"]
                                               + last["worker3_accuracy"]) / 2, abs=1e-5)
        assert 0 < last["worker2_loss"] < 3
        assert 'device = "cpu"' in (Path(run["run"]) / "config.toml").read_text()
    # three edges in both graphs: the same bytes, AL-DSGD's 16-byte metadata aside
    sent = {row[1]: row[5] for row in result.rows}
    assert sent["AL-DSGD dynamic"] == pytest.approx(sent["D-PSGD"], rel=1e-2)
    assert sent["AL-DSGD"] > sent["D-PSGD"]
    # the claims table from the same data, each verdict one of the rule's
    verdicts = {row[0]: row[2] for row in claims(result.data)}
    assert set(verdicts.values()) <= {"holds", "does not hold", "not shown", NOT_MEASURED}
    assert verdicts["(a) faster to the target than D-PSGD"] != NOT_MEASURED
    assert verdicts["(a) at budget 0.5: faster to the target than MATCHA 0.5"] == NOT_MEASURED
    # read back from the records, training nothing, through the command line
    again = aldsgd.run(out, True, {"device": "cpu", "reuse": "only"})
    assert again.rows == result.rows
    page = tmp_path / "page.md"
    command = "python studies/aldsgd.py --quick --device cpu --out records/aldsgd"
    page.write_text(f"<!-- claims: {command} -->\n| old |\n<!-- end claims -->\n")
    assert records.refresh(page, tmp_path, tmp_path / "scratch") == 1
    assert markdown(result.data) in page.read_text()
    assert script(aldsgd).main(["--quick", "--device", "cpu", "--reuse-only",
                                 "--out", str(out)]) == 0
