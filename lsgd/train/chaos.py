"""``lsgd train --chaos SEED``: a reproducible schedule of faults at random.

Faults arrive as a Poisson process (exponential gaps of mean ``--chaos-mtbf`` seconds) over
the run's ``--minutes`` (ten without it; those due after the run ended never fire), a worker's
at a second of the training clock (``@S``), a link's at a wall second after the first training
step; each takes a kind from ``--chaos-kinds`` and a node (and a worker of it) uniformly.
Fatal kinds (kill, segv, kill-node, corrupt-checkpoint) are capped at what ``--restarts``
allows: per node where each node restarts on its own (elastic runs, shaped nodes), else in
all; a draw over the cap becomes another kind drawn, or is dropped. A stopped worker or a link
down is out for 1 to min(10, ``--timeout``/2) seconds, a slow link runs at a tenth of
``--link`` for 3 to 10 seconds. The schedule is written as ``--fault`` items, so the run's
``config.toml`` replays it without ``--chaos``.
"""

from __future__ import annotations

import random
from typing import Any

from lsgd.train.faults import FATAL, FIELDS, config_errors, nodes_of

DEFAULT_MINUTES = 10.0


def kinds_of(cfg: Any) -> list[str]:
    """``--chaos-kinds`` as a list."""
    return [k.strip() for k in str(cfg.faults.chaos_kinds).split(",") if k.strip()]


def errors(cfg: Any) -> list[str]:
    """What is wrong with the --chaos settings for this run (one line each, with the fix)."""
    if cfg.faults.chaos is None:
        return []
    found = []
    kinds = kinds_of(cfg)
    if not kinds or any(kind not in FIELDS for kind in kinds):
        found.append(f"--chaos-kinds {cfg.faults.chaos_kinds!r}: choose among "
                     f"{', '.join(FIELDS)}, comma-separated")
    if not cfg.faults.chaos_mtbf > 0:
        found.append(f"--chaos-mtbf {cfg.faults.chaos_mtbf}: give the mean seconds between faults, "
                     "above 0 (e.g. 30)")
    if cfg.faults.chaos < 0:
        found.append(f"--chaos {cfg.faults.chaos}: give a seed of 0 or more")
    if found:
        return found
    for kind in kinds:  # each kind's fit to this run, said once, from one that fits any
        problems = config_errors(cfg.but(fault=[_spec(kind, cfg, 0, 0, "1.0", "1.0")]))
        found += [f"--chaos-kinds {kind}: " + p.split(": ", 1)[1] for p in problems]
    return found


def _spec(kind: str, cfg: Any, node: int, rank: int, second: str, lasts: str) -> str:
    """The ``--fault`` item of ``kind`` at ``second`` of the run (a worker's training clock, a
    link's wall clock), out for ``lasts`` seconds; a slow link at a tenth of ``--link``."""
    from lsgd.links.spec import parse_link

    rate = f"{max(1.0, parse_link(cfg.link).rate / 10):.0f}bit" if cfg.link else "1mbit"
    values = {"rank": rank, "node": node, "step": f"@{second}", "second": second,
              "seconds": lasts, "rate": rate}
    return ":".join([kind, *(str(values[name]) for name in FIELDS[kind])])


def draw(cfg: Any, count: int | None = None) -> list[str]:
    """The ``--fault`` items of ``--chaos`` for ``cfg`` (validated by :func:`errors`); with
    ``count``, exactly that many at uniform times (the Poisson process given its count)."""
    rng = random.Random(cfg.faults.chaos)
    kinds = kinds_of(cfg)
    horizon = 60.0 * (cfg.minutes or DEFAULT_MINUTES)
    if count is not None:
        times = iter(sorted(rng.uniform(0.0, horizon) for _ in range(count)))
    nodes = nodes_of(cfg)
    per_node = max(1, cfg.workers // nodes)
    separate = bool(cfg.elastic or cfg.link)  # each node restarts on its own
    fatal: dict[int, int] = {}
    out_for = (1.0, max(1.0, min(10.0, cfg.timeout / 2)))
    specs: list[str] = []
    second = 0.0
    while True:
        if count is None:
            second += rng.expovariate(1.0 / cfg.faults.chaos_mtbf)
        else:
            second = next(times, horizon)
        if second >= horizon:
            return specs
        kind = rng.choice(kinds)
        node = rng.randrange(nodes)
        rank = node * per_node + rng.randrange(per_node)
        if kind == "corrupt-checkpoint":
            node, rank = 0, 0
        if kind in FATAL:
            key = node if separate else 0
            if fatal.get(key, 0) >= cfg.faults.restarts:
                others = [k for k in kinds if k not in FATAL]
                if not others:
                    continue
                kind = rng.choice(others)
            else:
                fatal[key] = fatal.get(key, 0) + 1
        lasts = (rng.uniform(*out_for) if kind in ("stop", "link-down")
                 else rng.uniform(3.0, 10.0) if kind == "slow" else 0.0)
        specs.append(_spec(kind, cfg, node, rank, f"{second:.1f}", f"{lasts:.1f}"))


def with_chaos(cfg: Any) -> Any:
    """``cfg`` with its ``--chaos`` schedule drawn into ``fault`` (and ``chaos`` cleared)."""
    if cfg.faults.chaos is None:
        return cfg
    return cfg.but(fault=[*cfg.faults.fault, *draw(cfg)], chaos=None)
