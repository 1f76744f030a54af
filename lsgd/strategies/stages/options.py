"""The options of an averaging round, declared once: how a round hides, what its
message is compressed to, the error feedback, and the leader's force. :func:`plan`
checks them into the :class:`RoundPlan` a :class:`~lsgd.strategies.stages.round.Round`
is built from.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from lsgd import _validate
from lsgd.comm.sparse import SparseFormat, density_to_k
from lsgd.names import GATHERED_CODECS, ROUND_CODECS, SPARSE_VALUES
from lsgd.strategies.pipeline import check_options
from lsgd.strategies.stages.land import check_merge

DENSITY = 0.01  # compress="topk": the share of each chunk's entries a message keeps
CHUNK = 4096  # values per chunk of a gathered message (top-k, and 2-bit levels)


class RoundOptions(TypedDict, total=False):
    """The keywords of an averaging round (each stage's module says more).

    overlap: K in ``[0, period)``, steps between a round's start and its landing.
    fragments: F, parts of the state sent in turn, one every ``period / F`` steps.
    compress: ``"none"``, ``"bf16"``, ``"int8"`` (all-reduced), ``"2bit"`` (sign and one
        magnitude bit) or ``"topk"`` (all-gathered, :mod:`lsgd.comm.sparse`); compressed, a
        worker sends its difference from a reference every worker holds.
    merge: with overlap, ``"keep"``, ``"replace"`` or ``"mix"`` (:mod:`.land`).
    error_feedback, feedback_decay: with compression, what the codec dropped goes with the
        next message, the accumulator decayed by β in [0, 1] (default 1; :mod:`.feedback`).
    density, chunk, values: ``"topk"``'s share of each chunk kept, in (0, 1] (default
        0.01), and kept values' format (``"float32"``, ``"int8"``, ``"2bit"``); the values
        per chunk of ``"topk"`` or ``"2bit"`` (default 4096).
    leader, leader_weight, leader_pull: ``"none"``, ``"weights"`` (with c >= 0, default 1)
        or ``"pull"`` (with λ in [0, 1], default 0.5), :mod:`.leader_force`; ``step(loss)``
        then needs the loss.
    """

    overlap: int
    fragments: int
    compress: str
    merge: str | None
    error_feedback: bool
    feedback_decay: float
    density: float | None
    chunk: int | None
    values: str | None
    leader: str
    leader_weight: float | None
    leader_pull: float | None


#: The options a method takes only when it says so (``takes`` of :func:`plan`).
OPTIONAL = {"merge": ("merge",), "leader": ("leader", "leader_weight", "leader_pull")}


def option_names(takes: tuple[str, ...]) -> list[str]:
    """The round options of a method that takes the optional groups ``takes``."""
    refused = {key for group, keys in OPTIONAL.items() if group not in takes for key in keys}
    return [key for key in RoundOptions.__annotations__ if key not in refused]


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """The checked options of an averaging round."""

    overlap: int = 0
    fragments: int = 1
    compress: str = "none"
    merge: str = "keep"
    error_feedback: bool = False
    feedback_decay: float = 1.0
    fmt: SparseFormat | None = None  # a gathered message's format
    chunk: int = CHUNK
    leader: str = "none"
    leader_weight: float | None = None
    leader_pull: float | None = None

    @property
    def gathers(self) -> bool:
        """Whether the message is all-gathered (each worker's kept entries its own)."""
        return self.fmt is not None


def plan(owner: str, period: int, options: dict[str, Any], *, merge: str,
         asynchronous: bool = False, takes: tuple[str, ...] = ()) -> RoundPlan:
    """Check (and pop) a method's round ``options``; ``takes``: its optional groups."""
    given = {key: options.pop(key) for key in list(options) if key in RoundOptions.__annotations__}
    for group, keys in OPTIONAL.items():
        refused = [key for key in keys if key in given and group not in takes
                   and given[key] not in (None, "none")]
        if refused:
            raise ValueError(f"{owner}: {refused[0]}={given[refused[0]]!r} is not an option "
                             f"of {owner}; drop it")
    compress = given.get("compress", "none")
    _validate.choice(owner, "compress", compress, ROUND_CODECS)
    overlap, fragments, _ = check_options(
        owner, period, given.get("overlap", 0), given.get("fragments", 1),
        "none" if compress in GATHERED_CODECS else compress, asynchronous)
    if asynchronous and compress != "none":
        raise ValueError(f"{owner}: compress={compress!r} needs synchronous rounds; drop "
                         "asynchronous=True or compress")
    merge = check_merge(owner, given.get("merge"), overlap, merge)
    feedback = bool(given.get("error_feedback", False))
    if feedback and compress == "none":
        raise ValueError(f"{owner}: error_feedback=True adds what a codec dropped to the next "
                         "message, and compress='none' drops nothing: give compress or drop "
                         "error_feedback")
    decay = given.get("feedback_decay", 1.0)
    if "feedback_decay" in given and not feedback:
        raise ValueError(f"{owner}: feedback_decay={decay!r} decays the error feedback's "
                         "accumulator; give error_feedback=True or drop feedback_decay")
    decay = _validate.fraction(owner, "feedback_decay", decay)
    return RoundPlan(overlap, fragments, compress, merge, feedback, decay,
                     *_gathered(owner, compress, given),
                     leader=given.get("leader", "none"),
                     leader_weight=given.get("leader_weight"),
                     leader_pull=given.get("leader_pull"))


def _gathered(owner: str, compress: str, given: dict[str, Any]) -> tuple[SparseFormat | None, int]:
    """The format of a gathered message (None: all-reduced) and its chunk."""
    for key, codecs in (("density", ("topk",)), ("values", ("topk",)), ("chunk", GATHERED_CODECS)):
        if given.get(key) is not None and compress not in codecs:
            raise ValueError(f"{owner}: {key}={given[key]!r} shapes a "
                             f"{' or '.join(repr(c) for c in codecs)} message; give "
                             f"compress={codecs[0]!r} or drop {key}")
    if compress not in GATHERED_CODECS:
        return None, CHUNK
    chunk = given.get("chunk")
    chunk = CHUNK if chunk is None else _validate.positive_int(owner, "chunk", chunk)
    if compress == "2bit":
        return SparseFormat(chunk, "2bit"), chunk
    density = DENSITY if given.get("density") is None else given["density"]
    if not _validate.is_number(density, finite=True) or not 0 < density <= 1:
        raise ValueError(f"{owner}: density must be a number in (0, 1], the share of each "
                         f"chunk's entries a message keeps (e.g. 0.01), got {density!r}")
    values = _validate.choice(owner, "values", given.get("values") or "float32", SPARSE_VALUES)
    return SparseFormat(density_to_k(float(density), chunk), values), chunk
