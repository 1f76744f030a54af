"""The configuration of one training run, as a typed dataclass: every field a flag of
``lsgd train`` with its help. A run's settings come from the defaults, then a TOML file
(``--config``), then the command line; the resolved ones are saved as ``config.toml``.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from lsgd._validate import is_int, is_number
from lsgd.method_options import OPTIONS, declarations, option_names
from lsgd.names import METHODS, REPLICAS
from lsgd.tasks.headline import is_language
from lsgd.train import tuned
from lsgd.train.checks import config_errors, option_errors
from lsgd.train.ranges import EVAL_EVERY, flag
from lsgd.train.settings import (EvaluationSettings, FaultSettings, LanguageSettings,
                                 OptimizerSettings, OutputSettings, QuorumSettings, _f, group)

ALIASES = {"async": "asynchronous"}  # TOML keys accepted besides the field names


@dataclass
class TrainConfig:
    """Everything that defines a run of ``lsgd train``."""

    method: str = _f("lsgd", "distributed method; several, comma-separated (lsgd,allreduce), "
                             "train one run each, side by side, into --out/METHOD, then "
                             "print a table and draw comparison.png", choices=METHODS)
    model: str = _f("cnn7", "model: for images cnn7, resnet20, vgg16, wrn-28-10 (any wrn-D-K), "
                            "resnet50, mlp; for text gpt (lsgd's transformer) or hf-gpt2 (Hugging "
                            "Face's GPT-2 from a config: pip install 'lsgd[hf]')")
    dataset: str = _f("fashion-mnist",
                      "dataset: images fashion-mnist, cifar10, cifar100, imagenet, digits, "
                      "synthetic; text kjv (the King James Bible, Debian's bible-kjv) or "
                      "text (--data-dir FILE_OR_FOLDER of UTF-8 text)")
    data_dir: str | None = _f(None, "dataset folder (default: $LSGD_DATA, else the Debian "
                                    "package's folder for Fashion-MNIST); for --dataset "
                                    "text, the UTF-8 file or folder of files")
    augment: str = _f("auto", "augmentation preset (auto: the papers' choice for the dataset "
                              "and model; none to turn off)")
    language: LanguageSettings = group(LanguageSettings)
    workers: int = _f(4, "number of workers W")
    groups: int = _f(1, "groups (nodes) of workers; several groups make LSGD multi-leader")
    replica: str = _f("process", "what the method sees as one worker: every process, or (node) "
                                 "the processes of each group together, stepping as one replica "
                                 "with their gradients averaged every step (DDP over the node) "
                                 "while the method's rounds run across nodes", choices=REPLICAS)
    backend: str = _f("processes", "local workers as gloo/NCCL processes, or as threads of "
                                   "the in-process simulator; auto: processes, except with "
                                   "--link on a machine that cannot shape links (no root or "
                                   "iproute2), where the simulator models the link",
                      choices=("processes", "threads", "auto"))
    device: str = _f("auto", "cpu, cuda (one GPU per worker), or auto",
                     choices=("auto", "cpu", "cuda"))
    timeout: float = _f(300.0, "seconds a collective may wait before the run fails")
    link: str | None = _f(None, "the link between nodes (groups), RATE[,LATENCY] such as 100mbit, "
                                "1gbit or 20mbit,5ms; with processes every group is a node in a "
                                "network namespace of its own behind a link the kernel shapes to "
                                "RATE (root and iproute2; a latency needs netem); with --backend "
                                "threads a modeled link on the simulator's clock (measured "
                                "compute plus modeled transfers)")
    step_seconds: float | None = _f(None, "with --backend threads and --link: the seconds each "
                                          "local step costs on the simulator's clock, instead of "
                                          "the compute it measured (a pace independent of this "
                                          "machine's speed and load; --straggle multiplies it)")
    straggle: list[str] = _f((), "RANK:FACTOR makes that worker's steps FACTOR times slower "
                                 "(it sleeps in proportion to its compute; with --backend "
                                 "threads, on the simulator's virtual clock); repeatable")
    # Budget (the first one reached stops the run)
    epochs: float | None = _f(None, "passes over the training set (per worker: over its shard; "
                                    "with --async, the workers' mean)")
    steps: int | None = _f(None, "local steps per worker (with --async, the workers' mean)")
    minutes: float | None = _f(None, "wall-clock minutes")
    optim: OptimizerSettings = group(OptimizerSettings)
    batch_size: int = _f(128, "batch size per worker: images, or text windows (text: 16)")
    options: Any = _f(None, "the method's options: lsgd.method_options.OPTIONS[method], "
                            "given on the command line by their own flags", cli=False)
    evaluation: EvaluationSettings = group(EvaluationSettings)
    faults: FaultSettings = group(FaultSettings)
    elastic: bool = _f(False, "keep training when workers fail (torchft, pip install "
                              "'lsgd[torchft]'): the others go on without a restart, and a worker "
                              "started again (--restarts) rejoins from a live one; lsgd, diloco, "
                              "local-sgd and easgd; nodes: --groups, or one per worker")
    quorum: QuorumSettings = group(QuorumSettings)
    out: str | None = _f(None, "run folder (default runs/METHOD-DATASET-Ww)")
    resume: str | None = _f(None, "continue the run in this folder where it stopped")
    seed: int = _f(0, "random seed")
    output: OutputSettings = group(OutputSettings)

    def __post_init__(self) -> None:
        """Every value as its setting's type (see :func:`conform`), or ``ValueError``
        listing the values of a wrong type; no ``options``: the method's defaults."""
        errors: list[str] = []
        for holder, f in _flat_fields(self):
            value = getattr(holder, f.name)
            try:
                setattr(holder, f.name, conform(f.name, value))
            except TypeError as expected:
                errors.append(f"--{flag(f.name)} {value!r}: expected {expected}")
        if errors:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))
        if self.options is None and self.method in OPTIONS:
            self.options = OPTIONS[self.method]()

    @classmethod
    def of(cls, **settings: Any) -> TrainConfig:
        """A config from settings by their flat names (``lr``, ``period``): the run's,
        its groups' and the method's options (unchecked: :func:`make_config` checks)."""
        top = {name: value for name, value in settings.items() if GROUP_OF.get(name, "") is None}
        for name, holder in GROUPS.items():
            top[name] = holder(**{k: v for k, v in settings.items() if GROUP_OF.get(k) == name})
        cfg = cls(**top)
        given = {k: v for k, v in settings.items() if k not in GROUP_OF}
        if given and cfg.method in OPTIONS:
            cfg.options = OPTIONS[cfg.method](**given)
        return cfg

    def but(self, **changes: Any) -> TrainConfig:
        """A copy with the settings ``changes`` (by flat name), unchecked."""
        return TrainConfig.of(**(self.settings() | changes))

    def setting(self, name: str, default: Any = None) -> Any:
        """The setting ``name`` by its flat name: the run's, a group's or the method's."""
        if name in GROUP_OF:
            holder = self if GROUP_OF[name] is None else getattr(self, GROUP_OF[name])
            return getattr(holder, name)
        return self.option(name, default)

    def option(self, name: str, default: Any = None) -> Any:
        """The method's option ``name``, or ``default`` if the method has none of that name."""
        if isinstance(self.options, dict):  # an unknown method's, being refused
            return self.options.get(name, default)
        return getattr(self.options, name, default)

    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.method}-{self.dataset}-{self.workers}w")

    @property
    def replicas(self) -> int:
        """The workers the method sees: the processes, or with ``--replica node`` the groups."""
        return self.groups if self.replica == "node" else self.workers

    def eval_interval(self) -> tuple[str, float]:
        """``("steps", N)``, ``("seconds", S)`` or ``("auto", 0)`` (validated: N, S > 0)."""
        match = re.fullmatch(EVAL_EVERY, str(self.evaluation.eval_every).strip())
        if match is None:
            return ("auto", 0.0)  # validated: the only other value
        steps, seconds = match.groups()
        return ("steps", float(steps)) if steps is not None else ("seconds", float(seconds))

    def straggler_factors(self) -> dict[int, float]:
        """``--straggle`` as ``{rank: factor}`` (validated by :meth:`validate`)."""
        pairs = (item.partition(":") for item in self.straggle)
        return {int(rank): float(factor) for rank, _, factor in pairs}

    def step_times(self) -> dict[int, float] | None:
        """The simulator's step time per rank: ``--step-seconds`` (1.0 without it) times
        each ``--straggle`` factor; ``None`` (measured compute) when neither is given."""
        factors = self.straggler_factors()
        if self.step_seconds is None:
            return factors or None
        return {r: self.step_seconds * factors.get(r, 1.0) for r in range(self.workers)}

    def validate(self) -> None:
        """Raise ``ValueError`` listing every bad value at once (:mod:`lsgd.train.checks`)."""
        errors = [f"--{flag(f.name)} {value!r}: choose one of {', '.join(choices)}"
                  for holder, f in _flat_fields(self) if (choices := f.metadata.get("choices"))
                  and (value := getattr(holder, f.name)) is not None and value not in choices]
        errors += option_errors(self.method, self.options) + config_errors(self)
        if errors:
            raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))

    def elastic_nodes(self) -> int:
        """An elastic run's nodes (torchft replica groups): ``groups`` if above 1, else workers."""
        return self.groups if self.groups > 1 else self.workers

    def budgets(self) -> dict[str, float]:
        """The budgets given; one epoch if none is."""
        given = {k: getattr(self, k) for k in ("epochs", "steps", "minutes")
                 if getattr(self, k) is not None}
        return given or {"epochs": 1.0}

    def settings(self) -> dict[str, Any]:
        """Every setting by name, the method's options among them (as a TOML file holds them)."""
        values = {f.name: getattr(holder, f.name) for holder, f in _flat_fields(self)}
        return values | ({f.name: getattr(self.options, f.name)
                          for f in dataclasses.fields(self.options)} if self.options else {})

    def to_toml(self) -> str:
        """The settings as TOML (written by ``tomli_w``); unset ones as comments."""
        values = self.settings()
        unset = [f"# {name} = (unset)" for name, value in values.items() if value is None]
        text = tomli_w.dumps({name: list(value) if isinstance(value, tuple) else value
                              for name, value in values.items() if value is not None})
        return text + "".join(line + "\n" for line in unset)


#: The groups of settings, by their field of :class:`TrainConfig`.
GROUPS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(TrainConfig)
                           if f.metadata.get("group")}  # type: ignore[misc]
#: The run's settings by flat name: the group that holds each (None: TrainConfig itself).
GROUP_OF: dict[str, str | None] = {
    **{f.name: None for f in dataclasses.fields(TrainConfig)
       if f.name != "options" and not f.metadata.get("group")},
    **{f.name: name for name, holder in GROUPS.items() for f in dataclasses.fields(holder)}}


def _flat_fields(cfg: TrainConfig) -> list[tuple[Any, dataclasses.Field[Any]]]:
    holders = [(None, cfg), *((name, getattr(cfg, name)) for name in GROUPS)]
    return [(holder, f) for name, holder in holders for f in dataclasses.fields(holder)
            if GROUP_OF.get(f.name, "") == name]


#: Options whose value, in a config.toml written before each method declared its options
#: (one holding every method's), meant "the method's own default".
LEGACY_DEFAULTS = {"compress": "none", "error_feedback": False}


def from_legacy(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The settings of a TOML file as they were meant: in an older run's file (it holds
    options ``method`` does not take) a :data:`LEGACY_DEFAULTS` value is left out, so
    the method's own default applies, as it did when the run was trained."""
    takes = option_names(method)
    if all(name in takes or name in GROUP_OF for name in settings):
        return settings
    return {name: value for name, value in settings.items()
            if not (name in takes and LEGACY_DEFAULTS.get(name, ...) == value)}


def defaults_of(method: str) -> dict[str, Any]:
    """Every setting's default by flat name: the run's, and ``method``'s options."""
    return TrainConfig(method=method).settings()


#: Every setting's type: the run's, and each option as the first method declares it.
_HINTS = {name: typing.get_type_hints(OPTIONS[found[0][0]])[name]
          for name, found in declarations().items()} | typing.get_type_hints(TrainConfig) | {
    k: v for holder in GROUPS.values() for k, v in typing.get_type_hints(holder).items()}


def conform(name: str, value: Any) -> Any:
    """``value`` as the field ``name`` holds it (:func:`conform_to` of its type hint), or
    ``TypeError`` naming the type expected."""
    return conform_to(_HINTS[name], value)


#: What each scalar type of a field reads as, alone and in a list.
_KINDS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "true or false values"), int: ("an integer", "integers"),
    float: ("a number", "numbers"), str: ("a string", "strings")}


def conform_to(hint: Any, value: Any) -> Any:
    """``value`` as type ``hint`` takes it, or ``TypeError`` saying what was expected: an
    integer is also a number, a bool is neither; a number stands for its text where a
    string is expected (``eval-every = 200``); a tuple is also a list. Other types than
    those of :data:`_KINDS`, lists and unions of them are taken as given."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        expected = []
        for alternative in (a for a in args if a is not type(None)):
            try:
                return conform_to(alternative, value)
            except TypeError as error:
                expected.append(str(error))
        raise TypeError(" or ".join(expected))
    if origin is list:
        kind = f"a list of {_KINDS.get(args[0], ('', 'values'))[1]}"
        if not isinstance(value, (list, tuple)):
            raise TypeError(kind)
        try:
            return [conform_to(args[0], item) for item in value]
        except TypeError:
            raise TypeError(kind) from None
    if hint is bool and isinstance(value, bool) or hint is int and is_int(value):
        return value
    if hint is float and is_number(value):
        return float(value)
    if hint is str and (isinstance(value, str) or is_number(value)):
        return str(value)
    if hint in _KINDS:
        raise TypeError(_KINDS[hint][0])
    return value


def as_toml(value: Any) -> str:
    """``value`` as TOML writes it (``true``, ``"a lot"``), as Python does if not one line."""
    text = tomli_w.dumps({"x": value})
    one_line = text.startswith("x = ") and text.count("\n") == 1
    return text[len("x = "):].strip() if one_line else repr(value)


#: The defaults of a language-modelling run (``--dataset kjv`` or ``text``) where they
#: differ from an image run's: AdamW with warm-up and cosine decay, smaller batches.
TEXT_DEFAULTS: dict[str, Any] = {"optimizer": "adamw", "lr": 0.001, "weight_decay": 0.1,
                                 "batch_size": 16, "schedule": "cosine", "warmup_epochs": 0.1}


#: Settings lsgd no longer takes: the value that meant what leaving the setting out
#: means now (the config.toml of every run trained before its removal holds it, and is
#: read as if it did not), and what to write instead of any other value.
REMOVED: dict[str, tuple[Any, str]] = {"sync_buffers": (True, 'bn_buffers = "local"')}


def without_removed(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (keys as field names) without the removed settings at their old default
    (:data:`REMOVED`); ``ValueError`` naming what to write instead of any other value of one."""
    errors = [f"{name} = {as_toml(value)} is no longer a setting; "
              f"write {REMOVED[name][1]} instead" for name, value in settings.items()
              if name in REMOVED and (type(value), value) != (type(old := REMOVED[name][0]), old)]
    if errors:
        raise ValueError("\n  ".join(errors))
    return {name: value for name, value in settings.items() if name not in REMOVED}


def make_config(settings: dict[str, Any], siblings: tuple[str, ...] = (),
                lenient: Collection[str] = ()) -> TrainConfig:
    """A validated config from settings by name (a TOML file merged with the command line):
    the run's fields and the method's options. Settings not given take the method's needs
    and tuned point (:mod:`lsgd.train.tuned`), then :data:`TEXT_DEFAULTS` for a text
    dataset, then the fields' defaults. An option the method does not take is a mistake,
    unless a method in ``siblings`` (compared side by side) takes it, or it is in
    ``lenient`` (from a TOML file) at the default of a method that takes it."""
    settings = without_removed(settings)
    method = str(settings.get("method", TrainConfig.method))
    text = TEXT_DEFAULTS if is_language(str(settings.get("dataset", ""))) else {}
    settings = text | tuned.defaults(settings, method) | settings
    given = {name: value for name, value in settings.items() if name not in RUN_FIELDS}
    cfg = TrainConfig.of(**{name: settings[name] for name in settings.keys() & RUN_FIELDS})
    cfg.options = _options_of(method, given, siblings, lenient)
    cfg.validate()
    return cfg


def _options_of(method: str, given: dict[str, Any], siblings: tuple[str, ...],
                lenient: Collection[str]) -> Any:
    """``method``'s options of ``given`` (see :func:`make_config`); for an unknown method
    (which validation names) those some method takes, as given, checked as far as they can."""
    if method not in OPTIONS:
        return {name: value for name, value in given.items() if name in SETTING_NAMES}
    cls, known = OPTIONS[method], declarations()
    hints, options, errors = typing.get_type_hints(cls), {}, []
    for name, value in given.items():
        others = [m for m, _ in known.get(name, ())]
        defaults = {f.default for _, f in known.get(name, ()) if not isinstance(f.default, list)}
        if name in {f.name for f in dataclasses.fields(cls)}:
            try:
                options[name] = conform_to(hints[name], value)
            except TypeError as expected:
                errors.append(f"--{flag(name)} {value!r}: expected {expected}")
        elif not (any(m in siblings for m in others)
                  or name in lenient
                  and (tuple(value) if isinstance(value, list) else value) in defaults):
            spelled = _flag_of(known[name][0][1]) if name in known else f"--{flag(name)}"
            shown = (" ".join(str(v) for v in value) if isinstance(value, list) else
                     "" if value is True else value)
            errors.append(f"{spelled} {shown}".strip() + ": "
                          + (f"an option of --method {' or '.join(others)}, not of {method}"
                             if others else f"not an option of --method {method}")
                          + f"; {method} takes "
                          + ", ".join(sorted(_flag_of(f) for f in dataclasses.fields(cls))))
    if errors:
        raise ValueError("invalid configuration:\n  " + "\n  ".join(errors))
    return cls(**options)


def _flag_of(f: dataclasses.Field[Any]) -> str:
    """A setting's flag as the command line spells it (``--async`` for ``asynchronous``)."""
    return (*f.metadata.get("flags", ()), f"--{flag(f.name)}")[0]


#: The run's own settings (every one but the method's options), by flat name.
RUN_FIELDS = frozenset(GROUP_OF)
#: Every setting's name: the run's and every method's options.
SETTING_NAMES = RUN_FIELDS | frozenset(declarations())
