"""The checks of a run's configuration: every bad value named, with what to give instead.

:meth:`lsgd.train.config.TrainConfig.validate` raises one ``ValueError`` listing
all of them; which methods take which options is written here once.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from lsgd.links.spec import parse_link
from lsgd.names import LANGUAGE_MODELS, METHODS, TEXT_DATASETS
from lsgd.tasks.headline import from_dataset, is_language
from lsgd.train import chaos, faults
from lsgd.train.ranges import (NON_NEGATIVE_INTS, POSITIVE_INTS, RANGES, as_float,
                               count_limit, eval_every_errors, flag, range_text, within)

#: What each method supports is declared on its class (lsgd.strategies.seams.supporting);
#: the methods with each, by the class attribute that says so, as these names.
CAPABILITIES = {"DECENTRALIZED": "uses_graph", "ASYNCHRONOUS": "supports_asynchronous",
                "OVERLAPPED": "supports_hidden_rounds", "ELASTIC": "supports_elastic"}


@functools.cache
def methods_with(capability: str) -> tuple[str, ...]:
    """The methods whose class has ``capability`` (an attribute of :data:`CAPABILITIES`).

    Read from the classes on first use: they import torch, which a command line
    refused before it starts a run never needs."""
    from lsgd.registry import strategy_class

    return tuple(n for n in METHODS if getattr(strategy_class(n), capability))


def __getattr__(name: str) -> tuple[str, ...]:
    """``DECENTRALIZED``, ``ASYNCHRONOUS``, ``OVERLAPPED``, ``ELASTIC``: the methods with
    each capability (:func:`methods_with`), computed on first use."""
    if name in CAPABILITIES:
        return methods_with(CAPABILITIES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def config_errors(cfg: Any) -> list[str]:
    """Every bad value of ``cfg`` (a :class:`~lsgd.train.config.TrainConfig`) but the
    choices, each a line naming the option, the value and what to give instead."""
    errors: list[str] = []
    for name in POSITIVE_INTS:
        value = getattr(cfg, name)
        if value is not None and not 1 <= value <= count_limit(name):
            errors.append(f"--{flag(name)} must be a positive integer of at most "
                          f"{count_limit(name)}, got {value}")
    for name in NON_NEGATIVE_INTS:
        value = getattr(cfg, name)
        if not 0 <= value <= count_limit(name):
            errors.append(f"--{flag(name)} must be an integer in [0, {count_limit(name)}], "
                          f"got {value}")
    if cfg.workers >= 1 and cfg.groups >= 1 and cfg.workers % cfg.groups:
        errors.append(f"--groups {cfg.groups} must divide --workers {cfg.workers}"
                      + (" (a replica is a group's workers, --replica node)"
                         if cfg.replica == "node" else ""))
    if cfg.replica == "node" and cfg.hierarchical:
        errors.append("--hierarchical averages inside each group before across them, but "
                      "with --replica node a group's workers are one replica: drop one")
    for name, bounds in RANGES.items():
        value = getattr(cfg, name)
        if value is not None and not within(value, *bounds):
            errors.append(f"--{flag(name)} must be {range_text(*bounds)}, got {value}")
    at_or_after_start = (0, math.inf, True, False)
    bad_drops = [d for d in cfg.drops if not within(d, *at_or_after_start)]
    if bad_drops:
        errors.append(f"--drops {' '.join(f'{d:g}' for d in bad_drops)}: every drop must be "
                      f"{range_text(*at_or_after_start)} (epochs or minutes)")
    if cfg.global_period and cfg.period >= 1 and cfg.global_period % cfg.period:
        errors.append(f"--global-period {cfg.global_period} must be a multiple of "
                      f"--period {cfg.period}")
    errors += eval_every_errors(str(cfg.eval_every).strip())
    if cfg.schedule in ("step", "minutes") and not cfg.drops:
        errors.append(f"--schedule {cfg.schedule} needs --drops (e.g. --drops 30 60)")
    if cfg.mixing_weight not in ("auto", "max-degree") and not within(
            as_float(cfg.mixing_weight), 0, 1, False, True):
        errors.append(f"--mixing-weight {cfg.mixing_weight!r}: give auto, max-degree "
                      f"or a number in (0, 1]")
    if cfg.bn_buffers != "auto" and cfg.method in METHODS:
        from lsgd.registry import strategy_class

        allowed = strategy_class(cfg.method).bn_modes
        if cfg.bn_buffers not in allowed:
            errors.append(f"--bn-buffers {cfg.bn_buffers}: --method {cfg.method} takes "
                          f"{', '.join(allowed)}")
    errors += _pipeline_errors(cfg)
    errors += _leader_errors(cfg)
    errors += _task_errors(cfg)
    if cfg.elastic:
        errors += _elastic_errors(cfg)
    elif (cfg.min_workers != 1 or cfg.join_timeout != 30.0 or cfg.heartbeat_timeout != 2.0
          or cfg.lighthouse or cfg.slot is not None or cfg.address):
        errors.append("--min-workers, --join-timeout, --heartbeat-timeout, --lighthouse, --slot "
                      "and --address are settings of --elastic; add it")
    if cfg.asynchronous and cfg.method not in methods_with("supports_asynchronous"):
        errors.append(f"--async works with --method "
                      f"{', '.join(methods_with('supports_asynchronous'))}; "
                      f"{cfg.method} is synchronous")
    if cfg.link is not None:
        try:
            parse_link(cfg.link)
        except ValueError as error:
            errors.append(f"--link {cfg.link!r}: {error}")
        if cfg.straggle and cfg.backend == "threads" and cfg.step_seconds is None:
            errors.append("--straggle with --link under --backend threads: the modeled "
                          "clock measures each step's compute; give --step-seconds (a "
                          "fixed step time that --straggle multiplies) or drop one of them")
    if cfg.step_seconds is not None and (cfg.backend != "threads" or cfg.link is None):
        errors.append(f"--step-seconds {cfg.step_seconds:g}: sets the step time on the "
                      "simulator's modeled clock; give it with --backend threads and --link")
    for item in cfg.straggle:
        match = re.fullmatch(r"(\d+):(\d+(?:\.\d*)?)", item.strip())
        if not match or not 0 <= int(match.group(1)) < cfg.workers or float(match.group(2)) < 1:
            errors.append(f"--straggle {item!r}: give RANK:FACTOR with a rank in "
                          f"[0, {cfg.workers}) and a factor >= 1, e.g. 3:2.5")
    errors += faults.config_errors(cfg) + chaos.errors(cfg)
    return errors


def _elastic_errors(cfg: Any) -> list[str]:
    """What --elastic (lsgd.train.elastic_run) does not take."""
    errors: list[str] = []
    elastic = methods_with("supports_elastic")
    if cfg.method not in elastic:
        errors.append(f"--elastic works with --method {', '.join(elastic)}; not {cfg.method}")
    if (cfg.lighthouse is None) != (cfg.slot is None):
        errors.append("--elastic on separate machines needs both --lighthouse and --slot "
                      "(one torchrun per node, docs/multinode.md); give both or neither")
    nodes = cfg.elastic_nodes()
    if cfg.slot is not None and not 0 <= cfg.slot < nodes:
        errors.append(f"--slot {cfg.slot}: give a node number in [0, {nodes})")
    if cfg.min_workers > nodes:
        errors.append(f"--min-workers {cfg.min_workers}: at most the {nodes} nodes")
    hidden = [flag_ for flag_, given in (("--overlap", cfg.overlap != 0), ("--fragments",
              cfg.fragments != 1), ("--compress", cfg.compress != "none")) if given]
    if hidden and cfg.workers > nodes and cfg.replica == "process":
        errors.append(f"--elastic with {', '.join(hidden)} runs one replica per node; give "
                      f"--replica node (a node's workers as one replica), or --groups "
                      f"{cfg.workers} (or drop them)")
    if cfg.overlap and cfg.period and cfg.overlap >= cfg.period // max(1, cfg.fragments):
        errors.append(f"--elastic --overlap {cfg.overlap}: a round must land before the next "
                      f"starts; give an overlap below period / fragments = "
                      f"{cfg.period // max(1, cfg.fragments)}")
    unsupported = [flag_ for flag_, given in (
        ("--async", cfg.asynchronous), ("--election early", cfg.election == "early"), ("--checkpoint-every", cfg.checkpoint_every), ("--resume", cfg.resume),
        ("--backend threads", cfg.backend == "threads"),
        ("--init independent", cfg.init != "broadcast"), ("--straggle", cfg.straggle),
        ("--target", cfg.target is not None))
        if given]
    if unsupported:
        errors.append(f"--elastic runs synchronous rounds from a fresh start, in "
                      f"processes; drop {', '.join(unsupported)}")
    return errors


#: The language models' size settings, and their defaults.
MODEL_SIZES = {"context": 128, "layers": 4, "width": 128, "heads": 4, "eval_tokens": 65536}


def _task_errors(cfg: Any) -> list[str]:
    """A model of the other task, a size that does not fit, a target out of range."""
    errors: list[str] = []
    text = is_language(cfg.dataset)
    if text and cfg.model not in LANGUAGE_MODELS:
        errors.append(f"--model {cfg.model} on --dataset {cfg.dataset}: a text dataset trains "
                      f"a language model; choose --model {' or '.join(LANGUAGE_MODELS)}")
    elif not text and cfg.model in LANGUAGE_MODELS:
        errors.append(f"--model {cfg.model} is a language model; train it on --dataset "
                      f"{' or '.join(TEXT_DATASETS)} (and --data-dir for text)")
    if not text:
        given = [f"--{flag(name)} {getattr(cfg, name)}" for name, default in MODEL_SIZES.items()
                 if getattr(cfg, name) != default]
        if given:
            errors.append(f"{', '.join(given)}: size a language model (--model gpt or "
                          f"hf-gpt2 on a text dataset); {cfg.model} has its own shape")
    elif cfg.heads >= 1 and cfg.width >= 1 and cfg.width % cfg.heads:
        errors.append(f"--heads {cfg.heads} must divide --width {cfg.width} (each head takes "
                      "width / heads channels)")
    if text and cfg.augment not in ("auto", "none"):
        errors.append(f"--augment {cfg.augment}: augmentation is for images; drop it for "
                      f"--dataset {cfg.dataset}")
    headline = from_dataset(cfg.dataset)
    if cfg.target is not None and not headline.target_ok(cfg.target):
        errors.append(f"--target {cfg.target}: {headline.target_text}")
    return errors


def _pipeline_errors(cfg: Any) -> list[str]:
    """What is wrong with --overlap, --fragments, --compress, --merge, --error-feedback,
    --powersgd."""
    errors: list[str] = []
    if cfg.method == "allreduce":
        return _gradient_hook_errors(cfg)
    if cfg.powersgd or cfg.powersgd_warmup != 10:
        errors.append(f"--powersgd {cfg.powersgd}: PowerSGD compresses all-reduce's "
                      "gradients; give it with --method allreduce")
    given = [f"--{flag(name)} {getattr(cfg, name)}" for name, default in
             (("overlap", 0), ("fragments", 1), ("compress", "none")) if getattr(cfg, name) != default]
    if cfg.method == "demo":
        return errors + _demo_errors(cfg)
    errors += _codec_errors(cfg)
    if cfg.method == "muloco" and cfg.optimizer != "muon":
        errors.append(f"--optimizer {cfg.optimizer}: muloco's inner optimizer is Muon; give "
                      "--optimizer muon (or leave it out), or use --method diloco")
    if given and cfg.method not in methods_with("supports_hidden_rounds"):
        errors.append(f"{', '.join(given)}: --method {cfg.method} has no rounds to hide "
                      f"or shrink; these work with "
                      f"{', '.join(methods_with('supports_hidden_rounds'))}")
    if cfg.election != "auto" and cfg.method != "lsgd":
        errors.append(f"--election {cfg.election}: says when LSGD elects its leader; give it "
                      "with --method lsgd")
    elif cfg.election == "early" and cfg.asynchronous:
        errors.append("--election early: needs synchronous rounds (an asynchronous round "
                      "falls due at a step no worker knows before); drop --async")
    if cfg.period >= 1 and not 0 <= cfg.overlap < cfg.period:
        errors.append(f"--overlap {cfg.overlap}: give a whole number of steps in "
                      f"[0, {cfg.period}), below --period {cfg.period}, so that a "
                      "round lands before the next one starts")
    if cfg.fragments >= 1 and cfg.period >= 1 and cfg.period % cfg.fragments:
        errors.append(f"--fragments {cfg.fragments} must divide --period {cfg.period}")
    if given and (cfg.asynchronous or cfg.hierarchical):
        errors.append(f"{', '.join(given)}: need synchronous rounds at one level; drop "
                      f"{'--async' if cfg.asynchronous else '--hierarchical'}")
    if cfg.merge != "auto" and cfg.method not in ("diloco", "local-sgd"):
        errors.append(f"--merge {cfg.merge}: works with --method diloco or local-sgd")
    elif cfg.merge != "auto" and cfg.overlap == 0 and cfg.outer != "eager":
        errors.append(f"--merge {cfg.merge}: says how an average meets the steps taken while "
                      "it was in flight; add --overlap K")
    if cfg.outer != "standard" and cfg.method != "diloco":
        errors.append(f"--outer {cfg.outer}: the outer step is DiLoCo's; give it with "
                      "--method diloco")
    elif cfg.outer == "eager" and (cfg.overlap or cfg.merge != "auto"):
        given = " ".join(f"--{flag(name)} {getattr(cfg, name)}" for name, default in
                         (("overlap", 0), ("merge", "auto")) if getattr(cfg, name) != default)
        errors.append(f"--outer eager with {given}: an eager round's all-reduce runs behind "
                      "the whole next period and its outer step is taken at once; drop "
                      f"{given}")
    if cfg.error_feedback and cfg.method != "muloco" and (
            cfg.compress == "none" or cfg.method in ("lsgd", "sparseloco")):
        errors.append("--error-feedback: needs --compress (bf16, int8, 2bit or topk) with "
                      "diloco, local-sgd, easgd or muloco (LSGD's reference already carries "
                      "what was lost; sparseloco and demo always feed back)")
    return errors


#: The codec settings, and the methods or --compress values that take each.
CODEC_SETTINGS = {"density": (("sparseloco",), ("topk",)),
                  "values": (("sparseloco", "demo"), ("topk",)),
                  "chunk": (("sparseloco", "demo"), ("topk", "2bit")),
                  "topk": (("demo",), ()),
                  "feedback_decay": (("sparseloco", "demo"), ())}


def _codec_errors(cfg: Any) -> list[str]:
    """A codec setting without the codec that takes it; a gathered codec where the round
    broadcasts; sparseloco's fixed codec."""
    errors = []
    for name, (methods, codecs) in CODEC_SETTINGS.items():
        value = getattr(cfg, name)
        if value is None or cfg.method in methods or cfg.compress in codecs:
            continue
        if name == "feedback_decay" and cfg.error_feedback:
            continue
        takes = [f"--method {m}" for m in methods] + [f"--compress {c}" for c in codecs]
        if name == "feedback_decay":
            takes.append("--error-feedback")
        errors.append(f"--{flag(name)} {value}: a setting of {' or '.join(takes)}; add it or "
                      f"drop --{flag(name)}")
    if cfg.compress in ("2bit", "topk") and cfg.method == "lsgd":
        errors.append(f"--compress {cfg.compress}: gathers every worker's compressed message, "
                      "and an lsgd round broadcasts the leader's state: give --compress bf16 or "
                      "int8 with lsgd, or --compress topk with diloco, local-sgd or easgd")
    if cfg.compress in ("2bit", "topk") and cfg.elastic:
        errors.append(f"--compress {cfg.compress} with --elastic: a gathered message needs every "
                      "worker, and an elastic round reduces among a quorum: give --compress "
                      "bf16 or int8")
    if cfg.method == "sparseloco" and cfg.compress != "none":
        errors.append(f"--compress {cfg.compress}: sparseloco's message is the top --density of "
                      "every chunk with error feedback; drop --compress, or use --method diloco "
                      "for another codec")
    return errors


def _demo_errors(cfg: Any) -> list[str]:
    """DeMo takes --overlap 0 or 1 and its codec's settings, nothing else of a round's."""
    errors = []
    if cfg.overlap not in (0, 1):
        errors.append(f"--overlap {cfg.overlap}: demo's gather of a step lands at the next "
                      "step at the latest; give --overlap 0 or 1")
    given = [f"--{flag(name)} {getattr(cfg, name)}" for name, default in (
        ("fragments", 1), ("compress", "none"), ("merge", "auto"), ("error_feedback", False),
        ("density", None), ("period", 16)) if getattr(cfg, name) != default]
    if given:
        errors.append(f"{', '.join(given)}: demo sends every step the top --topk DCT "
                      "coefficients of every block of its momentum (--chunk, --values, "
                      "--feedback-decay); drop them")
    if cfg.optimizer != "sgd" or cfg.momentum:
        errors.append(f"--optimizer {cfg.optimizer} --momentum {cfg.momentum:g}: demo steps a "
                      "momentum-free SGD on the sign of the gathered update (its momentum is "
                      "its own); give --optimizer sgd --momentum 0 or leave them out")
    return errors


def _leader_errors(cfg: Any) -> list[str]:
    """What is wrong with --leader, --leader-weight, --leader-pull."""
    errors: list[str] = []
    for name, mode in (("leader_weight", "weights"), ("leader_pull", "pull")):
        value = getattr(cfg, name)
        if value is not None and cfg.leader != mode:
            errors.append(f"--{flag(name)} {value}: the strength of --leader {mode}; add "
                          f"--leader {mode} or drop --{flag(name)}")
    if cfg.leader == "none":
        return errors
    if cfg.method == "demo":
        errors.append(f"--leader {cfg.leader}: demo's workers hold one state (every step "
                      "applies the same gathered update) and its message is momentum, not a "
                      "state difference, so no worker leads: drop --leader, or use it with "
                      "diloco, sparseloco or muloco")
    elif cfg.method not in ("diloco", "local-sgd", "sparseloco", "muloco"):
        errors.append(f"--leader {cfg.leader}: the leader's force on an averaging method "
                      "works with --method diloco, local-sgd, sparseloco or muloco (lsgd has "
                      "its own leader)")
    refused = [f for f, on in (("--async", cfg.asynchronous), ("--hierarchical", cfg.hierarchical),
                               ("--elastic", cfg.elastic)) if on]
    if refused:
        errors.append(f"--leader {cfg.leader}: elects among all workers at synchronous rounds "
                      f"of one level; drop {refused[0]} or --leader")
    if getattr(cfg, "outer", "standard") == "eager":
        errors.append(f"--leader {cfg.leader}: acts at the standard outer step; drop "
                      "--outer eager or --leader")
    return errors


def _gradient_hook_errors(cfg: Any) -> list[str]:
    """All-reduce takes torch's bf16 or PowerSGD hook, in worker processes, and no rounds."""
    errors: list[str] = []
    rounds = [f"--{flag(name)} {getattr(cfg, name)}" for name, default in
              (("overlap", 0), ("fragments", 1), ("merge", "auto"), ("error_feedback", False))
              if getattr(cfg, name) != default]
    if rounds:
        errors.append(f"{', '.join(rounds)}: all-reduce averages gradients every step, it has "
                      "no rounds to hide; it shrinks them with --compress bf16 or --powersgd "
                      "RANK (PyTorch's communication hooks)")
    if cfg.compress not in ("none", "bf16"):
        errors.append(f"--compress {cfg.compress} with allreduce: PyTorch's DDP hooks compress "
                      "to bf16 (--compress bf16) or by PowerSGD (--powersgd RANK); it has no "
                      f"{cfg.compress} hook (demo sends a sparse message every step)")
    if cfg.powersgd and cfg.compress != "none":
        errors.append(f"--powersgd {cfg.powersgd} and --compress {cfg.compress}: give one")
    if cfg.powersgd_warmup != 10 and not cfg.powersgd:
        errors.append(f"--powersgd-warmup {cfg.powersgd_warmup}: a setting of --powersgd RANK; "
                      "add it or drop --powersgd-warmup")
    elif cfg.powersgd_warmup < 2 and cfg.powersgd:
        errors.append(f"--powersgd-warmup {cfg.powersgd_warmup}: give at least 2 steps (PowerSGD's "
                      "error feedback and warm start need two plain steps first)")
    hook = "--powersgd" if cfg.powersgd else "--compress bf16" if cfg.compress != "none" else None
    if hook and cfg.backend == "threads":
        errors.append(f"{hook} with allreduce: PyTorch's communication hooks run inside "
                      "DistributedDataParallel in worker processes; the simulator has none: "
                      "drop --backend threads")
    return errors
