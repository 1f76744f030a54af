"""``lsgd train --fault KIND:RANK:STEP``: faults injected for tests.

``nan``: the worker's loss becomes NaN at its step STEP (so do its gradients and,
after the optimizer step, its state), to exercise the recovery from a diverging
worker. ``kill``: the worker SIGKILLs itself before its step STEP, on the first
attempt only (a restarted job runs through), to exercise restarts.
"""

from __future__ import annotations

import math
import os
import signal
import sys

import torch


class Faults:
    """The faults of worker ``rank``; ``attempt`` is torchelastic's restart count."""

    def __init__(self, faults: dict[tuple[str, int], int], rank: int, attempt: int) -> None:
        self.rank = rank
        self.nan_at = faults.get(("nan", rank))
        self.kill_at = faults.get(("kill", rank)) if attempt == 0 else None
        self.active = self.nan_at is not None or self.kill_at is not None

    def apply(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """``loss`` of step ``step``, or NaN, or no return at all (SIGKILL)."""
        if step == self.kill_at:
            print(f"fault: worker {self.rank} kills itself (SIGKILL) at step {step}",
                  file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if step == self.nan_at:
            print(f"fault: worker {self.rank}'s loss is NaN at step {step}", file=sys.stderr,
                  flush=True)
            return loss * math.nan
        return loss
