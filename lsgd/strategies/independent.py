"""Independent workers: no communication at all (plain SGD per worker).

The single-worker baseline, and the reference that LSGD with ``pull = scope = 0``
must equal bit for bit. ``center()`` still averages the workers for evaluation.
"""

from __future__ import annotations

from lsgd.strategies.strategy import Strategy


class Independent(Strategy):
    """Each worker trains alone; ``step`` is the optimizer step."""

    name = "sgd"
    bn_modes = ("local",)
