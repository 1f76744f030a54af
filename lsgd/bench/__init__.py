"""Benchmarks that show what lsgd is for: speed where communication is expensive.

``lsgd bench NAME`` (or ``all``; the names are :data:`NAMES`) runs them on a user's
own links, model and machine; each prints a table and writes ``NAME.json``,
``NAME.txt`` and figures under ``--out``. ``--quick`` runs a seconds-long version of
each (the test suite runs those). docs/benchmarks.md says what each one measures
and shows.

This package's own names import no torch (``lsgd bench`` checks the names it is
given before anything else); ``Result`` is :mod:`lsgd.bench.common`'s, imported on
first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsgd.bench.common import Result

Runner = Callable[[Path, bool, dict[str, Any]], "Result"]


_RUNNERS = {
    "time-to-accuracy": ("accuracy", "run"),
    "twelve-workers": ("accuracy", "run_twelve"),
    "scaling": ("scaling", "run"),
    "time-to-loss": ("accuracy", "run_text"),
    "volume": ("volume", "run"),
    "overhead": ("overhead", "run"),
    "stragglers": ("stragglers", "run"),
    "simulator": ("simulator_bench", "run"),
    "startup": ("startup", "run"),
    "elastic": ("elastic_bench", "run"),
    "chaos": ("chaos_bench", "run"),
}


def runner(name: str) -> Runner:
    """The benchmark ``name``'s ``run`` (its module is imported on first use)."""
    module, function = _RUNNERS[name]
    return getattr(importlib.import_module(f"lsgd.bench.{module}"), function)


NAMES = tuple(_RUNNERS)  # in the order ``all`` runs them

__all__ = ["NAMES", "Result", "runner"]


def __getattr__(name: str) -> Any:
    """``Result``, from :mod:`lsgd.bench.common` (which imports torch) on first use."""
    if name == "Result":
        from lsgd.bench.common import Result

        return Result
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
