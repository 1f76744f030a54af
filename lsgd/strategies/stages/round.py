"""A round of an averaging method as one pipeline of stages::

    message (x, r - x) -> transforms (the leader's weight, error feedback)
        -> move (all-reduce; all-gather of top-k, 2-bit) -> landing (into the state)

:meth:`Round.start` runs the sending half at a round's step and returns the transfer
in flight; :meth:`Round.arrive` runs the receiving half when it has landed and gives
the mean to the method's rule, which calls :meth:`Round.land`. Every stage owns its
state, which :meth:`Round.state` checkpoints; the rule never sees which codec, which
share of a replica or which leader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lsgd.comm import Communicator
from lsgd.comm.communicator import Among
from lsgd.flat import FlatBuffer
from lsgd.functional import all_finite
from lsgd.strategies.pipeline import InFlight
from lsgd.strategies.stages import leader_force as leaders
from lsgd.strategies.stages.feedback import ErrorFeedback
from lsgd.strategies.stages.land import Landing
from lsgd.strategies.stages.message import Message
from lsgd.strategies.stages.move import AllReduce, Chunks, Gather
from lsgd.strategies.stages.options import RoundPlan
from lsgd.strategies.stages.parts import StateParts

Tensors = list[torch.Tensor]
#: (this worker healthy, the healthy count, what a diverged worker is reset to)
Healing = tuple[bool, int, Tensors | None]


class Round:
    """The stages of one method's rounds, from the checked options ``plan``;
    ``reference``: ``r``, the copy every worker holds alike; ``difference``: send
    ``r - x`` even uncompressed; ``overlap`` and ``merge`` override the plan's. ``module``
    and ``device`` serve the leader's election."""

    def __init__(self, owner: str, comm: Communicator, state: Sequence[torch.Tensor],
                 plan: RoundPlan, module: nn.Module, device: torch.device, *,
                 reference: FlatBuffer | None = None, difference: bool = False,
                 overlap: int | None = None, merge: str | None = None) -> None:
        self.comm, self.plan, self.module, self.device = comm, plan, module, device
        self.reference = reference
        self.overlap = plan.overlap if overlap is None else overlap
        self.parts = StateParts(comm, state, plan.fragments)
        self.message = Message(self.parts, difference or plan.compress != "none")
        blocking = self.overlap == 0
        self.move: AllReduce | Gather = (
            Gather(comm, Chunks(plan.fmt, plan.chunk), blocking) if plan.fmt is not None
            else AllReduce(comm, plan.compress, blocking))
        self.feedback = (ErrorFeedback(self.parts, plan.feedback_decay)
                         if plan.error_feedback else None)
        self.leader = leaders.make(owner, plan.leader, plan.leader_weight, plan.leader_pull)
        self.landing = Landing(self.parts, self.overlap, merge or plan.merge)

    def start(self, part: int, steps: int, among: Among = "world") -> InFlight:
        """Build ``part``'s message, transform it and start its move."""
        message, now = self.message.build(part, self.reference)
        leader, weight = self.leader, None
        if leader is not None:
            weight = leader.elect(self.comm, self.module, self.parts.tensors, self.device, among)
            if weight is not None and not self.move.gathers:  # the sum of weighted messages
                torch._foreach_mul_(message, weight)
        if self.feedback is not None:
            self.feedback.send(message, part, self.move)
        summed = weight is not None and not self.move.gathers
        handles, tensors = self.move.start(message, among, summed)
        if self.overlap and self.landing.merge == "keep":
            tensors["start"] = [t.clone() for t in now]
        item = InFlight(steps, steps + self.overlap, f"fragment{part}", handles, tensors,
                        {"fragment": part, "among": among})
        if leader is not None:
            leader.send(self.comm, self.parts, self.move, self.reference, item, part, among)
        return item

    def attach(self, outer_parts: list[torch.optim.Optimizer]) -> None:
        """The outer optimizers of the reference, for DiLoCo's eager round."""

    def begin(self, part: int, steps: int, among: Among) -> tuple[InFlight, Tensors | None]:
        """:meth:`start`, and a direction the rule applies at once (here none)."""
        return self.start(part, steps, among), None

    def arrive(self, item: InFlight) -> tuple[bool, Tensors | None]:
        """(whether the landed mean is finite on every share, the mean for the rule)."""
        part = int(item.info["fragment"])
        leader, weights, keep = self.leader, None, None
        if leader is not None and self.move.gathers and "leader" in item.info:
            count = len(item.tensors["gathered"][0])
            weights = leader.weights(count, int(item.info["leader"]))
            keep = int(item.info["leader"]) if leader.mode == "pull" else None
        mean, kept = self.move.finish(item.tensors, weights, keep)
        if not self.comm.all_agree(all_finite(mean)):  # every share of the replica's
            return False, None
        if leader is not None:
            encoded = self.plan.compress != "none" and self.reference is not None
            leader.arrive(item, self.parts.of(self.reference, part) if encoded else None, kept)
        return True, mean

    def land(self, part: int, target: Sequence[torch.Tensor],
             start: Sequence[torch.Tensor] | None = None, weight: float = 1.0) -> None:
        """The rule's ``target`` (pulled toward the round's leader) lands in the state."""
        if self.leader is not None and weight == 1.0:
            self.leader.pull_(target)
        self.landing.land(part, target, start, weight)

    def done(self, part: int) -> None:
        """After the rule: the reference whole again, the round's leader let go."""
        if self.leader is not None:
            self.leader.done()
        if self.reference is not None:
            self.parts.put_together(self.reference, part)

    def heal(self, part: int, among: Among, plain: Callable[[int, Among], Healing],
             diverged: Callable[[], Exception]) -> Healing:
        """A mean that is not finite: the method's ``plain`` rule over the healthy members."""
        return plain(part, among)

    def state(self) -> dict[str, Any]:
        """The stages' own state: the feedback's accumulator, the leader's scores."""
        state: dict[str, Any] = {"rounds_of": {} if self.feedback is None
                                 else self.feedback.state()}
        if self.leader is not None:
            state["leader_force"] = self.leader.state()
        return state

    def load(self, state: Mapping[str, Any], owner: str) -> None:
        if self.feedback is not None:
            saved = state.get("rounds_of", {})
            if "residual" not in saved:
                raise ValueError(f"{owner}.load_state_dict: the state was saved without error "
                                 "feedback; resume with error_feedback=False")
            self.feedback.load(saved)
        if self.leader is not None:
            if "leader_force" not in state:
                raise ValueError(f"{owner}.load_state_dict: the state was saved without a "
                                 "leader force; resume with leader='none'")
            self.leader.load(state["leader_force"])
