"""Benchmarks that show what lsgd is for: speed where communication is expensive.

``lsgd bench NAME`` (:data:`NAMES`, or ``all``) runs them on a user's own links, model
and machine (docs/benchmarks.md). This package imports no torch, so that ``lsgd bench``
checks its links and numbers before torch loads (method and set names against the
benchmarks' own lists, which import it); a benchmark's module is imported when it runs.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lsgd.bench.common import Result


class Runner(Protocol):
    """A benchmark: ``run(out, quick, options)``."""

    def __call__(self, out: Path, quick: bool, options: dict[str, Any]) -> Result: ...


#: name: (module, function)
_RUNNERS = {
    "time-to-accuracy": ("accuracy", "run"), "twelve-workers": ("accuracy", "run_twelve"),
    "scaling": ("scaling", "run"), "time-to-loss": ("accuracy", "run_text"),
    "volume": ("volume", "run"), "overhead": ("overhead", "run"),
    "stragglers": ("stragglers", "run"), "simulator": ("simulator_bench", "run"),
    "startup": ("startup", "run"), "elastic": ("elastic_bench", "run"),
    "chaos": ("chaos_bench", "run")}
NAMES = tuple(_RUNNERS)  # in the order ``all`` runs them


def runner(name: str) -> Runner:
    """The benchmark ``name``'s ``run`` (its module is imported on first use)."""
    module, function = _RUNNERS[name]
    return getattr(importlib.import_module(f"lsgd.bench.{module}"), function)
