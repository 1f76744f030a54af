"""``lsgd plan``: :func:`lsgd.plan`'s table, and its files with ``--out`` (torch is imported
once the arguments are accepted)."""

from __future__ import annotations

import argparse
from typing import Any

from lsgd.names import ROUND_CODECS, SPARSE_VALUES
from lsgd.train.errors import UsageError

#: The method options that shape traffic, each for the methods that take it.
KNOBS = {"period": int, "global_period": int, "fragments": int, "overlap": int,
         "compress": ROUND_CODECS, "density": float, "chunk": int, "values": SPARSE_VALUES,
         "topk": int, "powersgd": int}


def add_plan_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("plan", help="each method's cost on a link, before training",
                                   description="Seconds per step, utilization, bytes and the "
                                   "link rates each method needs (docs/plan.md).")
    add = parser.add_argument
    size, compute = (parser.add_mutually_exclusive_group(required=True) for _ in "ab")
    size.add_argument("--params", help="parameters: 124M, 842k, 5000")
    size.add_argument("--model", help="one of lsgd's models: gpt, cnn7, resnet20, ...")
    compute.add_argument("--step-time", type=float, metavar="SECONDS", help="compute per step")
    compute.add_argument("--measure", action="store_true", help="time --model's steps here")
    add("--device", default="cpu", choices=("cpu", "cuda"), help="where --measure times")
    add("--workers", type=int, default=4, help="worker processes (4)")
    add("--groups", type=int, help="nodes, a link each (default: one per worker)")
    add("--link", default="20mbit", help="RATE[,LATENCY] (20mbit)")
    add("--methods", help="a subset of allreduce,diloco,sparseloco,demo,muloco,lsgd")
    for name, kind in KNOBS.items():
        add(f"--{name.replace('_', '-')}", type=kind if callable(kind) else str,
            choices=None if callable(kind) else kind, help="as lsgd train takes it")
    add("--mtbf", type=float, metavar="SECONDS",
        help="mean seconds of training between faults: adds each method's expected goodput")
    add("--checkpoint-every", type=int, default=50, metavar="N",
        help="with --mtbf: steps between checkpoints of a restartable run (50)")
    add("--out", metavar="DIR", help="write plan.csv, plan.json and plan.png there")
    parser.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from lsgd.planner.planning import METHODS, parse_size, plan

    knobs = {key: getattr(args, key) for key in KNOBS if getattr(args, key) is not None}
    methods = [m.strip() for m in (args.methods or ",".join(METHODS)).split(",")]
    try:
        result = plan(args.model or parse_size(args.params), step_time=args.step_time,
                      workers=args.workers, groups=args.groups, link=args.link,
                      methods=methods, knobs=knobs, device=args.device, mtbf=args.mtbf,
                      checkpoint_every=args.checkpoint_every)
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(result.table())
    for path in result.write(args.out) if args.out else []:
        print(f"wrote {path}")
    return 0
