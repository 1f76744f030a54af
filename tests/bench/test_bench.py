"""`lsgd bench`: the quick mode of the time-to-accuracy, volume and straggler benchmarks,
and the command line's checks; the quick modes of the studies that read back their runs
(fidelity, equal steps, equal tokens, replicas)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lsgd import cli
from lsgd.bench import accuracy, ranking, stragglers, volume
from lsgd.bench.common import RECORD_FILES, write


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_time_to_accuracy_quick_ranks_every_method_on_one_time_axis(tmp_path: Path) -> None:
    result = accuracy.run(tmp_path, True, {})
    methods = [row[1] for row in result.rows]
    assert methods == [m for m in accuracy.QUICK if m != "lsgd-multi"]
    by_method = {row[1]: row for row in result.rows}
    # The MLP on the digits passes 80% within 6 simulated seconds under every method
    # (within 4.1 s here; each run stops there), and LSGD's own ratio is 1.
    for name, row in by_method.items():
        assert row[2] is not None and row[2] <= 6.0 + 2.0, row
        assert row[5] >= 0.8, row
    assert by_method["lsgd"][6] == pytest.approx(1.0)
    # On 20 Mbit/s every all-reduce costs the MLP's 0.9 MB state 1.5 times over the
    # link; LSGD with period 4 sends it once per 4 steps along the chain of nodes.
    per_step = {r["method"]: r["comm_seconds"] / r["steps_done"] for r in result.data["runs"]}
    assert per_step["allreduce"] > 3 * per_step["lsgd"], per_step
    # DiLoCo in two fragments, behind 2 steps and in int8, sends about a quarter of
    # DiLoCo's bytes per step (the same period 16)
    sent = {r["method"]: r["bytes_per_worker"] / r["steps_done"] for r in result.data["runs"]}
    assert 0.2 * sent["diloco"] < sent["diloco-streaming-int8"] < 0.3 * sent["diloco"], sent
    saved = json.loads(write(result, tmp_path).read_text())
    assert saved["rows"] == json.loads(json.dumps(result.rows))
    assert (tmp_path / "time-to-accuracy.txt").read_text().startswith("Time to 80%")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_volume_quick_counts_what_the_algorithms_send(tmp_path: Path) -> None:
    result = volume.run(tmp_path, True, {})
    counted = result.data["counted"]
    for key, value in counted.items():
        if key.startswith("lsgd") and not key.endswith("/1"):
            # The extra first-step round and the scores: above the theory, within 2x.
            assert value["theory"] < value["measured"] < 2 * value["theory"], key
        else:
            assert value["measured"] == pytest.approx(value["theory"], rel=1e-3), key
    for method in ("lsgd", "local-sgd"):  # compressed rounds, counted as they travel
        for period in (1, 4):
            plain = counted[f"{method}/{period}"]["measured"]
            assert 0.48 <= counted[f"{method} bf16/{period}"]["measured"] / plain <= 0.52
            assert counted[f"{method} int8/{period}"]["measured"] / plain <= 0.27
    for timed in result.data["timed"]:  # only where links can be shaped (root)
        # No faster than the link allows (a token bucket's burst goes through at once).
        assert timed["chain"] >= timed["floor"], timed
        assert timed["chain"] < timed["tree"]


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(180)
def test_stragglers_quick_async_lets_the_fast_workers_run_ahead(tmp_path: Path) -> None:
    result = stragglers.run(tmp_path, True, {})
    sync, async_ = result.data["runs"]
    assert len(set(sync["worker_steps"])) == 1  # synchronous: lockstep
    *fast, slow = async_["worker_steps"]
    assert slow < 0.8 * min(fast)  # the worker slowed 3 times falls behind
    assert min(sync["test_accuracy"], async_["test_accuracy"]) > 0.8


def test_bench_checks_its_options_before_running(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "volume", "--links", "fast", "--out", str(tmp_path)]) == 2
    assert "--links: link: expected RATE" in capsys.readouterr().err
    assert cli.main(["bench", "time-to-accuracy", "--methods", "lsgd,adam"]) == 2
    assert "unknown ['adam']" in capsys.readouterr().err
    assert cli.main(["bench", "nonsense"]) == 2
    assert not list(tmp_path.iterdir())



def test_reuse_reads_back_a_finished_run_only_when_its_settings_match(tmp_path: Path) -> None:
    from lsgd.bench.common import finished, train
    from lsgd.train.config import make_config

    settings = {"method": "lsgd", "workers": 2, "backend": "threads", "model": "mlp",
                "dataset": "digits", "steps": 4, "batch_size": 16, "eval_every": "1000"}
    run = tmp_path / "run"
    first = train(run, **settings)
    assert "reused" not in first
    again = train(run, reuse=True, **settings)
    assert again["reused"] and again["steps"] == first["steps"] == 4
    assert again["rows"] == first["rows"]

    def wanted(**changes: object) -> str:
        return make_config({"out": str(run), "quiet": True, **settings, **changes}).to_toml()

    assert finished(run, wanted(period=8)) is None, "another setting: train again"
    # A setting the stored run predates counts as its default.
    saved = run / "config.toml"
    saved.write_text("\n".join(line for line in saved.read_text().splitlines()
                               if not line.startswith("leader_momentum")) + "\n")
    assert finished(run, wanted()) is not None
    assert finished(run, wanted(leader_momentum=0.5)) is None
    (run / "summary.json").unlink()
    assert finished(run, wanted()) is None, "an unfinished run is trained again"


def test_time_to_accuracy_gives_no_ratio_without_lsgd() -> None:
    run = {"link": "20mbit", "seed": 0, "time": 10.0, "steps": 40, "best": 0.9}
    runs = [run | {"method": "local-sgd"}, run | {"method": "easgd", "time": 20.0}]
    rows, _ = ranking.table(runs, ["local-sgd", "easgd"], {"links": ["20mbit"]})
    assert [row[6] for row in rows] == [None, None]
    rows, _ = ranking.table(runs + [run | {"method": "lsgd", "time": 5.0}],
                              ["lsgd", "local-sgd", "easgd"], {"links": ["20mbit"]})
    assert [row[6] for row in rows] == [1.0, 0.5, 0.25]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_twelve_workers_with_a_fixed_step_time_gives_the_same_clock_in_parallel(
        tmp_path: Path) -> None:
    options = {"methods": ["lsgd-multi", "allreduce"], "budget": 1.0, "step_seconds": 0.01,
               "target": 0.5}
    alone = accuracy.run_twelve(tmp_path / "alone", True, options)
    both = accuracy.run_twelve(tmp_path / "both", True, options | {"jobs": 2})
    assert "0.01 s per step" in alone.notes[0]
    for one, other in zip(alone.data["runs"], both.data["runs"], strict=True):
        # The clock is the step time plus the modeled transfers: neither depends on
        # the other run sharing the cores, so the steps and times agree exactly.
        assert one["method"] == other["method"]
        assert one["steps_done"] == other["steps_done"]
        assert [t for t, _ in one["curve"]] == [t for t, _ in other["curve"]]
        assert one["comm_seconds"] == pytest.approx(other["comm_seconds"], rel=1e-9)
        assert one["best"] == pytest.approx(other["best"], abs=0.03)
    steps = {r["method"]: r["steps_done"] for r in alone.data["runs"]}
    # 1 s of 0.01 s steps at most 100; all-reduce pays the link at every step (10 steps
    # here), LSGD only at its global rounds (60).
    assert 40 <= steps["lsgd-multi"] < 100 and steps["allreduce"] * 3 < steps["lsgd-multi"], steps


def test_parallel_runs_need_a_fixed_step_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "twelve-workers", "--jobs", "2"]) == 2
    assert "--jobs 2: runs at once share" in capsys.readouterr().err
    assert cli.main(["bench", "time-to-accuracy", "--step-seconds", "0.1"]) == 2
    assert "add --backend threads" in capsys.readouterr().err
    assert cli.main(["bench", "twelve-workers", "--step-seconds", "0"]) == 2
    assert "--step-seconds 0.0: give a positive" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_given_knobs_skip_tuning_and_first_seed_picks_the_seeds(tmp_path: Path) -> None:
    options = {"methods": ["lsgd", "dpsgd"], "tune": True, "budget": 1.0, "seeds": 1,
               "first_seed": 3, "knobs": {"dpsgd": {"gossip_period": 4}}}
    result = accuracy.run(tmp_path, True, options)
    # Only LSGD is tuned (its two grid points, on the tuning seed); D-PSGD keeps the
    # knobs given, which are not its first grid point.
    assert sorted(t["knobs"]["period"] for t in result.data["tuning"]) == [4, 16]
    assert {t["method"] for t in result.data["tuning"]} == {"lsgd"}
    assert result.data["chosen"]["dpsgd"] == {"gossip_period": 4}
    assert [(r["method"], r["seed"]) for r in result.data["runs"]] == [("lsgd", 3), ("dpsgd", 3)]
    assert (tmp_path / "runs" / "20mbit" / "dpsgd-gossip_period4-seed3" / "summary.json").is_file()
    assert "seed(s) 3," in result.notes[0]
    assert "dpsgd {'gossip_period': 4} (given)" in result.notes[2]


@pytest.mark.parametrize(("args", "message"), [
    (["--knobs", "dpsgd"], "--knobs 'dpsgd': expected METHOD:KEY=VALUE"),
    (["--knobs", "dpsgd:gossip_period=0"], "--gossip-period must be a positive integer"),
    (["--knobs", "dpsgd:gossip_period="], "'gossip_period=' is not KEY=VALUE"),
    (["--knobs", "lsgd-multi-hidden:period=8,compress=zip"], "--compress 'zip'"),
    (["--knobs", "dpsgd:gossip_period=4", "--knobs", "dpsgd:gossip_period=1"], "given twice"),
    (["--knobs", "dpsgd:period=4"],
     "--knobs dpsgd: unknown ['period']; its knobs are gossip_period, lr"),
    (["--knobs", "allreduce:period=4"], "unknown ['period']; its knobs are lr"),
    (["--knobs", "allreduce:lr=-1"], "--lr"),
    (["--knobs", "lsgd-multi:period=16,global-period=4"],
     "--global-period 4 must be a multiple of --period 16"),
    (["--knobs", "lsgd:period=4"], "--knobs lsgd: left out of this benchmark"),
    (["--methods", "dpsgd", "--knobs", "matcha:gossip_period=4"], "--knobs matcha: not among"),
    (["--first-seed", "-1"], "--first-seed -1: give 0 or more"),
    (["--batch-size", "0"], "--batch-size 0: give a whole number of at least 1"),
])
def test_bench_checks_knobs_and_seeds_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert cli.main(["bench", "twelve-workers", "--out", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_given_knobs_name_the_run_folder_in_the_grid_order() -> None:
    given = accuracy._given_knobs({"lsgd-multi": {"global_period": 16, "period": 4}},
                                  ["lsgd-multi"], {}, (12, 3))
    assert list(given["lsgd-multi"]) == ["period", "global_period"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fidelity_quick_reports_every_variant_and_reuses_its_records(tmp_path: Path) -> None:
    from studies import fidelity

    first = fidelity.run(tmp_path, True, {})
    assert [row[1] for row in first.rows] == [v for v, _ in fidelity.SETS["leader-momentum"][2]]
    for row in first.rows:
        assert row[0] == "leader-momentum" and row[2] == 40 and row[3] > 0.9, row
        assert (row[4] is None) == row[1].startswith(("diloco", "local sgd")), row
    again = fidelity.run(tmp_path, True, {"reuse": "only"})  # read back, nothing trained
    assert again.rows == first.rows


def test_reuse_only_trains_nothing_and_names_the_missing_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studies import fidelity
    from studies.common import script

    assert script(fidelity).main(["--quick", "--reuse-only", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--reuse-only: no finished run with these settings in" in err
    assert "drop --reuse-only to train the missing runs" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_equal_steps_quick_compares_each_form_with_its_plain_one(tmp_path: Path) -> None:
    from studies import equal_steps

    result = equal_steps.run(tmp_path, True, {})
    rows = {(row[0], row[1]): row for row in result.rows}
    assert list(rows) == [(m, v) for m, variants in equal_steps.QUICK.items() for v in variants]
    for (method, variant), row in rows.items():
        assert row[3] > 0.9, row  # the MLP learns the digits in 40 steps under every form
        assert row[4] == pytest.approx(100 * (row[3] - rows[(method, "plain")][3]), abs=0.01)
    # int8 rounds send about a quarter of the plain bytes (DiLoCo, the same period)
    assert rows[("diloco", "int8")][5] < 0.3 * rows[("diloco", "plain")][5]
    again = equal_steps.run(tmp_path, True, {"reuse": "only"})
    assert again.rows == result.rows


def test_torchft_synchronises_whole_layers_in_groups_of_about_equal_size() -> None:
    from lsgd.bench import peer
    from lsgd.models import build_model

    model = build_model("cnn7", (1, 28, 28), 10)
    one, two = peer._fragments(model, 1), peer._fragments(model, 2)
    sizes = [sum(p.numel() for p in part.parameters()) for part in two]
    assert len(one) == 1 and sum(p.numel() for p in one[0].parameters()) == sum(sizes)
    assert len(two) == 2 and sizes[0] == 1664 + 204928  # the two first convolutions
    firsts = [id(p) for p in two[0].parameters()]
    assert firsts == [id(p) for p in list(model.parameters())[:4]]  # the model's own tensors


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchft_diloco_trains_on_the_same_shards_and_leaves_a_record(tmp_path: Path) -> None:
    from lsgd.bench import peer

    if not peer.available():
        pytest.skip("torchft is not installed (pip install 'lsgd[torchft]')")
    settings = dict(method="torchft-diloco", workers=4, groups=4, link=None, model="mlp",
                    dataset="digits", batch_size=32, minutes=0.1, eval_every="2s", seed=0,
                    period=8)
    summary = peer.train(tmp_path / "run", **settings)
    # It learns (on the 8x8 digits torchft's DiLoCo later drifts off, hundreds of epochs in).
    assert max(row["center_accuracy"] for row in summary["rows"]) > 0.8 and summary["rounds"] >= 1
    assert summary["bytes_sent_per_worker"] == pytest.approx(
        summary["rounds"] * 2 * 3 / 4 * 4 * sum(p.numel() for p in _mlp().parameters()))
    again = peer.train(tmp_path / "run", reuse="only", **settings)
    assert again["reused"] and again["rows"] == summary["rows"]


def _mlp() -> object:
    from lsgd.models import build_model

    return build_model("mlp", (1, 8, 8), 10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_elastic_quick_survives_where_a_restart_redoes_steps(tmp_path: Path) -> None:
    import importlib.util

    from lsgd.bench import runner

    if importlib.util.find_spec("torchft") is None:
        pytest.skip("torchft is not installed (pip install 'lsgd[torchft]')")
    result = runner("elastic")(tmp_path, True, {"methods": ["lsgd"]})
    rows = {(row[1].split()[0], row[2]): row for row in result.rows}
    survived, restarted = rows[("elastic", "kill:2:40")], rows[("restart,", "kill:2:40")]
    assert survived[4] == 0 and 0 < survived[5] < 30 and survived[6] > 0  # redone, rejoin s, MB
    assert 0 < survived[7] < survived[5]  # heal s: within the time to rejoin
    assert restarted[4] == 3 * 8  # 3 workers back from step 32 to 40
    assert survived[8] > 0.9 and abs(survived[8] - rows[("elastic", "none")][8]) < 0.03


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_time_to_loss_quick_ranks_the_language_model_by_its_validation_loss(
        tmp_path: Path) -> None:
    result = accuracy.run_text(tmp_path, True, {})
    assert result.title.startswith("Time to a validation loss of 3.3 nats per byte")
    by_method = {row[1]: row for row in result.rows}
    assert list(by_method) == accuracy.QUICK_TEXT
    for name, row in by_method.items():
        assert row[2] is not None and row[5] <= 3.3, row  # reached; its best is a loss
        # Each run stops at the target, so its steps at its pace give its time.
        assert row[10] == pytest.approx(row[2], rel=0.05), row
    sent = {r["method"]: r["bytes_per_worker"] / r["steps_done"] for r in result.data["runs"]}
    assert sent["allreduce"] > 10 * sent["diloco"], sent
    assert (tmp_path / "time-to-loss-20mbit.png").exists()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_equal_tokens_quick_compares_losses_and_bytes_with_all_reduce(tmp_path: Path) -> None:
    from studies import equal_tokens

    result = equal_tokens.run(tmp_path, True, {})
    rows = {row[0]: row for row in result.rows}
    assert list(rows) == equal_tokens.QUICK
    assert rows["allreduce"][3] == 0 and rows["allreduce"][5] == pytest.approx(1.0)
    for label in equal_tokens.QUICK[1:]:  # int8 rounds every 32 steps: over 100x fewer bytes
        assert rows[label][5] > 100, rows[label]
        assert rows[label][2] < 5.0  # all of them learned (from 5.55)
    again = equal_tokens.run(tmp_path, True, {"reuse": "only"})
    assert again.rows == result.rows
    # the DiLoCo screen shares the runs of the settings both hold (all-reduce's here)
    screen = equal_tokens.run_screen(tmp_path, True, {"variants": ["diloco, lr 0.002"]})
    assert [row[0] for row in screen.rows] == ["allreduce", "diloco, lr 0.002"]
    assert screen.rows[0][1:] == rows["allreduce"][1:] and screen.title == result.title
    assert screen.rows[1][5] > 4 and screen.rows[1][2] < 5.3  # rounds every 16 steps; learned


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scaling_quick_sets_time_and_bytes_against_the_number_of_workers(
        tmp_path: Path) -> None:
    from lsgd.bench import scaling

    result = scaling.run(tmp_path, True, {"methods": ["allreduce", "lsgd-multi-hidden"]})
    assert [(row[0], row[1], row[2]) for row in result.rows] == [
        (size, size // 2, name) for size in (2, 4, 8)
        for name in ("allreduce", "lsgd-multi-hidden")]
    rows = {(row[0], row[2]): row for row in result.rows}
    for size in (4, 8):  # behind the slow link: a hidden int8 round every 4 steps sends
        # a small share of an all-reduce of the gradients every step
        assert rows[size, "lsgd-multi-hidden"][6] < 0.2 * rows[size, "allreduce"][6], rows
    assert rows[2, "allreduce"][6] > 0  # one node of two: all-reduce inside it, free
    assert (tmp_path / "scaling.png").is_file()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replicas_quick_compares_layouts_and_replica_forms(tmp_path: Path) -> None:
    """Equal tokens: every layout of DiLoCo learns, the bytes over a node's link fall with
    the replicas and a replica's gradients stay inside its node; to a target: both forms
    of each method, the node form putting fewer bytes on the link than the process form."""
    from studies import replicas

    result = replicas.run(tmp_path / "tokens", True, {})
    rows = {(row[0], row[1]): row for row in result.rows}
    assert rows[("allreduce", "all 8")][5] == 0
    link = [rows[("diloco", layout)][6] for layout in replicas.LAYOUTS]
    assert link == sorted(link, reverse=True) and link[-1] > 0
    assert rows[("diloco", "8 x 1")][7] == 0 < rows[("diloco", "4 x 2")][7]
    assert all(rows[("diloco", layout)][3] < 5.5 for layout in replicas.LAYOUTS)
    again = replicas.run(tmp_path / "tokens", True, {"reuse": "only"})
    assert again.rows == result.rows
    timed = {row[0]: row for row in replicas.run_time(tmp_path / "time", True, {}).rows}
    assert timed["diloco-int8, node"][5] < timed["diloco-int8, process"][5]
    assert all(row[4] < 5.5 for row in timed.values())


def test_batch_size_and_an_lr_knob_reach_the_runs_settings(tmp_path: Path) -> None:
    """``--batch-size`` and ``--knobs allreduce:lr=...`` are what the runs train with."""
    from lsgd.bench import command

    _, options = command.parse(["time-to-loss", "--batch-size", "4",
                                "--knobs", "allreduce:lr=0.004", "--out", str(tmp_path)])
    assert options["batch_size"] == 4
    opts = accuracy._defaults(False, "time-to-loss") | {"batch_size": 4}
    assert opts["batch_size"] == 4 and opts["task"]["lr"] == 0.001  # the knob wins per run
    given = accuracy._given_knobs({"allreduce": {"lr": 0.004}}, ["allreduce"], {}, (4, 4))
    assert given == {"allreduce": {"lr": 0.004}}
