"""``plan(...)``: every planned form's seconds, bytes and the rates it needs; the model
(the parameter shapes) counted on the meta device, or its step timed here."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lsgd.links.spec import parse_link
from lsgd.method_options import OPTIONS
from lsgd.names import GATHERED_CODECS, LANGUAGE_MODELS
from lsgd.planner.schedules import (Form, Net, averaging, demo_payload, leader,
                                    powersgd_values, rate_for, step_seconds)
from lsgd.strategies.pipeline import check_options
from lsgd.strategies.stages.options import plan as round_plan

#: The methods planned, in the order of the table.
METHODS = ("allreduce", "diloco", "sparseloco", "demo", "muloco", "lsgd")
TARGETS = (0.90, 0.95, 0.99)
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([kmgb]?)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Row:
    """One form on the link: seconds per step (compute, transfer waited for and
    hidden), utilization, link bytes per node and step, rates for :data:`TARGETS`."""

    form: str
    method: str
    knobs: str
    step_seconds: float
    waits: float
    hides: float
    utilization: float
    bytes_per_node: float
    rates: tuple[float | None, ...]


@dataclasses.dataclass
class Plan:
    """What :func:`plan` found; :meth:`table` prints it, :meth:`write` keeps it."""

    params: int
    workers: int
    groups: int
    link: str
    step_time: float
    rows: list[Row]
    forms: list[Form]
    notes: list[str]

    def utilization(self, form: Form, rate: float) -> float:
        latency = parse_link(self.link).latency
        return self.step_time / step_seconds(form, self.step_time, rate, latency)

    def table(self) -> str:
        head = (f"{self.params:,} parameters, {self.workers} workers in {self.groups} nodes, "
                f"link {self.link}, {self.step_time:.4g} s of compute per step")
        lines = [head, f"{'form':20} {'knobs':18} {'s/step':>8} {'waits':>8} {'hides':>8} "
                       f"{'util':>6} {'MB/node':>9}  rate for 90/95/99% util"]
        for r in self.rows:
            rates = " / ".join("-" if x is None else _rate(x) for x in r.rates)
            lines.append(f"{r.form:20} {r.knobs:18} {r.step_seconds:8.4f} {r.waits:8.4f} "
                         f"{r.hides:8.4f} {r.utilization:6.1%} {r.bytes_per_node / 1e6:9.4f}"
                         f"  {rates}")
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def write(self, out: str | Path) -> list[Path]:
        """``plan.csv``, ``plan.json`` and (with matplotlib) ``plan.png`` under ``out``."""
        from lsgd.plots import pyplot, save
        from lsgd.train.outputs import write_csv, write_json

        out = Path(out)
        rows = [dataclasses.asdict(r) | {f"rate_{round(t * 100)}": x for t, x in
                                         zip(TARGETS, r.rates)} for r in self.rows]
        fields = [k for k in rows[0] if k != "rates"] if rows else []
        write_csv(out / "plan.csv", rows, fields)
        inputs = {k: getattr(self, k) for k in ("params", "workers", "groups", "link",
                                                "step_time", "notes")}
        write_json(out / "plan.json", inputs | {"rows": rows})
        written = [out / "plan.csv", out / "plan.json"]
        plt = pyplot(note=True)
        if plt is not None:
            rates = [10 ** (5 + i / 8) for i in range(8 * 6 + 1)]  # 100 kbit/s to 100 Gbit/s
            fig, ax = plt.subplots(figsize=(7.5, 4.5))
            for i, form in enumerate(self.forms):
                ax.plot(rates, [self.utilization(form, x) for x in rates], label=form.name,
                        color=f"C{i % 10}", linestyle="-" if i < 10 else "--")
            ax.axvline(parse_link(self.link).rate, color="grey", linestyle=":", linewidth=1)
            ax.set_xscale("log")
            ax.set(xlabel="link rate (bit/s)", ylabel="compute utilization",
                   title=self.table().splitlines()[0])
            ax.title.set_fontsize(8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
            written.append(save(fig, out / "plan.png"))
        return written


def _rate(bits: float) -> str:
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g}{unit}"
    return f"{bits:.3g}bit"


def parse_size(text: str) -> int:
    """``"124M"``, ``"842k"``, ``"1.5B"`` or ``"5000"`` as a count; ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}
    count = round(float(match.group(1)) * scale[match.group(2).lower()]) if match else 0
    if count < 1:
        raise ValueError(f"--params {text!r}: give a positive count such as 124M, 842k or "
                         "5000")
    return count


def build(name: str, device: str = "meta") -> nn.Module:
    """lsgd's model ``name`` as ``lsgd train`` builds it by default (image models for
    Fashion-MNIST, cnn7 and mlp, or CIFAR-10, the others; language models of byte
    tokens at the default sizes); ValueError naming it when there is none."""
    from lsgd.data import FACTS
    from lsgd.models.catalog import build_model, model_names
    from lsgd.models.gpt import build_language_model
    from lsgd.train.settings import LanguageSettings

    with torch.device(device):
        if name in LANGUAGE_MODELS:
            sizes = LanguageSettings()
            return build_language_model(name, 256, sizes.context, sizes.layers, sizes.width,
                                        sizes.heads)
        shape, classes, _ = FACTS["fashion-mnist" if name in ("cnn7", "mlp") else "cifar10"]
        try:
            return build_model(name, shape, classes)
        except ValueError as error:
            raise ValueError(f"--model {name!r}: {error}; lsgd's models: "
                             f"{', '.join(model_names() + list(LANGUAGE_MODELS))}") from None


def measure(name: str, device: str = "cpu", steps: int = 5) -> float:
    """Seconds of one training step (forward, backward, SGD) of model ``name`` on
    ``device``, the median of ``steps`` after two warm-up steps; ValueError naming a
    device that is not here."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device here; measure on --device cpu "
                         "or give --step-time SECONDS")
    model = build(name, device)
    text = name in LANGUAGE_MODELS
    inputs = (torch.randint(0, 256, (16, model.context), device=device) if text else  # type: ignore[arg-type]
              torch.randn(128, *((1, 28, 28) if name in ("cnn7", "mlp") else (3, 32, 32)),
                          device=device))
    targets = (torch.randint(0, 256, (16, model.context), device=device) if text  # type: ignore[arg-type]
               else torch.randint(0, 10, (128,), device=device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, -2), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times[2:])[steps // 2]


def _options(method: str, knobs: dict[str, Any]) -> Any:
    """The method's options: its declared defaults, with the ``knobs`` it takes."""
    from lsgd.train.checks import option_errors

    cls = OPTIONS[method]
    names = {f.name for f in dataclasses.fields(cls)}
    options = cls(**{k: v for k, v in knobs.items() if k in names})
    errors = option_errors(method, options)
    if errors:
        raise ValueError(f"{method}: {'; '.join(errors)} (or leave {method} out: --methods)")
    return options


def _knobs(period: int, fragments: int = 1, overlap: int = 0, codec: str = "none",
           lands: int | None = None) -> str:
    return " ".join([f"H={period}"] + [f"F={fragments}"] * (fragments > 1)
                    + [f"K={overlap}"] * bool(overlap) + [codec] * (codec != "none")
                    + ["eager"] * (lands == period))


def forms(shapes: Sequence[tuple[int, ...]] | None, numel: int, net: Net,
          knobs: dict[str, Any], methods: Sequence[str]) -> list[Form]:
    """Every form of ``methods`` on ``net``: its cycle and its sends (see the package's
    docstring). ``shapes``: the parameters' (None: unknown, no PowerSGD)."""
    out: list[Form] = []
    for method in methods:
        o = _options(method, knobs)
        if method == "allreduce":
            out.append(Form("allreduce", method, "", 1, (net.all_reduce(numel, at=0),)))
            out.append(Form("allreduce-bf16", method, "bf16 hook", 1,
                            (net.all_reduce(numel, width=2, at=0),)))
            rank = o.powersgd or 4
            if shapes is not None:
                sends = [net.all_reduce(v, at=0) for v in powersgd_values(shapes, rank) if v]
                out.append(Form("allreduce-powersgd", method, f"rank {rank}", 1, tuple(sends)))
        elif method == "demo":
            side = o.chunk * o.chunk  # --params: matrices in whole blocks
            assumed = [(o.chunk, o.chunk)] * (numel // side) + [(numel % side,)] * bool(numel % side)
            payload = demo_payload(shapes or assumed, o.topk, o.chunk, o.values)
            out.append(Form("demo", method, f"top {o.topk}/{o.chunk}" + " K=1" * o.overlap, 1,
                            (net.all_gather(payload, at=0, lands=o.overlap),)))
        elif method == "lsgd":
            h = o.period
            size = net.members[-1] // net.groups + 1
            top = h if net.groups == 1 else o.global_period or h * (4 if size > 1 else 1)
            if top % h:
                raise ValueError(f"--global-period {top} must be a multiple of --period {h}")
            for name, k in (("lsgd", o.overlap), ("lsgd-hidden", o.overlap or h - 1)):
                check_options("lsgd", h, k, o.fragments, o.compress, False)
                if top % o.fragments:
                    raise ValueError(f"--fragments {o.fragments} must divide the global "
                                     f"period {top}")
                out.append(Form(name, method, _knobs(top, o.fragments, k, o.compress), top,
                                tuple(leader(net, numel, top, o.fragments, k, o.compress))))
        else:  # DiLoCo's round: diloco, sparseloco, muloco
            h, codec = o.period, "topk" if method == "sparseloco" else o.compress
            given = {"density": o.density, "values": o.values} if codec == "topk" else {}
            given |= {"chunk": o.chunk} if codec in GATHERED_CODECS else {}
            variants = [(method, o.fragments, o.overlap, o.overlap)]
            if method == "diloco":
                variants += [("diloco-streaming", o.fragments if o.fragments > 1 else
                              math.gcd(4, h), o.overlap, o.overlap),
                             ("diloco-hidden", o.fragments, o.overlap or h - 1,
                              o.overlap or h - 1),
                             ("diloco-eager", o.fragments, 0, h)]
            for name, count, k, lands in variants:
                rp = round_plan(method, h, {"compress": codec, "fragments": count,
                                            "overlap": k, **given}, merge="keep")
                out.append(Form(name, method, _knobs(h, count, k, codec, lands), h,
                                tuple(averaging(net, numel, h, rp, lands))))
    return out


def _shapes(size: int | str | nn.Module) -> tuple[list[tuple[int, ...]] | None, int]:
    if isinstance(size, nn.Module):
        shapes = [tuple(p.shape) for p in size.parameters()]
    elif isinstance(size, str) and not _SIZE.fullmatch(size.strip()):
        shapes = [tuple(p.shape) for p in build(size).parameters()]
    else:
        count = parse_size(str(size))
        return None, count
    return shapes, sum(math.prod(s) for s in shapes)


def plan(size: int | str | nn.Module, *, step_time: float | None = None, workers: int = 4,
         groups: int | None = None, link: str = "20mbit", methods: Sequence[str] = METHODS,
         knobs: dict[str, Any] | None = None, device: str = "cpu") -> Plan:
    """Which method, how often, and what it costs on ``link``, before training.

    ``size``: a parameter count (``124_000_000``, ``"124M"``), one of lsgd's models by
    name (``"gpt"``, ``"cnn7"``; its shapes counted on the meta device) or a module.
    ``step_time``: seconds of compute per step (None: :func:`measure` the named model
    on ``device``). ``workers`` in ``groups`` nodes (default: a node each), one link
    per node. ``knobs``: method options by name (``period``, ``fragments``,
    ``overlap``, ``compress``, ``density``, ``chunk``, ``values``, ``topk``,
    ``powersgd``, ``global_period``), each for the methods that take it; the rest
    their declared defaults. ValueError naming any bad value.
    """
    shapes, numel = _shapes(size)
    groups = workers if groups is None else groups
    for name, value in (("--workers", workers), ("--groups", groups)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} {value}: give a positive whole number")
    if workers % groups:
        raise ValueError(f"--workers {workers} in --groups {groups}: the groups must divide "
                         "the workers (every node holds as many)")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"--methods {','.join(unknown)}: not a planned method; choose from "
                         f"{', '.join(METHODS)}")
    if step_time is None:
        if not isinstance(size, str) or shapes is None:
            raise ValueError("--measure times one of lsgd's models: give --model NAME")
        step_time = measure(size, device)
    if not (isinstance(step_time, (int, float)) and 0 < step_time < math.inf):
        raise ValueError(f"--step-time {step_time}: give a positive number of seconds")
    spec = parse_link(link)
    net = Net(workers, groups)
    planned = forms(shapes, numel, net, dict(knobs or {}), methods)
    rows = []
    for form in planned:
        seconds = step_seconds(form, step_time, spec.rate, spec.latency)
        transfer = form.per_step(spec.rate, spec.latency)
        waits = max(0.0, seconds - step_time)
        rows.append(Row(form.name, form.method, form.knobs, seconds, waits,
                        max(0.0, transfer - waits), step_time / seconds,
                        sum(s.nbytes for s in form.sends) / form.cycle,
                        tuple(rate_for(form, step_time, spec.latency, t) for t in TARGETS)))
    notes = ["allreduce-bf16 and -powersgd are PyTorch's DDP hooks (worker processes only): "
             "predicted, not checked against the simulator; DDP's buckets are one message"]
    if shapes is None:
        notes.append("--params: PowerSGD needs the matrices' shapes (give --model); DeMo "
                     "takes the state as matrices of whole --chunk x --chunk blocks")
    return Plan(numel, workers, groups, str(spec), float(step_time), rows, planned, notes)


__all__ = ["METHODS", "Plan", "Row", "build", "measure", "parse_size", "plan"]
