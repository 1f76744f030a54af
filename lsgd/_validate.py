"""Checks for user-supplied hyperparameters: each raises ``ValueError`` naming the owner,
the parameter, the offending value and what would be accepted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (``True``/``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any, finite: bool = False) -> bool:
    """Whether ``value`` is a real number (not a bool), and finite if asked."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) or not finite


def fraction(owner: str, name: str, value: Any) -> float:
    """``value`` as a float in [0, 1]."""
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{owner}: {name} must be a number in [0, 1], got {value!r}")
    return float(value)


def momentum(owner: str, name: str, value: Any) -> float:
    """``value`` as a float in [0, 1) (a momentum coefficient)."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: {name} must be a number in [0, 1), got {value!r}")
    return float(value)


def positive_int(owner: str, name: str, value: Any) -> int:
    """``value`` as an int >= 1."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def choice(owner: str, name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` if it is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        options = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{owner}: {name} must be one of {options}, got {value!r}")
    return value


def multiple_of(owner: str, name: str, value: int, base_name: str, base: int) -> int:
    """``value`` if it is a multiple of ``base``."""
    if value % base != 0:
        raise ValueError(f"{owner}: {name} must be a multiple of {base_name}={base}, got "
                         f"{name}={value}")
    return value
