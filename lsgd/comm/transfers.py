"""Non-blocking collectives: what a started transfer is, and the handle that finishes it.

``comm.start_all_reduce(...)``, ``start_broadcast(...)`` and ``start_all_gather(...)`` return a
:class:`Handle` at once; the transfer runs while the worker computes, and ``handle.wait()`` blocks
until it has arrived (docs/algorithms.md, "Overlapped rounds"). The tensors belong to the transfer
until then. Started transfers run in order within a *lane* (:data:`LANES`, :mod:`lsgd.comm.lanes`).
Bytes and seconds are counted at ``wait``, under the category current at the start. Compressed
(``"bf16"`` or ``"int8"``), an all-reduce is an all-to-all of encoded parts, each owner's sum
encoded again, then an all-gather, so every member ends with the same values; a broadcast sends the
source's encoding, which every member (the source included) decodes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from lsgd.comm import codec as codecs
from lsgd.comm.info import Among, ReduceOp

#: The queues a worker's started transfers run in: ``"bulk"`` (rounds' states) and
#: ``"control"`` (small messages such as an election's scores), each in order, neither
#: waiting for the other.
LANES = ("bulk", "control")


@dataclasses.dataclass
class Transfer:
    """One started collective: its kind, tensor, members and wire format."""

    kind: str  # "all_reduce", "broadcast" or "all_gather"
    tensor: torch.Tensor
    among: Among
    op: ReduceOp = "mean"  # all_reduce
    src: int = 0  # broadcast: the source's global rank
    codec: str = "none"
    chained: bool = False  # broadcast: lsgd's pipelined chain of the nodes
    lane: str = "bulk"  # one of LANES

    def payload_bytes(self) -> int:
        """Bytes of one member's tensor on the wire (encoded, when compressed)."""
        if self.codec == "none":
            return self.tensor.nbytes
        return codecs.nbytes(self.codec, self.tensor.numel())


class Handle:
    """A started transfer; :meth:`wait` finishes it (once) and hands its seconds to ``count``."""

    def __init__(self, finish: Callable[[], tuple[Any, float]],
                 count: Callable[[float], None] | None = None) -> None:
        self._finish, self._count = finish, count
        self._result: Any = None
        self.done = False

    def wait(self) -> Any:
        """Block until the transfer has arrived; the all-gathered tensor, else None (in place)."""
        if not self.done:
            self._result, seconds = self._finish()
            self.done = True
            if self._count is not None:
                self._count(seconds)
        return self._result


def done_handle(result: Any = None) -> Handle:
    """A finished handle (one worker, or restored from a checkpoint after it had arrived)."""
    return Handle(lambda: (result, 0.0))


def run(comm: Any, transfer: Transfer) -> tuple[Any, float]:
    """Carry out ``transfer`` (among several workers) with ``comm``'s blocking primitives:
    (result, seconds). The simulator computes the same results with :func:`compute`."""
    t = transfer
    if t.kind == "all_gather":
        return comm._all_gather(t.tensor, t.among)
    if t.kind == "all_reduce":
        if t.codec == "none":
            return None, comm._all_reduce(t.tensor, t.op, t.among)
        return None, _compressed_all_reduce(comm, t)
    start = time.perf_counter()  # a broadcast
    wire = (t.tensor.reshape(-1) if t.codec == "none" else
            codecs.encode(t.codec, t.tensor) if comm.rank == t.src else
            torch.empty(t.payload_bytes(), dtype=torch.uint8, device=t.tensor.device))
    if t.chained:
        comm._chain_broadcast(wire, t.src)
    else:
        comm._broadcast(wire, t.src, t.among)
    if t.codec != "none":
        t.tensor.view(-1).copy_(codecs.decode(t.codec, wire, t.tensor.numel()))
    return None, time.perf_counter() - start


def _compressed_all_reduce(comm: Any, t: Transfer) -> float:
    """The all-to-all / reduce / all-gather of a compressed all-reduce (see above)."""
    start = time.perf_counter()
    flat = t.tensor.view(-1)
    members = comm.among_members(t.among)
    n, me = len(members), members.index(comm.rank)
    parts = codecs.chunks(t.codec, flat.numel(), n)
    sizes = codecs.part_sizes(t.codec, flat.numel(), n)
    mine = parts[me][1] - parts[me][0]
    received = comm._all_to_all([codecs.encode(t.codec, flat[b:e]) for b, e in parts],
                                [sizes[me]] * n, t.among)
    reduced = codecs.reduce_encoded(t.codec, received, mine, t.op == "mean")
    padded = torch.zeros(max(sizes), dtype=torch.uint8, device=flat.device)
    padded[:reduced.numel()].copy_(reduced)
    gathered, _ = comm._all_gather(padded, t.among)
    if len(gathered) != n:  # an elastic round: a row per worker, absent ones included
        gathered = gathered[members]
    for row, (begin, end) in zip(gathered, parts):
        flat[begin:end].copy_(codecs.decode(t.codec, row, end - begin))
    return time.perf_counter() - start


def compute(transfer: Transfer, tensors: dict[int, torch.Tensor], ranks: list[int]
            ) -> Any:
    """The result of ``transfer`` computed from every member's tensor (``tensors`` by
    rank, ``ranks`` in collective order) with :func:`run`'s arithmetic in its order,
    written into them in place; an all-gather returns the stacked tensor."""
    t = transfer
    if t.kind == "all_gather":
        return torch.stack([tensors[r] for r in ranks])
    if t.kind == "all_reduce" and t.codec != "none":
        flats = [tensors[r].view(-1) for r in ranks]
        for begin, end in codecs.chunks(t.codec, flats[0].numel(), len(ranks)):
            encoded = [codecs.encode(t.codec, flat[begin:end]) for flat in flats]
            reduced = codecs.reduce_encoded(t.codec, encoded, end - begin, t.op == "mean")
            values = codecs.decode(t.codec, reduced, end - begin)
            for flat in flats:
                flat[begin:end].copy_(values)
        return None
    if t.kind == "broadcast":
        result = tensors[t.src]
        if t.codec != "none":
            result.view(-1).copy_(codecs.roundtrip(t.codec, result.view(-1)))
    else:
        result = tensors[ranks[0]].clone()
        for r in ranks[1:]:
            result.add_(tensors[r])
        if t.op == "mean":
            result.div_(len(ranks))
    for r in ranks:
        if tensors[r] is not result:
            tensors[r].copy_(result)
    return None
