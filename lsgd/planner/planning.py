"""``lsgd.plan(...)``: each form of a method as the collectives it starts in its cycle of
steps (:func:`forms`), priced by the simulator's link model (a link per node, free inside
one) and replayed on one worker's clock (:func:`step_seconds`); the seconds per step, bytes
per node and link rates that leaves. What is not planned: docs/plan.md, "Left out"."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lsgd.comm import codec as codecs
from lsgd.comm.chain import chain_heads, chunk_count
from lsgd.comm.sparse import SparseFormat
from lsgd.comm.wire import (LinkModel, broadcast_pattern, compressed_all_reduce_traffic,
                            ring_allreduce_bytes, ring_traffic)
from lsgd.dct import block_shape
from lsgd.links.spec import RATE_UNITS, parse_link
from lsgd.method_options import OPTIONS, option_names
from lsgd.models.gpt import count_parameters
from lsgd.names import GATHERED_CODECS, LANGUAGE_MODELS
from lsgd.planner.goodput import MODES, goodput
from lsgd.registry import strategy_class
from lsgd.strategies.pipeline import check_options
from lsgd.strategies.stages.options import RoundPlan
from lsgd.strategies.stages.options import plan as round_plan
from lsgd.train.settings import LanguageSettings

METHODS = ("allreduce", "diloco", "local-sgd", "easgd", "sparseloco", "demo", "muloco", "lsgd")
TARGETS = (90, 95, 99)  # utilization, percent
SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([kmgb]?)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Send:
    """A collective started after step ``at`` of the cycle and waited for ``lands`` steps
    later (0: blocking), taking ``stages * latency + bits / rate`` seconds; ``nbytes``
    cross a node's link. ``control``: on the control lane, before that step's landings."""

    at: int
    stages: float
    bits: float
    nbytes: float
    lands: int = 0
    control: bool = False

    def seconds(self, rate: float, latency: float) -> float:
        return self.stages * latency + self.bits / rate


@dataclasses.dataclass(frozen=True)
class Form:
    """A method with its knobs: the sends of its cycle of steps."""

    name: str
    method: str
    knobs: str
    cycle: int
    sends: tuple[Send, ...]


class Net:
    """Collectives among ``workers`` in ``groups`` nodes as :class:`Send` s: their stages
    and bits from LinkModel, their bytes from lsgd.comm.wire."""

    def __init__(self, workers: int, groups: int) -> None:
        size = workers // groups
        self.groups, self.m, self.first = groups, list(range(workers)), range(size)
        self.node: Callable[[int], int] = lambda rank: rank // size
        # Communicator._chained: a broadcast across nodes goes along the nodes' heads
        self.heads = chain_heads(0, groups, size) if groups > 1 and workers > 2 else None

    def _send(self, op: Callable[[LinkModel], float], nbytes: float, **when: Any) -> Send:
        stages, bits = (op(LinkModel(rate, latency, self.node))
                        for rate, latency in ((math.inf, 1.0), (1.0, 0.0)))
        return Send(stages=stages, bits=bits, nbytes=nbytes, **when)

    def _ring(self, per_hop: float) -> float:  # what the first node sends (as every node)
        return sum(ring_traffic(per_hop, self.m, r, self.node).link_sent for r in self.first)

    def all_reduce(self, numel: int, codec: str = "none", width: int = 4, **when: Any) -> Send:
        m = self.m
        if codec == "none":
            size = width * numel
            return self._send(lambda link: link.all_reduce(size, m),
                              self._ring(ring_allreduce_bytes(size, len(m))), **when)
        sizes = codecs.part_sizes(codec, numel, len(m))  # the simulator's _modeled
        sent = sum(compressed_all_reduce_traffic(sizes, m, r, self.node).link_sent
                   for r in self.first)
        return self._send(lambda link: link.all_to_all(sizes, m)
                          + link.all_gather(max(sizes), m), sent, **when)

    def all_gather(self, nbytes: int, **when: Any) -> Send:
        return self._send(lambda link: link.all_gather(nbytes, self.m),
                          self._ring((len(self.m) - 1) * nbytes), **when)

    def broadcast(self, nbytes: int, **when: Any) -> Send:
        heads = self.heads
        moves = broadcast_pattern(nbytes, self.m, 0, "tree", heads)
        moved = sum(b for a, c, b in moves if self.node(a) != self.node(c)) / self.groups
        return self._send(lambda link: link.broadcast(nbytes, self.m, 0) if heads is None
                          else link.broadcast(nbytes, heads, 0, "chain", chunk_count(nbytes)),
                          moved, **when)

    def message(self, numel: int, plan: RoundPlan, **when: Any) -> Send:
        """A round's message of ``numel`` values: all-reduced in its codec, or its payload
        (top-k, 2-bit) all-gathered."""
        if plan.fmt is None:
            return self.all_reduce(numel, plan.compress, **when)
        return self.all_gather(plan.fmt.nbytes(math.ceil(numel / plan.chunk), plan.chunk), **when)


def powersgd_values(shapes: Sequence[tuple[int, ...]], rank: int) -> list[int]:
    """Values of PowerSGD's three all-reduces, as torch's powerSGD_hook splits the
    gradients (min_compression_rate 2): the tensors left whole, the Ps, the Qs."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    whole = ps = qs = 0
    for shape in shapes:
        n, m = (shape[0], math.prod(shape[1:])) if shape else (1, 1)
        kept = min(n, m, rank)
        if _should_compress(n, m, kept, 2)[0]:
            ps, qs = ps + n * kept, qs + m * kept
        else:
            whole += n * m
    return [whole, ps, qs]


def step_seconds(form: Form, compute: float, rate: float, latency: float,
                 cycles: int = 40) -> float:
    """Seconds per step once what is in flight at a cycle's end repeats (at most
    ``cycles``), or the busiest lane's per cycle if more. The clock moves as
    :mod:`lsgd.comm.world` moves a worker's: the compute, the control lane's sends, the
    transfers due land (waiting for what is left of them), then the other sends start
    (blocking, or behind the earlier ones of their lane)."""
    clock, lanes, pending, ends, state = 0.0, {}, [], [0.0], None
    for step in range(1, cycles * form.cycle + 1):
        clock += compute
        at = step % form.cycle
        for control in (True, False):
            for send in (s for s in form.sends if s.at == at and s.control == control):
                if send.lands == 0:
                    clock += send.seconds(rate, latency)
                    continue
                lanes[control] = max(clock, lanes.get(control, 0.0)) + send.seconds(rate, latency)
                pending.append((step + send.lands, lanes[control]))
            if control:
                clock = max([clock] + [end for due, end in pending if due <= step])
                pending = [(due, end) for due, end in pending if due > step]
        if at == 0:
            ends.append(clock)
            now = [round(max(0.0, e - clock), 9) for e in lanes.values()] + [
                (due - step, round(max(0.0, e - clock), 9)) for due, e in pending]
            if now == state:
                break
            state = now
    busiest = max([sum(s.seconds(rate, latency) for s in form.sends
                       if s.lands and s.control == lane) for lane in lanes] + [0.0])
    return max(ends[-1] - ends[-2], busiest) / form.cycle


def rate_for(form: Form, compute: float, latency: float, utilization: float) -> float | None:
    """The least link rate (bit/s) at which ``form`` computes ``utilization`` of the time:
    bisection over the rate, in log space; None if no rate up to 1 Tbit/s does."""
    def enough(rate: float) -> bool:
        return compute / step_seconds(form, compute, rate, latency) >= utilization

    low, high = 1.0, 1e12
    if not enough(high):
        return None
    for _ in range(50):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


@dataclasses.dataclass
class Plan:
    """The inputs, and a row per form: seconds per step (``step_seconds``; of them the
    transfer that ``waits`` for what is left of it when it lands), the transfer that
    ``hides`` behind compute, ``utilization`` (compute / total), ``bytes_per_node`` per
    step, ``rate_90/95/99`` (bit/s; None: none to 1 Tbit/s)."""

    params: int
    workers: int
    groups: int
    link: str
    step_time: float
    rows: list[dict[str, Any]]
    forms: list[Form]
    notes: list[str]
    mtbf: float | None = None

    def table(self) -> str:
        lines = [f"{self.params:,} parameters, {self.workers} workers in {self.groups} nodes, "
                 f"link {self.link}, {self.step_time:.4g} s of compute per step",
                 f"{'form':19} {'knobs':19} s/step   waits    hides    util  MB/node  "
                 "rate for 90/95/99% util" + ("   goodput restart/elastic" if self.mtbf else "")]
        for r in self.rows:
            rates = " / ".join(_rate(r[f"rate_{t}"]) for t in TARGETS)
            kept = " / ".join("-" if r[f"goodput_{m}"] is None else f"{r[f'goodput_{m}']:.1%}"
                              for m in MODES) if self.mtbf else ""
            lines.append(f"{r['form']:19} {r['knobs']:19} {r['step_seconds']:.4f}  "
                         f"{r['waits']:.4f}  {r['hides']:.4f}  {r['utilization']:6.1%} "
                         f"{r['bytes_per_node'] / 1e6:8.4f}  {rates:26} {kept}".rstrip())
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def write(self, out: str | Path) -> list[Path]:
        """``plan.csv``, ``plan.json`` and, with matplotlib, ``plan.png`` (utilization
        against link rate) in ``out``."""
        from lsgd.plots import pyplot, save
        from lsgd.train.outputs import write_csv, write_json

        out, spec, plt = Path(out), parse_link(self.link), pyplot(note=True)
        paths = [out / "plan.csv", out / "plan.json"]
        write_csv(paths[0], self.rows, list(self.rows[0]))
        write_json(paths[1], {k: v for k, v in vars(self).items() if k != "forms"})
        if plt is None:
            return paths
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        rates = [10 ** (5 + i / 8) for i in range(49)]  # 100 kbit/s to 100 Gbit/s
        for i, form in enumerate(self.forms):
            ax.plot(rates, [self.step_time / step_seconds(form, self.step_time, x, spec.latency)
                            for x in rates], "-:"[i // 10], label=form.name, color=f"C{i % 10}")
        ax.axvline(spec.rate, color="grey", linestyle=":")
        ax.set(xscale="log", xlabel="link rate (bit/s)", ylabel="compute utilization")
        ax.set_title(self.table().splitlines()[0], fontsize=8)
        ax.legend(fontsize=7, ncol=2)
        return paths + [save(fig, out / "plan.png")]


def _rate(bits: float | None) -> str:
    if bits is None:
        return "-"
    unit = next((u for u in ("gbit", "mbit", "kbit") if bits >= RATE_UNITS[u]), "bit")
    return f"{bits / RATE_UNITS[unit]:.3g}{unit}"


def parse_size(text: str) -> int:
    """``"124M"``, ``"842k"``, ``"1.5B"`` or ``"5000"`` as a count; ValueError otherwise."""
    match = SIZE.fullmatch(text.strip())
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}
    if not match or (count := round(float(match[1]) * scale[match[2].lower()])) < 1:
        raise ValueError(f"--params {text!r}: give a positive count, e.g. 124M, 842k, 5000")
    return count


def _image(name: str) -> tuple[int, int, int]:
    return (1, 28, 28) if name in ("cnn7", "mlp") else (3, 32, 32)


def build(name: str, device: str = "meta") -> nn.Module:
    """lsgd's model ``name`` as ``lsgd train`` builds it by default (cnn7 and mlp for
    Fashion-MNIST, the other image models for CIFAR-10); ValueError if there is none."""
    from lsgd.models.catalog import build_model
    from lsgd.models.gpt import build_language_model

    s = LanguageSettings()
    with torch.device(device):
        if name in LANGUAGE_MODELS:
            return build_language_model(name, 256, s.context, s.layers, s.width, s.heads)
        try:
            return build_model(name, _image(name), 10)
        except ValueError as error:
            raise ValueError(f"--model {name!r}: {error}; or one of "
                             f"{', '.join(LANGUAGE_MODELS)}") from None


def measure(name: str, device: str = "cpu", steps: int = 5) -> float:
    """Median seconds of a training step (forward, backward, SGD) of model ``name`` on
    ``device`` over ``steps`` (after two), at lsgd train's default batch."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here; give --device cpu or "
                         "--step-time SECONDS")
    model, context, text = build(name, device), LanguageSettings().context, name in LANGUAGE_MODELS
    inputs = (torch.randint(0, 256, (16, context)) if text else
              torch.randn(128, *_image(name))).to(device)
    targets = (torch.randint(0, 256, (16 * context,)) if text else
               torch.randint(0, 10, (128,))).to(device)
    optimizer, times = torch.optim.SGD(model.parameters(), lr=0.01), []
    for _ in range(steps + 2):
        start = time.perf_counter()
        nn.functional.cross_entropy(model(inputs).flatten(0, -2), targets).backward()
        optimizer.step()
        optimizer.zero_grad()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times[2:])[steps // 2]


def _options(method: str, knobs: dict[str, Any]) -> Any:
    """The method's declared options, with the ``knobs`` it takes, checked."""
    from lsgd.train.checks import option_errors

    names = option_names(method)
    options = OPTIONS[method](**{k: v for k, v in knobs.items() if k in names})
    if errors := option_errors(method, options):
        raise ValueError(f"{method}: {'; '.join(errors)} (or leave it out: --methods)")
    return options


def _knobs(h: int, f: int = 1, k: int = 0, codec: str = "none", eager: bool = False) -> str:
    return " ".join([f"H={h}"] + [f"F={f}"] * (f > 1) + [f"K={k}"] * bool(k)
                    + [codec] * (codec != "none") + ["eager"] * eager)


def forms(shapes: list[tuple[int, ...]] | None, numel: int, net: Net,
          knobs: dict[str, Any], methods: Sequence[str]) -> list[Form]:
    """Every form of ``methods`` (``shapes``: the parameters', None when unknown).
    ``allreduce`` all-reduces the gradients every step (``-bf16``: in bfloat16;
    ``-powersgd``: torch's three all-reduces); ``diloco``, ``local-sgd``, ``easgd``,
    ``sparseloco`` and ``muloco`` send the state every ``H`` steps, or one of ``F``
    fragments every ``H/F`` (``-streaming``), blocking or behind ``K`` steps (``-hidden``)
    or the next period (``-eager``); ``demo`` gathers its payload every step; ``lsgd``'s
    global round blocks, or hides behind ``K`` steps (``-hidden``)."""
    out: list[Form] = []
    for method in methods:
        o = _options(method, knobs)
        if method == "allreduce":
            out += [Form("allreduce", method, "", 1, (net.all_reduce(numel, at=0),)),
                    Form("allreduce-bf16", method, "bf16 hook", 1,
                         (net.all_reduce(numel, width=2, at=0),))]
            if shapes is not None:
                rank = o.powersgd or 4
                out.append(Form("allreduce-powersgd", method, f"rank {rank}", 1, tuple(
                    net.all_reduce(v, at=0) for v in powersgd_values(shapes, rank) if v)))
        elif method == "demo":  # the top-k of each parameter's DCT blocks
            side = o.chunk ** 2  # --params: matrices of whole blocks
            shaped = shapes or [(o.chunk, o.chunk)] * (numel // side) + [(numel % side,)]
            blocks = [(math.prod(s), math.prod(block_shape(s, o.chunk))) for s in shaped]
            payload = sum(SparseFormat(min(o.topk, b), o.values).nbytes(n // b, b)
                          for n, b in blocks)
            out.append(Form("demo", method, f"top {o.topk}/{o.chunk}" + " K=1" * o.overlap, 1,
                            (net.all_gather(payload, at=0, lands=o.overlap),)))
        elif method == "lsgd":
            h, f, size = o.period, o.fragments, len(net.m) // net.groups
            top = h if net.groups == 1 else o.global_period or h * (4 if size > 1 else 1)
            if top % h or top % f:
                raise ValueError(f"--global-period {top}: a multiple of --period {h} that "
                                 f"--fragments {f} divides")
            check_options("lsgd", h, o.overlap, f, o.compress, False)
            for name, k in (("lsgd", o.overlap), ("lsgd-hidden", o.overlap or h - 1)):
                # the scores (float64) gathered at the round, or a step early on the
                # control lane; then each fragment of the leader's state broadcast
                scores = (net.all_gather(8, at=top - 1, lands=1, control=True) if k or f > 1
                          else net.all_gather(8, at=0))
                states = [net.broadcast(codecs.nbytes(o.compress, high - low),
                                        at=part * top // f, lands=k)
                          for part, (low, high) in enumerate(codecs.split(numel, f))]
                out.append(Form(name, method, _knobs(top, f, k, o.compress), top,
                                (scores, *states)))
        else:  # DiLoCo's round: diloco, local-sgd, easgd, sparseloco, muloco
            h, f, k = o.period, o.fragments, o.overlap
            codec = "topk" if method == "sparseloco" else o.compress
            given = ({"density": o.density, "values": o.values} if codec == "topk" else {}) | (
                {"chunk": o.chunk} if codec in GATHERED_CODECS else {})
            variants = {method: (f, k, k)} | ({} if method != "diloco" else {
                "diloco-streaming": (f if f > 1 else math.gcd(4, h), k, k),
                "diloco-hidden": (f, k or h - 1, k or h - 1), "diloco-eager": (f, 0, h)})
            for name, (count, overlap, lands) in variants.items():
                rp = round_plan(method, h, {"compress": codec, "fragments": count,
                                            "overlap": overlap, **given}, merge="keep")
                sends = [net.message(high - low, rp, at=(part + 1) * h // count % h, lands=lands)
                         for part, (low, high) in enumerate(codecs.split(numel, count))]
                out.append(Form(name, method, _knobs(h, count, overlap, codec, lands > overlap),
                                h, tuple(sends)))
    return out


def plan(size: int | str | nn.Module, *, step_time: float | None = None, workers: int = 4,
         groups: int | None = None, link: str = "20mbit", methods: Sequence[str] = METHODS,
         knobs: dict[str, Any] | None = None, device: str = "cpu", mtbf: float | None = None,
         checkpoint_every: int = 50) -> Plan:
    """Which method, how often, and what it costs on ``link`` (``RATE[,LATENCY]``):
    ``size`` a parameter count (``"124M"``), a model's name (counted on the meta device)
    or a module; ``step_time`` compute seconds per step (None: :func:`measure` it on
    ``device``); ``workers`` in ``groups`` nodes (default: a node each); ``knobs`` the
    method options that shape traffic (``lsgd plan --help``), else each method's own.
    With ``mtbf`` (mean seconds of training between faults) each row adds the expected
    goodput restarting from checkpoints every ``checkpoint_every`` steps, and elastic
    (:mod:`lsgd.planner.goodput`). ValueError names a bad value."""
    named = isinstance(size, str) and not SIZE.fullmatch(size)
    model = size if isinstance(size, nn.Module) else build(str(size)) if named else None
    numel = parse_size(str(size)) if model is None else count_parameters(model)
    groups = workers if groups is None else groups
    if bad := [f"{flag} {v}" for flag, v in (("--workers", workers), ("--groups", groups),
                                             ("--checkpoint-every", checkpoint_every))
               if not isinstance(v, int) or v < 1]:
        raise ValueError(f"{bad[0]}: give a positive whole number")
    if workers % groups:
        raise ValueError(f"--workers {workers}: --groups {groups} must divide it")
    if unknown := [m for m in methods if m not in METHODS]:
        raise ValueError(f"--methods {','.join(unknown)}: choose from {', '.join(METHODS)}")
    if mtbf is not None and not (isinstance(mtbf, (int, float)) and 0 < mtbf < math.inf):
        raise ValueError(f"--mtbf {mtbf}: give the mean seconds between faults, above 0")
    if step_time is None and not named:
        raise ValueError("--measure times one of lsgd's models: give --model NAME")
    step_time = measure(str(size), device) if step_time is None else step_time
    if not (isinstance(step_time, (int, float)) and 0 < step_time < math.inf):
        raise ValueError(f"--step-time {step_time}: give a positive number of seconds")
    spec = parse_link(link)
    shapes = None if model is None else [tuple(p.shape) for p in model.parameters()]
    planned, rows = forms(shapes, numel, Net(workers, groups), dict(knobs or {}), methods), []
    for form in planned:
        seconds = step_seconds(form, step_time, spec.rate, spec.latency)
        transfer = sum(s.seconds(spec.rate, spec.latency) for s in form.sends) / form.cycle
        rows.append({"form": form.name, "method": form.method, "knobs": form.knobs,
                     "step_seconds": seconds, "waits": max(0.0, seconds - step_time),
                     "hides": max(0.0, transfer - seconds + step_time),
                     "utilization": step_time / seconds,
                     "bytes_per_node": sum(s.nbytes for s in form.sends) / form.cycle}
                    | {f"rate_{t}": rate_for(form, step_time, spec.latency, t / 100)
                       for t in TARGETS})
        if mtbf is not None:
            elastic = strategy_class(form.method).supports_elastic
            rows[-1] |= {f"goodput_{mode}": goodput(mode, mtbf, seconds, checkpoint_every)
                         if mode == "restart" or elastic else None for mode in MODES}
    notes = [note for due, note in (
        ("allreduce" in methods, "allreduce-bf16 and -powersgd are PyTorch's DDP hooks (worker "
         "processes only): not checked against the simulator; their buckets counted as one "
         "message"),
        (model is None, "--params: no PowerSGD (give --model); DeMo's state as --chunk blocks"),
        (workers > groups, "every process a replica; --replica node is not planned "
         "(docs/plan.md)")) if due]
    return Plan(numel, workers, groups, str(spec), float(step_time), rows, planned, notes, mtbf)
