"""The checks of a run's configuration: every bad value named, with what to give instead.

:meth:`lsgd.train.config.TrainConfig.validate` raises one ``ValueError`` listing
all of them; which methods take which options is written here once.
"""

from __future__ import annotations

import math
import re
from typing import Any

from lsgd.links.spec import parse_link
from lsgd.registry import strategy_class, strategy_names
from lsgd.train.ranges import (NON_NEGATIVE_INTS, POSITIVE_INTS, RANGES, as_float,
                               count_limit, eval_every_errors, flag, range_text, within)

METHODS = tuple(strategy_names())  # the registry's names
DECENTRALIZED = ("dpsgd", "matcha", "al-dsgd")
ASYNCHRONOUS = ("lsgd", "easgd", "local-sgd")
OVERLAPPED = ("lsgd", "diloco", "local-sgd", "easgd")  # overlap, fragments, compress


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
        errors.append(f"--groups {cfg.groups} must divide --workers {cfg.workers}")
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
        allowed = strategy_class(cfg.method).bn_modes
        if cfg.bn_buffers not in allowed:
            errors.append(f"--bn-buffers {cfg.bn_buffers}: --method {cfg.method} takes "
                          f"{', '.join(allowed)}")
        elif not cfg.sync_buffers and cfg.bn_buffers != "local":
            errors.append(f"--bn-buffers {cfg.bn_buffers} with sync_buffers = false: "
                          "give only --bn-buffers")
    errors += _pipeline_errors(cfg)
    if cfg.elastic:
        errors += _elastic_errors(cfg)
    elif (cfg.min_workers != 1 or cfg.join_timeout != 30.0 or cfg.lighthouse or
          cfg.slot is not None or cfg.address):
        errors.append("--min-workers, --join-timeout, --lighthouse, --slot and --address are "
                      "settings of --elastic; add it")
    if cfg.asynchronous and cfg.method not in ASYNCHRONOUS:
        errors.append(f"--async works with --method {', '.join(ASYNCHRONOUS)}; "
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
    for item in cfg.fault:
        match = re.fullmatch(r"(nan|kill):(\d+):(\d+)", item.strip())
        if not match or not 0 <= int(match.group(2)) < cfg.workers or int(match.group(3)) < 1:
            errors.append(f"--fault {item!r}: give KIND:RANK:STEP with KIND nan or kill, a "
                          f"rank in [0, {cfg.workers}) and a step >= 1, e.g. nan:1:30")
        elif match.group(1) == "kill" and cfg.backend == "threads":
            errors.append(f"--fault {item!r}: kill needs worker processes; drop "
                          "--backend threads")
    return errors


ELASTIC = tuple(n for n in METHODS if strategy_class(n).supports_elastic)


def _elastic_errors(cfg: Any) -> list[str]:
    """What --elastic (lsgd.train.elastic) does not take."""
    errors: list[str] = []
    if cfg.method not in ELASTIC:
        errors.append(f"--elastic works with --method {', '.join(ELASTIC)}; not {cfg.method}")
    if (cfg.lighthouse is None) != (cfg.slot is None):
        errors.append("--elastic on separate machines needs both --lighthouse and --slot "
                      "(one torchrun per node, docs/multinode.md); give both or neither")
    nodes = cfg.elastic_nodes()
    if cfg.slot is not None and not 0 <= cfg.slot < nodes:
        errors.append(f"--slot {cfg.slot}: give a node number in [0, {nodes})")
    if cfg.min_workers > nodes:
        errors.append(f"--min-workers {cfg.min_workers}: at most the {nodes} nodes")
    unsupported = [flag_ for flag_, given in (
        ("--async", cfg.asynchronous), ("--overlap", cfg.overlap != 0),
        ("--fragments", cfg.fragments != 1), ("--compress", cfg.compress != "none"),
        ("--checkpoint-every", cfg.checkpoint_every), ("--resume", cfg.resume),
        ("--backend threads", cfg.backend == "threads"),
        ("--init independent", cfg.init != "broadcast"), ("--straggle", cfg.straggle))
        if given]
    if unsupported:
        errors.append(f"--elastic runs blocking rounds of one level from a fresh start, in "
                      f"processes; drop {', '.join(unsupported)}")
    return errors


def _pipeline_errors(cfg: Any) -> list[str]:
    """What is wrong with --overlap, --fragments, --compress, --merge, --error-feedback."""
    errors: list[str] = []
    given = [f"--{flag(name)} {getattr(cfg, name)}" for name, default in
             (("overlap", 0), ("fragments", 1), ("compress", "none")) if getattr(cfg, name) != default]
    if given and cfg.method not in OVERLAPPED:
        errors.append(f"{', '.join(given)}: --method {cfg.method} has no rounds to hide "
                      f"or shrink; these work with {', '.join(OVERLAPPED)}")
    if cfg.fragments > 1 and cfg.method == "lsgd":
        errors.append(f"--fragments {cfg.fragments}: LSGD's round elects one leader for "
                      "the whole state; fragments work with diloco, local-sgd, easgd")
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
    elif cfg.merge != "auto" and cfg.overlap == 0:
        errors.append(f"--merge {cfg.merge}: says how an average meets the steps taken while "
                      "it was in flight; add --overlap K")
    if cfg.error_feedback and (cfg.compress == "none" or cfg.method == "lsgd"):
        errors.append("--error-feedback: needs --compress bf16 or int8 with diloco, "
                      "local-sgd or easgd (LSGD's reference already carries what was lost)")
    return errors
