"""The move stage: how a round's messages travel and what each worker gets back.

* :class:`AllReduce`: the mean (or, with per-worker weights, the sum) of the messages,
  one all-reduce per flat buffer in a dense wire format (:mod:`lsgd.comm.codec`).
* :class:`Gather`: a compressed message whose kept entries differ from worker to
  worker (top-k, 2-bit: :mod:`lsgd.comm.sparse`): one all-gather of every worker's
  payload, decoded and summed in rank order, so every worker computes the same mean.

Both move this process's share of the part among the replicas (``comm.across``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from lsgd.comm import Communicator
from lsgd.comm import codec as codecs
from lsgd.comm.communicator import Among
from lsgd.comm.sparse import SparseFormat, as_rows, from_rows
from lsgd.comm.transfers import Handle, done_handle

Tensors = list[torch.Tensor]


class AllReduce:
    """The dense move (see the module docstring); ``codec`` one of :data:`CODECS`."""

    gathers = False

    def __init__(self, comm: Communicator, codec: str, blocking: bool) -> None:
        self.comm, self.codec, self.blocking = comm, codec, blocking and codec == "none"

    def roundtrip(self, message: Tensors) -> Tensors:
        """What ``message`` becomes on the wire (before any reduction)."""
        return [codecs.roundtrip(self.codec, t).view_as(t) for t in message]

    def start(self, message: Tensors, among: Among, summed: bool
              ) -> tuple[list[Handle], dict[str, Tensors]]:
        """Reduce ``message`` in place: the mean (``summed``: the sum of weighted ones)."""
        across, op = self.comm.across, "sum" if summed else "mean"
        if self.blocking:
            for t in message:
                across.all_reduce_(t, op, among)
            return [done_handle()], {"mean": message}
        return ([across.start_all_reduce(t, op, among, codec=self.codec) for t in message],
                {"mean": message})

    def finish(self, tensors: dict[str, Tensors], weights: Sequence[float] | None,
               keep: int | None) -> tuple[Tensors, Tensors | None]:
        """The landed mean (already in place); no worker's own message is kept."""
        return tensors["mean"], None


class Layout(Protocol):
    """How a gathered message's tensors become rows, each row in a format, and back."""

    def formats(self, message: Sequence[torch.Tensor]) -> list[SparseFormat]: ...

    def shapes(self, message: Sequence[torch.Tensor]) -> list[tuple[int, int]]: ...

    def split(self, message: Sequence[torch.Tensor]) -> Tensors: ...

    def join(self, rows: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> Tensors: ...


class Chunks:
    """A gathered message's layout: rows of ``chunk`` values (zero-padded) in ``fmt``."""

    def __init__(self, fmt: SparseFormat, chunk: int) -> None:
        self.fmt, self.chunk = fmt, chunk

    def formats(self, message: Sequence[torch.Tensor]) -> list[SparseFormat]:
        return [self.fmt] * len(message)

    def split(self, message: Sequence[torch.Tensor]) -> Tensors:
        return [as_rows(t.reshape(-1).float(), self.chunk) for t in message]

    def shapes(self, message: Sequence[torch.Tensor]) -> list[tuple[int, int]]:
        return [(-(-t.numel() // self.chunk), self.chunk) for t in message]

    def join(self, rows: Sequence[torch.Tensor], like: Sequence[torch.Tensor]) -> Tensors:
        return [from_rows(r, t.numel()).view_as(t).to(t.dtype) for r, t in zip(rows, like)]


class Gather:
    """The gathered move of a compressed message, as the rows of ``layout``."""

    gathers = True

    def __init__(self, comm: Communicator, layout: Layout, blocking: bool) -> None:
        self.comm, self.layout, self.blocking = comm, layout, blocking
        self._payload: torch.Tensor | None = None  # encoded by roundtrip, sent by start

    def _sizes(self, message: Sequence[torch.Tensor]) -> list[int]:
        return [fmt.nbytes(rows, s) for fmt, (rows, s)
                in zip(self.layout.formats(message), self.layout.shapes(message))]

    def nbytes(self, message: Sequence[torch.Tensor]) -> int:
        """Bytes of one worker's payload for ``message``."""
        return sum(self._sizes(message))

    def _encode(self, message: Tensors) -> torch.Tensor:
        parts = [fmt.encode(rows) for fmt, rows
                 in zip(self.layout.formats(message), self.layout.split(message))]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)

    def _decode(self, payload: torch.Tensor, like: Sequence[torch.Tensor]) -> Tensors:
        """The rows ``payload`` stands for, dense (zeros where nothing was kept)."""
        out, offset = [], 0
        for fmt, (rows, s), size in zip(self.layout.formats(like), self.layout.shapes(like),
                                        self._sizes(like)):
            out.append(fmt.decode(payload[offset:offset + size], rows, s))
            offset += size
        return out

    def roundtrip(self, message: Tensors) -> Tensors:
        """What ``message`` is decoded to; its encoding is kept for :meth:`start`."""
        self._payload = self._encode(message)
        return self.layout.join(self._decode(self._payload, message), message)

    def start(self, message: Tensors, among: Among, summed: bool
              ) -> tuple[list[Handle], dict[str, Tensors]]:
        """Start the all-gather of ``message``'s payload (into ``tensors["gathered"]``)."""
        payload = self._payload if self._payload is not None else self._encode(message)
        self._payload = None
        across = self.comm.across
        gathered = torch.zeros(across.among_size(among), payload.numel(), dtype=torch.uint8,
                               device=payload.device)
        started = across.start_all_gather(payload, among)

        def arrive() -> tuple[None, float]:
            gathered.copy_(started.wait())
            return None, 0.0  # the all-gather's own handle counted its traffic

        handle = Handle(arrive, lambda seconds: None)
        if self.blocking:
            handle.wait()
        return [handle], {"gathered": [gathered], "mean": [torch.zeros_like(t) for t in message]}

    def decoded(self, tensors: dict[str, Tensors]) -> list[Tensors]:
        """Every member's message decoded, as its rows (in rank order)."""
        return [self._decode(payload, tensors["mean"]) for payload in tensors["gathered"][0]]

    def finish(self, tensors: dict[str, Tensors], weights: Sequence[float] | None,
               keep: int | None) -> tuple[Tensors, Tensors | None]:
        """Every member's message decoded and reduced in rank order into
        ``tensors["mean"]`` (with ``weights``: the weighted sum); also the decoded
        message of member ``keep``."""
        mean = tensors["mean"]
        members = self.decoded(tensors)
        kept = None
        if keep is not None:  # its own message, before any weight
            kept = [t.clone() for t in self.layout.join(members[keep], mean)]
        for rows, weight in zip(members, weights or ()):
            torch._foreach_mul_(rows, weight)
        total = members[0]
        for rows in members[1:]:
            torch._foreach_add_(total, rows)
        if weights is None:
            torch._foreach_div_(total, float(len(members)))
        torch._foreach_copy_(mean, self.layout.join(total, mean))
        return mean, kept
