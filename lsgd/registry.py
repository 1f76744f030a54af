"""Every method by its command-line name: one place that builds strategies, so that a
name means one thing everywhere.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from lsgd.strategies import (ALDSGD, DPSGD, EASGD, LSGD, MATCHA, AllReduce, DeMo, DiLoCo,
                              Independent, LocalSGD, MuLoCo, SparseLoCo)
from lsgd.names import METHODS
from lsgd.strategies.strategy import Strategy

STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (
    LSGD, EASGD, LocalSGD, AllReduce, Independent, DPSGD, MATCHA, ALDSGD, DiLoCo, SparseLoCo, DeMo,
    MuLoCo)}
assert tuple(STRATEGIES) == METHODS, "lsgd.names.METHODS lists the registry's names, in order"


def strategy_names() -> list[str]:
    """The methods' names, as ``lsgd train --method`` spells them."""
    return list(STRATEGIES)


def strategy_class(name: str) -> type[Strategy]:
    """The strategy class called ``name``; ``ValueError`` listing the names otherwise."""
    try:
        return STRATEGIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; choose one of "
                         f"{', '.join(STRATEGIES)}") from None


def accepted_knobs(name: str) -> list[str]:
    """The keyword arguments that the strategy ``name`` accepts (its own, then those it
    passes on with ``**options``: the strategy's, and an averaging round's)."""
    cls = strategy_class(name)
    parameters = inspect.signature(cls.__init__).parameters.values()
    own = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        own += [key for key in cls.option_names() if key not in own]
    return own


def check_knobs(name: str, knobs: Any, unavailable: tuple[str, ...] = (),
                who: str | None = None) -> None:
    """``ValueError`` naming the keyword arguments in ``knobs`` that the strategy ``name``
    does not take (or that ``who``, the caller, leaves ``unavailable``), and those it does."""
    accepted = [k for k in accepted_knobs(name) if k not in unavailable]
    unknown = sorted(set(knobs) - set(accepted))
    if unknown:
        raise ValueError(f"{who or name}: unknown argument(s) {', '.join(unknown)}; {name} "
                         f"takes {', '.join(accepted)}")


def make_strategy(name: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                  **knobs: Any) -> Strategy:
    """Build the strategy ``name`` around ``model`` and ``optimizer`` with its keyword
    arguments ``knobs``; one it does not take is a ``ValueError`` naming the ones it does."""
    cls = strategy_class(name)
    check_knobs(name, knobs)
    return cls(model, optimizer, **knobs)
