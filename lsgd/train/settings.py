"""The groups of a run's settings (:class:`~lsgd.train.config.TrainConfig`): each a dataclass
whose fields are flags of ``lsgd train`` and keys of a TOML file, as flat names (``--lr``,
``lr = 0.1``), and a field of the run's configuration as a whole (``cfg.optim.lr``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lsgd.train.faults import FIELDS

SCHEDULES = ("constant", "step", "minutes", "plateau", "cosine")


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


def group(cls: type) -> Any:
    """A field of the run's configuration that holds the group of settings ``cls``."""
    return field(default_factory=cls, metadata={"group": True, "help": cls.__doc__})


@dataclass
class LanguageSettings:
    """The language model's shape and evaluation (``--dataset kjv`` or ``text``)."""

    context: int = _f(128, "language models: tokens (bytes) per window the model attends over")
    layers: int = _f(4, "language models: transformer blocks")
    width: int = _f(128, "language models: width of the residual stream")
    heads: int = _f(4, "language models: attention heads (divides --width)")
    eval_tokens: int = _f(65536, "language models: validation bytes predicted at each evaluation, "
                                 "in windows spread over the validation text (0: all of it)")


@dataclass
class OptimizerSettings:
    """The inner optimizer of every worker and its learning-rate schedule."""

    optimizer: str = _f("sgd", "inner optimizer of every worker (text: adamw); muon: Muon on "
                                "the 2-D weights outside embeddings, AdamW on the rest",
                        choices=("sgd", "adam", "adamw", "lars", "muon"))
    lr: float = _f(0.05, "learning rate (text: 0.001)")
    momentum: float = _f(0.9, "momentum (SGD, LARS)")
    nesterov: bool = _f(True, "Nesterov momentum (SGD, LARS)")
    weight_decay: float = _f(1e-4, "weight decay (text: 0.1)")
    trust_coefficient: float = _f(0.001, "LARS trust coefficient eta: a layer's local lr is "
                                         "eta * ||w|| / (||g|| + weight_decay * ||w||) "
                                         "(1 where ||w|| or ||g|| is 0)")
    schedule: str = _f("constant", "constant; step (drop at --drops epochs); minutes (drop at "
                                   "--drops minutes); plateau (drop when the center's test loss "
                                   "stops improving); cosine (from the lr down to a tenth of "
                                   "it over the budget: --steps, --epochs or --minutes) "
                                   "(text: cosine)", choices=SCHEDULES)
    drops: list[float] = _f((), "epochs or minutes at which the lr is multiplied by --drop-factor")
    drop_factor: float = _f(0.1, "factor of each drop")
    patience: int = _f(3, "plateau: evaluations without improvement before a drop")
    warmup_epochs: float = _f(0.0, "linear warm-up from 0 over this many epochs (text: 0.1)")


@dataclass
class EvaluationSettings:
    """When and what a run evaluates, and the target that stops it."""

    eval_every: str = _f("auto", "evaluate every N steps, or every Ns seconds (e.g. 30s); "
                                 "auto: 10 times per run")
    eval_leader: bool = _f(True, "also test the leader at each evaluation (one more broadcast "
                                 "of its state, and one more pass over the test set)")
    eval_workers: bool = _f(False, "also evaluate every worker's own model (columns "
                                   "workerR_accuracy and workerR_loss)")
    bn_recalibrate: int = _f(0, "refresh the center's BatchNorm statistics with N batches")
    target: float | None = _f(None, "stop once the center reaches this at an evaluation: a "
                                    "test accuracy in (0, 1] for images, a validation loss "
                                    "in nats per byte for text (summary.json says when)")


@dataclass
class QuorumSettings:
    """The settings of ``--elastic``: the quorum, its timeouts, a node's place under torchrun."""

    min_workers: int = _f(1, "--elastic: rounds with fewer nodes are not committed")
    join_timeout: float = _f(30.0, "--elastic: seconds a round waits for a live worker that has "
                                   "not come to it (a slow or hung one) before going on without")
    heartbeat_timeout: float = _f(2.0, "--elastic: seconds without a heartbeat after which a "
                                       "worker is left out of the rounds (dead); a restarted "
                                       "one that beats again within them is waited for")
    lighthouse: str | None = _f(None, "--elastic under torchrun, one per node: the torchft "
                                      "lighthouse's address, http://HOST:29510")
    slot: int | None = _f(None, "--elastic under torchrun: this node's number, 0 .. nodes - 1 "
                                "(kept across restarts)")
    address: str | None = _f(None, "--elastic under torchrun: this node's address, which its "
                                   "servers advertise to the others (default: its hostname)")


@dataclass
class FaultSettings:
    """Faults injected on purpose, checkpoints, and restarts after a failure."""

    fault: list[str] = _f((), "inject a fault, once per run (repeatable): " + ", ".join(
        ":".join([kind, *map(str.upper, fields)]) for kind, fields in FIELDS.items())
        + " (STEP may be @SECOND); logged in faults.csv")
    chaos: int | None = _f(None, "draw a reproducible fault schedule from this seed "
                                 "(--chaos-mtbf, --chaos-kinds), added to --fault")
    chaos_mtbf: float = _f(30.0, "--chaos: mean seconds between faults")
    chaos_kinds: str = _f("kill,segv,stop,kill-node,link-down,slow",
                          "--chaos: the kinds drawn, comma-separated")
    restarts: int = _f(0, "restart the workers up to N times after a failure (a worker "
                          "killed, a node lost), from the latest checkpoint; under torchrun "
                          "use its --max-restarts instead")
    checkpoint_every: int = _f(0, "steps between checkpoints (0: at the end); the last two kept")


@dataclass
class OutputSettings:
    """What a run prints and writes besides its results."""

    quiet: bool = _f(False, "no progress bar, no line per evaluation")
    dry_run: bool = _f(False, "check and print the resolved settings, then exit without "
                              "loading data or training")
    tensorboard: bool = _f(False, "also log to TensorBoard in the run folder")
