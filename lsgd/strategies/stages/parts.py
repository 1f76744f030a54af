"""The state as a round moves it: one flat vector per dtype, cut into parts
(fragments), each part into this process's share (replicas of several processes,
:mod:`lsgd.comm.replica`). A method's rule works on the views this module hands it and
never asks which share they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from lsgd.comm import Communicator
from lsgd.flat import FlatBuffer
from lsgd.strategies.cadence import Cadence


class Fragments:
    """A flat state cut into ``count`` contiguous parts (per flat buffer), and each part
    into this process's share (``share``: its ``(begin, end)`` of so many values)."""

    def __init__(self, like: FlatBuffer, count: int,
                 share: Callable[[int], tuple[int, int]] | None = None) -> None:
        self.count = count
        self.whole = [[(b.numel() * f // count, b.numel() * (f + 1) // count)
                       for b in like.buffers] for f in range(count)]
        share = share or (lambda numel: (0, numel))
        self.bounds = [[(lo + begin, lo + end) for lo, hi in part
                        for begin, end in [share(hi - lo)]] for part in self.whole]

    def of(self, flat: FlatBuffer, f: int) -> list[torch.Tensor]:
        """This process's share of part ``f`` of ``flat`` (laid out like the state)."""
        return [b[lo:hi] for b, (lo, hi) in zip(flat.buffers, self.bounds[f])]

    def cadences(self, period: int) -> list[Cadence]:
        """One kind of round per part, every ``period`` steps at its offset."""
        if self.count == 1:
            return [Cadence("global", period, "world")]
        return [Cadence(f"fragment{f}", period, "world",
                        offset=(f + 1) * period // self.count % period)
                for f in range(self.count)]


def part_of(cadence: str) -> int:
    """The part a cadence's rounds send (``"global"``, ``"local"``: the whole state)."""
    return int(cadence.removeprefix("fragment")) if cadence.startswith("fragment") else 0


class StateParts:
    """The state as a round sees it: ``work``, a flat copy, and ``fragments``."""

    def __init__(self, comm: Communicator, state: Sequence[torch.Tensor], fragments: int) -> None:
        self.comm, self.tensors = comm, list(state)
        self.work = FlatBuffer(self.tensors)
        self.fragments = Fragments(self.work, fragments, comm.part)

    def of(self, flat: FlatBuffer, part: int) -> list[torch.Tensor]:
        """This process's share of ``part`` of ``flat``, as views."""
        return self.fragments.of(flat, part)

    def current(self, part: int) -> list[torch.Tensor]:
        """The part's values now, as views of a flat copy; :meth:`write_back` stores them."""
        self.work.copy_from(self.tensors)
        return self.fragments.of(self.work, part)

    def write_back(self, part: int) -> None:
        """The state's part ``part`` from :meth:`current`'s views, shares put together."""
        self.put_together(self.work, part)
        self.work.copy_to(self.tensors)

    def put_together(self, flat: FlatBuffer, part: int) -> None:
        """Part ``part`` of ``flat`` whole again from the replica's processes' shares."""
        if self.comm.share[1] > 1:
            for buffer, (lo, hi) in zip(flat.buffers, self.fragments.whole[part]):
                self.comm.put_together_(buffer[lo:hi])

    def leading(self, flat: FlatBuffer, grads: FlatBuffer, count: int
                ) -> tuple[list[tuple[list[torch.Tensor], list[torch.Tensor]]],
                           list[tuple[int, int]]]:
        """Where this process's share of ``flat`` (one part) holds the state's first ``count``
        tensors (the parameters, ahead of the buffers): one ``(values, grads)`` pair of views
        (the tensors' own for a whole share), and the share's region of the rest per buffer."""
        ends = [0] * len(flat.buffers)  # where each flat buffer's leading tensors end
        for index, offset, shape in flat._layout[:count]:
            ends[index] = max(ends[index], offset + shape.numel())
        values, slopes, regions = [], [], []
        for (lo, hi), end, theta, delta in zip(self.fragments.bounds[0], ends, flat.buffers,
                                               grads.buffers):
            if lo < end:
                values.append(theta[lo:min(hi, end)])
                slopes.append(delta[lo:min(hi, end)])
            regions.append((max(lo, end) - lo, hi - lo))
        if self.comm.share[1] == 1:
            values, slopes = flat.views[:count], grads.views[:count]
        return [(values, slopes)], regions
