"""The ``lsgd`` command line: each subcommand's parser is added beside the code it runs
and sets ``handler`` (the parsed arguments -> the exit code) as a default. Exit codes:
0 success, 2 bad usage (no traceback), 130 interrupted. Building the parser imports no
torch: a bad flag or choice is refused at once.
"""

from __future__ import annotations

import argparse
import sys

import lsgd
from lsgd.train.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    from lsgd.bench.command import add_bench_parser
    from lsgd.planner.command import add_plan_parser
    from lsgd.repro.command import add_repro_parser
    from lsgd.train.command import add_plot_parser, add_train_parser

    parser = argparse.ArgumentParser(prog="lsgd", description="Communication-efficient "
                                     "distributed training: Leader SGD and baselines.")
    parser.add_argument("--version", action="version", version=f"lsgd {lsgd.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_train_parser, add_plot_parser, add_repro_parser, add_bench_parser,
                add_plan_parser):
        add(subparsers)
    parser.set_defaults(handler=None, parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for bad usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.handler is None:  # no command
            parser.error(f"choose a command; see {parser.prog} --help")
        return args.handler(args)
    except UsageError as error:  # a person's mistake: the message, no traceback
        print(f"lsgd {args.command}: error: {error}", file=sys.stderr)
        return 2
    except SystemExit as exit_:  # argparse's --help, --version and usage errors
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
