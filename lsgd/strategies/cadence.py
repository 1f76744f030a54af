"""When rounds fall due (docs/algorithms.md, "LSGD, asynchronous"): after each local
step :class:`RoundSchedule` says which of a method's *cadences* (kinds of round) to join:

* **synchronous**: a round of period ``tau`` is due after the worker's own step ``s``
  when ``s % tau`` equals the cadence's offset.
* **asynchronous**: every local step adds one to a counter shared by all workers;
  round ``r`` falls due when it reaches ``r * W * tau``, and each worker joins every
  round once, in order, at its first step after it sees the round due.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping
from typing import Any

from lsgd.comm import Communicator
from lsgd.comm.communicator import Among


@dataclasses.dataclass(frozen=True)
class Cadence:
    """Rounds of one kind: ``name``, every ``period`` steps, among ``among``; with an
    ``offset`` (synchronous rounds only) at the steps ``s % period == offset``."""

    name: str
    period: int
    among: Among  # "world" | "group": which workers take part
    offset: int = 0


class RoundSchedule:
    """The rounds due after each local step of one worker."""

    def __init__(self, comm: Communicator, cadences: list[Cadence], asynchronous: bool) -> None:
        self.comm, self.cadences, self.asynchronous = comm, list(cadences), bool(asynchronous)
        self.key = comm.new_counter_key("steps") if self.asynchronous and cadences else ""
        self.total = 0  # the shared counter as last seen (async), plus `base`
        self.base = 0  # counter value at which a resumed run restarts its counter
        self.joined = {c.name: 0 for c in self.cadences}
        self._announced = dict(self.joined)
        self._pending: deque[tuple[int, list[Cadence]]] = deque()
        self.last_due = 0  # counter value at which the last joined round fell due

    def after_step(self, steps: int) -> None:
        """Note the worker's ``steps``-th local step; queue the rounds it makes due."""
        if not self.cadences:
            return
        if not self.asynchronous:
            due = [c for c in self.cadences if steps % c.period == c.offset]
            if due:
                self._pending.append((steps, due))
            return
        self.total = self.base + self.comm.add_count(self.key, 1)
        world = self.comm.world_size
        while True:
            due_at = {c.name: (self._announced[c.name] + 1) * world * c.period
                      for c in self.cadences}
            first = min(due_at.values())
            if first > self.total:
                return
            group = [c for c in self.cadences if due_at[c.name] == first]
            for c in group:
                self._announced[c.name] += 1
            self._pending.append((first, group))

    def next(self) -> list[Cadence] | None:
        """The next round(s) to join now, falling due together; None when none is."""
        if not self._pending:
            return None
        due, group = self._pending.popleft()
        for c in group:
            self.joined[c.name] += 1
        self.last_due = due
        return group

    def state(self) -> dict[str, Any]:
        """What to save at a sync point (no round pending is needed to resume)."""
        return {"joined": dict(self.joined), "last_due": self.last_due, "total": self.total}

    def load(self, state: Mapping[str, Any]) -> None:
        """Continue after :meth:`state` (exact when saved at a sync point after the
        workers agreed on the counter); a new job's counter restarts where this one was."""
        self.joined = {c.name: int(state["joined"].get(c.name, 0)) for c in self.cadences}
        self._announced = dict(self.joined)
        self._pending.clear()
        self.last_due = int(state["last_due"])
        if self.asynchronous:
            self.base = self.total = int(state.get("total", self.last_due))
