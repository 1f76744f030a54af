"""Communication volume: bytes per worker per step, and the seconds of one round.

Counted (in the simulator, which counts what gloo sends): each method trains the model
on 4 workers of one group for a whole number of its periods; the bytes each worker sent
per local step, the algorithm's value (``B`` the model's parameter bytes, ``W`` the
workers, ``p`` the period; docs/algorithms.md) and the ratio to all-reduce; compressed
rounds counted as they travel, their blocks' scales included.

Timed (on links the kernel shapes; needs root): 4 nodes of one worker; one broadcast of
the state (what LSGD's round moves, besides one score per worker) as gloo's binomial tree
and as lsgd's pipelined chain, next to the limit ``B / rate`` no broadcast from one node beats.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

import lsgd
from lsgd.bench.common import Result, median, train_step
from lsgd.comm import codec, sparse
from lsgd.links import netns, parse_link
from lsgd.models import build_model

WORKERS = 4
METHODS = ("allreduce", "lsgd", "easgd", "local-sgd", "dpsgd",
           "lsgd bf16", "lsgd int8", "local-sgd bf16", "local-sgd int8", "local-sgd 2bit",
           "local-sgd topk", "sparseloco", "demo")
PERIODS = (1, 4, 16, 64)


def _gathered(label: str, model: Any) -> float:
    """The payload of one worker's gathered message (top-k, 2-bit, DeMo's DCT blocks), by
    the format's byte count (docs/algorithms.md, "Gathered messages")."""
    values = sum(p.numel() for p in model.parameters())
    if label == "demo":
        return lsgd.DeMo.payload_fraction(model) * 4 * values
    chunk, rows = 4096, -(-values // 4096)
    k, kind = {"sparseloco": (sparse.density_to_k(0.1, chunk), "2bit"),
               "local-sgd topk": (sparse.density_to_k(0.01, chunk), "float32"),
               "local-sgd 2bit": (chunk, "2bit")}[label]
    return sparse.SparseFormat(k, kind).nbytes(rows, chunk)


def _theory(label: str, period: int, b: float, w: int, model: Any = None) -> float:
    """Bytes per worker per step that the algorithm sends (means over the workers); a
    compressed round sends the codec's share of the state's bytes; a gathered one
    ``(w - 1)`` payloads (a ring all-gather)."""
    method, _, compress = label.partition(" ")
    if label in ("sparseloco", "demo") or compress in ("2bit", "topk"):
        return (w - 1) * _gathered(label, model) / (1 if label == "demo" else period)
    if compress:
        values = int(b // 4)
        return _theory(method, period, b, w) * codec.nbytes(compress, values) / (4 * values)
    ring = 2 * (w - 1) / w * b  # one all-reduce (allreduce's period is 1)
    per_round = {"allreduce": ring, "easgd": ring, "local-sgd": ring,
                 "lsgd": (w - 1) / w * b,  # a tree broadcast of B; the scores left out
                 "dpsgd": 2 * b}  # a ring: B to each of 2 neighbours every gossip
    return per_round.get(method, math.nan) / period


def _count(info: lsgd.WorkerInfo, label: str, period: int, steps: int, model: str
           ) -> dict[str, float]:
    torch.manual_seed(0)
    net = build_model(model, (1, 28, 28), 10)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    method, _, compress = label.partition(" ")
    knobs: dict[str, Any] = {} if method in ("allreduce", "demo") else {"period": period}
    if compress:
        knobs["compress"] = compress
    strategy = lsgd.make_strategy(method, net, opt, **knobs)
    start = strategy.report().bytes_sent  # the initial broadcast is not a step's traffic
    g = torch.Generator().manual_seed(info.rank)
    for _ in range(steps):
        train_step(strategy.model, opt, torch.randn(2, 1, 28, 28, generator=g),
                   torch.randint(0, 10, (2,), generator=g), strategy)
    return {"bytes": (strategy.report().bytes_sent - start) / steps}


def _broadcasts(info: lsgd.WorkerInfo, values: int, repeats: int) -> dict[str, float]:
    comm = lsgd.get_communicator()
    state = torch.zeros(values)
    seconds: dict[str, float] = {}
    for name, pipelined in (("tree", False), ("chain", True)):
        comm.pipelined_broadcast = pipelined
        times = []
        for _ in range(repeats):
            comm.barrier()
            start = time.perf_counter()
            comm.broadcast_(state, src=0)
            comm.barrier()
            times.append(time.perf_counter() - start)
        seconds[name] = median(times)
    return seconds


def run(out: Path, quick: bool, options: dict[str, Any]) -> Result:
    model = options.get("model") or ("mlp" if quick else "cnn7")
    periods = (1, 4) if quick else PERIODS
    steps = 8 if quick else 128
    net = build_model(model, (1, 28, 28), 10)
    b = float(sum(p.numel() * p.element_size() for p in net.parameters()))
    allreduce = _theory("allreduce", 1, b, WORKERS)
    rows: list[list[Any]] = []
    counted: dict[str, Any] = {}
    for method in METHODS:
        for period in (1,) if method in ("allreduce", "demo") else periods:
            result = lsgd.simulate(_count, WORKERS, 1, args=(method, period, steps, model))
            measured = sum(r["bytes"] for r in result) / WORKERS
            theory = _theory(method, period, b, WORKERS, net)
            counted[f"{method}/{period}"] = {"measured": measured, "theory": theory}
            rows.append([method, period, measured, theory, measured / b,
                         allreduce / measured if measured else None])
    links = options.get("links") or (["200mbit"] if quick else ["1gbit", "100mbit", "20mbit"])
    timed, timing_notes = _timed_rounds(b, links, repeats=2 if quick else 5)
    notes = [f"{model}: B = {b / 1e6:.3f} MB of parameters, {WORKERS} workers, {steps} steps; "
             "bytes sent per worker per local step, the algorithm's value, B per step, and "
             "how many times less than all-reduce (higher is better); sparseloco: "
             "top 10% of every 4096 in 2-bit values; local-sgd topk: top 1% in float32; "
             "demo: top 32 DCT coefficients of every block, every step.",
             "lsgd's theory leaves out the all-gather of one score per worker at each "
             "round (4 bytes per worker and round) and the extra round LSGD holds after "
             "its first step (to elect a first leader), which short runs feel most.",
             *timing_notes]
    return Result("volume", "Communication volume per worker and step, and one round's seconds",
                  ["method", "period", "bytes/step", "theory", "B per step",
                   "x less than allreduce"], rows, notes,
                  {"B": b, "model": model, "counted": counted, "timed": timed},
                  _figure(out, rows))


def _timed_rounds(b: float, links: list[str], repeats: int
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """One broadcast of the state timed on each shaped link (tree and chain); the timings
    and two notes of them."""
    try:
        netns.check_tools()
    except netns.LinkSetupError as error:
        return [], [f"shaped-link timings not measured: {error}", ""]
    timed = []
    for link in links:
        spec = parse_link(link)
        results = lsgd.launch(_broadcasts, WORKERS, WORKERS, args=(int(b // 4), repeats),
                              link=link, timeout=300)
        # The least any transfer can take: what the token bucket does not let through at once.
        floor = 8 * max(0.0, b - netns.burst_bytes(spec)) / spec.rate
        timed.append({"link": link, "tree": max(r["tree"] for r in results),
                      "chain": max(r["chain"] for r in results), "limit": 8 * b / spec.rate,
                      "floor": floor})
    lines = [f"  {t['link']:>8}: tree {t['tree']:.3f} s ({t['tree'] / t['limit']:.2f} x limit), "
             f"chain {t['chain']:.3f} s ({t['chain'] / t['limit']:.2f} x limit), "
             f"limit {t['limit']:.3f} s" for t in timed]
    return timed, ["one broadcast of B from one node to the 3 others over links the kernel "
                   "shapes (median of the repeats, slowest worker), next to the limit B/rate:",
                   "\n".join(lines)]


def _figure(out: Path, rows: list[list[Any]]) -> list[str]:
    """Bytes per step over B against the period, one line per method."""
    from lsgd.plots import log_log_axes, pyplot, save

    plt = pyplot()
    if plt is None:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method in METHODS:
        mine = [row for row in rows if row[0] == method]
        ax.plot([row[1] for row in mine], [row[4] for row in mine], marker="o", label=method)
    log_log_axes(ax, "period (steps between rounds; gossip period for dpsgd)",
                 "bytes sent per worker per step / B")
    return [str(save(fig, out / "volume.png"))]
