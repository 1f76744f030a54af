"""Reproductions of the LSGD paper's own small experiments (Teng et al., NeurIPS 2019,
arXiv:1905.10395; docs/reproductions.md): :mod:`lsgd.repro.toy`, a 2-D landscape with 4
workers, and :mod:`lsgd.repro.matrix`, low-rank matrix factorization with 8 workers, both
LGD against EAGD, with the library's own strategies on the simulator (so they double as
an end-to-end check). This package offers what the two share (:mod:`lsgd.repro.fullbatch`,
imported on first use: ``lsgd repro`` checks its arguments against the torch-free
:mod:`lsgd.repro.defaults`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["FullBatchRun", "Method", "PLOT_HINT", "Point", "Progress", "ValueAndGrad", "eagd",
           "lgd", "pyplot", "run_full_batch"]


def __getattr__(name: str) -> Any:
    """A public name, from :mod:`lsgd.repro.fullbatch` (which imports torch) on first use."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = "lsgd.plots" if name in ("PLOT_HINT", "pyplot") else "lsgd.repro.fullbatch"
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from lsgd.plots import PLOT_HINT, pyplot
    from lsgd.repro.fullbatch import (FullBatchRun, Method, Point, Progress, ValueAndGrad, eagd,
                                      lgd, run_full_batch)
