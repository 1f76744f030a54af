"""Scripted cases with hand-computed expectations, run under both backends.

Each case is ``(world_size, groups, worker function name, spec, check)``;
``check(results)`` asserts the update rule on the per-rank results, whichever
backend produced them. Values are exact binary fractions in float64, so most
checks are exact equalities.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

X0 = [[1.0, 8.0], [2.0, 4.0], [3.0, 0.0], [4.0, -4.0]]
STATE_BYTES = 2 * 8  # two float64
SCORE_BYTES = 8  # one float64 score per worker


def lerp(a: list[float], b: list[float], w: float) -> list[float]:
    return [ai + w * (bi - ai) for ai, bi in zip(a, b)]


def check_round(world: int) -> Callable[[list[dict[str, Any]]], None]:
    def check(results: list[dict[str, Any]]) -> None:
        leader = 1  # losses [3, 1, 2, 4]: rank 1 is lowest
        for r, res in enumerate(results):
            assert res["leader"] == [leader]
            expected = X0[r] if r == leader else lerp(X0[r], X0[leader], 0.25)
            assert res["x"][0] == expected, f"rank {r} did not move exactly pull=0.25 of the way"
            # Traffic: the score all-gather, and the leader's state along gloo's binomial
            # tree from the leader. Sends by distance from the leader: with 2 workers
            # leader -> +1; with 4, leader -> +1, then leader -> +2 and +1 -> +3.
            gather = (world - 1) * SCORE_BYTES
            sends = {2: [1, 0], 4: [2, 1, 0, 0]}[world][(r - leader) % world]
            assert res["sent"][0] == gather + sends * STATE_BYTES
            assert res["received"][0] == gather + (0 if r == leader else STATE_BYTES)
    return check


def check_scope(results: list[dict[str, Any]]) -> None:
    leader = 1
    lead = X0[leader]
    for r, res in enumerate(results):
        for t, x in enumerate(res["x"], start=1):
            if r == leader:
                assert x == lead, "the leader must take plain optimizer steps"
                continue
            factor = 0.9**t * (0.5 if t == 4 else 1.0)  # scope/period = 0.1 a step; pull 0.5 at 4
            expected = [l + (x0 - l) * factor for x0, l in zip(X0[r], lead)]
            assert x == pytest.approx(expected, rel=0, abs=1e-12), (r, t)


def check_multi(results: list[dict[str, Any]]) -> None:
    # losses [2, 1, 0.5, 3]: local leaders 1 (group 0) and 2 (group 1), global leader 2.
    x = [list(v) for v in X0]
    for _ in range(2):  # two local rounds, pull 0.5
        x[0] = lerp(x[0], x[1], 0.5)
        x[3] = lerp(x[3], x[2], 0.5)
    for r in (0, 1, 3):  # then the global round at step 2, pull_global 0.25
        x[r] = lerp(x[r], x[2], 0.25)
    for r, res in enumerate(results):
        assert res["local_leader"] == [[1, 1, 2, 2][r]] * 2
        assert res["leader"] == [None, 2]
        assert res["x"][1] == x[r], r
    # Local round: an all-gather of 2 scores inside the group, the leader's state in it.
    assert [res["sent"][0] for res in results] == [8, 8 + 16, 8 + 16, 8]
    # Step 2: one world all-gather serves both rounds, then the local broadcasts (1 and 2
    # send to their partner) and the global one from 2 as the pipelined chain of the two
    # nodes: 2 -> 0 across (the heads), then 2 -> 3 and 0 -> 1 inside the nodes.
    assert [res["sent"][1] for res in results] == [24 + 16, 24 + 16, 24 + 16 + 32, 24]


def check_nan(results: list[dict[str, Any]]) -> None:
    assert [res["leader"] for res in results] == [[1]] * 4
    assert results[1]["x"][0] == X0[1]


def check_easgd(results: list[dict[str, Any]]) -> None:
    # alpha = 0.4 / 4 = 0.1; center starts at the mean 2.5. Worked by hand:
    # step 1: after gradient [0.5, 2.5, 2.0, 4.0], mean 2.25 -> x [0.7, 2.5, 2.05, 3.85], c 2.4
    # step 2: after gradient [0.2, 3.0, 1.05, 3.85], mean 2.025 -> x below, c 2.25
    expected = [[0.42], [2.94], [1.185], [3.705]]
    for r, res in enumerate(results):
        assert res["x"][0] == pytest.approx([[0.7], [2.5], [2.05], [3.85]][r], abs=1e-12)
        assert res["x"][1] == pytest.approx(expected[r], abs=1e-12)
        assert res["center"] == pytest.approx([2.25], abs=1e-12)
        ring = 2 * 3 * 8 // 4  # ring all-reduce of one float64 among 4
        assert res["sent"] == [ring, ring]


def check_local_sgd(results: list[dict[str, Any]]) -> None:
    mean = [sum(X0[r][i] for r in range(4)) / 4 for i in range(2)]
    for r, res in enumerate(results):
        assert res["x"][0] == X0[r], "no averaging before the period"
        assert res["x"][1] == mean, "replicas identical to the mean after averaging"


def check_hierarchical(results: list[dict[str, Any]]) -> None:
    groups = [lerp(X0[0], X0[1], 0.5), lerp(X0[2], X0[3], 0.5)]
    mean = lerp(groups[0], groups[1], 0.5)
    for r, res in enumerate(results):
        assert res["x"][0] == groups[r // 2]
        assert res["x"][1] == mean


CHAIN_VALUES = 300_000  # 1.2 MB: 19 chunks


def check_chain(results: list[dict[str, Any]]) -> None:
    from tests.comm.byte_counts import chain_bytes

    b = 4 * CHAIN_VALUES
    for rank, res in enumerate(results):
        assert res["ok"] == [True, True], rank
        # Source 3 (node 1): heads 3 -> 0; source 1 (node 0): heads 1 -> 2.
        assert res["sent"] == [chain_bytes(b, src, rank, 2, 2)[0] for src in (3, 1)]
    assert [res["sent"][0] for res in results] == [b, 0, 0, 2 * b]
    assert [res["received"][0] for res in results] == [b, b, b, 0]
    assert [res["sent"][1] for res in results] == [0, 2 * b, b, 0]


def scripted(method: str, losses: list[list[float]], world: int = 4, **spec: Any) -> dict[str, Any]:
    return {"method": method, "x0": X0[:world], "losses": [l[:world] for l in losses], **spec}


CASES: dict[str, tuple[int, int, str, dict[str, Any], Callable[[list[dict[str, Any]]], None]]] = {
    "lsgd_round_4": (4, 1, "scripted", scripted(
        "lsgd", [[3, 1, 2, 4]], kwargs=dict(pull=0.25, scope=0.0, period=1)), check_round(4)),
    "lsgd_round_2": (2, 1, "scripted", scripted(
        "lsgd", [[3, 1]], world=2, kwargs=dict(pull=0.25, scope=0.0, period=1)), check_round(2)),
    "lsgd_scope": (4, 1, "scripted", scripted(
        "lsgd", [[3, 1, 2, 4]] * 4, kwargs=dict(pull=0.5, scope=0.4, period=4)), check_scope),
    "lsgd_multi": (4, 2, "scripted", scripted(
        "lsgd", [[2, 1, 0.5, 3]] * 2,
        kwargs=dict(pull=0.5, pull_global=0.25, scope=0.0, period=1, global_period=2)),
        check_multi),
    "lsgd_nan": (4, 1, "scripted", scripted(
        "lsgd", [[math.nan, 5, math.inf, 7]], kwargs=dict(pull=0.5, scope=0.0, period=1)),
        check_nan),
    "easgd": (4, 1, "scripted", scripted(
        "easgd", [[0, 0, 0, 0]] * 2, lr=0.5, kwargs=dict(moving_rate=0.4, period=1))
        | {"x0": [[1.0], [2.0], [3.0], [4.0]], "grads": [[1.0], [-1.0], [2.0], [0.0]]},
        check_easgd),
    "local_sgd": (4, 1, "scripted", scripted(
        "local-sgd", [[0] * 4] * 2, kwargs=dict(period=2)), check_local_sgd),
    "local_sgd_hierarchical": (4, 2, "scripted", scripted(
        "local-sgd", [[0] * 4] * 2, kwargs=dict(period=1, hierarchical=True, global_period=2)),
        check_hierarchical),
    "chain_broadcast": (4, 2, "chain", {"sources": [3, 1], "n": CHAIN_VALUES}, check_chain),
}

from tests.cases_hidden import HIDDEN_CASES  # noqa: E402
from tests.cases_sparse import SPARSE_CASES  # noqa: E402

CASES.update(HIDDEN_CASES)
CASES.update(SPARSE_CASES)
