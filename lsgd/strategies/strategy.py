"""What every strategy shares: the worker state, initialization, the center, stats.

A strategy wraps one worker's model and optimizer; the user's loop stays plain PyTorch,
with ``strategy.step(loss)`` in place of ``optimizer.step()``. Periodic methods declare
their kinds of round (:class:`~lsgd.strategies.cadence.Cadence`) and implement
``_run_rounds``; asynchronous workers act together (stop, evaluate, checkpoint) only at
a *sync point*, right after a round among all workers.

A diverged worker (NaN or infinite loss or state) is reset at its next round to the
state it would have moved toward, its optimizer state cleared; when every worker has
diverged, every worker raises :class:`~lsgd.strategies.health.DivergedError`. At
construction the workers compare a fingerprint of their models (``"init"`` traffic)
(docs/algorithms.md, "Diverging and mismatched workers").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

import torch
from torch import nn

from lsgd import _validate
from lsgd.comm import CommStats, Communicator, get_communicator
from lsgd.strategies import buffers as bn
from lsgd.strategies.elastic_rounds import ElasticRounds
from lsgd.strategies.guard import driving, guard
from lsgd.strategies.health import DivergedError, check_same_model
from lsgd.strategies.pipeline import InFlight, Pipeline
from lsgd.strategies.report import Report
from lsgd.strategies.rounds import Rounds
from lsgd.strategies.cadence import Cadence, RoundSchedule
from lsgd.strategies.seams import Seams, supporting
from lsgd.strategies.state import float_buffers, on_state_, state_tensors

INITS = ("broadcast", "independent")
TRAFFIC = ("train", "eval")
COUNTS = ("steps", "rounds", "resets")  # checkpointed with the method's own counters


class Options(TypedDict, total=False):
    """The keywords every method passes on to :class:`Strategy` (``**options``)."""

    comm: Communicator | None
    init: str
    bn_buffers: str | None
    asynchronous: bool


def as_loss_tensor(loss: torch.Tensor | float, owner: str) -> torch.Tensor:
    """``loss`` as a detached 0-d tensor (no device sync: kept lazily on device)."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise ValueError(f"{owner}.step: loss must be a scalar, got shape {tuple(loss.shape)}")
        return loss.detach().reshape(())
    if _validate.is_number(loss):
        return torch.tensor(float(loss), dtype=torch.float64)
    raise ValueError(f"{owner}.step: loss must be a tensor or a number, got {loss!r}")


class Strategy(Seams):
    """Base class: wraps ``model`` and ``optimizer`` and owns the communication.

    Args:
        model: this worker's model.
        optimizer: this worker's inner optimizer over ``model``'s parameters.
        comm: the communicator; found from the environment when omitted.
        init: ``"broadcast"`` (every worker starts from rank 0's state) or
            ``"independent"`` (each keeps its own).
        bn_buffers: one of the method's :attr:`bn_modes` (default: the first; see
            :mod:`lsgd.strategies.buffers`).
        asynchronous: rounds fall due by the total steps of all workers instead
            of each worker's own.
    """

    name = "strategy"
    #: The method's ``bn_buffers`` modes, its default first.
    bn_modes: tuple[str, ...] = ("pull", "local")
    #: Whether a round averages the whole state (then ``"average"`` buffers ride in it).
    rounds_average_state = False
    #: The keywords the method passes on with ``**options``.
    options_type: Any = Options
    #: The method's own counters, checkpointed under their names.
    counters: tuple[str, ...] = ()

    @classmethod
    def option_names(cls) -> list[str]:
        """The keywords the method takes with ``**options`` (:attr:`options_type`)."""
        return list(cls.options_type.__annotations__)

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 comm: Communicator | None = None, init: str = "broadcast",
                 bn_buffers: str | None = None, asynchronous: bool = False,
                 **unknown: Any) -> None:
        if unknown:
            hint = ("; sync_buffers=False is bn_buffers='local' since lsgd 0.11"
                    if "sync_buffers" in unknown else "")
            raise TypeError(f"{self.name}: unknown keyword argument(s) "
                            f"{', '.join(sorted(unknown))}{hint}")
        if asynchronous and not self.supports_asynchronous:
            raise ValueError(f"{self.name}: asynchronous=True is available for "
                             f"{', '.join(supporting('supports_asynchronous'))} only")
        if not isinstance(model, nn.Module):
            raise ValueError(f"{self.name}: model must be a torch.nn.Module, got {type(model)!r}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"{self.name}: optimizer must be a torch.optim.Optimizer, "
                             f"got {type(optimizer)!r}")
        self.init = _validate.choice(self.name, "init", init, INITS)
        self.bn_buffers = bn.resolve(self.name, self.bn_modes, bn_buffers)
        self.comm = comm if comm is not None else get_communicator()
        self.optimizer = optimizer
        guard(optimizer)
        self._module = model
        self._replica = self.comm.replica_parallel(model)
        self._buffers_in_state = self.bn_buffers in ("pull", "broadcast") or (
            self.bn_buffers == "average" and self.rounds_average_state)
        self._state = state_tensors(model, self._buffers_in_state)
        separate = self.bn_buffers == "average" and not self._buffers_in_state
        found = float_buffers(model) if separate else []
        self._bn_average = bn.BufferAverage(found) if found else None
        self.steps = self.rounds = 0
        self.resets = 0  # times this worker diverged and was reset (see _reset_to)
        self.asynchronous = bool(asynchronous)
        self.wait_seconds = 0.0  # time inside rounds: waiting for the others, and the transfer
        self.at_sync_point = True
        self._schedule = RoundSchedule(self.comm, [], self.asynchronous)
        self._pipeline = Pipeline()  # the rounds' transfers in flight (overlap)
        self.on_round: Callable[[], None] | None = None  # elastic: the trainer's hook
        self._elastic = bool(getattr(self.comm, "elastic", False))
        self._rounds = (ElasticRounds if self._elastic else Rounds)(self)
        self._rounds.start()
        # The communicator may outlive several strategies: count from here.
        self._baseline = {c: self.comm.stats(c) for c in TRAFFIC}

    @property
    def model(self) -> nn.Module:
        """The module to call in the forward pass (a DDP wrapper, or the model itself)."""
        return self._module if self._replica is None else self._replica

    @property
    def module(self) -> nn.Module:
        """The user's own model (never a wrapper)."""
        return self._module

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.world_size

    def step(self, loss: torch.Tensor | float | None = None) -> None:
        """Inner optimizer step, then this method's pulls; then the transfers that are
        due land and the rounds that fell due run (:mod:`lsgd.strategies.rounds`).
        Asynchronously, the rounds joined stop after one among all workers, so that
        :attr:`at_sync_point` is set there. An elastic worker's first step joins the job."""
        if self._rounds.join():
            return
        if self._replica is not None:  # the replica's processes' gradients, averaged
            self._replica.synchronize(self.name)
        if self._before_optimizer_step():
            with driving(self.optimizer):
                self.optimizer.step()
        self.steps += 1
        self.comm.local_step()
        with torch.no_grad():
            self._after_step(loss)
            self._schedule.after_step(self.steps)
            self.at_sync_point = not self.asynchronous
            for item in self._pipeline.due(self.steps):  # due after this step, before its rounds
                start = self.comm.now()
                self._rounds.land(item)
                self.wait_seconds += self.comm.now() - start
            while (group := self._schedule.next()) is not None:
                start = self.comm.now()
                world = any(c.among == "world" for c in group)
                self._rounds.run([c.name for c in group], world)
                self.wait_seconds += self.comm.now() - start
                if self.asynchronous and world:
                    self.at_sync_point = True
                    break

    def join_rounds(self, names: list[str]) -> None:
        self._run_rounds(names)
        if self._bn_average is not None:
            world = any(c.among == "world" for c in self._schedule.cadences if c.name in names)
            self._rounds.average_buffers("world" if world else "group")

    def start_together(self) -> None:
        """Raise ``ValueError`` on every worker unless all states have the same layout
        (:func:`~lsgd.strategies.health.check_same_model`), then (``init="broadcast"``)
        start every worker from rank 0's state (``"init"`` traffic)."""
        every = self._state + (self._bn_average.tensors if self._bn_average else [])
        check_same_model(self.comm, every, self.name, self._device())
        if self.init == "broadcast":
            with self.comm.category("init"):
                on_state_(self._module, lambda buffer: self.comm.broadcast_(buffer, src=0))

    def average_buffers_now(self, among: str) -> None:
        if self._bn_average is not None:
            self._bn_average(self.comm, among)

    def _before_optimizer_step(self) -> bool:
        """The method's rules before the optimizer step; whether to take the step."""
        return True

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        """The method's every-step rules after the ``self.steps``-th optimizer step."""

    def settle(self) -> None:
        """Wait until every transfer in flight has arrived (each still lands at its step);
        call before evaluating or timing a pause."""
        if self._pipeline:
            start = self.comm.now()
            self._pipeline.settle()
            self.wait_seconds += self.comm.now() - start

    def _launch(self, item: InFlight) -> None:
        """A round's transfer, started: applied now if due, else kept in flight."""
        if item.apply_at <= self.steps:
            self.arrive(item)
        else:
            self._pipeline.add(item)

    def arrive(self, item: InFlight) -> None:
        item.wait()
        self._apply(item)
        if "bn_among" in item.info:  # an elastic round's, left until the transfer was done
            self.average_buffers_now(item.info["bn_among"])

    def _apply(self, item: InFlight) -> None:
        """Apply a round whose transfer has arrived."""
        raise NotImplementedError

    def _use_cadences(self, cadences: list[Cadence]) -> None:
        """Declare this method's kinds of round, local before global (end of ``__init__``)."""
        self._schedule = RoundSchedule(self.comm, cadences, self.asynchronous)
        self._rounds.check()

    def _run_rounds(self, names: list[str]) -> None:
        """Run the rounds ``names`` (cadence names), which fell due together."""
        raise NotImplementedError

    def _diverged_error(self, what: str = "state", step: int | None = None) -> DivergedError:
        """The error every worker raises when no worker is left healthy."""
        step = self.steps if step is None else step
        return DivergedError(f"{self.name}: every worker's {what} is NaN or infinite at step "
                             f"{step}: lower the learning rate (or clip the gradients, or warm "
                             "the learning rate up) and restart from the last checkpoint")

    def _reset_to(self, source: Sequence[torch.Tensor]) -> None:
        """Reset this diverged worker to ``source`` exactly (shaped like the state), its
        optimizer's per-parameter state dropped (likely NaN too); no communication."""
        if self._state:
            torch._foreach_copy_(self._state, list(source))
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                self.optimizer.state.pop(p, None)
        self.resets += 1
        self._after_reset()

    def _after_reset(self) -> None:
        """What else the method forgets after :meth:`_reset_to` (the leader score's window)."""

    @property
    def total_steps(self) -> int:
        """Local steps of all workers together, as this worker last saw them."""
        return self._schedule.total if self.asynchronous else self.steps * self.world_size

    def agree(self, *values: float) -> tuple[float, ...]:
        """The largest of each value over all workers (``"control"`` traffic), at a sync
        point (:attr:`at_sync_point`); :attr:`total_steps` is then exact on each."""
        if not self.at_sync_point:
            raise RuntimeError(f"{self.name}.agree: asynchronous workers act together only "
                               "right after a round among all workers; check "
                               "strategy.at_sync_point first")
        if self.world_size == 1:
            return tuple(float(v) for v in values)
        # The shared counter rides along: nobody steps at a sync point, so the
        # largest value seen is its exact value, which every worker then holds.
        mine = torch.tensor([float(v) for v in values] + [float(self._schedule.total)],
                            dtype=torch.float64, device=self._device())
        with self.comm.category("control"):
            table = self.comm.all_gather(mine)
        agreed = [float(v) for v in table.amax(dim=0).cpu()]
        self._schedule.total = int(agreed.pop())
        return tuple(agreed)

    def should_stop(self, wish: bool) -> bool:
        """Whether all workers stop now: True once any worker wished it, at a sync point
        (asynchronous workers agree at the next one). Call after every ``step``."""
        return self.at_sync_point and self.agree(1.0 if wish else 0.0)[0] > 0

    def _device(self) -> torch.device:
        return self._state[0].device if self._state else torch.device("cpu")

    def center(self) -> nn.Module:
        """A copy of the model with the workers' average state (one ``"eval"`` all-reduce)."""
        replica = copy.deepcopy(self._module)
        with self.comm.category("eval"):
            on_state_(replica, lambda buffer: self.comm.all_reduce_(buffer, op="mean"))
        return replica

    def report(self) -> Report:
        """Steps, rounds, traffic and leaders of this worker (see :class:`Report`)."""
        train, evaluation = self.traffic("train"), self.traffic("eval")
        return Report(
            method=self.name, rank=self.rank, world_size=self.world_size,
            groups=self.comm.groups, replica_processes=self.comm.share[1],
            steps=self.steps, rounds=self.rounds, asynchronous=self.asynchronous,
            total_steps=self.total_steps, wait_seconds=self.wait_seconds, resets=self.resets,
            bytes_sent=train.bytes_sent, bytes_received=train.bytes_received,
            comm_seconds=train.seconds, comm_calls=train.calls,
            link_bytes_sent=train.link_bytes_sent, link_bytes_received=train.link_bytes_received,
            eval_bytes_sent=evaluation.bytes_sent, eval_bytes_received=evaluation.bytes_received,
            **self._report_fields())

    def _report_fields(self) -> dict[str, Any]:
        """The method's own :class:`Report` fields (leaders, ``details``: its counters)."""
        return {"details": {name: getattr(self, name) for name in self.counters}}

    def spread(self) -> float | None:
        """Mean distance of the states to their average (decentralized methods only)."""
        return None

    def traffic(self, category: str = "train") -> CommStats:
        """What this strategy moved in ``category`` (``"train"`` or ``"eval"``)."""
        return self.comm.stats(category).minus(self._baseline.get(category, CommStats()))

    def state_dict(self) -> dict[str, Any]:
        self._pipeline.settle()  # first: a transfer's bytes count once it has arrived
        return {"name": self.name, "bn_buffers": self.bn_buffers, "wait_seconds": self.wait_seconds,
                "schedule": self._schedule.state(), "in_flight": self._pipeline.state(),
                "traffic": {c: dataclasses.asdict(self.traffic(c)) for c in TRAFFIC},
                **{name: getattr(self, name) for name in (*COUNTS, *self.counters)}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"{self.name}.load_state_dict: the state was saved by "
                             f"{state.get('name')!r}")
        saved = state.get("bn_buffers")
        if saved is None and self._bn_average is not None:
            raise ValueError(
                f"{self.name}.load_state_dict: the state was saved before bn_buffers existed, "
                "when the BatchNorm statistics were pulled like parameters; resume with "
                "bn_buffers='pull', or 'local' if its buffers were kept local")
        if saved is not None and saved != self.bn_buffers:
            raise ValueError(
                f"{self.name}.load_state_dict: the state was saved with bn_buffers={saved!r}, "
                f"this strategy has {self.bn_buffers!r}; resume with the same mode")
        for name in (*COUNTS, *self.counters):
            setattr(self, name, int(state.get(name, 0)))
        self.wait_seconds = float(state.get("wait_seconds", 0.0))
        if "schedule" in state:
            self._schedule.load(state["schedule"])
        for c in TRAFFIC:
            saved = CommStats(**state["traffic"][c])
            self._baseline[c] = self.comm.stats(c).minus(saved)
        self._pipeline.load(state.get("in_flight", []), self._device())
