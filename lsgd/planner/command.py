"""``lsgd plan``: the table of :func:`lsgd.plan` on stdout, and with ``--out`` its files.

The parser reads torch-free tables only; torch is imported once the arguments are
accepted.
"""

from __future__ import annotations

import argparse
from typing import Any

from lsgd.names import ROUND_CODECS, SPARSE_VALUES
from lsgd.train.errors import UsageError

#: The method options that shape traffic: (flag, type, choices).
KNOBS = (("period", int, None), ("global-period", int, None), ("fragments", int, None),
         ("overlap", int, None), ("compress", str, ROUND_CODECS), ("density", float, None),
         ("chunk", int, None), ("values", str, SPARSE_VALUES), ("topk", int, None),
         ("powersgd", int, None))


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plan", help="which method, how often, and its cost on a link, before training",
        description="Seconds per step (the communication that waits and that hides), "
                    "compute utilization, bytes per node and the link rates for 90/95/99%% "
                    "utilization of every method, on the simulator's link model "
                    "(docs/plan.md).")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--params", help="the model's parameters: 124M, 842k, 5000")
    size.add_argument("--model", help="one of lsgd's models: gpt, cnn7, resnet20, ...")
    parser.add_argument("--workers", type=int, default=4, help="worker processes W (4)")
    parser.add_argument("--groups", type=int, default=None,
                        help="nodes, each behind its own link (default: one per worker)")
    parser.add_argument("--link", default="20mbit", help="RATE[,LATENCY] (20mbit)")
    time = parser.add_mutually_exclusive_group(required=True)
    time.add_argument("--step-time", type=float, metavar="SECONDS",
                      help="compute seconds per step")
    time.add_argument("--measure", action="store_true",
                      help="time a few steps of --model on --device")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--methods", default=None,
                        help="comma-separated: allreduce,diloco,sparseloco,demo,muloco,lsgd")
    for name, kind, choices in KNOBS:
        parser.add_argument(f"--{name}", type=kind, choices=choices, default=None,
                            help="a method option (lsgd train --help); default: each "
                                 "method's own")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write plan.csv, plan.json and plan.png there")
    parser.set_defaults(handler=run_plan, parser=parser)
    return parser


def run_plan(args: argparse.Namespace) -> int:
    from lsgd.planner.planning import METHODS, parse_size, plan

    knobs = {name.replace("-", "_"): getattr(args, name.replace("-", "_")) for name, _, _
             in KNOBS if getattr(args, name.replace("-", "_")) is not None}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods \
        else list(METHODS)
    try:
        result = plan(args.model or parse_size(args.params), step_time=None if args.measure
                      else args.step_time, workers=args.workers, groups=args.groups,
                      link=args.link, methods=methods, knobs=knobs, device=args.device)
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(result.table())
    if args.out:
        for path in result.write(args.out):
            print(f"wrote {path}")
    return 0
