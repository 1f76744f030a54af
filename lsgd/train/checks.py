"""The checks of a run's configuration: every bad value named, with what to give instead
(:meth:`lsgd.train.config.TrainConfig.validate` raises one ``ValueError`` listing all).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from lsgd.links.spec import parse_link
from lsgd.method_options import OPTIONS, AllReduceOptions, CodecOptions, declarations
from lsgd.names import LANGUAGE_MODELS, METHODS, TEXT_DATASETS
from lsgd.tasks.headline import from_dataset, is_language
from lsgd.train import chaos, faults
from lsgd.train.ranges import (INTEGERS, RANGES, as_float, eval_every_errors, flag,
                               range_text, within)
from lsgd.train.settings import QuorumSettings


def config_errors(cfg: Any) -> list[str]:
    """Every bad value of ``cfg`` (a :class:`~lsgd.train.config.TrainConfig`) but the choices."""
    errors: list[str] = []
    for name, (low, high) in INTEGERS.items():
        value = cfg.setting(name)
        if value is not None and not low <= value <= high:
            errors.append(f"--{flag(name)} must be {_integers(low, high)}, got {value}")
    if cfg.workers >= 1 and cfg.groups >= 1 and cfg.workers % cfg.groups:
        errors.append(f"--groups {cfg.groups} must divide --workers {cfg.workers}"
                      + (" (a replica is a group's workers, --replica node)"
                         if cfg.replica == "node" else ""))
    o = cfg.option
    if cfg.replica == "node" and o("hierarchical"):
        errors.append("--hierarchical averages inside each group before across them, but "
                      "with --replica node a group's workers are one replica: drop one")
    for name, bounds in RANGES.items():
        value = cfg.setting(name)
        if value is not None and not within(value, *bounds):
            errors.append(f"--{flag(name)} must be {range_text(*bounds)}, got {value}")
    at_or_after_start = (0, math.inf, True, False)
    bad_drops = [d for d in cfg.optim.drops if not within(d, *at_or_after_start)]
    if bad_drops:
        errors.append(f"--drops {' '.join(f'{d:g}' for d in bad_drops)}: every drop must be "
                      f"{range_text(*at_or_after_start)} (epochs or minutes)")
    if o("global_period") and o("period", 0) >= 1 and o("global_period") % o("period"):
        errors.append(f"--global-period {o('global_period')} must be a multiple of "
                      f"--period {o('period')}")
    errors += eval_every_errors(str(cfg.evaluation.eval_every).strip())
    if cfg.optim.schedule in ("step", "minutes") and not cfg.optim.drops:
        errors.append(f"--schedule {cfg.optim.schedule} needs --drops (e.g. --drops 30 60)")
    if o("mixing_weight", "auto") not in ("auto", "max-degree") and not within(
            as_float(o("mixing_weight")), 0, 1, False, True):
        errors.append(f"--mixing-weight {o('mixing_weight')!r}: give auto, max-degree "
                      f"or a number in (0, 1]")
    if o("bn_buffers", "auto") != "auto" and cfg.method in METHODS:
        from lsgd.registry import strategy_class

        allowed = strategy_class(cfg.method).bn_modes
        if o("bn_buffers") not in allowed:
            errors.append(f"--bn-buffers {o('bn_buffers')}: --method {cfg.method} takes "
                          f"{', '.join(allowed)}")
    needs = OPTIONS[cfg.method].requires if cfg.method in OPTIONS else {}
    wrong = {name: value for name, value in needs.items() if cfg.setting(name) != value}
    if wrong:
        errors.append(f"{' '.join(f'--{flag(n)} {cfg.setting(n)}' for n in wrong)}: "
                      f"{cfg.method} needs {' '.join(f'--{flag(n)} {v}' for n, v in needs.items())}"
                      " (leave them out), or use another --method")
    errors += _pipeline_errors(cfg) + _leader_errors(cfg) + _task_errors(cfg)
    if cfg.elastic:
        errors += _elastic_errors(cfg)
    elif cfg.quorum != QuorumSettings():
        errors.append("--min-workers, --join-timeout, --heartbeat-timeout, --lighthouse, --slot "
                      "and --address are settings of --elastic; add it")
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
    from lsgd.registry import strategy_class  # torch: only once a run asks for --elastic

    errors: list[str] = []
    elastic = [name for name in METHODS if strategy_class(name).supports_elastic]
    if cfg.method not in elastic:
        errors.append(f"--elastic works with --method {', '.join(elastic)}; not {cfg.method}")
    if (cfg.quorum.lighthouse is None) != (cfg.quorum.slot is None):
        errors.append("--elastic on separate machines needs both --lighthouse and --slot "
                      "(one torchrun per node, docs/multinode.md); give both or neither")
    nodes = cfg.elastic_nodes()
    if cfg.quorum.slot is not None and not 0 <= cfg.quorum.slot < nodes:
        errors.append(f"--slot {cfg.quorum.slot}: give a node number in [0, {nodes})")
    if cfg.quorum.min_workers > nodes:
        errors.append(f"--min-workers {cfg.quorum.min_workers}: at most the {nodes} nodes")
    o = cfg.option
    overlap, fragments, period = o("overlap", 0), o("fragments", 1), o("period", 0)
    hidden = [flag_ for flag_, given in (("--overlap", overlap != 0), ("--fragments",
              fragments != 1), ("--compress", o("compress", "none") != "none")) if given]
    if hidden and cfg.workers > nodes and cfg.replica == "process":
        errors.append(f"--elastic with {', '.join(hidden)} runs one replica per node; give "
                      f"--replica node (a node's workers as one replica), or --groups "
                      f"{cfg.workers} (or drop them)")
    if overlap and period and overlap >= period // max(1, fragments):
        errors.append(f"--elastic --overlap {overlap}: a round must land before the next starts; "
                      f"give an overlap below period / fragments = {period // max(1, fragments)}")
    unsupported = [flag_ for flag_, given in (
        ("--async", o("asynchronous")), ("--election early", o("election") == "early"),
        ("--checkpoint-every", cfg.faults.checkpoint_every), ("--resume", cfg.resume),
        ("--backend threads", cfg.backend == "threads"),
        ("--init independent", o("init", "broadcast") != "broadcast"),
        ("--straggle", cfg.straggle), ("--target", cfg.evaluation.target is not None)) if given]
    if unsupported:
        errors.append(f"--elastic runs synchronous rounds from a fresh start, in "
                      f"processes; drop {', '.join(unsupported)}")
    return errors


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
    sizes = cfg.language
    given = [f"--{flag(f.name)} {getattr(sizes, f.name)}" for f in dataclasses.fields(sizes)
             if getattr(sizes, f.name) != f.default]
    if given and not text:
        errors.append(f"{', '.join(given)}: size a language model (--model gpt or "
                      f"hf-gpt2 on a text dataset); {cfg.model} has its own shape")
    elif text and sizes.heads >= 1 and sizes.width >= 1 and sizes.width % sizes.heads:
        errors.append(f"--heads {sizes.heads} must divide --width {sizes.width} (each head "
                      "takes width / heads channels)")
    if text and cfg.augment not in ("auto", "none"):
        errors.append(f"--augment {cfg.augment}: augmentation is for images; drop it for "
                      f"--dataset {cfg.dataset}")
    headline = from_dataset(cfg.dataset)
    if cfg.evaluation.target is not None and not headline.target_ok(cfg.evaluation.target):
        errors.append(f"--target {cfg.evaluation.target}: {headline.target_text}")
    return errors


def option_errors(method: str, options: Any) -> list[str]:
    """Each of the method's options (a :mod:`lsgd.method_options` dataclass, or for an
    unknown method a dict by name, checked as the first method that takes each declares
    it) outside its declared choices or range."""
    errors: list[str] = []
    if isinstance(options, dict):
        found = declarations()
        pairs = [(found[name][0][1], value) for name, value in options.items() if name in found]
    else:
        pairs = [(f, getattr(options, f.name)) for f in dataclasses.fields(options)]
    for f, value in pairs:
        choices, bounds = f.metadata["choices"], f.metadata["range"]
        if value is None:
            continue
        if choices and value not in choices:
            errors.append(f"--{flag(f.name)} {value!r}: --method {method} takes one of "
                          f"{', '.join(choices)}")
        elif bounds and not isinstance(value, bool) and not within(value, *bounds):
            what = _integers(*bounds[:2]) if isinstance(value, int) else range_text(*bounds)
            errors.append(f"--{flag(f.name)} must be {what}, got {value}")
    return errors


def _integers(low: int, high: int) -> str:
    return f"a positive integer of at most {high}" if low == 1 else f"an integer in [{low}, {high}]"


def _pipeline_errors(cfg: Any) -> list[str]:
    """What is wrong with --overlap, --fragments, --compress, --merge, --error-feedback,
    --powersgd, together."""
    if isinstance(cfg.options, AllReduceOptions):
        return _gradient_hook_errors(cfg)
    o = cfg.option
    errors = _codec_errors(cfg)
    period, overlap, fragments = o("period"), o("overlap", 0), o("fragments", 1)
    defaults = _defaults(cfg)
    given = [f"--{flag(name)} {o(name)}" for name in ("overlap", "fragments", "compress")
             if name in defaults and o(name) != defaults[name]]
    if o("election") == "early" and o("asynchronous"):
        errors.append("--election early: needs synchronous rounds (an asynchronous round "
                      "falls due at a step no worker knows before); drop --async")
    if period is not None and period >= 1 and not 0 <= overlap < period:
        errors.append(f"--overlap {overlap}: give a whole number of steps in [0, {period}), below "
                      f"--period {period}, so that a round lands before the next one starts")
    if period is not None and fragments >= 1 and period >= 1 and period % fragments:
        errors.append(f"--fragments {fragments} must divide --period {period}")
    if given and (o("asynchronous") or o("hierarchical")):
        errors.append(f"{', '.join(given)}: need synchronous rounds at one level; drop "
                      f"{'--async' if o('asynchronous') else '--hierarchical'}")
    if o("merge", "auto") != "auto" and overlap == 0 and o("outer") != "eager":
        errors.append(f"--merge {o('merge')}: says how an average meets the steps taken while "
                      "it was in flight; add --overlap K")
    if o("outer") == "eager" and (overlap or o("merge", "auto") != "auto"):
        given = " ".join(f"--{flag(name)} {o(name)}" for name, default in
                         (("overlap", 0), ("merge", "auto")) if o(name) != default)
        errors.append(f"--outer eager with {given}: an eager round's all-reduce runs behind the "
                      f"whole next period and its outer step is taken at once; drop {given}")
    return errors


def _defaults(cfg: Any) -> dict[str, Any]:
    return ({f.name: f.default for f in dataclasses.fields(cfg.options)}
            if dataclasses.is_dataclass(cfg.options) else {})


#: The codec settings of a method that chooses its codec, and the --compress values
#: that take each.
CODEC_SETTINGS = {"density": ("topk",), "values": ("topk",), "chunk": ("topk", "2bit")}


def _codec_errors(cfg: Any) -> list[str]:
    """A codec setting without the codec that takes it; error feedback without a codec; a
    gathered codec with --elastic."""
    if not isinstance(cfg.options, CodecOptions):
        return []
    errors, o = [], cfg.option
    for name, codecs in CODEC_SETTINGS.items():
        if o(name) is not None and o("compress") not in codecs:
            errors.append(f"--{flag(name)} {o(name)}: a setting of "
                          f"{' or '.join(f'--compress {c}' for c in codecs)}; add it or "
                          f"drop --{flag(name)}")
    if o("feedback_decay") is not None and not o("error_feedback"):
        errors.append(f"--feedback-decay {o('feedback_decay')}: decays the error feedback; "
                      "add --error-feedback or drop --feedback-decay")
    if o("error_feedback") and o("compress") == "none":
        mine = f" ({cfg.method}'s default)" if _defaults(cfg)["error_feedback"] else ""
        errors.append(f"--error-feedback{mine} with --compress none: it adds what a codec "
                      "dropped to the next message; give --compress (bf16, int8, 2bit or "
                      "topk) or --no-error-feedback")
    if o("compress") in ("2bit", "topk") and cfg.elastic:
        errors.append(f"--compress {o('compress')} with --elastic: a gathered message needs "
                      "every worker, and an elastic round reduces among a quorum: give "
                      "--compress bf16 or int8")
    return errors


def _leader_errors(cfg: Any) -> list[str]:
    """What is wrong with --leader, --leader-weight, --leader-pull."""
    errors: list[str] = []
    o = cfg.option
    for name, mode in (("leader_weight", "weights"), ("leader_pull", "pull")):
        if o(name) is not None and o("leader") != mode:
            errors.append(f"--{flag(name)} {o(name)}: the strength of --leader {mode}; add "
                          f"--leader {mode} or drop --{flag(name)}")
    if o("leader", "none") == "none":
        return errors
    refused = [f for f, on in (("--async", o("asynchronous")), ("--hierarchical",
                                o("hierarchical")), ("--elastic", cfg.elastic)) if on]
    if refused:
        errors.append(f"--leader {o('leader')}: elects among all workers at synchronous rounds "
                      f"of one level; drop {refused[0]} or --leader")
    if o("outer") == "eager":
        errors.append(f"--leader {o('leader')}: acts at the standard outer step; drop "
                      "--outer eager or --leader")
    return errors


def _gradient_hook_errors(cfg: Any) -> list[str]:
    """All-reduce takes torch's bf16 or PowerSGD hook, in worker processes."""
    errors: list[str] = []
    o = cfg.option
    powersgd, warmup, compress = o("powersgd"), o("powersgd_warmup"), o("compress")
    if powersgd and compress != "none":
        errors.append(f"--powersgd {powersgd} and --compress {compress}: give one")
    if warmup != 10 and not powersgd:
        errors.append(f"--powersgd-warmup {warmup}: a setting of --powersgd RANK; "
                      "add it or drop --powersgd-warmup")
    elif warmup < 2 and powersgd:
        errors.append(f"--powersgd-warmup {warmup}: give at least 2 steps (PowerSGD's "
                      "error feedback and warm start need two plain steps first)")
    hook = "--powersgd" if powersgd else "--compress bf16" if compress != "none" else None
    if hook and cfg.backend == "threads":
        errors.append(f"{hook} with allreduce: PyTorch's communication hooks run inside "
                      "DistributedDataParallel in worker processes; the simulator has none: "
                      "drop --backend threads")
    return errors
