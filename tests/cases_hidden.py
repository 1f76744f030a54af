"""Hidden LSGD rounds (early election, fragments, overlap, one or two levels) against a
reference written from the rule in docs/algorithms.md, run under both backends.

The reference knows nothing of the strategy: plain floats, the rule step by step.
Leaders change every step (worker ``r``'s loss at step ``t`` is ``(r + t) % 4 + 1``),
so an election one step early picks another leader than one at the round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

X0 = [[1.0, 8.0, -2.0, 0.5], [2.0, 4.0, 6.0, -1.0], [3.0, 0.0, 1.0, 2.0],
      [4.0, -4.0, 0.25, 3.0]]
GRADS = [[0.5, 0.0, 1.0, -0.5], [0.0, 0.25, -1.0, 0.5], [0.25, 0.25, 0.0, 1.0],
         [-0.5, 0.0, 0.5, 0.0]]
LR = 0.5
STEPS = 12


def loss(rank: int, step: int) -> float:
    return float((rank + step) % 4 + 1)


def reference(levels: list[tuple[int, list[list[int]], float]], fragments: int, overlap: int,
              election: str, decay: int = 0) -> list[list[list[float]]]:
    """Each rank's state after every step. ``levels``: (period, groups of ranks, pull),
    local before global. A level's election at the steps ``s % period == 0`` picks the
    lowest loss of step ``s - 1`` (``"early"``) or ``s`` (``"round"``) in each group; its
    leader's part ``f`` is taken at step ``s + f period / F`` and pulled ``overlap``
    steps later, or at once with no overlap (the parts started at one step: every
    level's first, then the later parts, local before global; those landing together
    in that order). ``decay``: R of the early valley, the level's ``r``-th election
    (from 0) pulls all its parts by ``pull + (1 - pull) c`` with ``c = max(0, 1 - r / R)``;
    with overlap its parts first move ``c`` of the way by the difference of the worker's
    part at the send from the leader's, ``x <- x - c (x_s - x̃)``, then pull by ``pull``."""
    x = [list(v) for v in X0]
    n = len(x[0])
    bounds = [(n * f // fragments, n * (f + 1) // fragments) for f in range(fragments)]
    elected: dict[tuple[int, int], int] = {}
    rounds = [0 for _ in levels]  # each level's elections so far
    flight: list[tuple[Any, ...]] = []
    out: list[list[list[float]]] = [[] for _ in x]

    def land(item: tuple[Any, ...]) -> None:
        _, members, leader, pull, f, values, share, starts = item
        lo, hi = bounds[f]
        for r in members:
            if r != leader:
                now, weight = x[r][lo:hi], pull + (1 - pull) * share
                if overlap and share:  # hidden: the copied share on the round's difference
                    now = [a - share * (s0 - b) for a, s0, b in zip(now, starts[r], values)]
                    weight = pull
                x[r][lo:hi] = [a + weight * (b - a) for a, b in zip(now, values)]

    for s in range(1, STEPS + 1):
        for r in range(len(x)):
            x[r] = [a - LR * g for a, g in zip(x[r], GRADS[r])]
        for item in [i for i in flight if i[0] == s]:
            land(item)
        flight = [i for i in flight if i[0] != s]
        when = s - 1 if election == "early" else s
        for li, (period, groups, _) in enumerate(levels):
            if s % period == 0:
                rounds[li] += 1
                for gi, members in enumerate(groups):
                    elected[li, gi] = min(members, key=lambda r: (loss(r, when), r))
        for f in range(fragments):
            for li, (period, groups, pull) in enumerate(levels):
                if s % period == f * period // fragments and (li, 0) in elected:
                    r = rounds[li] - 1
                    share = max(0.0, 1 - r / decay) if decay else 0.0
                    for gi, members in enumerate(groups):
                        leader = elected[li, gi]
                        lo, hi = bounds[f]
                        flight.append((s + overlap, members, leader, pull, f,
                                       list(x[leader][lo:hi]), share,
                                       {m: list(x[m][lo:hi]) for m in members}))
                        if not overlap:  # a blocking round pulls before the next is sent
                            land(flight.pop())
        for r in range(len(x)):
            out[r].append(list(x[r]))
    return out


def spec(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"method": "lsgd", "x0": X0, "grads": GRADS, "lr": LR,
            "losses": [[loss(r, t) for r in range(4)] for t in range(1, STEPS + 1)],
            "kwargs": {"scope": 0.0, "leader_window": 1} | kwargs}


def check(levels: list[tuple[int, list[list[int]], float]], fragments: int, overlap: int,
          election: str, decay: int = 0) -> Callable[[list[dict[str, Any]]], None]:
    def run(results: list[dict[str, Any]]) -> None:
        expected = reference(levels, fragments, overlap, election, decay)
        for r, res in enumerate(results):
            for t, (got, want) in enumerate(zip(res["x"], expected[r]), start=1):
                assert got == want, f"rank {r} after step {t}: {got} != {want}"
    return run


SINGLE = [[0, 1, 2, 3]]
GROUPS = [[0, 1], [2, 3]]
HIDDEN_CASES: dict[str, tuple[int, int, str, dict[str, Any],
                              Callable[[list[dict[str, Any]]], None]]] = {
    # the early election, the whole state, overlap 2
    "lsgd_early": (4, 1, "scripted", spec(dict(pull=0.5, period=4, overlap=2)),
                   check([(4, [SINGLE[0]], 0.5)], 1, 2, "early")),
    # the election at the round, as before the early one existed
    "lsgd_round_hidden": (4, 1, "scripted", spec(dict(pull=0.5, period=4, overlap=2,
                                                      election="round")),
                          check([(4, [SINGLE[0]], 0.5)], 1, 2, "round")),
    # two fragments, each pulled one step after it is sent
    "lsgd_fragments": (4, 1, "scripted", spec(dict(pull=0.5, period=4, overlap=1,
                                                   fragments=2)),
                       check([(4, [SINGLE[0]], 0.5)], 2, 1, "early")),
    # multi-leader: local (period 2) and global (period 4) levels, each in 2 fragments
    "lsgd_multi_fragments": (4, 2, "scripted", spec(dict(
        pull=0.5, pull_global=0.25, period=2, global_period=4, overlap=1, fragments=2)),
        check([(2, GROUPS, 0.5), (4, SINGLE, 0.25)], 2, 1, "early")),
}
