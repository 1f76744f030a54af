"""``lsgd repro toy`` and ``lsgd repro matrix-completion`` (:mod:`lsgd.repro.toy`,
:mod:`lsgd.repro.matrix`): their options; each writes its figures and ``summary.json``
under ``--out`` and prints a table (or, with ``--json``, the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from lsgd.repro import defaults


def _checked(convert: Callable[[str], Any], fits: Callable[[Any], bool],
             expected: str) -> Callable[[str], Any]:
    """An argument type: ``convert(text)`` where ``fits`` it, else "expected ``expected``"."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not fits(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_int = _checked(int, lambda value: value >= 1, "a positive integer")
positive_float = _checked(float, lambda value: 0 < value < float("inf"), "a positive number")
fraction = _checked(float, lambda value: 0.0 <= value <= 1.0, "a number in [0, 1]")


def int_list(text: str) -> list[int]:
    """``"1,10"`` or ``"1"`` (used with ``nargs="+"``: ``--ranks 1 10`` or ``--ranks 1,10``)."""
    return [positive_int(part) for part in text.split(",") if part.strip()]


def add_repro_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``lsgd repro EXPERIMENT``: rerun the LSGD paper's small experiments."""
    repro = subparsers.add_parser(
        "repro", help="rerun the LSGD paper's small experiments",
        description="Rerun the LSGD paper's own small experiments through the library's "
                    "strategies (see docs/reproductions.md).")
    experiments = repro.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    add_toy_parser(experiments)
    add_matrix_completion_parser(experiments)
    repro.set_defaults(handler=run_repro, parser=repro)
    return repro


def _add_common(parser: argparse.ArgumentParser, out: str) -> None:
    parser.add_argument("--out", default=out, metavar="DIR",
                        help=f"folder for the PNGs and summary.json (default: {out})")
    parser.add_argument("--json", action="store_true",
                        help="print the results as JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")


def add_toy_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "toy", help="2-D landscape sin(pi r)/(pi r), 4 workers: LGD vs EAGD",
        description="The 2-D landscape L = sin(pi r)/(pi r) with 4 workers from (-6, -4), "
                    "(-15, -18), (20, 11), (17, 8): LGD (pull 0.1) and EAGD (moving rate 0.43) "
                    "with full gradients and learning rate 0.1, plus LSGD with a scope pull "
                    "and period 4, local SGD and independent GD. Each runs until no worker "
                    "moves more than --tol in a step (checked every 10 steps) or --max-steps.")
    _add_common(p, os.path.join("runs", "repro-toy"))
    p.add_argument("--max-steps", type=positive_int, default=20_000,
                   help="step limit per method (default: 20000)")
    p.add_argument("--tol", type=positive_float, default=1e-10,
                   help="stop when no coordinate moves more than this in a step "
                   "(default: 1e-10)")
    p.add_argument("--lr", type=positive_float, default=defaults.TOY_LR, help="step (default: 0.1)")
    p.add_argument("--pull", type=fraction, default=defaults.TOY_PULL,
                   help="LGD's pull lambda (default: 0.1)")
    p.add_argument("--moving-rate", type=fraction, default=defaults.TOY_MOVING_RATE,
                   help="EAGD's moving rate beta (default: 0.43)")
    p.set_defaults(handler=run_toy, parser=p)
    return p


def add_matrix_completion_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "matrix-completion",
        help="low-rank factorization 1/4 ||M - X X^T||^2, 8 workers: LGD vs EAGD",
        description="Low-rank factorization F(X) = 1/4 ||M - X X^T||_F^2, M = U U^T, with "
                    "8 workers from N(0, 1) starts: LGD vs EAGD (step 5e-4, pull 1/5, every "
                    "step), for each rank and trial. Prints the best worker's F/F(0) (median "
                    "and range over trials) and writes the paper's Figure 1.")
    _add_common(p, os.path.join("runs", "repro-matrix-completion"))
    p.add_argument("--dim", type=positive_int, default=defaults.MATRIX_DIM,
                   help="d (default: 1000)")
    p.add_argument("--ranks", type=int_list, nargs="+", default=[list(defaults.MATRIX_RANKS)],
                   metavar="R", help="ranks r, e.g. --ranks 1 10 or --ranks 1,10 "
                   "(default: 1 10 50 100)")
    p.add_argument("--trials", type=positive_int, default=defaults.MATRIX_TRIALS,
                   help="random trials per rank (default: 10)")
    p.add_argument("--steps", type=positive_int, default=defaults.MATRIX_STEPS,
                   help=f"iterations (default: {defaults.MATRIX_STEPS})")
    p.add_argument("--seed", type=int, default=0, help="seed of U and the starts (default: 0)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="(default: float64)")
    p.add_argument("--workers", type=positive_int, default=defaults.MATRIX_WORKERS,
                   help="workers (default: 8)")
    p.add_argument("--lr", type=positive_float, default=defaults.MATRIX_LR,
                   help="step eta (default: 5e-4)")
    p.add_argument("--pull", type=fraction, default=defaults.MATRIX_PULL,
                   help="the paper's lambda (default: 0.2); the strategies get eta * lambda")
    p.add_argument("--engine", choices=defaults.ENGINES, default="batched",
                   help="batched tensors (default, fast) or the strategies on the simulator")
    p.add_argument("--report-steps", type=int_list, nargs="+", default=None, metavar="S",
                   help="step counts in the table (default: a few up to --steps)")
    p.set_defaults(handler=run_matrix_completion, parser=p)
    return p


def run_repro(args: argparse.Namespace) -> int:
    """``lsgd repro`` without an experiment: the usage and exit code 2."""
    parser: argparse.ArgumentParser = args.parser
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: choose an experiment; see {parser.prog} --help", file=sys.stderr)
    return 2


def run_toy(args: argparse.Namespace) -> int:
    from lsgd.repro import Progress, toy

    with Progress(enabled=not args.quiet) as progress:
        summary, runs = toy.run(max_steps=args.max_steps, tol=args.tol, pull=args.pull,
                                moving_rate=args.moving_rate, lr=args.lr, progress=progress)
    _report(args, summary, toy.table(summary), toy.plot(runs, args.out))
    return 0


def run_matrix_completion(args: argparse.Namespace) -> int:
    import torch

    from lsgd.repro import Progress, matrix

    parser: argparse.ArgumentParser = args.parser
    ranks = sorted({r for group in args.ranks for r in group})
    too_big = [r for r in ranks if r > args.dim]
    if too_big:
        parser.error(f"--ranks {too_big} exceed --dim {args.dim}")
    at = sorted({s for group in args.report_steps for s in group}) if args.report_steps else None
    if at and at[-1] > args.steps:
        parser.error(f"--report-steps {[s for s in at if s > args.steps]} exceed --steps "
                     f"{args.steps}")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device!r} is not a torch device (try cpu or cuda)")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available on this machine")
    with Progress(enabled=not args.quiet) as progress:
        result = matrix.run(dim=args.dim, ranks=ranks, trials=args.trials, steps=args.steps,
                            seed=args.seed, workers=args.workers, lr=args.lr, pull=args.pull,
                            device=str(device), dtype=getattr(torch, args.dtype),
                            engine=args.engine, progress=progress)
    summary = matrix.summarize(result, at)
    _report(args, summary, matrix.table(summary), matrix.plot(result, args.out))
    return 0


def _report(args: argparse.Namespace, summary: dict[str, Any], table: str,
            paths: Sequence[str]) -> None:
    """Write ``summary.json`` under ``--out``; print the table (or the JSON) on stdout and
    the files written (on stderr with ``--json``)."""
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2) if args.json else table)
    for path in [*paths, os.path.join(args.out, "summary.json")]:
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
