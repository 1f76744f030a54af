"""What each method sends in one cycle of steps, and the steps per second it leaves.

A form's :class:`Send` is one collective as the simulator's clock charges it: its
seconds come from :class:`~lsgd.comm.wire.LinkModel`'s own methods (evaluated once
at latency 1 and infinite rate, once at rate 1 and no latency: every stage costs
``latency + 8 bytes / rate``, so ``seconds = stages * latency + bits / rate``), its
bytes from :mod:`lsgd.comm.wire`'s traffic functions, its payload from the codecs'
size functions. :func:`step_seconds` replays the cycle as a worker's clock moves
(:mod:`lsgd.comm.world`): each step adds the compute, then the early starts, then
the transfers due land (waited for), then the round's transfers start: a blocking
one adds its seconds, a started one runs behind earlier ones of its lane.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from lsgd.comm import codec as codecs
from lsgd.comm.chain import chain_heads, chunk_count
from lsgd.comm.sparse import SparseFormat
from lsgd.comm.wire import (LinkModel, broadcast_pattern, compressed_all_reduce_traffic,
                            ring_allreduce_bytes, ring_traffic)
from lsgd.dct import block_shape
from lsgd.strategies.stages.options import RoundPlan

Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Send:
    """One transfer of a cycle: started after step ``at`` of the cycle, waited for
    ``lands`` steps later (0: blocking); ``early``: started before that step's landings."""

    at: int
    stages: float
    bits: float
    nbytes: float  # bytes that cross a node's link, the mean over the nodes
    lands: int = 0
    lane: str = "bulk"
    early: bool = False

    def seconds(self, rate: float, latency: float) -> float:
        return self.stages * latency + self.bits / rate


@dataclasses.dataclass(frozen=True)
class Form:
    """A method with its knobs: its cycle of steps and what it sends in it."""

    name: str
    method: str
    knobs: str
    cycle: int
    sends: tuple[Send, ...]

    def per_step(self, rate: float, latency: float) -> float:
        """Seconds of transfer per step (waited for or hidden)."""
        return sum(s.seconds(rate, latency) for s in self.sends) / self.cycle


class Net:
    """``workers`` in ``groups`` nodes: the collectives lsgd's communicators run among
    all of them, as :class:`Send` s."""

    def __init__(self, workers: int, groups: int) -> None:
        size = workers // groups
        self.groups, self.members = groups, list(range(workers))
        self.node_of: Callable[[int], int] = lambda rank: rank // size
        # Communicator._chained: a world broadcast across nodes is the chain of heads
        self.heads = chain_heads(0, groups, size) if groups > 1 and workers > 2 else None

    def _send(self, op: Callable[[LinkModel], float], moved: float, **when: object) -> Send:
        stages = op(LinkModel(math.inf, 1.0, self.node_of))
        bits = op(LinkModel(1.0, 0.0, self.node_of))
        return Send(stages=stages, bits=bits, nbytes=moved / self.groups, **when)  # type: ignore[arg-type]

    def _ring(self, per_hop: float) -> float:
        return sum(ring_traffic(per_hop, self.members, r, self.node_of).link_sent
                   for r in self.members)

    def all_reduce(self, numel: int, codec: str = "none", width: int = 4, **when: object
                   ) -> Send:
        m = self.members
        if codec == "none":
            size = width * numel
            return self._send(lambda link: link.all_reduce(size, m),
                              self._ring(ring_allreduce_bytes(size, len(m))), **when)
        sizes = codecs.part_sizes(codec, numel, len(m))
        moved = sum(compressed_all_reduce_traffic(sizes, m, r, self.node_of).link_sent
                    for r in m)
        return self._send(lambda link: link.all_to_all(sizes, m)
                          + link.all_gather(max(sizes), m), moved, **when)

    def all_gather(self, nbytes: int, **when: object) -> Send:
        m = self.members
        return self._send(lambda link: link.all_gather(nbytes, m),
                          self._ring((len(m) - 1) * nbytes), **when)

    def broadcast(self, nbytes: int, **when: object) -> Send:
        m, heads = self.members, self.heads
        moves = broadcast_pattern(nbytes, m, 0, "tree", heads)
        moved = sum(b for a, c, b in moves if self.node_of(a) != self.node_of(c))
        if heads is None:
            return self._send(lambda link: link.broadcast(nbytes, m, 0, "tree"), moved, **when)
        return self._send(lambda link: link.broadcast(nbytes, heads, 0, "chain",
                                                      chunk_count(nbytes)), moved, **when)


def parts(numel: int, fragments: int) -> list[int]:
    """The values of each of ``fragments`` parts of a flat buffer (stages/parts.py)."""
    return [numel * (f + 1) // fragments - numel * f // fragments for f in range(fragments)]


def averaging(net: Net, numel: int, period: int, plan: RoundPlan, lands: int) -> list[Send]:
    """DiLoCo's rounds (SparseLoCo, MuLoCo): each fragment every ``period`` steps at its
    offset, all-reduced in its codec or its payload all-gathered."""
    sends, count = [], plan.fragments
    for f, values in enumerate(parts(numel, count)):
        at = (f + 1) * period // count % period
        if plan.fmt is None:
            sends.append(net.all_reduce(values, plan.compress, at=at, lands=lands))
        else:
            rows = -(-values // plan.chunk)
            sends.append(net.all_gather(plan.fmt.nbytes(rows, plan.chunk), at=at, lands=lands))
    return sends


def leader(net: Net, numel: int, period: int, fragments: int, overlap: int, compress: str
           ) -> list[Send]:
    """LSGD's global rounds: the scores gathered (at the round, or a step before on the
    control lane), then each fragment of the leader's state broadcast."""
    early = bool(overlap) or fragments > 1
    sends = [net.all_gather(8, at=(period - 1) % period, lands=1, lane="control", early=True)
             if early else net.all_gather(8, at=0)]
    for f, values in enumerate(parts(numel, fragments)):
        sends.append(net.broadcast(codecs.nbytes(compress, values), at=f * period // fragments,
                                   lands=overlap))
    return sends


def demo_payload(shapes: Sequence[Shape], topk: int, chunk: int, values: str) -> int:
    """Bytes of one worker's DeMo message: the top ``topk`` of every DCT block."""
    total = 0
    for shape in shapes:
        s = math.prod(block_shape(shape, chunk))
        total += SparseFormat(min(topk, s), values).nbytes(math.prod(shape) // s, s)
    return total


def powersgd_values(shapes: Sequence[Shape], rank: int) -> list[int]:
    """Values in PowerSGD's three all-reduces (torch's powerSGD_hook, its default
    min_compression_rate 2): the tensors it leaves whole, the P and the Q factors."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    whole = ps = qs = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = math.prod(shape) // max(n, 1)
        r = min(n, m, rank)
        if _should_compress(n, m, r, 2)[0]:
            ps, qs = ps + n * r, qs + m * r
        else:
            whole += n * m
    return [whole, ps, qs]


def step_seconds(form: Form, compute: float, rate: float, latency: float,
                 cycles: int = 40) -> float:
    """Seconds per step in the steady state: the cycle once what is in flight at its
    end, relative to the clock, repeats (at most ``cycles`` cycles), or the busiest
    lane's seconds per cycle if more (a lane that never idles sets the pace)."""
    clock, lanes, pending, ends, state = 0.0, {}, [], [0.0], None
    for step in range(1, cycles * form.cycle + 1):
        clock += compute
        at = step % form.cycle
        for early in (True, False):
            for send in (s for s in form.sends if s.at == at and s.early == early):
                seconds = send.seconds(rate, latency)
                if send.lands == 0:
                    clock += seconds
                    continue
                begin = max(clock, lanes.get(send.lane, 0.0))
                lanes[send.lane] = begin + seconds
                pending.append((step + send.lands, begin + seconds))
            if early:  # the transfers due land before the round's start
                clock = max([clock] + [end for due, end in pending if due <= step])
                pending = [(due, end) for due, end in pending if due > step]
        if at == 0:
            ends.append(clock)
            now = [round(max(0.0, end - clock), 9) for end in lanes.values()] + [
                (due - step, round(max(0.0, end - clock), 9)) for due, end in pending]
            if now == state:
                break
            state = now
    busiest = max([sum(s.seconds(rate, latency) for s in form.sends
                       if s.lands and s.lane == lane) for lane in lanes] + [0.0])
    return max(ends[-1] - ends[-2], busiest) / form.cycle


def rate_for(form: Form, compute: float, latency: float, utilization: float) -> float | None:
    """The least link rate (bit/s) at which ``form`` keeps the compute ``utilization``
    of the time (bisection over the rate, in log space); None if no rate does (the
    latency alone costs more)."""
    def busy(rate: float) -> bool:
        return compute / step_seconds(form, compute, rate, latency) >= utilization

    low, high = 1.0, 1e15
    if not busy(high):
        return None
    for _ in range(50):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if busy(middle) else (middle, high)
    return high
