"""The averaging methods (DiLoCo, local SGD, EASGD): their round is the stages'
(:mod:`lsgd.strategies.stages`; docs/algorithms.md, "Hiding and shrinking
communication"), their file holds the rule applied to the round's mean
(:meth:`Averaging._rule`), or to the healthy members' when it is not finite
(:meth:`Averaging._recover`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.communicator import Among
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.strategies.health import sum_healthy_
from lsgd.strategies.strategy import Options, Strategy, as_loss_tensor
from lsgd.strategies.cadence import Cadence
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.stages.leader_force import check_rounds
from lsgd.strategies.stages.options import RoundOptions, option_names, plan
from lsgd.strategies.stages.parts import part_of
from lsgd.strategies.stages.round import Round


class AveragingOptions(Options, RoundOptions, total=False):
    """The strategy's and the round's keywords, as an averaging method passes them on."""


class Averaging(Strategy):
    """A method whose round averages the state and applies its rule to the mean.

    ``__init__`` checks ``period`` and the round's options, then the strategy's; a
    subclass calls :meth:`_setup_round` at the end of its own, and implements
    :meth:`_rule` and :meth:`_recover`.
    """

    supports_elastic = True
    options_type = AveragingOptions
    default_merge = "keep"
    #: The optional groups of round options the method takes ("merge", "leader").
    round_takes: tuple[str, ...] = ("merge",)
    #: The checkpoint's key of the copy that differences are taken from.
    reference_key = "reference"
    _round: Round

    @classmethod
    def option_names(cls) -> list[str]:
        return list(Options.__annotations__) + option_names(cls.round_takes)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, period: int,
                 **options: Unpack[AveragingOptions]) -> None:
        owner = type(self).__name__
        self.period = _validate.positive_int(owner, "period", period)
        self.plan = plan(owner, self.period, options,  # type: ignore[arg-type]
                         merge=self.default_merge, takes=self.round_takes,
                         asynchronous=options.get("asynchronous", False))
        self.overlap, self.fragments = self.plan.overlap, self.plan.fragments
        self.compress, self.merge = self.plan.compress, self.plan.merge
        if self.plan.gathers and getattr(options.get("comm"), "elastic", False):
            raise ValueError(f"{owner}: compress={self.compress!r} gathers every worker's "
                             "message, and elastic rounds reduce among a quorum: use "
                             "compress='int8' or 'bf16' for elastic training")
        self._own_round = self._round_kind(owner)
        # A hidden, compressed or self-stepping round carries the parameters only; a
        # blocking one of a method that averages the whole state carries the buffers too.
        self.rounds_average_state = (self.rounds_average_state and not self.hides_rounds
                                     and not self._own_round)
        super().__init__(model, optimizer, **options)

    def _round_kind(self, owner: str) -> dict[str, Any]:
        """The method's own kind of round (``kind`` and :class:`Round`'s keywords)."""
        return {}

    def _setup_round(self, cadences: list[Cadence] | None = None,
                     reference: FlatBuffer | None = None) -> None:
        """This method's rounds, every ``self.period`` steps (or ``cadences``); ``reference``:
        the copy every worker holds alike, what a difference is taken from."""
        self._mean = FlatBuffer(self._state)  # the rare path's healthy mean
        options = dict(self._own_round)
        kind = options.pop("kind", Round)
        self._round = kind(self.name, self.comm, self._state, self.plan, self.module,
                           self._device(), reference=reference, **options)
        self._use_cadences(cadences or self._round.parts.fragments.cadences(self.period))
        check_rounds(self._round.leader, self.asynchronous, getattr(self, "hierarchical", False),
                     self._elastic)

    def _shared_copy(self) -> FlatBuffer:
        """A copy of the state every worker holds alike (``init="independent"``: the mean)."""
        copy = FlatBuffer(self._state).copy_from(self._state)
        if self.init == "independent":
            with self.comm.category("init"):
                for buffer in copy.buffers:
                    self.comm.all_reduce_(buffer, op="mean")
        return copy

    def _run_rounds(self, names: list[str]) -> None:
        # Hierarchical local SGD: when both fall due the global average subsumes the local.
        among: Among = "group" if names == ["local"] else "world"
        part = part_of(names[-1])
        item, now = self._round.begin(part, self.steps, among)
        self._launch(item)
        self.rounds += 1
        if now is not None:  # a round whose rule steps at once, on a direction of its own
            self._rule(part, now, True, None)
            self._round.done(part)

    def _apply(self, item: InFlight) -> None:
        """The mean of a part has landed: the method's rule, or the healthy mean's."""
        part, among = int(item.info["fragment"]), item.info.get("among", "world")
        healthy, mean = self._round.arrive(item)
        if healthy:
            if mean is not None:
                self._rule(part, mean, self._round.message.difference, item.tensors.get("start"))
                self._round.done(part)
            return
        healthy, count, reset = self._round.heal(part, among, self._heal, self._diverged_error)
        self._round.done(part)
        if not healthy and count and reset is not None:
            self._reset_to(reset)

    def _heal(self, part: int, among: Among) -> tuple[bool, int, list[torch.Tensor] | None]:
        """The rule over the healthy members' mean (``self._mean``: their sum); no healthy
        worker at all raises ``DivergedError``."""
        self._mean.copy_from(self._state)
        healthy = all_finite(self._mean.buffers)
        count = sum_healthy_(self.comm, self._mean.buffers, healthy, among, self._device())
        if count == 0 and among == "world":
            raise self._diverged_error()
        return healthy, count, self._recover(part, healthy, count)

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        loss = None if loss is None else as_loss_tensor(loss, self.name)
        if self._round.leader is not None:  # the step's loss, for the leader's score
            self._round.leader.scorer.record(loss, self.name)

    def _after_reset(self) -> None:
        if self._round.leader is not None:  # the score forgets the diverged losses
            self._round.leader.scorer.window.load([])

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """Apply the round's mean of ``part`` (``encoded``: the mean of ``reference - x``)."""
        raise NotImplementedError

    def _recover(self, part: int, healthy: bool, count: int) -> list[torch.Tensor] | None:
        """Apply ``self._mean``, the sum of ``count`` healthy members' states; returns what
        a diverged worker is reset to."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(self._round.state())
        if self._round.reference is not None:
            state[self.reference_key] = [b.clone() for b in self._round.reference.buffers]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._round.load(state, self.name)
        if self._round.reference is not None:
            torch._foreach_copy_(self._round.reference.buffers, list(state[self.reference_key]))
