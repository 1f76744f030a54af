"""AL-DSGD's claims judged from the runs of the aldsgd study (:mod:`studies.aldsgd`):
per claim and setting, "holds", "does not hold" or "not shown", with the numbers.

The rule: each claim compares one method with a baseline on one measure over the
same seeds (time to the target, lower is better, a missed target counting as
infinitely late; the center at the end, or the lowest-degree workers' own models at
the end: accuracy higher is better, validation loss lower). The claim **holds** where
the two ranges [min, max] over the seeds do not overlap and the method's is on the
better side, **does not hold** where they do not overlap and the baseline's is on the
better side, and is **not shown** where they overlap (or where neither reached the
target). Claim (b) is judged on the irregular graphs only (on the ring every worker
has the same degree). The table is docs/decentralized.md's, re-derived from
records/aldsgd by the tests (:mod:`studies.records`, block kind ``claims``).
"""

from __future__ import annotations

import math
from typing import Any

from studies.aldsgd import span, time_to

#: (claim, what is compared, measure, method, baseline, graphs: None = every graph)
CLAIMS: list[tuple[str, str, str, str, str, tuple[str, ...] | None]] = [
    ("(a)", "faster to the target than D-PSGD", "time", "AL-DSGD", "D-PSGD", None),
    ("(a)", "better center at equal steps than D-PSGD", "final", "AL-DSGD", "D-PSGD", None),
    ("(a)", "grid p 0.3: faster to the target than D-PSGD", "time", "AL-DSGD p 0.3",
     "D-PSGD", None),
    ("(a)", "grid p 0.3: better center at equal steps than D-PSGD", "final", "AL-DSGD p 0.3",
     "D-PSGD", None),
    ("(a)", "at budget 0.5: faster to the target than MATCHA 0.5", "time",
     "AL-DSGD budget 0.5", "MATCHA 0.5", None),
    ("(a)", "at budget 0.5: better center at equal steps than MATCHA 0.5", "final",
     "AL-DSGD budget 0.5", "MATCHA 0.5", None),
    ("(b)", "dynamic graphs: lowest-degree workers better than AL-DSGD on one graph",
     "lowest", "AL-DSGD dynamic", "AL-DSGD", ("erdos-renyi", "imbalanced")),
    ("(b)", "dynamic graphs: lowest-degree workers better than D-PSGD's", "lowest",
     "AL-DSGD dynamic", "D-PSGD", ("erdos-renyi", "imbalanced")),
    ("(b)", "dynamic graphs: lowest-degree workers better than D-PSGD on the same two graphs",
     "lowest", "AL-DSGD dynamic", "D-PSGD dynamic", ("erdos-renyi", "imbalanced")),
]
NOT_MEASURED = "not yet measured"


def verdict(mine: list[float], theirs: list[float], lower_is_better: bool,
            digits: int = 3) -> str:
    """"holds", "does not hold" or "not shown" for a method's values against a
    baseline's (one per seed; ``math.inf`` for a missed target), each rounded to the
    ``digits`` the table shows: see the module text."""
    if not mine or not theirs:
        return NOT_MEASURED
    sign = 1.0 if lower_is_better else -1.0
    a = sorted(sign * round(v, digits) if v != math.inf else sign * v for v in mine)
    b = sorted(sign * round(v, digits) if v != math.inf else sign * v for v in theirs)
    if a[-1] < b[0]:
        return "holds"
    if b[-1] < a[0]:
        return "does not hold"
    return "not shown"


def _values(runs: list[dict[str, Any]], measure: str, target: float) -> list[float]:
    if measure == "time":
        return [math.inf if (t := time_to(r, target)) is None else t for r in runs]
    return [r[measure] for r in runs]


def _text(values: list[float], digits: int) -> str:
    return span([None if v == math.inf else v for v in values], digits)


def claims(data: dict[str, Any]) -> list[list[str]]:
    """The rows [claim, setting, verdict, numbers] from the ``data`` of the aldsgd
    study's result (its ``aldsgd.json``): every claim on every setting it ran."""
    runs, settings = data.get("runs", []), data.get("settings", {})
    rows = []
    for claim, what, measure, method, baseline, graphs in CLAIMS:
        for task, setting in settings.items():
            for graph in setting["graphs"]:
                if graphs is not None and graph not in graphs:
                    continue
                of = {label: [r for r in runs if (r["task"], r["graph"], r["method"])
                              == (task, graph, label)] for label in (method, baseline)}
                lower = measure == "time" or setting["metric"] == "loss"
                mine, theirs = (_values(of[label], measure, setting["target"])
                                for label in (method, baseline))
                digits = 1 if measure == "time" else 4 if setting["metric"] == "loss" else 3
                found = verdict(mine, theirs, lower, digits)
                numbers = ("-" if found == NOT_MEASURED else
                           f"{method} {_text(mine, digits)} vs {baseline} "
                           f"{_text(theirs, digits)}")
                rows.append([f"{claim} {what}", f"{task} {graph}", found, numbers])
    return rows


def markdown(data: dict[str, Any]) -> str:
    """The claims table as docs/decentralized.md shows it."""
    lines = ["| claim | setting | verdict | numbers |", "|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in claims(data)])

