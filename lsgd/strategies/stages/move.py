"""The move stage: how a round's messages travel and what each worker gets back.

* :class:`AllReduce`: the mean (or, with per-worker weights, the sum) of the
  messages, one all-reduce per flat buffer, dense, in a dense wire format
  (``"none"``, ``"bf16"``, ``"int8"``, :mod:`lsgd.comm.codec`); a round that neither
  hides nor compresses runs the blocking all-reduce.
* :class:`Gather`: a compressed message whose kept entries differ from worker to
  worker (top-k per chunk, or 2-bit values, :mod:`lsgd.comm.sparse`): every worker
  all-gathers every worker's encoded payload (``uint8``, one all-gather per round),
  decodes each and sums them in rank order, so every worker computes the same mean
  from the same bytes. Bytes on the wire: ``(n - 1)`` payloads sent and received by
  each of ``n`` members (a ring all-gather), counted by the communicator.

Both move this process's share of the part among the replicas (``comm.across``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lsgd.comm import Communicator
from lsgd.comm import codec as codecs
from lsgd.comm.base import Among
from lsgd.comm.sparse import SparseFormat, as_rows, from_rows
from lsgd.comm.transfers import Handle, done_handle

Tensors = list[torch.Tensor]


class AllReduce:
    """The dense move (see the module docstring); ``codec`` one of :data:`CODECS`."""

    gathers = False

    def __init__(self, comm: Communicator, codec: str, blocking: bool) -> None:
        self.comm = comm
        self.codec = codec
        self.blocking = blocking and codec == "none"

    def roundtrip(self, message: Tensors) -> Tensors:
        """What ``message`` becomes on the wire (before any reduction)."""
        if self.codec == "none":
            return [t.clone() for t in message]
        return [codecs.roundtrip(self.codec, t).view_as(t) for t in message]

    def start(self, message: Tensors, among: Among, summed: bool
              ) -> tuple[list[Handle], dict[str, Tensors]]:
        """Reduce ``message`` in place among ``among`` (``summed``: the sum of messages
        the workers weighted, else the mean)."""
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


class Gather:
    """The gathered move of a compressed message (see the module docstring): each
    message tensor as rows of ``chunk`` values in ``fmt``."""

    gathers = True

    def __init__(self, comm: Communicator, fmt: SparseFormat, chunk: int, blocking: bool) -> None:
        self.comm = comm
        self.fmt = fmt
        self.chunk = chunk
        self.blocking = blocking
        self._payload: torch.Tensor | None = None  # encoded by roundtrip, sent by start

    def _sizes(self, message: Sequence[torch.Tensor]) -> list[int]:
        return [self.fmt.nbytes(-(-t.numel() // self.chunk), self.chunk) for t in message]

    def nbytes(self, message: Sequence[torch.Tensor]) -> int:
        """Bytes of one worker's payload for ``message``."""
        return sum(self._sizes(message))

    def _encode(self, message: Tensors) -> torch.Tensor:
        parts = [self.fmt.encode(as_rows(t.reshape(-1).float(), self.chunk)) for t in message]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)

    def _decode(self, payload: torch.Tensor, like: Sequence[torch.Tensor]) -> Tensors:
        out, offset = [], 0
        for t, size in zip(like, self._sizes(like)):
            rows = -(-t.numel() // self.chunk)
            dense = self.fmt.decode(payload[offset:offset + size], rows, self.chunk)
            out.append(from_rows(dense, t.numel()).view_as(t).to(t.dtype))
            offset += size
        return out

    def roundtrip(self, message: Tensors) -> Tensors:
        """What this worker's ``message`` is decoded to; its encoding is kept, and the
        next :meth:`start` sends it."""
        self._payload = self._encode(message)
        return self._decode(self._payload, message)

    def start(self, message: Tensors, among: Among, summed: bool
              ) -> tuple[list[Handle], dict[str, Tensors]]:
        """Start the all-gather of ``message``'s payload; ``tensors["gathered"]`` holds
        every member's payload once it has arrived, ``tensors["mean"]`` the reduction."""
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

    def finish(self, tensors: dict[str, Tensors], weights: Sequence[float] | None,
               keep: int | None) -> tuple[Tensors, Tensors | None]:
        """Every member's message decoded and reduced in rank order into
        ``tensors["mean"]``: the mean, or with ``weights`` the weighted sum; also the
        decoded message of member ``keep`` (None: none)."""
        mean, rows = tensors["mean"], tensors["gathered"][0]
        kept = None
        torch._foreach_zero_(mean)
        for member, payload in enumerate(rows):
            decoded = self._decode(payload, mean)
            if member == keep:
                kept = [t.clone() for t in decoded]
            if weights is not None:
                torch._foreach_mul_(decoded, weights[member])
            torch._foreach_add_(mean, decoded)
        if weights is None:
            torch._foreach_div_(mean, float(len(rows)))
        return mean, kept
