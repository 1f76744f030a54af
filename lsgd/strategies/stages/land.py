"""The landing stage: how a round's result reaches the worker's state. A round that
lands ``K = overlap`` steps after it started meets the ``K`` steps the worker took
meanwhile (docs/algorithms.md, "Overlapped rounds"); ``merge`` says how:

* ``"replace"``: the part becomes the target (the steps since are dropped);
* ``"keep"``: the part becomes ``target + (x_now - x_start)``, the steps since kept;
* ``"mix"``: ``x <- MIX x_now + (1 - MIX) target`` (Streaming DiLoCo's merge).

Without overlap every merge is the copy. A weighted landing (EASGD) moves the part
``weight`` of the way."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lsgd import _validate
from lsgd.functional import pull_
from lsgd.names import MERGES
from lsgd.strategies.stages.parts import StateParts

MIX = 0.5  # Streaming DiLoCo's weight of the local state in a "mix" merge


def check_merge(owner: str, merge: str | None, overlap: int, default: str) -> str:
    """``merge`` (None: the method's ``default``); one that is given needs ``overlap``."""
    if merge is None:
        return default
    _validate.choice(owner, "merge", merge, MERGES)
    if not overlap:
        raise ValueError(f"{owner}: merge={merge!r} says how an average meets the steps taken "
                         "while it was in flight; it needs overlap > 0")
    return merge


class Landing:
    """Writes a round's target into the state's part, merged with the steps since."""

    def __init__(self, parts: StateParts, overlap: int, merge: str) -> None:
        self.parts, self.overlap, self.merge = parts, overlap, merge

    def land(self, part: int, target: Sequence[torch.Tensor],
             start: Sequence[torch.Tensor] | None = None, weight: float = 1.0) -> None:
        """Move ``part`` to ``target`` (``weight < 1``: that much of the way)."""
        now = self.parts.current(part)
        if weight != 1.0:
            pull_(now, target, weight)
        elif self.overlap and self.merge == "mix":
            torch._foreach_lerp_(now, list(target), 1.0 - MIX)
        elif self.overlap and self.merge == "keep" and start is not None:
            torch._foreach_sub_(now, list(start))
            torch._foreach_add_(now, list(target))
        else:  # "replace", and every merge without overlap: no step was taken since
            torch._foreach_copy_(now, list(target))
        self.parts.write_back(part)
