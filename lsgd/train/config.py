"""The configuration of one training run, as a typed dataclass.

Every field has a help text (shown by ``lsgd train --help``). A run's config
comes from, in increasing priority: the defaults here, a TOML file
(``--config run.toml``, keys as the field names with ``-`` or ``_``), and the
command line. The resolved config is saved as ``config.toml`` in the run folder.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from lsgd.train.conform import conform_to
from lsgd.method_options import OPTIONS, MethodOptions, declarations
from lsgd.names import METHODS, REPLICAS
from lsgd.tasks.headline import is_language
from lsgd.train import tuned
from lsgd.train.checks import config_errors, option_errors
from lsgd.train.ranges import EVAL_EVERY, flag

ALIASES = {"async": "asynchronous"}  # TOML keys accepted besides the field names
OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "muon")
SCHEDULES = ("constant", "step", "minutes", "plateau", "cosine")
BACKENDS = ("processes", "threads", "auto")
DEVICES = ("auto", "cpu", "cuda")
def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """Everything that defines a run of ``lsgd train``."""

    # What to train
    method: str = _f("lsgd", "distributed method; several, comma-separated (lsgd,allreduce), "
                             "train one run each, side by side, into --out/METHOD, then "
                             "print a table and draw comparison.png", choices=METHODS)
    model: str = _f("cnn7", "model: for images cnn7, resnet20, vgg16, wrn-28-10 (any "
                            "wrn-D-K), resnet50, mlp; for text gpt (lsgd's transformer) or "
                            "hf-gpt2 (Hugging Face's GPT-2 from a config: pip install "
                            "'lsgd[hf]')")
    dataset: str = _f("fashion-mnist",
                      "dataset: images fashion-mnist, cifar10, cifar100, imagenet, digits, "
                      "synthetic; text kjv (the King James Bible, Debian's bible-kjv) or "
                      "text (--data-dir FILE_OR_FOLDER of UTF-8 text)")
    data_dir: str | None = _f(None, "dataset folder (default: $LSGD_DATA, else the Debian "
                                    "package's folder for Fashion-MNIST); for --dataset "
                                    "text, the UTF-8 file or folder of files")
    augment: str = _f("auto", "augmentation preset (auto: the papers' choice for the dataset "
                              "and model; none to turn off)")
    # Language models (--dataset kjv or text)
    context: int = _f(128, "language models: tokens (bytes) a window holds and the model "
                           "attends over")
    layers: int = _f(4, "language models: transformer blocks")
    width: int = _f(128, "language models: width of the residual stream")
    heads: int = _f(4, "language models: attention heads (divides --width)")
    eval_tokens: int = _f(65536, "language models: validation bytes predicted at each "
                                 "evaluation, in windows spread over the validation text "
                                 "(0: all of it)")
    # Workers
    workers: int = _f(4, "number of workers W")
    groups: int = _f(1, "groups (nodes) of workers; several groups make LSGD multi-leader")
    replica: str = _f("process", "what the method sees as one worker: every process, or "
                                 "(node) the processes of each group together, stepping as "
                                 "one replica with their gradients averaged every step (DDP "
                                 "over the node) while the method's rounds run across nodes",
                      choices=REPLICAS)
    backend: str = _f("processes", "local workers as gloo/NCCL processes, or as threads of "
                                   "the in-process simulator; auto: processes, except with "
                                   "--link on a machine that cannot shape links (no root or "
                                   "iproute2), where the simulator models the link",
                      choices=BACKENDS)
    device: str = _f("auto", "cpu, cuda (one GPU per worker), or auto", choices=DEVICES)
    timeout: float = _f(300.0, "seconds a collective may wait before the run fails")
    link: str | None = _f(None, "the link between nodes (groups), RATE[,LATENCY] such as "
                                "100mbit, 1gbit or 20mbit,5ms; with processes every group "
                                "is a node in a network namespace of its own behind a "
                                "link the kernel shapes to RATE (root and iproute2; a "
                                "latency needs netem); with --backend threads a modeled "
                                "link on the simulator's clock (measured compute plus "
                                "modeled transfers)")
    step_seconds: float | None = _f(None, "with --backend threads and --link: the seconds each "
                                          "local step costs on the simulator's clock, instead "
                                          "of the compute it measured (a pace independent of "
                                          "this machine's speed and load; --straggle "
                                          "multiplies it)")
    straggle: list[str] = _f((), "RANK:FACTOR makes that worker's steps FACTOR times slower "
                                 "(it sleeps in proportion to its compute; with --backend "
                                 "threads, on the simulator's virtual clock); repeatable")
    # Budget (the first one reached stops the run)
    epochs: float | None = _f(None, "passes over the training set (per worker: over its shard; "
                                    "with --async, the workers' mean)")
    steps: int | None = _f(None, "local steps per worker (with --async, the workers' mean)")
    minutes: float | None = _f(None, "wall-clock minutes")
    # Inner optimizer
    optimizer: str = _f("sgd", "inner optimizer of every worker (text: adamw); muon: Muon on "
                                "the 2-D weights outside embeddings, AdamW on the rest",
                        choices=OPTIMIZERS)
    lr: float = _f(0.05, "learning rate (text: 0.001)")
    momentum: float = _f(0.9, "momentum (SGD, LARS)")
    nesterov: bool = _f(True, "Nesterov momentum (SGD, LARS)")
    weight_decay: float = _f(1e-4, "weight decay (text: 0.1)")
    trust_coefficient: float = _f(0.001, "LARS trust coefficient eta: a layer's local lr is "
                                         "eta * ||w|| / (||g|| + weight_decay * ||w||) "
                                         "(1 where ||w|| or ||g|| is 0)")
    batch_size: int = _f(128, "batch size per worker: images, or text windows (text: 16)")
    # Learning-rate schedule
    schedule: str = _f("constant", "constant; step (drop at --drops epochs); minutes (drop at "
                                   "--drops minutes); plateau (drop when the center's test loss "
                                   "stops improving); cosine (from the lr down to a tenth of "
                                   "it over the budget: --steps, --epochs or --minutes) "
                                   "(text: cosine)", choices=SCHEDULES)
    drops: list[float] = _f((), "epochs or minutes at which the lr is multiplied by --drop-factor")
    drop_factor: float = _f(0.1, "factor of each drop")
    patience: int = _f(3, "plateau: evaluations without improvement before a drop")
    warmup_epochs: float = _f(0.0, "linear warm-up from 0 over this many epochs (text: 0.1)")
    # The method's own options (lsgd.method_options), by their flags
    options: Any = _f(None, "the method's options: lsgd.method_options.OPTIONS[method], "
                            "given on the command line by their own flags", cli=False)
    # Evaluation and output
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
    checkpoint_every: int = _f(0, "steps between checkpoints (0: only at the end); the last "
                                  "two are kept")
    restarts: int = _f(0, "restart the workers up to N times after a failure (a worker "
                          "killed, a node lost), from the latest checkpoint; under torchrun "
                          "use its --max-restarts instead")
    elastic: bool = _f(False, "keep training when workers fail (torchft, pip install "
                              "'lsgd[torchft]'): the others go on without a restart, and a "
                              "worker started again (--restarts) rejoins from a live one; "
                              "lsgd, diloco, local-sgd and easgd; nodes: --groups, or one "
                              "per worker")
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
    fault: list[str] = _f((), "inject a fault, once per run (repeatable): kill:RANK:STEP, "
                              "nan:RANK:STEP, segv:RANK:STEP, stop:RANK:STEP:SECONDS, "
                              "kill-node:NODE:STEP, corrupt-checkpoint:STEP, "
                              "link-down:NODE:SECOND:SECONDS, slow:NODE:SECOND:RATE:SECONDS "
                              "(STEP may be @SECOND); logged in faults.csv")
    chaos: int | None = _f(None, "draw a reproducible fault schedule from this seed "
                                 "(--chaos-mtbf, --chaos-kinds), added to --fault")
    chaos_mtbf: float = _f(30.0, "--chaos: mean seconds between faults")
    chaos_kinds: str = _f("kill,segv,stop,kill-node,link-down,slow",
                          "--chaos: the kinds drawn, comma-separated")
    out: str | None = _f(None, "run folder (default runs/METHOD-DATASET-Ww)")
    resume: str | None = _f(None, "continue the run in this folder where it stopped")
    seed: int = _f(0, "random seed")
    quiet: bool = _f(False, "no progress bar, no line per evaluation")
    dry_run: bool = _f(False, "check and print the resolved settings, then exit without "
                              "loading data or training")
    tensorboard: bool = _f(False, "also log to TensorBoard in the run folder")

    def __post_init__(self) -> None:
        """Every value as its field's type (see :func:`conform`), or ``ValueError`` listing
        the values of a wrong type; no ``options``: the method's defaults."""
        errors: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            try:
                setattr(self, f.name, conform(f.name, value))
            except TypeError as expected:
                errors.append(f"--{flag(f.name)} {value!r}: expected {expected}")
        if errors:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))
        self.fault = [str(v) for v in self.fault]
        if self.options is None and self.method in OPTIONS:
            self.options = OPTIONS[self.method]()

    def option(self, name: str, default: Any = None) -> Any:
        """The method's option ``name``, or ``default`` if the method has none of that name."""
        if isinstance(self.options, dict):  # an unknown method's, being refused
            return self.options.get(name, default)
        return getattr(self.options, name, default)

    # -- derived -------------------------------------------------------------
    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.method}-{self.dataset}-{self.workers}w")

    @property
    def replicas(self) -> int:
        """The workers the method sees: the processes, or with ``--replica node`` the groups."""
        return self.groups if self.replica == "node" else self.workers

    def eval_interval(self) -> tuple[str, float]:
        """``("steps", N)``, ``("seconds", S)`` or ``("auto", 0)`` (validated: N, S > 0)."""
        text = str(self.eval_every).strip()
        if text == "auto":
            return ("auto", 0.0)
        match = re.fullmatch(EVAL_EVERY, text)
        assert match, "validated"
        if match.group(1) is not None:
            return ("steps", float(match.group(1)))
        return ("seconds", float(match.group(2)))

    def straggler_factors(self) -> dict[int, float]:
        """``--straggle`` as ``{rank: factor}`` (validated by :meth:`validate`)."""
        factors = {}
        for item in self.straggle:
            rank, _, factor = item.partition(":")
            factors[int(rank)] = float(factor)
        return factors

    def step_times(self) -> dict[int, float] | None:
        """The simulator's step time per rank: ``--step-seconds`` (1.0 without it) times
        each ``--straggle`` factor; ``None`` (measured compute) when neither is given."""
        factors = self.straggler_factors()
        if self.step_seconds is None:
            return factors or None
        return {r: self.step_seconds * factors.get(r, 1.0) for r in range(self.workers)}

    def validate(self) -> None:
        """Raise ``ValueError`` listing every bad value at once (:mod:`lsgd.train.checks`)."""
        errors = [f"--{flag(f.name)} {getattr(self, f.name)!r}: choose one of "
                  f"{', '.join(f.metadata['choices'])}" for f in dataclasses.fields(self)
                  if f.metadata.get("choices") and getattr(self, f.name) is not None and
                  getattr(self, f.name) not in f.metadata["choices"]]
        errors += option_errors(self.method, self.options) + config_errors(self)
        if errors:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))

    def elastic_nodes(self) -> int:
        """An elastic run's nodes (torchft replica groups): ``groups`` when above 1, else
        one per worker."""
        return self.groups if self.groups > 1 else self.workers

    def budgets(self) -> dict[str, float]:
        """The budgets given; one epoch if none is."""
        given = {k: getattr(self, k) for k in ("epochs", "steps", "minutes")
                 if getattr(self, k) is not None}
        return given or {"epochs": 1.0}

    # -- TOML ----------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """Every setting by name, the method's options among them (as a TOML file holds them)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "options"}
        return values | ({f.name: getattr(self.options, f.name)
                          for f in dataclasses.fields(self.options)} if self.options else {})

    def to_toml(self) -> str:
        """The settings as TOML (written by ``tomli_w``); unset ones as comments."""
        values = self.settings()
        unset = [f"# {name} = (unset)" for name, value in values.items() if value is None]
        text = tomli_w.dumps({name: list(value) if isinstance(value, tuple) else value
                              for name, value in values.items() if value is not None})
        return text + "".join(line + "\n" for line in unset)


#: Every setting's type: the run's fields, and each option as its first method declares it.
_HINTS = {name: typing.get_type_hints(OPTIONS[found[0][0]])[name]
          for name, found in declarations().items()} | typing.get_type_hints(TrainConfig)


def conform(name: str, value: Any) -> Any:
    """``value`` as the field ``name`` holds it, or ``TypeError`` naming the type expected.

    From the field's type hint: an integer is also a number, a bool is neither; a
    number stands for its text where a string is expected (``eval-every = 200``,
    ``mixing-weight = 0.5``); a tuple is also a list.
    """
    return conform_to(_HINTS[name], value)


#: The defaults of a language-modelling run (``--dataset kjv`` or ``text``) where they
#: differ from an image run's: AdamW with warm-up and cosine decay, smaller batches.
TEXT_DEFAULTS: dict[str, Any] = {"optimizer": "adamw", "lr": 0.001, "weight_decay": 0.1,
                                 "batch_size": 16, "schedule": "cosine",
                                 "warmup_epochs": 0.1}


#: Settings lsgd no longer takes: the value that meant what leaving the setting out
#: means now (the config.toml of every run trained before its removal holds it, and is
#: read as if it did not), and what to write instead of any other value.
REMOVED: dict[str, tuple[Any, str]] = {"sync_buffers": (True, 'bn_buffers = "local"')}


def without_removed(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (keys as field names) without the removed settings at their old
    default (:data:`REMOVED`); ``ValueError`` naming what to write instead of any
    other value of one."""
    errors = [f"{name} = {tomli_w.dumps({'x': value})[4:].strip()} is no longer a setting; "
              f"write {REMOVED[name][1]} instead" for name, value in settings.items()
              if name in REMOVED and (type(value), value) != (type(old := REMOVED[name][0]), old)]
    if errors:
        raise ValueError("\n  ".join(errors))
    return {name: value for name, value in settings.items() if name not in REMOVED}


def make_config(settings: dict[str, Any], siblings: tuple[str, ...] = (),
                lenient: Collection[str] = ()) -> TrainConfig:
    """A validated config from settings by name (TOML file merged with the command line):
    the run's fields, and the method's options (:data:`lsgd.method_options.OPTIONS`).

    Settings not given take :data:`TEXT_DEFAULTS` for a text dataset, else the
    fields' defaults; then the method's needs and its tuned point on the run's task
    (:mod:`lsgd.train.tuned`). An option the method does not take is a mistake, unless
    a method in ``siblings`` (compared side by side) takes it, or it is in ``lenient`` (read
    from a TOML file, which may hold every method's options) at the default of a method
    that takes it.
    """
    settings = without_removed(settings)
    method = str(settings.get("method", TrainConfig.method))
    chosen = tuned.defaults(settings, method)
    if is_language(str(settings.get("dataset", ""))):
        settings = TEXT_DEFAULTS | chosen | settings
    else:
        settings = chosen | settings
    run = {name: value for name, value in settings.items() if name in RUN_FIELDS}
    given = {name: value for name, value in settings.items() if name not in RUN_FIELDS}
    cfg = TrainConfig(**run)
    if method in OPTIONS:
        cls = OPTIONS[method]
        takes = {f.name for f in dataclasses.fields(cls)}
        known = declarations()
        errors = []
        for name, value in given.items():
            if name in takes:
                continue
            others = [m for m, f in known.get(name, ())]
            default = {f.default for m, f in known.get(name, ()) if not isinstance(f.default, list)}
            if any(m in siblings for m in others) or name in lenient and _hashable(value) in default:
                continue
            field_ = known[name][0][1] if name in known else None
            spelled = _flag_of(field_) if field_ else f"--{flag(name)}"
            shown = (" ".join(str(v) for v in value) if isinstance(value, list) else
                     "" if value is True else value)
            errors.append(f"{spelled} {shown}".strip() + ": "
                          + (f"an option of --method {' or '.join(others)}, not of {method}"
                             if others else f"not an option of --method {method}")
                          + f"; {method} takes "
                          + ", ".join(sorted(_flag_of(f) for f in dataclasses.fields(cls))))
        if errors:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))
        options = {name: value for name, value in given.items() if name in takes}
        hints = typing.get_type_hints(cls)
        bad = []
        for name, value in options.items():
            try:
                options[name] = conform_to(hints[name], value)
            except TypeError as expected:
                bad.append(f"--{flag(name)} {value!r}: expected {expected}")
        if bad:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(bad))
        cfg.options = cls(**options)
    else:  # a mistake validate() names; the options checked as far as they can be
        cfg.options = {name: value for name, value in given.items() if name in SETTING_NAMES}
    cfg.validate()
    return cfg


def _flag_of(f: dataclasses.Field[Any]) -> str:
    """A setting's flag as the command line spells it (``--async`` for ``asynchronous``)."""
    return (*f.metadata.get("flags", ()), f"--{flag(f.name)}")[0]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


#: The run's own settings (every field but the method's options).
RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig) if f.name != "options")
#: Every setting's name: the run's and every method's options.
SETTING_NAMES = RUN_FIELDS | frozenset(declarations())
