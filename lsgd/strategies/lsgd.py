"""Leader SGD (Teng et al., "Leader Stochastic Gradient Descent for Distributed
Training of Deep Learning Models", NeurIPS 2019), synchronous.

Each worker runs its own optimizer. Workers are pulled toward the best
performer (the *leader*, lowest recent training loss), never toward an average:

1. every local step, after the optimizer step, a small pull toward the leaders
   elected at the last communication (stale leaders are fine, Theorem 2)::

       x <- x - (scope / period) (x - leader_local) - (scope_global / global_period) (x - leader_global)

2. every ``period`` steps (a local round): elect the leader of each group,
   broadcast its state inside the group, ``x <- x - pull (x - leader_local)``;
3. every ``global_period`` steps (a global round): elect the leader of all
   workers, broadcast its state to everyone, ``x <- x - pull_global (x - leader_global)``.

When both rounds fall on one step the local round goes first. A leader's own
pull terms are zero: it takes a plain optimizer step. Before the first round
the pull targets come from an election on the first batch's losses (no pull
then; skipped at a level whose ``scope`` is 0, where targets are never used).

Two options change the rules (``docs/algorithms.md``, "LSGD, synchronous"):

* ``scope_pull="algorithm-1"`` computes the every-step pull at the point where
  the gradient was taken, as the paper's Algorithm 1 writes the update,
  ``x <- x - eta g(x) - (scope / period)(x - leader)``, with ``x`` the point
  before the optimizer step, and pulls the leader toward its own stale copy
  too. The default ``"after-step"`` pulls the point after the step and
  exempts the leader.
* ``leader_momentum=mu`` > 0 sends a round's pull through a Nesterov momentum
  kept by each worker for each level: with ``d = x - leader``,
  ``v <- mu v + d`` and ``x <- x - pull (d + mu v)`` (an outer Nesterov step
  toward the leader, with ``pull`` as its learning rate, as DiLoCo steps
  toward the average); the leader's ``v`` is zeroed. ``mu = 0`` is LSGD.
  Neither option sends anything more.

Single-leader LSGD is ``groups=1``: only the global level exists, set by
``pull``, ``scope`` and ``period`` (the ``*_global`` spellings are accepted too).
With several groups, ``pull``/``scope``/``period`` set the local level and
``pull_global``/``scope_global``/``global_period`` the global one.

Communicated per round: one all-gather of the scores (``W`` floats for a global
round, ``W / groups`` for a local one; one all-gather serves both when both are
due) and one broadcast of the leader's state. Nothing else.

A diverged worker (its score, or any value of its state, NaN or infinite)
gathers the score +inf, so it is never elected. At its next election it
receives the leader's state like everyone and, instead of the pull, copies it
exactly (a reset: its optimizer state and its loss window are cleared, so old
NaN losses do not keep it out; counted in ``report().resets``). The state
check is lazy (folded into the gathered score on the device), so a healthy
round costs no extra synchronisation and no extra byte. If no score among all
workers is finite, every worker raises :class:`~lsgd.strategies.health.DivergedError`
at that election; a group whose every member diverged at a local round keeps
its old leader until the next global round resets it.

Asynchronous LSGD (``asynchronous=True``, the paper's practical algorithm):
local round ``r`` falls due when all workers together have taken
``r * W * period`` steps, global round ``r`` at ``r * W * global_period``
(a counter in the c10d store); each worker joins each round once, at its next
step boundary, so fast workers take more steps between rounds than slow ones
(see :mod:`lsgd.strategies.rounds`). The pulls are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import Communicator
from lsgd.flat import FlatBuffer
from lsgd.functional import elect, finite_flag, pull_, pull_two_
from lsgd.leader import Scorer
from lsgd.strategies.base import Strategy, as_loss_tensor
from lsgd.strategies.levels import DEFAULTS, Level, one_spelling
from lsgd.strategies.pipeline import InFlight, Pipeline, check_options
from lsgd.strategies.rounds import Cadence


SCOPE_PULLS = ("after-step", "algorithm-1")


class LSGD(Strategy):
    """Leader SGD, single-leader (``groups=1``) or multi-leader (several groups).

    Args:
        pull: lambda, fraction of the way to the leader moved at a round, in [0, 1]
            (default 0.1).
        scope: gamma, the every-step pull is ``gamma / period`` of the way, in [0, 1]
            (default 0.01).
        period: tau, local steps between rounds (default 16).
        pull_global, scope_global, global_period: lambda_G, gamma_G, tau_G of the
            global level when there are several groups (default: ``pull``,
            ``scope`` and ``4 * period``, or ``period`` when every group is one
            worker, so that there is no local level); ``global_period`` must be a
            multiple of ``period``.
        leader_window: k, the score is the mean of the last k training losses.
        leader_metric: ``"train"`` (the window) or ``"eval"`` (the loss on
            ``eval_batch`` under ``eval_loss``, default cross-entropy, at election time).
        scope_pull: ``"after-step"`` (default) or ``"algorithm-1"``: where the
            every-step pull is computed, and whether the leader takes it (above).
        leader_momentum: mu in [0, 1), Nesterov momentum of the round's pull
            (above; default 0, plain LSGD).
        overlap: K, steps between the start of a round's broadcast and its pull
            (0: at once, the round blocks), in ``[0, period)``.
        compress: ``"none"``, ``"bf16"`` or ``"int8"``: the leader sends the
            difference between its state and the level's reference (the last
            leader state every member reconstructed) in this wire format.
        comm, init, sync_buffers, asynchronous: see :class:`~lsgd.strategies.base.Strategy`.
    """

    name = "lsgd"
    supports_asynchronous = True
    bn_modes = ("average", "pull", "local")
    supports_elastic = True

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        pull: float | None = None,
        scope: float | None = None,
        period: int | None = None,
        pull_global: float | None = None,
        scope_global: float | None = None,
        global_period: int | None = None,
        leader_window: int = 10,
        leader_metric: str = "train",
        eval_batch: tuple[torch.Tensor, torch.Tensor] | None = None,
        eval_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        scope_pull: str = "after-step",
        leader_momentum: float = 0.0,
        overlap: int = 0,
        compress: str = "none",
        comm: Communicator | None = None,
        init: str = "broadcast",
        sync_buffers: bool = True,
        bn_buffers: str | None = None,
        asynchronous: bool = False,
    ) -> None:
        owner = "LSGD"
        given = {"pull": pull, "scope": scope, "period": period}
        pull = _validate.fraction(owner, "pull", DEFAULTS["pull"] if pull is None else pull)
        scope = _validate.fraction(owner, "scope", DEFAULTS["scope"] if scope is None else scope)
        period = _validate.positive_int(
            owner, "period", DEFAULTS["period"] if period is None else period)
        if pull_global is not None:
            pull_global = _validate.fraction(owner, "pull_global", pull_global)
        if scope_global is not None:
            scope_global = _validate.fraction(owner, "scope_global", scope_global)
        if global_period is not None:
            global_period = _validate.positive_int(owner, "global_period", global_period)
        self.scope_pull = _validate.choice(owner, "scope_pull", scope_pull, SCOPE_PULLS)
        self.leader_momentum = _validate.momentum(owner, "leader_momentum", leader_momentum)
        self.overlap, _, self.compress = check_options(owner, period, overlap, 1, compress,
                                                       asynchronous)
        self.scorer = Scorer(owner, leader_window, leader_metric, eval_batch, eval_loss)
        super().__init__(model, optimizer, comm=comm, init=init, sync_buffers=sync_buffers,
                         bn_buffers=bn_buffers, asynchronous=asynchronous)
        info = self.comm.info
        self.levels: list[Level] = []
        if info.groups == 1:
            # Single leader: the one level may be spelled either way, not both differently.
            g_pull = one_spelling(owner, "pull", given["pull"], pull_global)
            g_scope = one_spelling(owner, "scope", given["scope"], scope_global)
            g_period = one_spelling(owner, "period", given["period"], global_period)
        else:
            g_pull = pull if pull_global is None else pull_global
            g_scope = scope if scope_global is None else scope_global
            # With one worker per group there is no local level: the global level is
            # the only one and runs every ``period`` steps unless told otherwise.
            local = info.group_size > 1
            if global_period is not None:
                g_period = global_period
            else:
                g_period = 4 * period if local else period
            _validate.multiple_of(owner, "global_period", g_period, "period", period)
            if local:
                self.levels.append(
                    Level("local", "group", info.group_members(), pull, scope, period,
                           FlatBuffer(self._state))
                )
        self.levels.append(
            Level("global", "world", list(range(info.world_size)), g_pull, g_scope, g_period,
                   FlatBuffer(self._state))
        )
        self.device = self._device()
        self.leader_history: list[tuple[int, str, int | None]] = []
        # algorithm-1: the pre-step pull, subtracted after the optimizer step
        self._scope_delta = FlatBuffer(self._state) if self.scope_pull == "algorithm-1" else None
        self._scope_pending = False
        # leader momentum: each level's velocity, and the round's lag x - leader
        self._velocity = {lv.name: FlatBuffer(self._state) for lv in self.levels
                          if self.leader_momentum > 0}
        self._lag = FlatBuffer(self._state) if self._velocity else None
        if self.overlap or self.compress != "none":
            self._pipeline = Pipeline()
            if self.compress != "none" and self.init == "broadcast":
                for level in self.levels:  # the first reference: the state all start from
                    level.snapshot.copy_from(self._state)
        self._use_cadences([Cadence(lv.name, lv.period, lv.among) for lv in self.levels])

    # -- public views ----------------------------------------------------
    @property
    def leader_rank(self) -> int | None:
        """The global leader elected at the last communication (None before any)."""
        return self.levels[-1].leader

    @property
    def local_leader_rank(self) -> int | None:
        """This worker's group leader (the global leader when there is one group)."""
        return self.levels[0].leader

    def _report_fields(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        for level in self.levels:
            details[f"{level.name}_rounds"] = level.rounds
            details[f"{level.name}_leader_switches"] = level.switches
        return {
            "leader_rank": self.leader_rank,
            "local_leader_rank": self.local_leader_rank,
            "leader_switches": self.levels[-1].switches,
            "leader_history": tuple(self.leader_history),
            "details": details,
        }

    # -- the rule ----------------------------------------------------------
    def _before_optimizer_step(self) -> bool:
        if self._scope_delta is not None:
            with torch.no_grad():
                self._scope_pending = self._pre_step_pull()
        return True

    def _pre_step_pull(self) -> bool:
        """Algorithm 1's every-step pull at the pre-step point ``x``, into
        ``_scope_delta``: ``d = sum over levels of (scope / period)(x - leader)``,
        the leader's own level included (toward its stale copy). Whether any."""
        active = [lv for lv in self.levels if lv.scope > 0 and lv.leader is not None]
        if not active:
            return False
        delta = self._scope_delta.views  # type: ignore[union-attr]
        first, *rest = active
        torch._foreach_copy_(delta, self._state)
        torch._foreach_sub_(delta, first.snapshot.views)
        torch._foreach_mul_(delta, first.scope_weight)
        for level in rest:
            torch._foreach_add_(delta, self._state, alpha=level.scope_weight)
            torch._foreach_add_(delta, level.snapshot.views, alpha=-level.scope_weight)
        return True

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        self.scorer.record(None if loss is None else as_loss_tensor(loss, "LSGD"), "LSGD")
        if self.steps == 1 and not self._elastic:  # elastic: nothing outside rounds
            initial = [lv for lv in self.levels if lv.scope > 0 and lv.period > 1]
            if initial:
                self._communicate(initial, pull=False)
        self._scope_pull()

    def _round(self, names: list[str]) -> None:
        self._communicate([lv for lv in self.levels if lv.name in names], pull=True)

    def _scope_pull(self) -> None:
        """Every-step pull toward the (stale) leaders of the last communication."""
        if self._scope_delta is not None:  # algorithm-1: computed before the step
            if self._scope_pending:
                torch._foreach_sub_(self._state, self._scope_delta.views)
                self._scope_pending = False
            return
        active = [
            lv for lv in self.levels
            if lv.scope > 0 and lv.leader is not None and lv.leader != self.rank
        ]
        if len(active) == 1:
            pull_(self._state, active[0].snapshot.views, active[0].scope_weight)
        elif len(active) == 2:
            a, b = active
            pull_two_(self._state, a.snapshot.views, a.scope_weight, b.snapshot.views, b.scope_weight)

    def _communicate(self, levels: list[Level], pull: bool) -> None:
        """Elect the leader of each level, broadcast its state, pull (local first).

        The score gathered is +inf when this worker's state is not finite
        (checked on the device, no extra synchronisation). A worker whose
        gathered score is not finite is diverged: it copies the leader's state
        instead of pulling (:meth:`_reset_to`) at the first level of this
        communication that elects a leader (the initial election included),
        and pulls normally at the next one. A worker whose
        window was just emptied by a reset (no loss since) scores NaN without
        being diverged: it is not elected, and pulls normally.
        """
        score = self.scorer.score(self._module, self.device)
        finite = finite_flag(self._state).to(score.device)
        score = torch.where(finite, score, torch.full_like(score, math.inf))
        world = any(lv.among == "world" for lv in levels)
        gathered = self.comm.all_gather(score.reshape(1), among="world" if world else "group")
        scores = gathered.reshape(-1).to("cpu", torch.float64)  # one synchronisation
        if world and not bool(torch.isfinite(scores).any()):
            raise self._diverged_error("state or training loss")
        own = float(scores[self.rank if world else self.comm.info.group_rank])
        diverged = not math.isfinite(own) and (
            self.scorer.metric == "eval" or len(self.scorer.window) > 0)
        for level in levels:  # self.levels order: local before global
            if world and level.among == "group":
                level_scores = scores[level.members[0] : level.members[-1] + 1]
            else:
                level_scores = scores
            winner = elect(level_scores)
            if winner is None:  # a whole group diverged: the next global round resets it
                continue
            leader = level.members[winner]
            if pull:
                level.rounds += 1
                self.rounds += 1
            if self._pipeline is not None:  # overlapped or compressed
                self._launch(self._start_level(level, leader, diverged, pull))
            else:
                if self.rank == leader:
                    level.snapshot.copy_from(self._state)
                for buffer in level.snapshot.buffers:
                    self.comm.broadcast_(buffer, src=leader, among=level.among)
                self._land(level, leader, diverged, pull)
            diverged = False

    def _start_level(self, level: Level, leader: int, diverged: bool, pull: bool) -> InFlight:
        """Start the broadcast of the leader's state (compressed: its difference from
        the level's reference, the snapshot every member holds) behind the next
        ``overlap`` steps (none for the first election)."""
        payload = FlatBuffer(self._state)
        if self.rank == leader:
            payload.copy_from(self._state)
            if self.compress != "none":
                torch._foreach_sub_(payload.buffers, level.snapshot.buffers)
        handles = [self.comm.start_broadcast(b, leader, level.among, codec=self.compress)
                   for b in payload.buffers]
        return InFlight(self.steps, self.steps + (self.overlap if pull else 0), level.name,
                        handles, {"leader": payload.buffers},
                        {"leader": leader, "diverged": diverged, "pull": pull})

    def _apply(self, item: InFlight) -> None:
        """The leader's state (as it was when the round started) has landed: it becomes
        the level's snapshot, then the pull, as in a blocking round."""
        level = next(lv for lv in self.levels if lv.name == item.name)
        if self.compress != "none":  # the reference moves by the decoded difference
            torch._foreach_add_(level.snapshot.buffers, item.tensors["leader"])
        else:
            torch._foreach_copy_(level.snapshot.buffers, item.tensors["leader"])
        info = item.info
        self._land(level, info["leader"], info["diverged"], info["pull"])

    def _land(self, level: Level, leader: int, diverged: bool, pull: bool) -> None:
        """The level's snapshot holds the leader's state: reset a diverged worker to it,
        or pull toward it; note the leader."""
        if diverged:
            self._reset_to(level.snapshot.views)
        elif pull and self.rank != leader:
            self._round_pull(level)
        elif pull and level.name in self._velocity:
            for buffer in self._velocity[level.name].buffers:
                buffer.zero_()  # the leader's lag is zero
        if level.leader is not None and level.leader != leader:
            level.switches += 1
        level.leader = leader
        self.leader_history.append((self.steps, level.name, leader))

    def _round_pull(self, level: Level) -> None:
        """``x <- x - pull (x - leader)``; with leader momentum, the Nesterov form."""
        if not self._velocity:
            pull_(self._state, level.snapshot.views, level.pull)
            return
        lag, velocity, mu = self._lag, self._velocity[level.name], self.leader_momentum
        assert lag is not None
        lag.copy_from(self._state)
        torch._foreach_sub_(lag.views, level.snapshot.views)  # d = x - leader
        torch._foreach_mul_(velocity.buffers, mu)
        torch._foreach_add_(velocity.buffers, lag.buffers)  # v <- mu v + d
        torch._foreach_add_(lag.buffers, velocity.buffers, alpha=mu)  # d + mu v
        torch._foreach_add_(self._state, lag.views, alpha=-level.pull)

    def _after_reset(self) -> None:
        """Forget the losses of the diverged past: the window refills from the next step;
        the leader momentum restarts from zero."""
        self.scorer.window.load([])
        for velocity in self._velocity.values():
            for buffer in velocity.buffers:
                buffer.zero_()

    # -- checkpointing -----------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["scorer"] = self.scorer.state()
        state["levels"] = {
            lv.name: {
                "leader": lv.leader,
                "rounds": lv.rounds,
                "switches": lv.switches,
                "snapshot": [b.clone() for b in lv.snapshot.buffers],
            }
            for lv in self.levels
        }
        state["leader_history"] = list(self.leader_history)
        if self._velocity:
            state["velocity"] = {name: [b.clone() for b in v.buffers]
                                 for name, v in self._velocity.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.scorer.load(state["scorer"])
        for lv in self.levels:
            saved = state["levels"][lv.name]
            lv.leader, lv.rounds, lv.switches = saved["leader"], saved["rounds"], saved["switches"]
            for buffer, value in zip(lv.snapshot.buffers, saved["snapshot"]):
                buffer.copy_(value)
        self.leader_history = [tuple(h) for h in state["leader_history"]]  # type: ignore[misc]
        saved = state.get("velocity", {})
        for name, velocity in self._velocity.items():
            for buffer, value in zip(velocity.buffers, saved.get(name, [])):
                buffer.copy_(value)
