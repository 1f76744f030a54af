"""Benchmarks that show what lsgd is for: speed where communication is expensive.

``lsgd bench NAME`` (or ``all``) runs them; each prints a table and writes
``NAME.json``, ``NAME.txt`` and figures under ``--out``. ``--quick`` runs a
seconds-long version of each (the test suite runs those). See
docs/benchmarks.md for the full runs and what they show.

=================  ===========================================================
time-to-accuracy   4 workers as 4 nodes behind 1 Gbit/s, 100 and 20 Mbit/s
                   links: every method's time to a target accuracy
twelve-workers     the paper's 12 workers as 3 nodes of 4, on the modeled link
scaling            4, 16 and 64 workers in nodes of 4 on the modeled clock: time
                   to a target and bytes per worker against the number of workers
time-to-loss       the language model (GPT on the King James Bible) on 4 nodes
                   behind slow links: every method's time to a validation loss,
                   all-reduce also with PyTorch's bf16 and PowerSGD hooks
equal-tokens       the language model: validation loss after the same steps
                   (tokens) against all-reduce, and the bytes each sent
volume             bytes per worker and step for each method and period; the
                   seconds of one LSGD round on shaped links against B/rate
overhead           a local step under each strategy against plain PyTorch
stragglers         synchronous against asynchronous LSGD with a slow worker
simulator          steps per second of 1 to 16 simulated workers
decentralized      D-PSGD, MATCHA and AL-DSGD on one graph and on two rotating
                   graphs (8 workers on modeled links)
fidelity           the paper-fidelity choices: BatchNorm statistics, the form
                   of LSGD's pull, leader momentum (simulator, fixed steps)
startup            a 1-step run of 4 worker processes against ``import lsgd``
equal-steps        accuracy after 240 steps of every overlapped or compressed
                   form of LSGD, DiLoCo, local SGD and EASGD against the plain one
=================  ===========================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result

Runner = Callable[[Path, bool, dict[str, Any]], Result]


_RUNNERS = {
    "time-to-accuracy": ("accuracy", "run"),
    "twelve-workers": ("accuracy", "run_twelve"),
    "scaling": ("scaling", "run"),
    "time-to-loss": ("accuracy", "run_text"),
    "equal-tokens": ("equal_tokens", "run"),
    "volume": ("volume", "run"),
    "overhead": ("overhead", "run"),
    "stragglers": ("stragglers", "run"),
    "simulator": ("simulator", "run"),
    "decentralized": ("decentralized", "run"),
    "fidelity": ("fidelity", "run"),
    "startup": ("startup", "run"),
    "equal-steps": ("equal_steps", "run"),
    "elastic": ("elastic", "run"),
}


def runner(name: str) -> Runner:
    """The benchmark ``name``'s ``run`` (its module is imported on first use)."""
    module, function = _RUNNERS[name]
    return getattr(importlib.import_module(f"lsgd.bench.{module}"), function)


NAMES = tuple(_RUNNERS)  # in the order ``all`` runs them

__all__ = ["NAMES", "Result", "runner"]
