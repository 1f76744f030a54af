"""The error-feedback stage: what a codec drops from one round is sent with the next.

For any codec ``C`` of the round's move, with ``Δ`` the message of a part and ``e`` this
worker's accumulator (laid out like the state, zero at the start)::

    u = Δ + β e;   c = C(u);   e <- u - c;   send u (the codec carries exactly c)

so after every round ``e`` equals exactly what the codec dropped (``β = 1``: classic
error feedback; ``β < 1``: SparseLoCo's decaying accumulator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch

from lsgd.flat import FlatBuffer
from lsgd.strategies.stages.parts import StateParts


class Codec(Protocol):
    """A move that can say what a message becomes on the wire."""

    def roundtrip(self, message: list[torch.Tensor]) -> list[torch.Tensor]: ...


class ErrorFeedback:
    """This worker's accumulator ``e`` over the state's parts, decayed by ``decay``."""

    def __init__(self, parts: StateParts, decay: float = 1.0) -> None:
        self.parts, self.decay = parts, decay
        self.residual = FlatBuffer(parts.tensors)

    def send(self, message: list[torch.Tensor], part: int, codec: Codec) -> None:
        """``message <- message + β e`` (what is sent); ``e <-`` what ``codec`` drops of it."""
        residual = self.parts.of(self.residual, part)
        if self.decay != 1.0:
            torch._foreach_mul_(residual, self.decay)
        torch._foreach_add_(message, residual)
        for lost, sent, kept in zip(residual, message, codec.roundtrip(message)):
            torch.sub(sent, kept, out=lost)

    def state(self) -> dict[str, Any]:
        return {"residual": [b.clone() for b in self.residual.buffers]}

    def load(self, state: Mapping[str, Any]) -> None:
        torch._foreach_copy_(self.residual.buffers, list(state["residual"]))
