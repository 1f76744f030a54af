"""The shared state of one simulation (:mod:`lsgd.comm.simulator`): whose turn it is, the
virtual clocks, the collectives.

A collective completes when its last member arrives, at the latest of the members'
clocks plus its modeled transfer time (zero without a link model), and every member's
clock moves there. Clocks advance **by step times** (default 1.0 per local step;
``step_time`` in :func:`lsgd.simulate`), or **by measured compute** (with a link and no
step times): the wall-clock seconds a worker held the turn, so the clock reads seconds
of compute plus modeled communication, as if every worker had a machine of its own.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import torch

from lsgd import _validate
from lsgd.comm.wire import LinkModel
from lsgd.links.spec import Link


class WorkerAborted(BaseException):
    """Raised inside a simulated worker when another worker failed (a ``BaseException``,
    so that a user's ``except Exception`` does not swallow it)."""


@dataclass
class RandomState:
    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: object
    numpy: dict

    @classmethod
    def capture(cls) -> RandomState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return cls(torch.get_rng_state(), cuda, random.getstate(),
                   np.random.get_state(legacy=False))

    def restore(self) -> None:
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None and torch.cuda.is_initialized():
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)

    @classmethod
    def seeded(cls, seed: int) -> RandomState:
        saved = cls.capture()
        try:
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)
            return cls.capture()
        finally:
            saved.restore()


@dataclass
class Pending:
    """A collective some members have entered and others not yet."""

    op: str
    members: list[int]
    describe: str
    payload: dict[int, Any] = field(default_factory=dict)
    result: dict[int, Any] = field(default_factory=dict)
    duration: float = 0.0
    # Started transfers: when each member started it, whether it has arrived, when it
    # finishes on the virtual clock, and the members waiting for it.
    started: dict[int, float] = field(default_factory=dict)
    complete: bool = False
    finish: float = 0.0
    waiting: set[int] = field(default_factory=set)


class World:
    """Shared state of one simulation: the turn, pending collectives, failures."""

    def __init__(self, world_size: int, groups: int, seeds: Sequence[int],
                 step_time: Sequence[float] | None, link: Link | None = None,
                 replica: str = "process") -> None:
        self.world_size, self.groups, self.replica = world_size, groups, replica
        self.step_time = None if step_time is None else list(step_time)  # None: measured
        self.link = None if link is None else LinkModel(link.rate, link.latency, self.node_of)
        self.resumed = [time.perf_counter()] * world_size
        self.clock = [0.0] * world_size
        self.counts: dict[str, int] = {}
        self.cv = threading.Condition()
        self.turn = 0
        self.ready = [True] * world_size
        self.done = [False] * world_size
        self.waiting_for: list[str] = [""] * world_size
        self.pending: dict[tuple, Pending] = {}
        # when each worker's last started transfer of each lane ends
        self.queue_end: dict[str, list[float]] = {}
        self.random = [RandomState.seeded(s) for s in seeds]
        self.failure: tuple[int | None, BaseException | None, str] | None = None

    def node_of(self, rank: int) -> int:
        """The node (group) of global rank ``rank``."""
        return rank // (self.world_size // self.groups)

    # Called with self.cv held.
    def _pass_turn(self) -> None:
        """Give the turn to the ready worker with the earliest clock (ties: the lowest rank)."""
        ready = [r for r in range(self.world_size) if self.ready[r] and not self.done[r]]
        if not ready and not all(self.done) and self.failure is None:
            stuck = "; ".join(f"rank {r} waits in {self.waiting_for[r]}"
                              for r in range(self.world_size) if not self.done[r])
            finished = [r for r in range(self.world_size) if self.done[r]]
            self.failure = (None, None, f"simulated workers deadlocked: {stuck}"
                            + (f"; ranks {finished} already returned" if finished else ""))
        self.turn = min(ready, key=lambda r: (self.clock[r], r)) if ready else -1
        self.cv.notify_all()

    def _wait_turn(self, rank: int) -> None:
        while self.turn != rank and self.failure is None:
            self.cv.wait()
        if self.failure is not None:
            raise WorkerAborted()
        self.random[rank].restore()
        self.resumed[rank] = time.perf_counter()

    def _yield_turn(self, rank: int) -> None:
        """Save ``rank``'s random state, let the next worker run, and wait for the turn."""
        self.random[rank] = RandomState.capture()
        self._pass_turn()
        self._wait_turn(rank)

    def _computed(self, rank: int) -> None:
        if self.step_time is None:
            self.clock[rank] += time.perf_counter() - self.resumed[rank]

    def _arrive(self, rank: int, key: tuple, op: str, members: list[int], payload: Any,
                compute: Callable[[dict[int, Any]], dict[int, Any]], started: bool
                ) -> tuple[Pending, bool]:
        """``rank`` enters the pending collective ``key`` (created by its first member) with
        its payload; the last member to arrive computes the results and their duration.
        Returns the collective and whether it is complete. A mismatch (another op or
        other members under the same key) or a failing ``compute`` fails the simulation."""
        self._computed(rank)
        what, verb = ("transfers", "started") if started else ("collectives", "called")
        describe = f"{'started ' if started else ''}{op} #{key[-1]} among ranks {members}"
        pending = self.pending.setdefault(key, Pending(op, members, describe))
        if pending.op != op or pending.members != members:
            self._fail(rank, None, f"mismatched {what}: rank {rank} {verb} {describe} while "
                       f"ranks {sorted(pending.payload)} {verb} {pending.describe}")
        pending.payload[rank] = payload
        if len(pending.payload) < len(members):
            return pending, False
        del self.pending[key]
        start = time.perf_counter()
        try:
            pending.result = compute(pending.payload)
        except BaseException as error:  # a shape mismatch, for example
            self._fail(rank, error, f"{pending.describe} failed: {error!r}")
        pending.duration = time.perf_counter() - start
        return pending, True

    def _fail(self, rank: int, error: BaseException | None, message: str) -> NoReturn:
        """Fail the simulation: every worker unwinds."""
        self.failure = (rank, error, message)
        self.cv.notify_all()
        raise WorkerAborted() from error

    def _release(self, members: Iterable[int], finish: float) -> None:
        for member in members:
            self.clock[member] = max(self.clock[member], finish)
            self.ready[member] = True
            self.waiting_for[member] = ""

    def start(self, rank: int) -> None:
        with self.cv:
            self._wait_turn(rank)

    def local_step(self, rank: int) -> None:
        """Advance ``rank``'s clock by one step time and let earlier workers run first."""
        with self.cv:
            self._computed(rank)
            if self.step_time is not None:
                self.clock[rank] += self.step_time[rank]
            self._yield_turn(rank)

    def add_count(self, key: str, amount: int) -> int:
        with self.cv:
            self.counts[key] = self.counts.get(key, 0) + amount
            return self.counts[key]

    def finish(self, rank: int, error: BaseException | None) -> None:
        with self.cv:
            self._computed(rank)
            self.random[rank] = RandomState.capture()
            self.done[rank] = True
            if error is not None and self.failure is None:
                self.failure = (rank, error, f"simulated worker {rank} raised {error!r}")
            self._pass_turn()

    def collective(self, rank: int, key: tuple, op: str, members: list[int], payload: Any,
                   compute: Callable[[dict[int, Any]], dict[int, Any]], transfer: float = 0.0
                   ) -> tuple[Any, float]:
        """Enter a collective; block (yielding the turn) until all members have. (this member's
        result, its duration: ``transfer`` with a link model, else the time ``compute`` took)."""
        with self.cv:
            pending, complete = self._arrive(rank, key, op, members, payload, compute, False)
            self.ready[rank] = False
            self.waiting_for[rank] = pending.describe
            if complete:
                if self.link is not None:
                    pending.duration = transfer
                self._release(members, max(self.clock[m] for m in members) + transfer)
            self._yield_turn(rank)
            return pending.result[rank], pending.duration

    def start_collective(self, rank: int, key: tuple, op: str, members: list[int],
                         payload: Any, compute: Callable[[dict[int, Any]], dict[int, Any]],
                         transfer: float = 0.0, lane: str = "bulk") -> Pending:
        """Start a transfer without giving up the turn; :meth:`wait_collective` finishes it.

        The last member to start it computes the results at once (the payloads are the members' send
        buffers, untouched until they wait). It begins at the latest start among its members, or at
        the end of a member's previous started transfer of the same ``lane`` if that is later (a
        lane runs its transfers one after another), and takes ``transfer`` seconds.
        """
        with self.cv:
            pending, complete = self._arrive(rank, key, op, members, payload, compute, True)
            pending.started[rank] = self.clock[rank]
            if complete:
                # Each member's earlier transfers have all arrived by now (they were
                # started first, by every member), so their ends are final.
                ends = self.queue_end.setdefault(lane, [0.0] * self.world_size)
                begin = max(max(pending.started.values()), max(ends[m] for m in members))
                pending.finish = begin + transfer
                pending.duration = transfer
                pending.complete = True
                for member in members:
                    ends[member] = pending.finish
                self._release(pending.waiting, pending.finish)
                self.cv.notify_all()
            self.resumed[rank] = time.perf_counter()  # computing goes on from here
            return pending

    def wait_collective(self, rank: int, pending: Pending) -> tuple[Any, float]:
        """Wait until ``pending`` has arrived; this worker's clock moves to its finish.
        Returns (this member's result, the transfer's modeled seconds)."""
        with self.cv:
            self._computed(rank)
            if not pending.complete:
                pending.waiting.add(rank)
                self.ready[rank] = False
                self.waiting_for[rank] = f"wait for the {pending.describe}"
                self._yield_turn(rank)
            else:
                self.clock[rank] = max(self.clock[rank], pending.finish)
                self.resumed[rank] = time.perf_counter()
            return pending.result.get(rank), pending.duration


def step_times(step_time: Sequence[float] | Mapping[int, float] | None, world_size: int
               ) -> list[float]:
    """One positive step time per rank from ``simulate``'s ``step_time`` argument."""
    if step_time is None:
        return [1.0] * world_size
    if isinstance(step_time, Mapping):
        bad = [r for r in step_time if not _validate.is_int(r) or not 0 <= r < world_size]
        if bad:
            raise ValueError(f"step_time: ranks {bad} are not in [0, {world_size})")
        times = [float(step_time.get(r, 1.0)) for r in range(world_size)]
    else:
        times = [float(t) for t in step_time]
        if len(times) != world_size:
            raise ValueError(f"step_time: give one value per worker ({world_size}), "
                             f"got {len(times)}")
    if not all(t > 0 and math.isfinite(t) for t in times):
        raise ValueError(f"step_time: every step time must be positive and finite, got {times}")
    return times
