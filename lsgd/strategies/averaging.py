"""The round of the averaging methods (DiLoCo, local SGD, EASGD): one mechanism for
blocking, overlapped, fragmented and compressed rounds.

A round all-reduces the workers' states (or one part of them) and hands the
mean to the method's rule (:meth:`Averaging._rule`); nothing else is sent on a
healthy round. The options (docs/algorithms.md, "Hiding and shrinking
communication: overlapped, fragmented and compressed rounds", gives them in full):
``fragments=F`` cuts the flat state into ``F`` parts, each with its own round
(Streaming DiLoCo, https://arxiv.org/abs/2501.18512); ``overlap=K`` applies a
part's mean ``K`` steps after its all-reduce starts, meeting the steps taken
meanwhile as ``merge`` says (``"keep"``, ``"replace"`` or ``"mix"``);
``compress="bf16"|"int8"`` sends ``r - x`` for a reference ``r`` every worker holds
(:mod:`lsgd.comm.codec`), with ``error_feedback`` adding what the codec lost.
A non-finite mean is redone over the healthy members (:meth:`Averaging._recover`).
With replicas of several processes each process averages and updates its share of
each part (``comm.across``), and the replica puts the shares back together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.comm import codec as codecs
from lsgd.comm.base import Among
from lsgd.comm.transfers import done_handle
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.strategies import leader_force
from lsgd.strategies.base import Strategy, as_loss_tensor
from lsgd.strategies.leader_force import LeaderForce
from lsgd.strategies.pipeline import InFlight, check_options
from lsgd.strategies.cadence import Cadence
from lsgd.names import MERGES

MIX = 0.5  # Streaming DiLoCo's weight of the local state in a "mix" merge


class Fragments:
    """A flat state cut into ``count`` contiguous parts (per flat buffer), and each part
    into the share of this process (``share``: its ``(begin, end)`` of so many values; a
    replica's, or all of them)."""

    def __init__(self, like: FlatBuffer, count: int,
                 share: Callable[[int], tuple[int, int]] | None = None) -> None:
        self.count = count
        self.whole = [[(b.numel() * f // count, b.numel() * (f + 1) // count)
                       for b in like.buffers] for f in range(count)]
        share = share or (lambda numel: (0, numel))
        self.bounds = [[(lo + begin, lo + end) for lo, hi in part
                        for begin, end in [share(hi - lo)]] for part in self.whole]

    def of(self, flat: FlatBuffer, f: int) -> list[torch.Tensor]:
        """This process's share of part ``f`` of ``flat`` (a buffer laid out like the
        state), as views."""
        return [b[lo:hi] for b, (lo, hi) in zip(flat.buffers, self.bounds[f])]

    def whole_of(self, flat: FlatBuffer, f: int) -> list[torch.Tensor]:
        """All of part ``f`` of ``flat``, as views."""
        return [b[lo:hi] for b, (lo, hi) in zip(flat.buffers, self.whole[f])]

    def cadences(self, period: int) -> list[Cadence]:
        """One kind of round per part, each every ``period`` steps at its offset (one
        part: the ``"global"`` round at the period's multiples)."""
        if self.count == 1:
            return [Cadence("global", period, "world")]
        return [Cadence(f"fragment{f}", period, "world",
                        offset=(f + 1) * period // self.count % period)
                for f in range(self.count)]


def part_of(cadence: str) -> int:
    """The part a cadence's rounds send (``"global"``, ``"local"``: the whole state)."""
    return int(cadence.removeprefix("fragment")) if cadence.startswith("fragment") else 0


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


class AveragingRounds:
    """Starts a part's all-reduce and writes what lands back into the state.

    ``state`` are the strategy's state tensors; ``merge`` one of :data:`MERGES`.
    A round without overlap or codec runs the blocking all-reduce at once.
    """

    def __init__(self, comm: Communicator, state: Sequence[torch.Tensor], *, fragments: int,
                 overlap: int, compress: str, merge: str, error_feedback: bool,
                 difference: bool = False) -> None:
        self.comm = comm
        self.tensors = list(state)
        self.work = FlatBuffer(self.tensors)  # the state as one flat vector, per dtype
        self.fragments = Fragments(self.work, fragments, comm.part)
        self.overlap = overlap
        self.compress = compress
        self.merge = merge
        self.difference = difference  # send reference - x even uncompressed
        self.residual = (FlatBuffer(self.tensors)
                         if error_feedback and compress != "none" else None)

    def start(self, part: int, steps: int, reference: FlatBuffer | None,
              among: Among = "world", weight: float | None = None) -> InFlight:
        """Start the all-reduce (mean) of ``part`` of the state among ``among``, or,
        compressed (or with ``difference``), of ``reference - state`` (plus the last
        residual with error feedback); with a ``weight``, the sum of the messages each
        multiplied by its sender's weight (the leader's weights,
        :mod:`lsgd.strategies.leader_force`)."""
        self.work.copy_from(self.tensors)
        now = self.fragments.of(self.work, part)
        message = [t.clone() for t in now]
        if self.compress != "none" or self.difference:
            assert reference is not None
            torch._foreach_neg_(message)
            torch._foreach_add_(message, self.fragments.of(reference, part))
        if weight is not None:
            torch._foreach_mul_(message, weight)
            if self.residual is not None:
                residual = self.fragments.of(self.residual, part)
                torch._foreach_add_(message, residual)
                for lost, sent in zip(residual, message):  # what the codec will not carry
                    torch.sub(sent, codecs.roundtrip(self.compress, sent).view_as(sent),
                              out=lost)
        across = self.comm.across  # this process's share, among the replicas
        op = "mean" if weight is None else "sum"
        if self.overlap == 0 and self.compress == "none":  # the blocking round
            for t in message:
                across.all_reduce_(t, op, among)
            handles = [done_handle()]
        else:
            handles = [across.start_all_reduce(t, op, among, codec=self.compress)
                       for t in message]
        tensors = {"mean": message}
        if self.overlap and self.merge == "keep":
            tensors["start"] = [t.clone() for t in now]
        return InFlight(steps, steps + self.overlap, f"fragment{part}", handles, tensors,
                        {"fragment": part, "among": among})

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the rounds (the residuals of error feedback)."""
        if self.residual is None:
            return {}
        return {"residual": [b.clone() for b in self.residual.buffers]}

    def load(self, state: Mapping[str, Any]) -> None:
        if self.residual is not None:
            for buffer, value in zip(self.residual.buffers, state["residual"]):
                buffer.copy_(value)

    def current(self, part: int) -> list[torch.Tensor]:
        """The part's values now, as views of a flat copy; :meth:`write_back` stores them."""
        self.work.copy_from(self.tensors)
        return self.fragments.of(self.work, part)

    def write_back(self, part: int) -> None:
        """The state's part ``part`` from :meth:`current`'s views (the shares of the
        replica's processes put together)."""
        self.put_together(self.work, part)
        self.work.copy_to(self.tensors)

    def put_together(self, flat: FlatBuffer, part: int) -> None:
        """Part ``part`` of ``flat`` whole again from the shares of the replica's
        processes (nothing to do for a process)."""
        if self.comm.share[1] > 1:
            for whole in self.fragments.whole_of(flat, part):
                self.comm.put_together_(whole)

    def land(self, part: int, target: Sequence[torch.Tensor],
             start: Sequence[torch.Tensor] | None = None) -> None:
        """Move ``part`` of the state to ``target`` (the new average, or DiLoCo's global
        state after its outer step), merged with the steps since the round (``start``:
        the part as it was then, for ``"keep"``)."""
        now = self.current(part)
        if self.overlap and self.merge == "mix":
            torch._foreach_lerp_(now, list(target), 1.0 - MIX)
        elif self.overlap and self.merge == "keep" and start is not None:
            torch._foreach_sub_(now, list(start))
            torch._foreach_add_(now, list(target))
        else:  # "replace", and every merge without overlap: no step was taken since
            torch._foreach_copy_(now, list(target))
        self.write_back(part)


class Averaging(Strategy):
    """A method whose round all-reduces the state and applies its rule to the mean.

    A subclass calls :meth:`_setup_rounds` at the end of its ``__init__`` and
    implements :meth:`_rule` (and :meth:`_reference` when it compresses).
    """

    supports_elastic = True
    supports_hidden_rounds = True
    default_merge = "keep"
    _force: LeaderForce | None = None  # the leader's force (DiLoCo, local SGD; leader=...)

    def _hidden(self, owner: str, period: int, overlap: Any, fragments: Any, compress: Any,
                merge: str | None, asynchronous: bool = False, eager: bool = False) -> bool:
        """Check the options (before ``Strategy.__init__``); whether rounds are hidden
        (``eager``: DiLoCo's eager rounds are). A hidden round carries the parameters
        only; blocking rounds of a method that averages the whole state carry its
        BatchNorm buffers too."""
        self.overlap, self.fragments, self.compress = check_options(
            owner, period, overlap, fragments, compress, asynchronous)
        self.merge = check_merge(owner, merge, self.overlap, self.default_merge)
        hidden = bool(self.overlap or self.fragments > 1 or self.compress != "none" or eager)
        self.rounds_average_state = self.rounds_average_state and not hidden
        return hidden

    def _setup_rounds(self, error_feedback: bool, cadences: list[Cadence] | None = None,
                      eager: bool = False) -> None:
        """The rounds of this method, every ``self.period`` steps (or ``cadences``);
        ``eager`` (DiLoCo's eager outer steps, :mod:`lsgd.strategies.eager`): each round
        sends ``reference - x`` and its transfer spans a whole period."""
        self._mean = FlatBuffer(self._state)  # the rare path's healthy mean
        self._averaging = AveragingRounds(
            self.comm, self._state, fragments=self.fragments,
            overlap=self.period if eager else self.overlap, compress=self.compress,
            merge="replace" if eager else self.merge, error_feedback=bool(error_feedback),
            difference=eager)
        self._use_cadences(cadences or self._averaging.fragments.cadences(self.period))
        leader_force.check_rounds(self._force, self.asynchronous,
                                  getattr(self, "hierarchical", False), self._elastic)

    def _shared_copy(self) -> FlatBuffer:
        """A copy of the state that every worker holds identically: the state all start
        from, or with ``init="independent"`` the workers' mean (one all-reduce)."""
        copy = FlatBuffer(self._state).copy_from(self._state)
        if self.init == "independent":
            with self.comm.category("init"):
                for buffer in copy.buffers:
                    self.comm.all_reduce_(buffer, op="mean")
        return copy

    def _reference(self) -> FlatBuffer | None:
        """The state every worker holds identically, what compressed rounds subtract from."""
        return None

    def _run_rounds(self, names: list[str]) -> None:
        # Hierarchical local SGD: when both fall due the global average subsumes the local.
        among: Among = "group" if names == ["local"] else "world"
        part = part_of(names[-1])
        force = self._force
        weight = None if force is None else force.elect(self.comm, self.module, self._state,
                                                        self._device(), among)
        item = self._averaging.start(part, self.steps, self._reference(), among, weight)
        if force is not None:
            force.send(self.comm, self._averaging, self._reference(), item, part, among)
        self._launch(item)
        self.rounds += 1

    def _apply(self, item: InFlight) -> None:
        """The mean of a part has landed: the method's rule, or the healthy mean's."""
        mean, part = item.tensors["mean"], int(item.info["fragment"])
        among: Among = item.info.get("among", "world")
        if self.comm.all_agree(all_finite(mean)):  # every share of the replica's
            force, reference = self._force, self._reference()
            if force is not None:  # the leader's state, for the pull in the rule
                force.arrive(item, None if self.compress == "none" or reference is None
                             else self._averaging.fragments.of(reference, part))
            self._rule(part, mean, self.compress != "none", item.tensors.get("start"))
            if force is not None:
                force.done()
            return
        healthy, count = self._healthy_sum_into(self._mean, among)
        self._recover(part, healthy, count, among)

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        if self._force is not None:  # the leader's score
            self._force.record(None if loss is None else as_loss_tensor(loss, self.name))

    def _after_reset(self) -> None:
        if self._force is not None:  # forget the diverged losses, as LSGD does
            self._force.scorer.window.load([])

    def _pull_to_leader(self, targets: list[torch.Tensor]) -> None:
        """The rule's new global state (this process's share of the part) moves
        ``leader_pull`` of the way to the round's leader (``leader="pull"``)."""
        if self._force is not None:
            self._force.pull_(targets)

    def _rule(self, part: int, mean: list[torch.Tensor], encoded: bool,
              start: list[torch.Tensor] | None) -> None:
        """Apply the round's mean of ``part`` (``encoded``: the mean of ``reference - x``)."""
        raise NotImplementedError

    def _recover(self, part: int, healthy: bool, count: int, among: Among) -> None:
        """The mean was NaN or infinite: ``self._mean`` holds the sum of the healthy
        members' states (``count`` of them); apply it, reset a diverged worker."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["rounds_of"] = self._averaging.state()
        if self._force is not None:
            state["leader_force"] = self._force.state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._averaging.load(state.get("rounds_of", {}))
        if self._force is not None:
            if "leader_force" not in state:
                raise ValueError(f"{self.name}.load_state_dict: the state was saved without "
                                 "a leader force; resume with leader='none'")
            self._force.load(state["leader_force"])
