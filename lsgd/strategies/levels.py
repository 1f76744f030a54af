"""LSGD's levels of leadership (a node's, and everyone's) and how their knobs are spelled."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm.communicator import Among
from lsgd.comm.info import WorkerInfo
from lsgd.flat import FlatBuffer

DEFAULTS = {"pull": 0.1, "scope": 0.01, "period": 16}


@dataclasses.dataclass
class Level:
    """One level of leadership: the local one (a group) or the global one (all)."""

    name: str  # "local" | "global"
    among: Among  # which workers elect this level's leader: "group" | "world"
    members: list[int]
    pull: float
    scope: float
    period: int
    snapshot: FlatBuffer
    leader: int | None = None
    rounds: int = 0
    switches: int = 0

    @property
    def scope_weight(self) -> float:
        return self.scope / self.period

    def state(self) -> dict[str, Any]:
        return {"leader": self.leader, "rounds": self.rounds, "switches": self.switches,
                "snapshot": [b.clone() for b in self.snapshot.buffers]}

    def load(self, saved: dict[str, Any]) -> None:
        self.leader, self.rounds = saved["leader"], saved["rounds"]
        self.switches = saved["switches"]
        torch._foreach_copy_(self.snapshot.buffers, list(saved["snapshot"]))


@dataclasses.dataclass(frozen=True)
class Knobs:
    """LSGD's knobs, checked; the global ones as given (None: not given)."""

    pull: float
    scope: float
    period: int
    pull_global: float | None
    scope_global: float | None
    global_period: int | None


def check_knobs(owner: str, pull: float | None, scope: float | None, period: int | None,
                pull_global: float | None, scope_global: float | None,
                global_period: int | None) -> Knobs:
    """Raise ``ValueError`` naming a knob out of its range; the knobs with defaults."""
    return Knobs(
        _validate.fraction(owner, "pull", DEFAULTS["pull"] if pull is None else pull),
        _validate.fraction(owner, "scope", DEFAULTS["scope"] if scope is None else scope),
        _validate.positive_int(owner, "period", DEFAULTS["period"] if period is None else period),
        None if pull_global is None else _validate.fraction(owner, "pull_global", pull_global),
        None if scope_global is None else _validate.fraction(owner, "scope_global",
                                                             scope_global),
        None if global_period is None else _validate.positive_int(owner, "global_period",
                                                                  global_period))


def build_levels(owner: str, k: Knobs, info: WorkerInfo, state: list[torch.Tensor]) -> list[Level]:
    """The levels, local before global: with one group the global level only, set by either
    spelling; with several a local level (groups of several workers) and a global one,
    its knobs defaulting as :class:`~lsgd.strategies.lsgd.LSGD` says."""
    levels = []
    if info.groups == 1:
        given = [f"{name}={value!r}" for name, value in (
            ("pull_global", k.pull_global), ("scope_global", k.scope_global),
            ("global_period", k.global_period)) if value is not None]
        if given:
            raise ValueError(f"{owner}: with groups=1 there is a single leader, set by pull, "
                             f"scope and period; got {', '.join(given)}: pass the plain knobs")
        g_pull, g_scope, g_period = k.pull, k.scope, k.period
    else:
        g_pull = k.pull if k.pull_global is None else k.pull_global
        g_scope = k.scope if k.scope_global is None else k.scope_global
        local = info.group_size > 1
        g_period = k.global_period or (4 * k.period if local else k.period)
        _validate.multiple_of(owner, "global_period", g_period, "period", k.period)
        if local:
            levels.append(Level("local", "group", info.group_members(), k.pull, k.scope,
                                k.period, FlatBuffer(state)))
    levels.append(Level("global", "world", list(range(info.world_size)), g_pull, g_scope,
                        g_period, FlatBuffer(state)))
    return levels
