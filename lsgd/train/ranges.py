"""The valid range of every number setting of ``lsgd train``, and how a bad one is named."""

from __future__ import annotations

import math
import re

#: The valid range of each number setting: (low, high, low allowed, high allowed).
#: Values must also be finite; an unset optional one (None) is fine.
RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "lr": (0, math.inf, False, False), "momentum": (0, 1, True, False),
    "weight_decay": (0, math.inf, True, False), "trust_coefficient": (0, math.inf, False, False),
    "drop_factor": (0, 1, False, False), "warmup_epochs": (0, 1e6, True, True),
    # seconds: up to about 116 days
    **dict.fromkeys(("timeout", "join_timeout", "heartbeat_timeout"), (0, 1e7, False, True)),
    "epochs": (0, 1e6, False, True), "minutes": (0, 1e8, False, True),
    "step_seconds": (0, 1e6, False, True)}
#: The largest count or interval any setting takes: above it a value is a mistake
#: (a slip of the keyboard), not a plan.
MAX_COUNT = 10**9
#: The integer settings: (least, most). Workers are started on this one machine; a
#: language model's dimension above 65536 is a slip, not a model for this trainer.
INTEGERS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("workers", "groups"), (1, 1024)),
    **dict.fromkeys(("batch_size", "patience", "steps", "min_workers"), (1, MAX_COUNT)),
    **dict.fromkeys(("context", "layers", "width", "heads"), (1, 65536)),
    **dict.fromkeys(("bn_recalibrate", "checkpoint_every", "restarts", "eval_tokens"),
                    (0, MAX_COUNT))}
#: ``--eval-every``: whole steps (``200``) or seconds (``30s``, ``2.5s``).
EVAL_EVERY = r"(\d+)|(\d+(?:\.\d*)?|\.\d+)\s*(?:s|sec|seconds)"


def flag(name: str) -> str:
    """A setting's command-line spelling without the dashes: ``pull_global`` -> ``pull-global``."""
    return name.replace("_", "-")


def within(value: float, low: float, high: float, low_ok: bool, high_ok: bool) -> bool:
    """Whether ``value`` is finite and in the range (see :data:`RANGES`); never for NaN."""
    return (math.isfinite(value) and (low < value or low_ok and value == low)
            and (value < high or high_ok and value == high))


def range_text(low: float, high: float, low_ok: bool, high_ok: bool) -> str:
    """The range as words: ``a finite number > 0`` or ``in [0, 1)``."""
    if high == math.inf:
        return f"a finite number {'>=' if low_ok else '>'} {_number(low)}"
    return f"in {'[' if low_ok else '('}{_number(low)}, {_number(high)}{']' if high_ok else ')'}"


def _number(value: float) -> str:
    """``1000000`` rather than ``1e+06``; ``0.5`` as it is."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def as_float(text: str) -> float:
    """``text`` as a number; NaN when it is none."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def eval_every_errors(text: str) -> list[str]:
    """What is wrong with an ``--eval-every`` value (nothing for ``auto``)."""
    if text == "auto":
        return []
    match = re.fullmatch(EVAL_EVERY, text)
    if match is None:
        return [f"--eval-every {text!r}: give a whole number of steps (200) or seconds (30s)"]
    value = float(match.group(1) if match.group(1) is not None else match.group(2))
    unit = "steps" if match.group(1) is not None else "seconds"
    if not 0 < value <= MAX_COUNT:
        return [f"--eval-every {text!r}: the {unit} between evaluations must be above 0 and "
                f"at most {MAX_COUNT}, e.g. 200 or 30s"]
    return []
