"""``lsgd plan --mtbf``: the expected goodput, 1 / (1 + lost / mtbf), per mode."""

from __future__ import annotations

import pytest

import lsgd
from lsgd.planner import goodput as g


def test_a_fault_every_lost_seconds_halves_the_goodput_and_restarts_redo_half_an_interval(
        ) -> None:
    elastic = g.lost_per_fault("elastic", 0.3, 50)
    assert elastic == g.LOST["elastic"] > 0
    assert g.goodput("elastic", elastic, 0.3) == pytest.approx(0.5)
    # A restartable run redoes, after each fatal fault, 25 of its 50 steps on average.
    assert g.lost_per_fault("restart", 0.3, 50) == pytest.approx(
        g.LOST["restart"] + g.FATAL * 25 * 0.3)
    assert g.goodput("restart", 30, 0.3, 10) > g.goodput("restart", 30, 0.3, 100)


def test_the_plan_gives_each_form_its_goodput_and_none_elastic_where_the_method_is_not(
        ) -> None:
    plan = lsgd.plan("1M", step_time=0.1, link="100mbit", mtbf=30.0,
                     methods=("allreduce", "diloco"), checkpoint_every=20)
    rows = {row["form"]: row for row in plan.rows}
    assert rows["allreduce"]["goodput_elastic"] is None
    for row in rows.values():
        assert row["goodput_restart"] == pytest.approx(
            g.goodput("restart", 30.0, row["step_seconds"], 20))
    assert rows["diloco-hidden"]["goodput_elastic"] == pytest.approx(
        1 / (1 + g.LOST["elastic"] / 30))
    assert "goodput restart/elastic" in plan.table()
    assert "goodput" not in lsgd.plan("1M", step_time=0.1).table()
