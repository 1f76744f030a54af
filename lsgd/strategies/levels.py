"""LSGD's levels of leadership (a node's, and everyone's) and how their knobs are spelled."""

from __future__ import annotations

import dataclasses
from typing import Any

from lsgd.comm.base import Among
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


def one_spelling(owner: str, name: str, plain: Any, global_: Any) -> Any:
    """With one group, ``name`` and ``name_global`` are the same knob: take the one given."""
    if global_ is None:
        return DEFAULTS[name] if plain is None else plain
    if plain is None or plain == global_:
        return global_
    global_name = "global_period" if name == "period" else f"{name}_global"
    raise ValueError(
        f"{owner}: with groups=1 there is a single leader set by {name}; got both "
        f"{name}={plain!r} and {global_name}={global_!r}; pass one of them"
    )
