"""Each method's options, declared once as a dataclass (:data:`OPTIONS`): type, default,
range or choices, and help. From them come ``lsgd train``'s flags and checks, a run's
``config.toml`` and the strategy's keywords (:meth:`MethodOptions.knobs`). Nothing here
imports torch: a bad flag is refused before torch is loaded.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lsgd.names import BN_MODES, CODECS, LEADERS, MERGES, METHODS, OUTERS, ROUND_CODECS, \
    SCOPE_PULLS, SPARSE_VALUES

#: Ranges as (low, high, low allowed, high allowed).
FRACTION = (0.0, 1.0, True, True)
OPEN_FRACTION = (0.0, 1.0, False, True)
MOMENTUM = (0.0, 1.0, True, False)
POSITIVE = (0.0, math.inf, False, False)
COUNT = (1, 10**9, True, True)  # a positive integer
NON_NEGATIVE = (0, 10**9, True, True)


def option(default: Any, help: str, *, choices: tuple[str, ...] | None = None,
           range: tuple[float, float, bool, bool] | None = None, keyword: str | None = None,
           flags: tuple[str, ...] = (), auto: Any = None) -> Any:
    """A method option: its default, help and checks; ``keyword`` is the strategy's name
    for it where that differs, ``auto`` the value that leaves it to the strategy."""
    return field(default=default, metadata={"help": help, "choices": choices, "range": range,
                                            "keyword": keyword, "flags": flags, "auto": auto})


@dataclass
class MethodOptions:
    """What every method takes."""

    bn_buffers: str = option("auto", "BatchNorm running statistics at a round: average "
                             "(every worker's averaged), pull (like parameters), local, "
                             "broadcast (allreduce); auto: the method's default",
                             choices=("auto", *BN_MODES), auto="auto")
    #: The run's settings the method needs (not defaults: a run that gives another fails).
    requires: ClassVar[dict[str, Any]] = {}
    #: task -> setting -> value: the method's tuned point (:mod:`lsgd.train.tuned`).
    tuned: ClassVar[dict[str, dict[str, Any]]] = {}

    def knobs(self, seed: int, groups: int) -> dict[str, Any]:
        """The strategy's keyword arguments: every option not ``None`` or ``auto``, by
        its keyword (a run's ``seed`` and ``groups`` for the methods that need them)."""
        return {f.metadata["keyword"] or f.name: getattr(self, f.name)
                for f in dataclasses.fields(self)
                if getattr(self, f.name) not in (None, f.metadata["auto"])}

    def layout_errors(self, groups: int) -> list[str]:
        """What the options cannot do with the run's ``groups`` of workers (none here)."""
        return []


@dataclass
class AllReduceOptions(MethodOptions):
    """All-reduce data parallel: torch's gradient hooks."""

    tuned: ClassVar[dict[str, dict[str, Any]]] = {"text": {"lr": 0.002}}

    compress: str = option("none", "wire format: none (float32) or bf16 (PyTorch's bf16 "
                           "gradient hook)", choices=("none", "bf16"))
    powersgd: int = option(0, "average the gradients with PyTorch's PowerSGD hook of this "
                           "rank (0: off; worker processes only)", range=NON_NEGATIVE)
    powersgd_warmup: int = option(10, "--powersgd: steps of plain all-reduce before PowerSGD "
                                  "compresses (torch's start_powerSGD_iter, >= 2)",
                                  range=NON_NEGATIVE)


@dataclass
class WorkerOptions(MethodOptions):
    """Every method whose workers keep models of their own."""

    init: str = option("broadcast", "broadcast (all start from rank 0) or independent",
                       choices=("broadcast", "independent"))


@dataclass
class RoundOptions(WorkerOptions):
    """The periodic methods' rounds: how often, hidden behind steps, sent in parts."""

    period: int = option(16, "steps between rounds", range=COUNT)
    overlap: int = option(0, "steps a round's transfer runs behind local training before "
                          "it is applied (0: the round blocks); below --period",
                          range=NON_NEGATIVE)
    fragments: int = option(1, "send the state in F parts, one every --period/F steps (F "
                            "divides --period)", range=COUNT)


@dataclass
class AsyncOptions(MethodOptions):
    """The methods that can run asynchronous rounds."""

    asynchronous: bool = option(False, "asynchronous rounds, due by the total steps of all "
                                "workers, so fast workers do not wait for slow ones",
                                flags=("--async",))


@dataclass
class CodecOptions(RoundOptions):
    """An averaging round's message: its wire format and the error feedback."""

    compress: str = option("none", "wire format of the rounds: none (float32), bf16, int8 "
                           "(blocks of 256 values with a scale each), all-reduced; 2bit "
                           "(sign and one magnitude bit) or topk (the top --density of every "
                           "chunk), all-gathered; what is sent is the difference from a "
                           "reference every worker holds", choices=ROUND_CODECS)
    error_feedback: bool = option(False, "with --compress: each worker adds what the codec "
                                  "dropped of its last message into its next one")
    feedback_decay: float | None = option(None, "beta: the error feedback's accumulator "
                                          "decays by it each round (default 1)",
                                          range=FRACTION)
    density: float | None = option(None, "--compress topk: the share of each chunk's entries "
                                   "a message keeps (default 0.01)", range=OPEN_FRACTION)
    chunk: int | None = option(None, "--compress topk or 2bit: values per chunk (default "
                               "4096)", range=COUNT)
    values: str | None = option(None, "--compress topk: the kept values' format (default "
                                "float32)", choices=SPARSE_VALUES)


@dataclass
class LeaderOptions(MethodOptions):
    """The force of the round's leader (the lowest recent loss) on an averaging method."""

    leader: str = option("none", "none; weights (the round's mean counts the leader 1 + "
                         "--leader-weight times); pull (after the round the global state "
                         "moves --leader-pull of the way to the leader's)", choices=LEADERS)
    leader_weight: float | None = option(None, "--leader weights: c >= 0, the leader's extra "
                                         "count in the mean (default 1)",
                                         range=(0.0, math.inf, True, False))
    leader_pull: float | None = option(None, "--leader pull: the fraction of the way from the "
                                       "round's global state to the leader's (default 0.5)",
                                       range=FRACTION)


@dataclass
class MergeOptions(MethodOptions):
    """How an average that was in flight meets the steps taken meanwhile."""

    merge: str = option("auto", "with --overlap: keep the steps taken meanwhile (added on "
                        "top), replace them (as torchft), or mix (half of each); auto: the "
                        "method's own", choices=("auto", *MERGES), auto="auto")


@dataclass
class LSGDOptions(AsyncOptions, RoundOptions):
    """LSGD: every worker pulled toward the leader (the best recent loss)."""

    compress: str = option("none", "wire format of the leader's broadcast: none, bf16, int8",
                           choices=CODECS)
    pull: float = option(0.1, "lambda: fraction of the way to the leader at a round",
                         range=FRACTION)
    scope: float = option(0.01, "gamma: every-step pull of gamma/period toward the leader",
                          range=FRACTION)
    pull_global: float | None = option(None, "lambda_G (several groups; default: pull)",
                                       range=FRACTION)
    scope_global: float | None = option(None, "gamma_G (several groups; default: scope)",
                                        range=FRACTION)
    global_period: int | None = option(None, "tau_G (default: 4 * period; period when each "
                                       "group is one worker)", range=COUNT)
    scope_pull: str = option("after-step", "every-step pull: after-step (after the "
                             "optimizer step; the leader exempt) or algorithm-1 (the paper's: "
                             "at the gradient's point, the leader too)", choices=SCOPE_PULLS)
    leader_momentum: float = option(0.0, "Nesterov momentum mu of the pull toward the "
                                    "leader (0: plain LSGD)", range=MOMENTUM)
    pull_decay_rounds: int = option(0, "R: round r pulls pull + (1 - pull) max(0, 1 - r/R), "
                                    "a full copy of the leader at first; 0: constant",
                                    range=NON_NEGATIVE)
    leader_window: int = option(10, "a worker's score is the mean of its last k losses",
                                range=COUNT)
    election: str = option("auto", "gather the scores at the round (round) or a step before "
                           "(early); auto: early if hidden or fragmented",
                           choices=("auto", "round", "early"), auto="auto")
    tuned: ClassVar[dict[str, dict[str, Any]]] = {"text": {"lr": 0.002}}

    def layout_errors(self, groups: int) -> list[str]:
        """With one group LSGD has one level, set by ``pull``, ``scope`` and ``period``: a
        different ``--*-global`` value is a mistake."""
        return [f"--{global_.replace('_', '-')} {getattr(self, global_)}: with one group LSGD "
                f"has a single leader, set by --{plain} {getattr(self, plain)}; drop "
                f"--{global_.replace('_', '-')}, or use several groups (--groups N, or one "
                "group per node under torchrun)"
                for plain, global_ in (("pull", "pull_global"), ("scope", "scope_global"),
                                       ("period", "global_period"))
                if groups == 1 and getattr(self, global_) not in (None, getattr(self, plain))]

    def knobs(self, seed: int, groups: int) -> dict[str, Any]:
        """With one group LSGD has one level: ``pull``, ``scope`` and ``period`` set it."""
        knobs = super().knobs(seed, groups)
        for name in ("pull_global", "scope_global", "global_period") if groups == 1 else ():
            knobs.pop(name, None)
        return knobs


@dataclass
class EASGDOptions(AsyncOptions, CodecOptions):
    """EASGD: elastic averaging with a center variable."""

    moving_rate: float = option(0.43, "beta: the elastic force's moving rate", range=FRACTION)


@dataclass
class LocalSGDOptions(AsyncOptions, LeaderOptions, MergeOptions, CodecOptions):
    """Local SGD: the workers' models averaged every period."""

    hierarchical: bool = option(False, "average inside groups, then across")
    global_period: int | None = option(None, "--hierarchical: steps between averages across "
                                       "groups (default: 4 * period)", range=COUNT)


@dataclass
class OuterOptions(LeaderOptions, CodecOptions):
    """The outer step of DiLoCo's family on the round's pseudo-gradient."""

    outer_lr: float = option(0.7, "learning rate of the outer Nesterov SGD", range=POSITIVE)
    outer_momentum: float = option(0.9, "Nesterov momentum of the outer SGD (0: plain SGD)",
                                   range=MOMENTUM)


@dataclass
class DiLoCoOptions(MergeOptions, OuterOptions):
    """DiLoCo: an outer Nesterov step on the mean of the workers' progress."""

    outer: str = option("standard", "standard (the outer step on the round's mean) or eager "
                        "(each worker steps at once on its own pseudo-gradient and the last "
                        "round's mean, whose all-reduce runs behind the next period)",
                        choices=OUTERS, auto="standard")
    tuned: ClassVar[dict[str, dict[str, Any]]] = {"text": {"outer_lr": 0.35, "lr": 0.002},
                                                  "cnn7": {"outer_lr": 0.35}}


@dataclass
class MuLoCoOptions(OuterOptions):
    """MuLoCo: DiLoCo with Muon inside and error-corrected 2-bit messages."""

    compress: str = option("2bit", CodecOptions.__dataclass_fields__["compress"].metadata[
        "help"], choices=ROUND_CODECS)
    error_feedback: bool = option(True, "each worker adds what the codec dropped of its last "
                                  "message into its next one")
    requires: ClassVar[dict[str, Any]] = {"optimizer": "muon"}
    tuned: ClassVar[dict[str, dict[str, Any]]] = {"text": {"lr": 0.004}}


@dataclass
class SparseLoCoOptions(LeaderOptions, RoundOptions):
    """SparseLoCo: the top-k of every chunk of the pseudo-gradient, error-corrected."""

    outer_lr: float = option(1.0, "learning rate of the outer step", range=POSITIVE)
    feedback_decay: float = option(0.95, "beta: the error feedback's decay each round",
                                   range=FRACTION)
    density: float = option(0.1, "the share of each chunk's entries a message keeps",
                            range=OPEN_FRACTION)
    chunk: int = option(4096, "values per chunk", range=COUNT)
    values: str = option("2bit", "the kept values' format", choices=SPARSE_VALUES)


@dataclass
class DeMoOptions(WorkerOptions):
    """DeMo: every step, the top DCT coefficients of every block of each momentum."""

    overlap: int = option(0, "1: a step's gather lands at the next step (0: it blocks)",
                          range=(0, 1, True, True))
    feedback_decay: float = option(0.999, "its momentum's decay", range=FRACTION,
                                   keyword="decay")
    topk: int = option(32, "DCT coefficients each worker sends per block", range=COUNT)
    chunk: int = option(64, "the largest side of a DCT block", range=COUNT)
    values: str = option("float32", "the kept values' format", choices=SPARSE_VALUES)
    requires: ClassVar[dict[str, Any]] = {"optimizer": "sgd", "momentum": 0.0,
                                          "nesterov": False}


@dataclass
class GossipOptions(WorkerOptions):
    """The decentralized methods: neighbours average along a graph."""

    topology: str = option("ring", "communication graph: ring, torus, complete, erdos-renyi, "
                           "with options as KIND:key=value,... (ring:stride=3), or an "
                           "edge-list file of 'i j' lines")
    graphs: list[str] = option((), "several graphs used in turn (dynamic graphs), each as "
                               "--topology")
    gossip_period: int = option(1, "steps between neighbour exchanges", range=COUNT,
                                keyword="period")
    mixing_weight: str = option("auto", "mixing weight a: auto (the method's own), "
                                "max-degree, or a number in (0, 1]", auto="auto")

    def knobs(self, seed: int, groups: int) -> dict[str, Any]:
        """The graphs as their specs (the strategy reads them), the weight as a number."""
        knobs = super().knobs(seed, groups)
        knobs["topology"] = list(knobs.pop("graphs", ())) or knobs["topology"]
        if knobs.get("mixing_weight") not in (None, "max-degree"):
            knobs["mixing_weight"] = float(knobs["mixing_weight"])
        return knobs


@dataclass
class MATCHAOptions(GossipOptions):
    """MATCHA: matchings of the graph drawn within a communication budget."""

    budget: float = option(0.5, "communication budget C_b", range=OPEN_FRACTION)

    def knobs(self, seed: int, groups: int) -> dict[str, Any]:
        return {**super().knobs(seed, groups), "seed": seed}


@dataclass
class ALDSGDOptions(MATCHAOptions):
    """AL-DSGD: gossip weighted toward the best and the best-connected neighbours."""

    budget: float = option(1.0, "communication budget C_b", range=OPEN_FRACTION)
    c_b: float = option(0.3, "weight of the best-scoring neighbour", range=FRACTION,
                        keyword="c_B")
    c_d: float = option(0.1, "weight of the highest-degree neighbour", range=FRACTION,
                        keyword="c_D")
    p_b: float = option(0.1, "corrective pull toward the best-scoring neighbour",
                        range=FRACTION, keyword="p_B")
    p_d: float = option(0.1, "corrective pull toward the highest-degree neighbour",
                        range=FRACTION, keyword="p_D")
    leader_window: int = option(10, "a worker's score is the mean of its last k losses",
                                range=COUNT)


#: Every method's options, by its command-line name, in :data:`lsgd.names.METHODS`'s order.
OPTIONS: dict[str, type[MethodOptions]] = {
    "lsgd": LSGDOptions, "easgd": EASGDOptions, "local-sgd": LocalSGDOptions,
    "allreduce": AllReduceOptions, "sgd": WorkerOptions, "dpsgd": GossipOptions,
    "matcha": MATCHAOptions, "al-dsgd": ALDSGDOptions, "diloco": DiLoCoOptions,
    "sparseloco": SparseLoCoOptions, "demo": DeMoOptions, "muloco": MuLoCoOptions}
assert tuple(OPTIONS) == METHODS, "every method declares its options, in METHODS' order"


def option_names(method: str) -> set[str]:
    """The options ``method`` takes (none for a method without declarations)."""
    return {f.name for f in dataclasses.fields(OPTIONS[method])} if method in OPTIONS else set()


def declarations() -> dict[str, list[tuple[str, dataclasses.Field[Any]]]]:
    """Option name -> (method, its declaration) for every method that takes it."""
    found: dict[str, list[tuple[str, dataclasses.Field[Any]]]] = {}
    for method, cls in OPTIONS.items():
        for f in dataclasses.fields(cls):
            found.setdefault(f.name, []).append((method, f))
    return found
