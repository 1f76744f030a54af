"""``lsgd train`` and ``lsgd plot``: their options, and what each prints; nothing that imports
torch is imported before the arguments are accepted, so that a mistake is refused at once."""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from pathlib import Path
from typing import Any

from lsgd.method_options import OPTIONS, declarations
from lsgd.train.config import TrainConfig
from lsgd.train.errors import UsageError
from lsgd.train.ranges import flag
from lsgd.train.runner import (check_before_start, dry_run, launch_from_this_process, resolve,
                               train_and_report)


def add_train_parser(subparsers: Any) -> None:
    """``lsgd train``: a flag per setting, the methods' options grouped by who takes them."""
    parser = subparsers.add_parser(
        "train", help="train a model with any method",
        description="Train a model with LSGD or a baseline on one machine or many. "
                    "Options can also come from --config FILE.toml; the command line wins.",
        argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", help="TOML file with settings (keys as the long options)")
    for f in dataclasses.fields(TrainConfig):
        if f.metadata.get("group"):
            holder = f.default_factory  # type: ignore[misc]
            title = holder.__doc__.split("\n")[0].rstrip(".").replace("``", "")
            section = parser.add_argument_group(title)
            for g in dataclasses.fields(holder):
                _add_flag(section, g, typing.get_type_hints(holder)[g.name], g.default)
        elif f.metadata.get("cli", True):
            _add_flag(parser, f, typing.get_type_hints(TrainConfig)[f.name], f.default)
    # The methods' options, each under the methods that take it (every method, lsgd, diloco,
    # muloco, ...), the groups in the methods' order.
    sections: dict[str, Any] = {}
    for name, found in declarations().items():
        methods = [m for m, _ in found]
        title = ("every method" if len(methods) == len(OPTIONS) else
                 "every method but " + ", ".join(m for m in OPTIONS if m not in methods)
                 if len(methods) > len(OPTIONS) / 2 else ", ".join(methods))
        if title not in sections:
            sections[title] = parser.add_argument_group(f"options of {title}")
        method, f = found[0]
        default = f"{f.default}" + "".join(f"; {m}: {g.default}" for m, g in found
                                           if g.default != f.default)
        # Every choice of any declaration, in order (each method checks its own).
        choices = tuple(dict.fromkeys(c for _, g in found for c in g.metadata["choices"] or ()))
        _add_flag(sections[title], f, typing.get_type_hints(OPTIONS[method])[name], default,
                  choices=choices or None)
    parser.set_defaults(handler=run_train)


def _add_flag(parser: Any, f: dataclasses.Field[Any], kind: Any, default: Any,
              choices: tuple[str, ...] | None = None) -> None:
    """The flag of the setting ``f`` (a run's field or a method's option) of type ``kind``."""
    flags = ["--" + flag(f.name), *f.metadata.get("flags", ())]
    base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)  # of X | None
    shown = f" (default: {default})" if default not in (None, (), "None") else ""
    help_text = f.metadata["help"] + shown
    if typing.get_origin(kind) is list:
        how: dict[str, Any] = {"type": base, "nargs": "+", "action": "extend"}
    elif base is bool:
        how = {"action": argparse.BooleanOptionalAction}
    else:
        # --method also takes several methods (checked by make_config, each of them).
        choices = choices or f.metadata.get("choices")
        if f.name == "method":
            help_text += f"; one of {', '.join(choices)}"
            choices = None
        how = {"type": base if base in (int, float) else str, "choices": choices}
    parser.add_argument(*flags, dest=f.name, help=help_text, **how)


def run_train(args: argparse.Namespace) -> int:
    """``lsgd train``: one run, or with ``--method A,B,...`` one run per method side by
    side (:mod:`lsgd.train.compare`)."""
    if "," in str(getattr(args, "method", "")):
        from lsgd.train.compare import run_comparison

        return run_comparison(args)
    cfg = resolve(args)
    if cfg.output.dry_run:
        return dry_run(cfg)
    launch_from_this_process(cfg)
    check_before_start(cfg)
    code, summary = train_and_report(cfg)
    if summary is not None:
        print_summary(summary)
    return code


def _clock_unit(summary: dict[str, Any]) -> str:
    if summary["backend"] != "threads":
        return " s per worker"
    if summary.get("link_kind") == "modeled":
        return " s per worker (simulator's clock: compute plus modeled transfers)"
    return " step-times per worker (simulator's virtual clock)"


def _headline_rows(summary: dict[str, Any], pct: Any) -> list[tuple[str, str]]:
    """The rows of the center's and the leader's headline figures, and of ``--target``."""
    reached = summary.get("reached_target")
    target = ([("target", f"{summary['target']:g} reached at {reached['time']:.1f} s, step "
                          f"{reached['steps']:g}" if reached else
                          f"{summary['target']:g} not reached")]
              if summary.get("target") is not None else [])
    if summary.get("metric") != "loss":
        return [("center test accuracy", pct(summary["test_accuracy"])),
                ("leader test accuracy", pct(summary.get("leader_test_accuracy"))), *target]
    leader = summary.get("leader_test_loss")
    return [("center validation loss", f"{summary['validation_loss']:.4f} nats/byte, "
                                       f"{summary['bits_per_byte']:.3f} bits/byte, "
                                       f"perplexity {summary['perplexity']:.2f}"),
            ("leader validation loss", "-" if leader is None else f"{leader:.4f} nats/byte"),
            ("next-byte accuracy", pct(summary["test_accuracy"])), *target]


def print_summary(summary: dict[str, Any]) -> None:
    """The run's summary as a table of what it reached, spent and wrote."""

    def pct(value: Any) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
            else f"{100 * value:.2f}%"

    comm = summary.get("worker_comm_seconds")
    rows = [
        ("method", f"{summary['method']}{' (async)' if summary.get('asynchronous') else ''} "
                   f"({summary['workers']} workers, {summary['groups']} group(s)"
                   + (f" as {summary['replicas']} replica"
                      f"{'s' if summary['replicas'] != 1 else ''} of "
                      f"{summary['workers'] // summary['replicas']}"
                      if summary.get("replica") == "node" else "")
                   + f", {summary['backend']})"),
        ("model / data", f"{summary['model']} on {summary['dataset']}"),
        *_headline_rows(summary, pct),
        ("steps / epochs", f"{summary['steps']:g} / {summary['epochs']:.2f}"
                           + (" (mean of the workers)" if summary.get("asynchronous") else "")),
        # Not in elastic runs, whose workers come and go.
        *([("steps per worker", " ".join(str(n) for n in summary["worker_steps"])
            + f" ({summary.get('steps_per_second', 0):.1f} steps/s in all)"),
           ("time in rounds", " ".join(f"{t:.1f}" for t in summary["worker_wait_seconds"])
            + _clock_unit(summary))] if "worker_steps" in summary else []),
        ("training time", f"{summary['train_seconds']:.1f} s "
                          f"({summary.get('seconds_per_epoch') or 0:.1f} s/epoch)"),
        ("data loading", "-" if summary.get("data_loading_fraction") is None
                         else f"{100 * summary['data_loading_fraction']:.1f}% of step time"),
        ("sent per worker", f"{summary['bytes_sent_per_worker'] / 1e6:.2f} MB "
                            f"in {summary['rounds']} rounds"),
        *([("sent per node", f"{summary['link_bytes_sent_per_node'] / 1e6:.2f} MB across its "
                             f"link, {summary['bytes_sent_inside_per_node'] / 1e6:.2f} MB "
                             "inside it")]
          if summary.get("bytes_sent_inside_per_node") is not None and summary["groups"] > 1
          and summary["groups"] < summary["workers"] else []),
        *([("link", f"{summary['link']} ({summary['link_kind']})" + (
            "; communicating " + " ".join(f"{t:.1f}" for t in comm) + " s per worker"
            if comm else ""))] if summary.get("link") else []),
        *([("elastic", f"{summary['members_at_end']} of {summary['workers']} workers at the "
                       f"end; {summary['heals']} heal(s) from a live worker")]
          if summary.get("elastic") else []),
        ("run folder", summary["out"]),
        *([("plots", ", ".join(summary["plots"]))] if summary.get("plots") else [])]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def add_plot_parser(subparsers: Any) -> None:
    """``lsgd plot RUN...``: several runs overlaid."""
    from lsgd.train.run_plots import METRICS

    parser = subparsers.add_parser(
        "plot", help="overlay the test error (or loss) of several runs",
        description="Draw the center's test error (or test loss) of each run against time "
                    "and steps.")
    parser.add_argument("runs", nargs="+", help="run folders written by lsgd train")
    parser.add_argument("--out", default="comparison.png", help="PNG to write")
    parser.add_argument("--metric", choices=list(METRICS), default=None,
                        help="the center's test error (%%) or its test loss (default: error; "
                             "loss for language models)")
    parser.add_argument("--zoom", type=float, metavar="FRACTION",
                        help="add a panel on the last FRACTION (0 < FRACTION < 1) of the time "
                             "axis, with its own y range")
    parser.set_defaults(handler=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    """``lsgd plot``: the figure of the runs, or a :class:`UsageError` saying why not."""
    from lsgd.train.run_plots import plot_runs

    runs = [Path(r) for r in args.runs]
    missing = [str(r) for r in runs if not (r / "metrics.csv").exists()]
    if missing:
        raise UsageError(f"not a run folder (no metrics.csv): {', '.join(missing)}")
    if args.zoom is not None and not 0 < args.zoom < 1:
        raise UsageError(f"--zoom {args.zoom}: the fraction of the time axis must lie strictly "
                         "between 0 and 1, e.g. 0.25")
    made = plot_runs(runs, Path(args.out), metric=args.metric, zoom=args.zoom)
    if made is None:
        raise UsageError("plotting needs matplotlib: pip install 'lsgd[plot]'")
    print(made)
    return 0

