"""Leader SGD (Teng et al., "Leader Stochastic Gradient Descent for Distributed
Training of Deep Learning Models", NeurIPS 2019, https://arxiv.org/abs/1905.10395),
single-leader and multi-leader, synchronous and asynchronous.

Each worker runs its own optimizer and is pulled toward the *leader* (lowest recent
training loss), never toward an average (docs/algorithms.md, "LSGD, synchronous"):
every step a scope pull of ``scope / period`` toward the last round's leaders; every
``period`` steps a local round (elect each group's leader, broadcast its state inside
the group, ``x <- x - pull (x - leader_local)``); every ``global_period`` steps the same
among all workers. Communicated per round: one all-gather of the scores and one
broadcast of the leader's state. Diverged workers copy the leader instead of pulling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm.transfers import done_handle
from lsgd.flat import FlatBuffer
from lsgd.functional import elect, lags_, pull_, pull_two_
from lsgd.leader import Scorer
from lsgd.strategies.stages.parts import Fragments
from lsgd.strategies.strategy import Options, Strategy, as_loss_tensor
from lsgd.strategies.election import ELECTIONS, Election
from lsgd.strategies.levels import Level, build_levels, check_knobs
from lsgd.strategies.pipeline import InFlight, check_options
from lsgd.strategies.pull_decay import copied_share, round_pull_
from lsgd.strategies.cadence import Cadence
from lsgd.names import SCOPE_PULLS


class LSGD(Strategy):
    """Leader SGD, single-leader (``groups=1``) or multi-leader (several groups).

    Args:
        pull: lambda in [0, 1], the round's pull toward the leader (default 0.1).
        scope: gamma in [0, 1]; the every-step pull is ``gamma / period`` (default 0.01).
        period: tau, local steps between rounds (default 16).
        pull_global, scope_global, global_period: lambda_G, gamma_G, tau_G of the global
            level (default ``pull``, ``scope``, ``4 * period``, or ``period`` with groups
            of one worker); a multiple of ``period``.
        leader_window: k, the score is the mean of the last k training losses.
        leader_metric: ``"train"`` (the window) or ``"eval"`` (the loss on
            ``eval_batch`` under ``eval_loss``, default cross-entropy).
        scope_pull: ``"after-step"`` (default) or ``"algorithm-1"`` (the paper's
            pull, computed before the step; the leader takes it too).
        leader_momentum: mu in [0, 1), Nesterov momentum of the round's pull (0: plain).
        pull_decay_rounds: R; each level's round r pulls ``pull + (1 - pull) max(0, 1 - r/R)``
            (:mod:`lsgd.strategies.pull_decay`; 0: the constant pull).
        overlap: K in ``[0, period)``, steps between a broadcast's start and its pull.
        fragments: F, parts of the leader's state sent in turn, one every ``period / F`` steps.
        election: ``"round"`` or ``"early"`` (scores gathered one step before the
            round; the default with overlap or fragments).
        compress: ``"none"``, ``"bf16"`` or ``"int8"``: the broadcast's wire format.
        comm, init, bn_buffers, asynchronous: see :class:`~lsgd.strategies.strategy.Strategy`.
    """

    name = "lsgd"
    supports_asynchronous = True
    bn_modes = ("average", "pull", "local")
    supports_elastic = True

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 pull: float | None = None, scope: float | None = None,
                 period: int | None = None, pull_global: float | None = None,
                 scope_global: float | None = None, global_period: int | None = None,
                 leader_window: int = 10, leader_metric: str = "train",
                 eval_batch: tuple[torch.Tensor, torch.Tensor] | None = None,
                 eval_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 scope_pull: str = "after-step", leader_momentum: float = 0.0,
                 pull_decay_rounds: int = 0, overlap: int = 0, fragments: int = 1,
                 compress: str = "none", election: str | None = None,
                 **options: Unpack[Options]) -> None:
        owner = "LSGD"
        knobs = check_knobs(owner, pull, scope, period, pull_global, scope_global, global_period)
        self.scope_pull = _validate.choice(owner, "scope_pull", scope_pull, SCOPE_PULLS)
        self.leader_momentum = _validate.momentum(owner, "leader_momentum", leader_momentum)
        if not _validate.is_int(pull_decay_rounds) or pull_decay_rounds < 0:
            raise ValueError(f"{owner}: pull_decay_rounds must be a whole number of rounds >= 0 "
                             "(R: the round pull decays from 1 to pull over the first R "
                             "rounds of each level; 0 keeps it constant), got "
                             f"{pull_decay_rounds!r}")
        self.pull_decay_rounds = int(pull_decay_rounds)
        self.overlap, self.fragments, self.compress = check_options(
            owner, knobs.period, overlap, fragments, compress, options.get("asynchronous", False))
        hidden = bool(self.overlap) or self.fragments > 1
        elastic = bool(getattr(options.get("comm"), "elastic", False))  # elect at the round
        election = _validate.choice(owner, "election", "early" if hidden and not elastic and
                                    election is None else election or "round", ELECTIONS)
        if election == "early" and options.get("asynchronous"):
            raise ValueError(f"{owner}: election='early' needs synchronous rounds (a round of "
                             "asynchronous LSGD falls due at a step no worker knows "
                             "before); drop asynchronous=True or election='early'")
        self.scorer = Scorer(owner, leader_window, leader_metric, eval_batch, eval_loss)
        self.election = Election(election, self.scorer)
        super().__init__(model, optimizer, **options)
        self.levels = build_levels(owner, knobs, self.comm.info, self._state)
        self.device = self._device()
        self.leader_history: list[tuple[int, str, int | None]] = []
        # algorithm-1: the pre-step pull, subtracted after the optimizer step
        self._scope_delta = FlatBuffer(self._state) if self.scope_pull == "algorithm-1" else None
        self._scope_pending = False
        # leader momentum: each level's velocity, and the round's lag x - leader
        self._velocity = {lv.name: FlatBuffer(self._state) for lv in self.levels
                          if self.leader_momentum > 0}
        self._lag = FlatBuffer(self._state) if self._velocity else None
        self._work = FlatBuffer(self._state)
        self._parts = Fragments(self._work, self.fragments)
        self._frozen = False  # diverged, copying a leader's fragments: no optimizer step
        if self.compress != "none" and self.init == "broadcast":
            for level in self.levels:  # the first reference: the state all start from
                level.snapshot.copy_from(self._state)
        self._use_cadences([Cadence(_part_name(lv.name, f), lv.period, lv.among,
                                    offset=f * lv.period // self.fragments)
                            for lv in self.levels for f in range(self.fragments)])
        if self._elastic and election == "early":  # after the checks of every hidden form
            raise ValueError(f"{owner}: elastic training runs blocking rounds; drop "
                             "election='early'")

    @property
    def leader_rank(self) -> int | None:
        """The global leader elected at the last communication (None before any)."""
        return self.levels[-1].leader

    @property
    def local_leader_rank(self) -> int | None:
        """This worker's group leader (the global leader when there is one group)."""
        return self.levels[0].leader

    def _report_fields(self) -> dict[str, Any]:
        details = {f"{lv.name}_{key}": value for lv in self.levels
                   for key, value in (("rounds", lv.rounds), ("leader_switches", lv.switches))}
        return {"leader_rank": self.leader_rank, "local_leader_rank": self.local_leader_rank,
                "leader_switches": self.levels[-1].switches,
                "leader_history": tuple(self.leader_history), "details": details}

    def _before_optimizer_step(self) -> bool:
        """Algorithm 1's every-step pull, at the pre-step point ``x``, into ``_scope_delta``:
        ``d = sum over levels of (scope / period)(x - leader)``, the leader's own level
        included (toward its stale copy); subtracted after the step."""
        if self._scope_delta is not None and not self._frozen:
            active = [lv for lv in self.levels if lv.scope > 0 and lv.leader is not None]
            if active:
                with torch.no_grad():
                    lags_(self._scope_delta.views, self._state,
                          [(lv.snapshot.views, lv.scope_weight) for lv in active])
            self._scope_pending = bool(active)
        return not self._frozen

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        self.scorer.record(None if loss is None else as_loss_tensor(loss, "LSGD"), "LSGD")
        early = self.election.rule == "early"
        if self.steps == 1 and not self._elastic and not early:  # elastic: only rounds
            self._elect([lv for lv in self.levels if lv.scope > 0 and lv.period > 1], pull=False)
        if not self._frozen:
            self._scope_pull()
        if early:
            due = [lv for lv in self.levels if (self.steps + 1) % lv.period == 0]
            if due:
                among = "world" if any(lv.among == "world" for lv in due) else "group"
                self.election.start_early(self.comm, self._module, self._state, self.device, among)

    def _run_rounds(self, names: list[str]) -> None:
        """Elect each due level's leader, send its state (later parts: the period's leader)."""
        self._elect([lv for lv in self.levels if lv.name in names], pull=True)
        for f in range(1, self.fragments):
            for level in self.levels:
                elected = self.election.elected.get(level.name)
                if _part_name(level.name, f) in names and elected is not None:
                    self._launch(self._send(level, *elected, pull=True, part=f))

    def _scope_pull(self) -> None:
        """Every-step pull toward the (stale) leaders of the last communication."""
        if self._scope_delta is not None:  # algorithm-1: computed before the step
            if self._scope_pending:
                torch._foreach_sub_(self._state, self._scope_delta.views)
                self._scope_pending = False
            return
        active = [lv for lv in self.levels
                  if lv.scope > 0 and lv.leader is not None and lv.leader != self.rank]
        if len(active) == 1:
            pull_(self._state, active[0].snapshot.views, active[0].scope_weight)
        elif len(active) == 2:
            a, b = active
            pull_two_(self._state, a.snapshot.views, a.scope_weight, b.snapshot.views,
                      b.scope_weight)

    def _elect(self, levels: list[Level], pull: bool) -> None:
        """Elect each level's leader from one gathered set of scores, local level first, and
        send its state. A worker whose gathered score is not finite is diverged: it copies
        the leader's state at the first level that elects one. One whose window a reset just
        emptied scores NaN but is not diverged."""
        if not levels:
            return
        world = any(lv.among == "world" for lv in levels)
        scores = self.election.gather(self.comm, self._module, self._state, self.device,
                                      "world" if world else "group")
        if world and not bool(torch.isfinite(scores).any()):
            raise self._diverged_error("state or training loss")
        own = float(scores[self.rank if world else self.comm.info.group_rank])
        diverged = not math.isfinite(own) and (
            self.scorer.scores_on_eval or len(self.scorer.window) > 0)
        for level in levels:
            members = level.members
            winner = elect(scores[members[0]: members[-1] + 1] if world and
                           level.among == "group" else scores)
            if pull:
                self.election.elected[level.name] = None
            if winner is None:  # a whole group diverged: the next global round resets it
                continue
            leader = members[winner]
            if pull:
                level.rounds += 1
                self.rounds += 1
                self.election.elected[level.name] = (leader, diverged)
                self._frozen = self._frozen or (diverged and self.fragments > 1)
            self._launch(self._send(level, leader, diverged, pull))
            diverged = False

    def _send(self, level: Level, leader: int, diverged: bool, pull: bool,
              part: int = 0) -> InFlight:
        """Broadcast the leader's state, or its part ``part`` (compressed: its difference
        from the level's snapshot, which every member holds), landing ``overlap`` steps
        later (at once for the first election); a blocking broadcast goes straight into
        the snapshot."""
        snapshot = self._parts.of(level.snapshot, part)
        overlap = self.overlap if pull else 0
        if self.compress == "none" and overlap == 0:  # the blocking round
            if self.rank == leader:
                torch._foreach_copy_(snapshot, self._copy_of_part(part))
            for buffer in snapshot:
                self.comm.broadcast_(buffer, src=leader, among=level.among)
            buffers, handles = snapshot, [done_handle()]
        else:  # the leader's part as it is now; the others' buffers are overwritten
            buffers = ([t.clone() for t in self._copy_of_part(part)] if self.rank == leader
                       else [torch.empty_like(t) for t in snapshot])
            if self.rank == leader and self.compress != "none":
                torch._foreach_sub_(buffers, snapshot)
            handles = [self.comm.start_broadcast(b, leader, level.among, codec=self.compress)
                       for b in buffers]
        info = {"leader": leader, "diverged": diverged, "pull": pull, "level": level.name,
                "part": part}
        tensors = {"leader": buffers}
        if pull and self.pull_decay_rounds:  # the round's r, for its decayed pull
            info["round"] = level.rounds - 1
            if overlap and self.rank != leader and copied_share(info["round"],
                                                               self.pull_decay_rounds):
                # the copied share lands on the round's own difference (round_pull_)
                tensors["start"] = [t.clone() for t in (
                    self._state if self.fragments == 1 else self._copy_of_part(part))]
        return InFlight(self.steps, self.steps + overlap, _part_name(level.name, part),
                        handles, tensors, info)

    def _copy_of_part(self, part: int) -> list[torch.Tensor]:
        """Part ``part`` of the state, copied into the work buffer."""
        self._work.copy_range_from(self._state, self._parts.bounds[part])
        return self._parts.of(self._work, part)

    def _apply(self, item: InFlight) -> None:
        """The leader's state (part), as its broadcast started, has landed in the level's
        snapshot: a diverged worker copies it (reset after the last part); with ``pull`` the
        others pull toward it (:func:`~lsgd.strategies.pull_decay.round_pull_`)."""
        info = item.info
        level = next(lv for lv in self.levels if lv.name == info.get("level", item.name))
        part = int(info.get("part", 0))
        leader, diverged, pull = info["leader"], info["diverged"], info["pull"]
        snapshot = self._parts.of(level.snapshot, part)
        received = item.tensors["leader"]
        if self.compress != "none":  # the reference moves by the decoded difference
            torch._foreach_add_(snapshot, received)
        elif received[0].data_ptr() != snapshot[0].data_ptr():  # not received in place
            torch._foreach_copy_(snapshot, received)
        whole = self.fragments == 1
        if diverged and part == self.fragments - 1:
            self._frozen = False
            self._reset_to(level.snapshot.views)
        elif diverged or (pull and self.rank != leader):
            x = self._state if whole else self._copy_of_part(part)
            target = level.snapshot.views if whole else snapshot
            if diverged:
                torch._foreach_copy_(x, target)
            else:
                share = copied_share(info.get("round"), self.pull_decay_rounds)
                round_pull_(x, target, level.pull, share, *self._momentum_views(level, part),
                            self.leader_momentum, item.tensors.get("start"))
            if not whole:
                self._work.copy_range_to(self._state, self._parts.bounds[part])
        elif pull and level.name in self._velocity:
            torch._foreach_zero_(self._momentum_views(level, part)[0] or [])
        if part == 0:
            if level.leader is not None and level.leader != leader:
                level.switches += 1
            level.leader = leader
            self.leader_history.append((self.steps, level.name, leader))

    def _momentum_views(self, level: Level, part: int
                        ) -> tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """The level's velocity and the lag buffer (part ``part``)."""
        if not self._velocity:
            return None, None
        assert self._lag is not None
        velocity = self._velocity[level.name]
        if self.fragments == 1:
            return velocity.views, self._lag.views
        return self._parts.of(velocity, part), self._parts.of(self._lag, part)

    def _after_reset(self) -> None:
        """Forget the diverged losses and restart the leader momentum from zero."""
        self.scorer.window.load([])
        for velocity in self._velocity.values():
            torch._foreach_zero_(velocity.buffers)

    def reset_target(self) -> list[torch.Tensor]:
        return self.levels[-1].snapshot.views

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["scorer"] = self.scorer.state()
        state["levels"] = {lv.name: lv.state() for lv in self.levels}
        state["leader_history"] = list(self.leader_history)
        state["election"] = self.election.state() | {"frozen": self._frozen}
        if self._velocity:
            state["velocity"] = {name: [b.clone() for b in v.buffers]
                                 for name, v in self._velocity.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.scorer.load(state["scorer"])
        for lv in self.levels:
            lv.load(state["levels"][lv.name])
        self.leader_history = [tuple(h) for h in state["leader_history"]]  # type: ignore[misc]
        self.election.load(state.get("election", {}))
        self._frozen = bool(state.get("election", {}).get("frozen", False))
        saved = state.get("velocity", {})
        for name, velocity in self._velocity.items():
            for buffer, value in zip(velocity.buffers, saved.get(name, [])):
                buffer.copy_(value)


def _part_name(level: str, part: int) -> str:
    """The cadence name of a level's part: the level's for part 0, else ``"level/part"``."""
    return level if part == 0 else f"{level}/{part}"
