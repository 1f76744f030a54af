"""lsgd plan's inputs (each bad one exits 2 naming it), its files, and the solver of the
link rate for a utilization."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

import lsgd
from lsgd.cli import main
from lsgd.comm.wire import LinkModel
from lsgd.planner.planning import Form, Net, rate_for, step_seconds
from tests.test_cli_fast import _refused

GOOD = ["plan", "--params", "1M", "--step-time", "0.1"]


@pytest.mark.parametrize("args,named", [
    (["plan", "--params", "0", "--step-time", "0.1"], "--params '0'"),
    (["plan", "--params", "-5", "--step-time", "0.1"], "--params '-5'"),
    (["plan", "--params", "lots", "--step-time", "0.1"], "--params 'lots'"),
    (GOOD[:4] + ["0"], "--step-time 0.0"),
    (GOOD[:4] + ["-0.5"], "--step-time -0.5"),
    (GOOD + ["--workers", "0"], "--workers 0"),
    (GOOD + ["--workers", "-4"], "--workers -4"),
    (GOOD + ["--groups", "0"], "--groups 0"),
    (GOOD + ["--workers", "6", "--groups", "4"], "--groups 4 must divide it"),
    (GOOD + ["--link", "20mbps"], "'20mbps'"),
    (["plan", "--model", "nope", "--step-time", "0.1"], "--model 'nope'"),
    (GOOD + ["--methods", "diloco,nope"], "--methods nope"),
    (GOOD + ["--methods", "diloco", "--fragments", "3"], "fragments=3"),
    (GOOD + ["--period", "0"], "--period must be a positive integer"),
    (["plan", "--params", "1M", "--measure"], "--measure times one of lsgd's models"),
    (["plan", "--model", "mlp", "--measure", "--device", "tpu"], "'tpu'"),
    (GOOD + ["--mtbf", "0"], "--mtbf 0.0"),
    (GOOD + ["--mtbf", "30", "--checkpoint-every", "0"], "--checkpoint-every 0"),
], ids=["size-zero", "size-negative", "size-word", "step-zero", "step-negative",
        "workers-zero", "workers-negative", "groups-zero", "not-divisible", "link", "model",
        "method", "fragments", "period", "measure-params", "device", "mtbf",
        "checkpoint-every"])
def test_a_bad_input_exits_2_naming_the_value(args: list[str], named: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err, err
    assert "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: --measure would time it")
def test_measure_on_a_device_that_is_not_here_exits_2_naming_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "mlp", "--measure", "--device", "cuda"]) == 2
    assert "--device cuda: no CUDA device here" in capsys.readouterr().err


def test_a_bad_flag_is_refused_before_torch_is_imported() -> None:
    code, torch_loaded, numpy_loaded, err = _refused(["plan", "--params", "1M"])
    assert code == 2 and "--step-time" in err and not torch_loaded and not numpy_loaded


def test_the_table_and_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "mlp", "--step-time", "0.05", "--link", "20mbit,1ms",
                 "--methods", "diloco,lsgd", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "235,146 parameters, 4 workers in 4 nodes, link 20mbit,1ms" in out
    saved = json.loads((tmp_path / "plan.json").read_text())
    forms = [row["form"] for row in saved["rows"]]
    assert forms == ["diloco", "diloco-streaming", "diloco-hidden", "diloco-eager", "lsgd",
                     "lsgd-hidden"]
    assert (tmp_path / "plan.csv").read_text().startswith("form,method,knobs,step_seconds")
    for row in saved["rows"]:  # the rates a utilization needs grow with it
        rates = [row[f"rate_{t}"] for t in (90, 95, 99)]
        assert all(a <= b for a, b in itertools.pairwise(rates) if b is not None)


def test_the_bytes_are_the_wire_modules(capsys: pytest.CaptureFixture[str]) -> None:
    """One worker per node: a ring all-reduce sends 2 (n - 1) / n of the state a step."""
    planned = lsgd.plan(1000, step_time=0.1, workers=4, methods=["allreduce", "lsgd"])
    rows = {row["form"]: row for row in planned.rows}
    assert rows["allreduce"]["bytes_per_node"] == pytest.approx(2 * 3 / 4 * 4000)
    # every period: the scores' ring all-gather (3 float64 from each node), and the chain
    # broadcast, where every node but the last forwards the state
    assert rows["lsgd"]["bytes_per_node"] == pytest.approx((3 * 8 + 3 / 4 * 4000) / 16)


def test_the_rate_for_a_utilization_solves_the_closed_form() -> None:
    """A blocking all-reduce without latency takes bits / rate a step: compute c keeps
    u of the time at rate = u bits / (c (1 - u))."""
    form = Form("allreduce", "allreduce", "", 1, (Net(4, 4).all_reduce(10_000, at=0),))
    bits = LinkModel(1.0, 0.0, lambda rank: rank).all_reduce(40_000, [0, 1, 2, 3])
    for u in (0.5, 0.9, 0.99):
        assert rate_for(form, 0.1, 0.0, u) == pytest.approx(u * bits / (0.1 * (1 - u)),
                                                           rel=1e-6)


def test_a_utilization_the_latency_forbids_has_no_rate() -> None:
    """6 stages of 10 ms a step against 0.1 s of compute: at most 62.5%."""
    form = Form("allreduce", "allreduce", "", 1, (Net(4, 4).all_reduce(10_000, at=0),))
    assert rate_for(form, 0.1, 0.01, 0.6) is not None
    assert rate_for(form, 0.1, 0.01, 0.63) is None


def test_a_hidden_round_needs_the_rate_at_which_its_wait_vanishes() -> None:
    """DiLoCo hidden behind 7 of 8 steps: the rate solved is the edge of the utilization."""
    planned = lsgd.plan(50_000, step_time=0.02, link="5mbit,1ms", methods=["diloco"],
                        knobs={"period": 8, "overlap": 7})
    form = planned.forms[0]
    rate = planned.rows[0]["rate_95"]
    utilization = [0.02 / step_seconds(form, 0.02, r, 0.001) for r in (rate, 0.99 * rate)]
    assert utilization[0] >= 0.95 > utilization[1]
