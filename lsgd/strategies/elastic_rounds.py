"""Elastic rounds: what a periodic method does when workers leave and return.

With torchft (:class:`~lsgd.comm.elastic_collectives.ElasticCommunicator`), every round
among all workers is a quorum point among the live workers (docs/algorithms.md,
"Elastic rounds"):

* **Leaving.** An absent worker is not a member of the next round and cannot be
  elected. A round whose collective failed applies nothing and is not committed.
* **Joining.** A (re)started worker is healed by torchft from an up-to-date member and
  enters the same round as a *diverged* worker (NaN), so the round's rule resets it.
* **Hidden rounds** (one worker per node): a round stays open while its transfer is
  under way, and closes (rule, then commit) when it lands.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from lsgd.comm.elastic_collectives import RoundFailed
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.rounds import Rounds
from lsgd.strategies.seams import Seams as Strategy
from lsgd.strategies.seams import supporting


class ElasticRounds(Rounds):
    """:class:`~lsgd.strategies.rounds.Rounds`, its rounds among all as quorum points."""

    joined = False  # whether this worker's first quorum is behind it

    def start(self) -> None:
        """Elastic workers exchange nothing outside rounds: only the method is checked."""
        strategy = self.strategy
        if not strategy.supports_elastic:
            raise ValueError(f"{strategy.name}: elastic training runs "
                             f"{', '.join(supporting('supports_elastic'))}; {strategy.name} is "
                             "not one of them")
        if strategy.init != "broadcast":
            raise ValueError(f"{strategy.name}: elastic workers start from the same model (the "
                             "same seed), with nothing exchanged outside rounds; drop "
                             "init='independent'")

    def check(self) -> None:
        """Refuse the options elastic rounds do not take; register what a joiner receives."""
        strategy, name = self.strategy, self.strategy.name
        if strategy.asynchronous:
            raise ValueError(f"{name}: elastic training runs synchronous rounds; "
                             "drop asynchronous=True")
        if strategy.hides_rounds and getattr(strategy.comm, "per_node", 1) > 1:
            raise ValueError(f"{name}: elastic hidden rounds (overlap, fragments, compress) "
                             "run with one replica per node: drop them, run one worker per "
                             "node, or make each node's workers one replica (replica='node')")
        gap = min(c.period for c in strategy.cadences) // strategy.fragments
        if strategy.overlap >= gap:
            raise ValueError(f"{name}: an elastic round lands before the next one starts: "
                             f"overlap must be below period / fragments = {gap}, got "
                             f"{strategy.overlap}")
        strategy.comm.add_state(  # type: ignore[attr-defined]
            "strategy", lambda: {"model": strategy.module.state_dict(),
                                 "strategy": strategy.state_dict()},
            strategy.take)

    def join(self) -> bool:
        """A worker's first quorum, at its first step. If it was healed (the job was
        running) it takes part in the others' round, due at its new step count, and the
        step is spent joining."""
        if self.joined:
            return False
        self.joined = True
        strategy, comm = self.strategy, self.strategy.comm

        def body() -> None:
            if comm.healed:
                strategy.join_rounds([c.name for c in strategy.cadences
                                      if strategy.steps % c.period == c.offset])

        with torch.no_grad():  # the hook only after a round of the method's own
            run_round(strategy, body, hook=lambda: bool(comm.healed))
        return bool(comm.healed)  # still set after the round: begin_round resets it

    def run(self, names: list[str], world: bool) -> None:
        if not world:  # rounds inside a node are no quorum points
            return super().run(names, world)
        run_round(self.strategy, lambda: self.strategy.join_rounds(names))

    def land(self, item: InFlight) -> None:
        if "elastic_hook" not in item.info:  # not a round among all workers
            return super().land(item)
        land_round(self.strategy, item, lambda: super(ElasticRounds, self).land(item))

    def average_buffers(self, among: str) -> None:
        """One process group: the BatchNorm average waits for this step's transfer."""
        started = self.strategy.in_flight()
        if started and started[-1].started == self.strategy.steps:
            started[-1].info["bn_among"] = among
        else:
            super().average_buffers(among)


def run_round(strategy: Strategy, body: Callable[[], None],
              hook: bool | Callable[[], bool] = True) -> bool | None:
    """One round among all workers as a quorum point: ``body`` (the method's collectives
    and rule) among the members, then ``strategy.on_round`` if set and ``hook``; a
    healed worker enters it as diverged. Whether it was committed; ``None`` while its
    transfer is under way (:func:`land_round` closes it)."""
    comm = strategy.comm
    before = len(strategy.in_flight())
    with contextlib.suppress(RoundFailed):  # a failed round is not committed
        comm.begin_round()  # type: ignore[attr-defined]
        if comm.healed:  # type: ignore[attr-defined]
            for tensor in strategy.local_state:
                tensor.fill_(math.nan)
        body()
        wanted = hook() if callable(hook) else hook
        started = strategy.in_flight()[before:]
        if started:
            for item in started:
                item.info["elastic_hook"] = wanted
            return None
        if wanted and strategy.on_round is not None:
            strategy.on_round()
    return bool(comm.end_round())  # type: ignore[attr-defined]


def land_round(strategy: Strategy, item: InFlight, arrive: Callable[[], None]) -> bool:
    """Close the hidden round of ``item``: ``arrive`` (wait for the transfer, apply it),
    ``strategy.on_round``, then torchft's commit. A transfer that failed is dropped and
    the round not committed."""
    with contextlib.suppress(RoundFailed):
        arrive()
        if item.info.get("elastic_hook") and strategy.on_round is not None:
            strategy.on_round()
    return bool(strategy.comm.end_round())  # type: ignore[attr-defined]
