"""What a round does with the BatchNorm running statistics (``bn_buffers=``; integer
buffers always stay local). Modes (docs/algorithms.md, "BatchNorm statistics"):
``"average"`` (every round's workers average them), ``"pull"`` (part of the state
``x``), ``"local"`` (never communicated) and ``"broadcast"`` (all-reduce data
parallel's: rank 0's before each forward).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lsgd.comm import Communicator
from lsgd.comm.communicator import Among
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.names import BN_MODES as MODES


def resolve(owner: str, allowed: Sequence[str], bn_buffers: str | None) -> str:
    """The mode of ``owner`` (a method whose modes are ``allowed``, default first)."""
    if bn_buffers is None:
        return allowed[0]
    if bn_buffers not in MODES:
        raise ValueError(f"{owner}: bn_buffers={bn_buffers!r} is not a mode; choose one of "
                         f"{', '.join(allowed)}")
    if bn_buffers not in allowed:
        raise ValueError(f"{owner}: bn_buffers={bn_buffers!r} is not a mode of {owner}; "
                         f"choose one of {', '.join(allowed)}")
    return bn_buffers


class BufferAverage:
    """The healthy mean of the members' floating buffers, in one all-reduce: each flat
    buffer (per dtype and device) has one extra slot, the member's count (1 when all
    its buffers are finite, else 0, its buffers then sent as zeros)."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = list(tensors)
        kinds = list(dict.fromkeys((t.dtype, t.device) for t in self.tensors))
        slots = [torch.zeros(1, dtype=dtype, device=device) for dtype, device in kinds]
        # FlatBuffer keeps each kind's tensors in order: its count slot comes last.
        self.flat = FlatBuffer(self.tensors + slots)
        self._views = self.flat.views[: len(self.tensors)]
        self._slots = self.flat.views[len(self.tensors):]

    def __call__(self, comm: Communicator, among: Among = "world") -> int:
        """Average among ``among``; returns the number of healthy members (0: unchanged)."""
        if not self.tensors:
            return 0
        torch._foreach_copy_(self._views, self.tensors)
        healthy = all_finite(self._views)
        if not healthy:
            torch._foreach_zero_(self._views)
        for slot in self._slots:
            slot.fill_(1.0 if healthy else 0.0)
        for buffer in self.flat.buffers:
            comm.all_reduce_(buffer, op="sum", among=among)
        count = int(self._slots[0].item())
        if count > 0:
            torch._foreach_div_(self._views, float(count))
            torch._foreach_copy_(self.tensors, self._views)
        return count
