"""Overlapped, fragmented and compressed rounds of the averaging methods (DiLoCo, local
SGD, EASGD): the part they share.

Each of these methods all-reduces the workers' states at a round and then
applies its own rule to the mean. With any of the options below the round
goes through :class:`AveragingRounds` instead of the plain blocking round
(docs/algorithms.md, "Overlapped rounds", "Fragments", "Compressed rounds"):

* ``fragments=F``: the state, as one flat vector, is cut into ``F``
  contiguous parts of equal size; part ``f`` has rounds of its own every
  ``period`` steps at offset ``(f + 1) period / F`` (the last part at the
  period's multiples), so the link carries ``1 / F`` of the state at a time
  (Streaming DiLoCo, Douillard et al. 2025).
* ``overlap=K``: the part's all-reduce starts at the round step ``s`` and its
  mean is applied after step ``s + K``; in between the worker trains on.
* ``compress="bf16"|"int8"``: what is all-reduced is the difference
  ``r - x`` between a reference ``r`` that every worker holds identically
  (DiLoCo: the global state; local SGD: the last average; EASGD: the
  center) and the worker's state, in the codec of :mod:`lsgd.comm.codec`;
  the mean of the states is ``r`` minus the mean difference, the same on
  every worker. With ``error_feedback`` each worker adds what the codec lost
  of its last message (``m - decode(encode(m))``) into its next one.

How the mean meets the steps taken since ``s`` (``merge``, DiLoCo and local
SGD): ``"keep"`` moves the worker to the new value plus its own progress
since the round started (``target + (x_now - x_s)``; local SGD's default);
``"replace"`` sets it to the new value (torchft's default, the steps since
``s`` are lost); ``"mix"`` takes ``0.5 target + 0.5 x_now`` (Streaming
DiLoCo's merge; DiLoCo's default). The defaults are what trained best after
240 steps (``lsgd bench equal-steps``).
Without overlap no step was taken since the round: the worker takes the new
value, whatever the merge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.comm import codec as codecs
from lsgd.flat import FlatBuffer
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.schedule import Cadence

MERGES = ("keep", "replace", "mix")
MIX = 0.5  # Streaming DiLoCo's weight of the local state in a "mix" merge


class Fragments:
    """A flat state cut into ``count`` contiguous parts (per flat buffer)."""

    def __init__(self, like: FlatBuffer, count: int) -> None:
        self.count = count
        self.bounds = [[(b.numel() * f // count, b.numel() * (f + 1) // count)
                        for b in like.buffers] for f in range(count)]

    def of(self, flat: FlatBuffer, f: int) -> list[torch.Tensor]:
        """Part ``f`` of ``flat`` (a buffer laid out like the state), as views."""
        return [b[lo:hi] for b, (lo, hi) in zip(flat.buffers, self.bounds[f])]

    def cadences(self, period: int) -> list[Cadence]:
        """One kind of round per part, each every ``period`` steps at its offset."""
        return [Cadence(name(f), period, "world", offset=(f + 1) * period // self.count % period)
                for f in range(self.count)]


def check_merge(owner: str, merge: str | None, overlap: int, default: str) -> str:
    """``merge``, one of :data:`MERGES` (None: the method's ``default``); one that is
    given needs ``overlap``, since without it no step is taken while a round is in
    flight."""
    if merge is None:
        return default
    _validate.choice(owner, "merge", merge, MERGES)
    if not overlap:
        raise ValueError(f"{owner}: merge={merge!r} says how an average meets the steps taken "
                         "while it was in flight; it needs overlap > 0")
    return merge


def name(fragment: int) -> str:
    """The cadence name of a fragment's rounds."""
    return f"fragment{fragment}"


def index(cadence: str) -> int:
    """The fragment of a cadence named by :func:`name`."""
    return int(cadence.removeprefix("fragment"))


class AveragingRounds:
    """Starts a fragment's all-reduce and writes what lands back into the state.

    ``state`` are the strategy's state tensors; ``merge`` one of :data:`MERGES`.
    """

    def __init__(self, comm: Communicator, state: Sequence[torch.Tensor], *, fragments: int,
                 overlap: int, compress: str, merge: str, error_feedback: bool) -> None:
        self.comm = comm
        self.tensors = list(state)
        self.work = FlatBuffer(self.tensors)  # the state as one flat vector, per dtype
        self.fragments = Fragments(self.work, fragments)
        self.overlap = overlap
        self.compress = compress
        self.merge = merge
        self.residual = (FlatBuffer(self.tensors)
                         if error_feedback and compress != "none" else None)

    def start(self, fragment: int, steps: int, reference: FlatBuffer | None) -> InFlight:
        """Start the all-reduce (mean) of ``fragment`` of the state, or, compressed, of
        ``reference - state`` (plus the last residual with error feedback)."""
        self.work.copy_from(self.tensors)
        now = self.fragments.of(self.work, fragment)
        message = [t.clone() for t in now]
        if self.compress != "none":
            assert reference is not None
            torch._foreach_neg_(message)
            torch._foreach_add_(message, self.fragments.of(reference, fragment))
            if self.residual is not None:
                residual = self.fragments.of(self.residual, fragment)
                torch._foreach_add_(message, residual)
                for lost, sent in zip(residual, message):  # what the codec will not carry
                    torch.sub(sent, codecs.roundtrip(self.compress, sent).view_as(sent),
                              out=lost)
        handles = [self.comm.start_all_reduce(t, "mean", codec=self.compress) for t in message]
        tensors = {"mean": message}
        if self.overlap and self.merge == "keep":
            tensors["start"] = [t.clone() for t in now]
        return InFlight(steps, steps + self.overlap, name(fragment), handles, tensors,
                        {"fragment": fragment})

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the rounds (the residuals of error feedback)."""
        if self.residual is None:
            return {}
        return {"residual": [b.clone() for b in self.residual.buffers]}

    def load(self, state: Mapping[str, Any]) -> None:
        if self.residual is not None:
            for buffer, value in zip(self.residual.buffers, state["residual"]):
                buffer.copy_(value)

    def current(self, fragment: int) -> list[torch.Tensor]:
        """The fragment's values now, as views of a flat copy; :meth:`write_back` stores them."""
        self.work.copy_from(self.tensors)
        return self.fragments.of(self.work, fragment)

    def write_back(self) -> None:
        self.work.copy_to(self.tensors)

    def land(self, item: InFlight, target: Sequence[torch.Tensor]) -> None:
        """Move the fragment of ``item`` to ``target`` (the new average, or DiLoCo's
        global state after its outer step), merged with the steps since the round."""
        now = self.current(item.info["fragment"])
        if self.overlap and self.merge == "mix":
            torch._foreach_lerp_(now, list(target), 1.0 - MIX)
        elif self.overlap and self.merge == "keep":
            torch._foreach_sub_(now, item.tensors["start"])
            torch._foreach_add_(now, list(target))
        else:  # "replace", and every merge without overlap: no step was taken since
            torch._foreach_copy_(now, list(target))
        self.write_back()
