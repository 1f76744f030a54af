"""The message stage: what a worker sends of a part of its state: ``x`` itself, or its
difference ``r - x`` from a reference ``r`` that every worker holds identically (the
last average, DiLoCo's ``θ_g``, EASGD's center), what a compressed round sends: a
difference is small and a codec's error on it does not accumulate in the state.
"""

from __future__ import annotations

import torch

from lsgd.flat import FlatBuffer
from lsgd.strategies.stages.parts import StateParts


class Message:
    """Builds a part's message: ``x``, or with ``difference`` ``r - x``."""

    def __init__(self, parts: StateParts, difference: bool) -> None:
        self.parts, self.difference = parts, difference

    def build(self, part: int, reference: FlatBuffer | None
              ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(the message of this process's share of the part; the part now, as views)."""
        now = self.parts.current(part)
        message = [t.clone() for t in now]
        if self.difference:
            assert reference is not None, "a difference needs the reference"
            torch._foreach_neg_(message)
            torch._foreach_add_(message, self.parts.of(reference, part))
        return message, now
