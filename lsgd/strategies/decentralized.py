"""What D-PSGD, MATCHA and AL-DSGD share: graphs, matchings, gossip, the spread.

No center and no global collective during training: at a communication every worker
swaps its state with its partners along the *active matchings* of the current graph
(one :meth:`~lsgd.comm.communicator.Communicator.exchange_many`) and mixes::

    x_i <- (1 - d_i a) x_i + a sum_{j in A_i} x_j          (d_i = |A_i|)

that is ``x <- W x`` with ``W = I - a L(t)`` doubly stochastic, so the workers' average
never moves. The methods differ only in which matchings are active, in ``a``, and in
AL-DSGD's leader terms. A worker drops every non-finite neighbour state; one whose own
state is not finite is reset to the mean of its finite neighbours' (docs/algorithms.md,
"Decentralized methods").
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import torch
from torch import nn

from lsgd import _validate, topology as topo
from lsgd.comm import get_communicator
from lsgd.flat import FlatBuffer
from lsgd.functional import finite_each
from lsgd.strategies.strategy import Options, Strategy
from lsgd.topology import Topology

Tensors = Sequence[torch.Tensor]
GraphSpec = Topology | Sequence[Topology | str] | str | None


def mix_(xs: Tensors, neighbours: Sequence[Tensors], weight: float) -> None:
    """Gossip in place: ``x <- (1 - d a) x + a sum_j x_j`` with ``d = len(neighbours)``."""
    if not neighbours or weight == 0.0:
        return
    xs = list(xs)
    torch._foreach_mul_(xs, 1.0 - len(neighbours) * weight)
    for state in neighbours:
        torch._foreach_add_(xs, list(state), alpha=weight)


MIXING_RULES = ("max-degree",)
MixingWeight = float | str | None


def mixing_weight_option(owner: str, value: Any) -> MixingWeight:
    """``None`` (the method's own weight), ``"max-degree"`` or a number in (0, 1]."""
    if value is None or value in MIXING_RULES:
        return value
    if not _validate.is_number(value) or not 0.0 < value <= 1.0:
        raise ValueError(f"{owner}: mixing_weight must be None (the method's own), "
                         f"'max-degree' or a number in (0, 1], got {value!r}")
    return float(value)


@dataclasses.dataclass
class GraphPlan:
    """One graph as a strategy uses it: matchings, activation probabilities, weight."""

    graph: Topology
    partners: list[int | None]  # this worker's partner in each matching
    probabilities: list[float]
    weight: float


def resolve_graphs(owner: str, spec: GraphSpec, world_size: int) -> list[Topology]:
    """The graphs of ``spec`` (default a ring), checked against ``world_size``."""
    if spec is None:
        graphs = [topo.ring(world_size)]
    elif isinstance(spec, Topology):
        graphs = [spec]
    else:  # a spec as the command line gives it (lsgd.topology.from_spec), or several
        graphs = [topo.from_spec(g, world_size) if isinstance(g, str) else g
                  for g in ([spec] if isinstance(spec, str) else spec)]
        if not graphs or not all(isinstance(g, Topology) for g in graphs):
            raise ValueError(f"{owner}: topology must be a Topology, a non-empty list of them "
                             f"(dynamic graphs) or a kind name {topo.KINDS}, got {spec!r}")
    wrong = [f"{g.name} has {g.size}" for g in graphs if g.size != world_size]
    if wrong:
        raise ValueError(f"{owner}: every graph must span the {world_size} workers; "
                         + ", ".join(wrong))
    if world_size > 1:
        (graphs[0] if len(graphs) == 1 else topo.union(graphs)).check_connected()
    return graphs


class GossipOptions(Options, total=False):
    """The gossip's and the strategy's keywords, as a gossip method passes them on."""

    topology: GraphSpec
    budget: float | None
    period: int
    seed: int
    mixing_weight: MixingWeight


class Decentralized(Strategy):
    """Base class of the gossip methods: neighbour exchange along active matchings.

    Args:
        topology: a :class:`~lsgd.topology.Topology`, a list of them used in turn (dynamic
            graphs), or a kind name for :func:`lsgd.topology.make`; default ``ring(W)``.
        budget: C_b in (0, 1], the expected fraction of matchings active (1: all).
        period: local steps between communications (1: every step).
        seed: seed of the activation sampler; the same on every worker.
        mixing_weight: ``a``. ``None``: the method's own (D-PSGD's
            ``2 / (lambda_2 + lambda_max)``, MATCHA's SDP); ``"max-degree"``:
            ``1 / (1 + max degree)``, every self weight positive; a number in (0, 1].
        comm, init, bn_buffers: the strategy's (``bn_buffers``: ``"pull"`` or ``"local"``).
    """

    name = "decentralized"
    uses_graph = True
    options_type = GossipOptions
    counters = ("communications", "exchanges", "dropped_neighbours")
    #: C_b when none is given (MATCHA's is 0.5).
    default_budget = 1.0

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *,
                 topology: GraphSpec = None, budget: float | None = None, period: int = 1,
                 seed: int = 0, mixing_weight: MixingWeight = None,
                 **options: Unpack[Options]) -> None:
        owner = type(self).__name__
        budget = self.default_budget if budget is None else budget
        if not _validate.is_number(budget) or not 0.0 < budget <= 1.0:
            raise ValueError(f"{owner}: budget must be a number in (0, 1], got {budget!r}")
        self.budget = float(budget)
        self.period = _validate.positive_int(owner, "period", period)
        if not _validate.is_int(seed) or seed < 0:
            raise ValueError(f"{owner}: seed must be an integer >= 0, got {seed!r}")
        self.seed = seed
        self.mixing_weight = mixing_weight_option(owner, mixing_weight)
        options["comm"] = comm = options.get("comm") or get_communicator()
        self.graphs = resolve_graphs(owner, topology, comm.world_size)
        super().__init__(model, optimizer, **options)
        self._check_agreement(owner)
        self.plans = self._make_plans()
        self.communications = self.exchanges = 0
        self.dropped_neighbours = 0  # received states left out: not finite
        self.last_active: list[int] = []
        self.last_peers: list[int] = []
        self._generator = torch.Generator().manual_seed(seed)
        self._send = FlatBuffer(self._state)

    def _agreement_key(self) -> list[float]:
        """Numbers that every worker must share (extended by subclasses)."""
        return [float(len(self.graphs)), *(float(g.fingerprint) for g in self.graphs),
                self.budget, float(self.period), float(self.seed),
                {None: -1.0, "max-degree": -2.0}.get(self.mixing_weight, self.mixing_weight)]

    def _check_agreement(self, owner: str) -> None:
        if self.world_size == 1:
            return
        # On the state's device: NCCL gathers CUDA tensors only.
        key = torch.tensor(self._agreement_key(), dtype=torch.float64, device=self._device())
        with self.comm.category("init"):
            keys = self.comm.all_gather(key)
        differ = [r for r in range(self.world_size) if not torch.equal(keys[r], key)]
        if differ:
            graphs = ", ".join(g.name for g in self.graphs)
            raise ValueError(f"{owner}: workers {differ} were given other graphs, budget, "
                             f"period, seed or weights than worker {self.rank} ({graphs}, "
                             f"budget={self.budget}, period={self.period}, seed={self.seed}, "
                             f"mixing_weight={self.mixing_weight!r}); all workers must pass "
                             "the same ones")

    def _make_plans(self) -> list[GraphPlan]:
        """Matchings locally; probabilities and weights from rank 0 (broadcast)."""
        sizes = [len(g.matchings) for g in self.graphs]
        numbers = torch.zeros(sum(sizes) + len(sizes), dtype=torch.float64,
                              device=self._device())  # NCCL broadcasts CUDA tensors only
        if self.rank == 0:
            values: list[float] = []
            for g in self.graphs:
                probabilities, weight = _solve(g, self.budget)
                if self.mixing_weight == "max-degree":
                    weight = 1.0 / (1 + max(g.degrees)) if g.matchings else 0.0
                elif self.mixing_weight is not None:
                    weight = float(self.mixing_weight)
                values += [*probabilities, weight]
            numbers.copy_(torch.tensor(values, dtype=torch.float64))
        if self.world_size > 1:
            with self.comm.category("init"):
                self.comm.broadcast_(numbers, src=0)
        pieces = numbers.split([m + 1 for m in sizes])  # each graph's probabilities, weight
        return [GraphPlan(g, g.partners(self.rank), p[:-1].tolist(), float(p[-1]))
                for g, p in zip(self.graphs, pieces)]

    def _after_step(self, loss: torch.Tensor | float | None) -> None:
        if self.steps % self.period == 0:
            self._communicate()

    def _activate(self, plan: GraphPlan) -> list[int]:
        """Indices of this communication's active matchings, the same on every worker."""
        if all(p == 1.0 for p in plan.probabilities):  # no random draw needed
            return list(range(len(plan.probabilities)))
        draws = torch.rand(len(plan.probabilities), generator=self._generator, dtype=torch.float64)
        return [j for j, p in enumerate(plan.probabilities) if float(draws[j]) < p]

    def _communicate(self) -> None:
        plan = self.plans[self.communications % len(self.plans)]  # graphs in turn
        self.communications += 1
        self.last_active = active = self._activate(plan)
        self.rounds += bool(active)
        self.last_peers = peers = [p for p in (plan.partners[j] for j in active) if p is not None]
        if not peers:  # no active neighbour: nothing to do this time
            return
        self._send.copy_from(self._state)
        mine = self._send.buffers
        per_buffer = [self.comm.exchange_many(buffer, peers) for buffer in mine]
        received = {peer: [got[k] for got in per_buffer] for k, peer in enumerate(peers)}
        self.exchanges += len(peers)
        self._share(peers)
        finite = finite_each([mine, *received.values()])  # one synchronisation
        if not all(finite):
            healthy = {p: got for (p, got), ok in zip(received.items(), finite[1:]) if ok}
            self.dropped_neighbours += len(received) - len(healthy)
            if not finite[0]:
                self._recover(healthy, plan, active)
                return
            received = healthy
        self._combine(mine, received, plan.weight)
        self._send.copy_to(self._state)

    def _share(self, peers: list[int]) -> None:
        """Exchange what else the method sends its active neighbours (AL-DSGD: score, degree)."""

    def _recover(self, healthy: dict[int, list[torch.Tensor]], plan: GraphPlan,
                 active: list[int]) -> None:
        """This worker's state is not finite: reset it to the mean of ``healthy``. With no
        finite neighbour state it stays as it is, unless the active graph is complete:
        then every worker saw every state non-finite, and all raise ``DivergedError``."""
        if not healthy:
            edges = sum(len(plan.graph.matchings[j]) for j in active)
            if edges == self.world_size * (self.world_size - 1) // 2:
                raise self._diverged_error()
            return
        first, *others = healthy.values()
        mean = self._send.buffers
        torch._foreach_copy_(mean, first)
        for state in others:
            torch._foreach_add_(mean, state)
        torch._foreach_div_(mean, float(len(healthy)))
        self._reset_to(self._send.views)

    def _combine(self, mine: list[torch.Tensor], received: dict[int, list[torch.Tensor]],
                 weight: float) -> None:
        """The new state, into ``mine`` (finite), from it and the finite states ``received``."""
        mix_(mine, list(received.values()), weight)

    def spread(self) -> float | None:
        """Mean over workers of ``||x_i - x_bar||`` (collective: two ``"eval"`` all-reduces)."""
        center = FlatBuffer(self._state).copy_from(self._state)
        with torch.no_grad(), self.comm.category("eval"):
            for buffer in center.buffers:
                self.comm.all_reduce_(buffer, op="mean")
            squared = torch.zeros((), dtype=torch.float64, device=self._device())
            for x, c in zip(self._state, center.views):
                squared += (x.double() - c.double()).pow(2).sum()
            distance = squared.sqrt().reshape(1)
            self.comm.all_reduce_(distance, op="mean")
        return float(distance)

    def _report_fields(self) -> dict[str, Any]:
        fields = super()._report_fields()
        fields["details"].update(graphs=[g.name for g in self.graphs], budget=self.budget)
        return fields

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"sampler": self._generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._generator.set_state(state["sampler"])


@functools.lru_cache(maxsize=64)
def _solve(graph: Topology, budget: float) -> tuple[tuple[float, ...], float]:
    """MATCHA's probabilities and weight of ``graph`` (cached: simulated workers share it)."""
    if not graph.matchings:
        return (), 0.0
    if budget == 1.0:
        return (1.0,) * len(graph.matchings), graph.mixing_weight()
    laplacians = graph.matching_laplacians()
    probabilities = topo.activation_probabilities(laplacians, budget)
    weight = topo.matcha_mixing_weight(laplacians, probabilities)
    assert math.isfinite(weight) and weight >= 0
    return tuple(probabilities), weight
