"""A link between nodes, as the command line spells it: ``RATE[,LATENCY]``, rates in
``bit``, ``kbit``, ``mbit`` or ``gbit`` per second (decimal, as ``tc`` reads them),
one-way latencies in ``s``, ``ms`` or ``us``: ``"100mbit"``, ``"20mbit,5ms"``.
"""

from __future__ import annotations

import dataclasses
import math
import re

RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_LINK = re.compile(_NUMBER + r"\s*(bit|kbit|mbit|gbit)(?:\s*,\s*" + _NUMBER + r"\s*(s|ms|us))?")
FORM = ("RATE[,LATENCY], e.g. 100mbit, 1gbit or 20mbit,5ms (rate in bit/kbit/mbit/gbit, "
        "latency in s/ms/us)")


@dataclasses.dataclass(frozen=True)
class Link:
    """A link of ``rate`` bits per second each way and ``latency`` seconds one way."""

    rate: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError("link rate must be a positive number of bits per second, got "
                             f"{self.rate!r}")
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"link latency must be a number of seconds >= 0, got {self.latency!r}")

    def __str__(self) -> str:
        whole = [unit for unit in ("gbit", "mbit", "kbit")
                 if self.rate >= RATE_UNITS[unit] and (self.rate / RATE_UNITS[unit]).is_integer()]
        rate = (f"{int(self.rate / RATE_UNITS[whole[0]])}{whole[0]}" if whole
                else f"{self.rate:g}bit")
        if not self.latency:
            return rate
        for unit in ("s", "ms", "us"):
            value = self.latency / TIME_UNITS[unit]
            if value >= 1 and round(value, 6).is_integer():
                return f"{rate},{int(round(value))}{unit}"
        return f"{rate},{self.latency * 1e6:g}us"

    def seconds(self, nbytes: float) -> float:
        """Time for ``nbytes`` to cross the link: latency plus bytes over rate."""
        return self.latency + 8.0 * nbytes / self.rate


def parse_link(text: str | Link) -> Link:
    """``"100mbit"`` or ``"20mbit,5ms"`` as a :class:`Link`; ``ValueError`` naming the form."""
    if isinstance(text, Link):
        return text
    match = _LINK.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"link: expected {FORM}; got {text!r}")
    rate = float(match[1]) * RATE_UNITS[match[2]]
    latency = float(match[3]) * TIME_UNITS[match[4]] if match[3] else 0.0
    if rate <= 0:
        raise ValueError(f"link: the rate must be above zero; got {text!r}")
    return Link(rate, latency)
