"""The optimizer guard: ``optimizer.step()`` outside ``strategy.step(loss)``, which runs
the step itself, is an error (it would step twice). A step pre-hook on the optimizer
(:func:`guard`) checks a flag that only :func:`driving` sets.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch

_driven: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = weakref.WeakKeyDictionary()


def guard(optimizer: torch.optim.Optimizer) -> None:
    """Make ``optimizer.step()`` outside ``strategy.step(loss)`` an error."""
    if optimizer in _driven:
        return
    _driven[optimizer] = False

    def check(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not _driven.get(opt, True):
            raise RuntimeError("optimizer.step() was called directly, but this optimizer is "
                               "driven by an lsgd strategy: call strategy.step(loss) instead "
                               "(it runs optimizer.step() and then the method's "
                               "communication); calling both would step twice")

    optimizer.register_step_pre_hook(check)


@contextlib.contextmanager
def driving(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Inside: the optimizer's step is the strategy's own."""
    _driven[optimizer] = True
    try:
        yield
    finally:
        _driven[optimizer] = False
