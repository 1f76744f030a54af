"""``lsgd bench``: run the benchmarks, print their tables, write their files (the
benchmarks, and torch, are imported once the links and numbers are checked)."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lsgd.bench import NAMES, runner
from lsgd.links.spec import parse_link
from lsgd.train.errors import UsageError
from lsgd.train.ranges import RANGES, within

#: The times to a target: the benchmarks that most flags are for.
TIMED = ("time-to-accuracy", "twelve-workers", "time-to-loss")
#: The benchmarks each flag is for (--quick and --out are every one's).
TAKES: dict[str, tuple[str, ...]] = {
    "links": (*TIMED, "volume", "scaling", "chaos", "elastic"),
    "seeds": (*TIMED, "scaling", "chaos"), "first_seed": (*TIMED, "scaling", "chaos"),
    "sets": ("chaos",), "mtbf": ("chaos",), "repeats": ("startup",),
    "budget": (*TIMED, "scaling", "stragglers"), "batch_size": TIMED,
    "target": (*TIMED, "scaling"), "steps_from": TIMED, "eval_steps": (*TIMED, "scaling"),
    "methods": (*TIMED, "scaling", "chaos", "elastic"), "backend": (*TIMED, "stragglers"),
    "step_seconds": (*TIMED, "scaling"), "jobs": (*TIMED, "scaling"),
    "no_tune": ("time-to-accuracy", "twelve-workers"), "knobs": TIMED,
    "reuse": (*TIMED, "scaling", "stragglers", "chaos"),
    "reuse_only": (*TIMED, "scaling", "stragglers", "chaos")}


#: Each number a flag takes: whether a value fits, and what to give instead.
NUMBERS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seeds": (lambda seeds: seeds >= 1, "give at least 1"),
    "budget": (lambda seconds: seconds > 0, "give a positive number of seconds"),
    "target": (lambda target: 0 < target < math.inf,
               "give a test accuracy in (0, 1], e.g. 0.88, or a validation loss > 0"),
    "eval_steps": (lambda steps: 1 <= steps <= 10**9, "give a positive number of steps"),
    "step_seconds": (lambda seconds: within(seconds, *RANGES["step_seconds"]),
                     "give a positive number of seconds, e.g. 0.12"),
    "repeats": (lambda repeats: 1 <= repeats <= 1000, "give 1 to 1000"),
    "batch_size": (lambda size: size >= 1, "give a whole number of at least 1"),
    "jobs": (lambda jobs: jobs >= 1, "give at least 1"),
    "first_seed": (lambda seed: seed >= 0, "give 0 or more")}


def _listed(*names: str) -> str:
    """``a, b and c``."""
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def _for(text: str, flag: str) -> str:
    """A flag's help: what it does, and the benchmarks it is for (:data:`TAKES`)."""
    return f"{text} ({', '.join(TAKES[flag])})"


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``lsgd bench NAME ... [flags]``: the benchmarks' command line."""
    parser = subparsers.add_parser(
        "bench", help="measure the methods side by side (time to accuracy on slow links, ...)",
        description="Compare lsgd's methods on this machine and its links: each benchmark "
                    "prints a table and writes NAME.json, NAME.txt and its figures under "
                    "--out (see docs/benchmarks.md).")
    parser.add_argument("names", nargs="+", metavar="NAME", choices=(*NAMES, "all"),
                        help=f"one or more of {', '.join(NAMES)}, or all")
    parser.add_argument("--quick", action="store_true",
                        help="a seconds-long version of each (small model, modeled links)")
    parser.add_argument("--out", default="bench-results", help="folder for the results")
    parser.add_argument("--links", help="comma-separated links, e.g. 1gbit,100mbit,20mbit: "
                        f"each one for {_listed(*TIMED, 'volume')}; the first for scaling, "
                        "chaos and elastic")
    parser.add_argument("--seeds", type=int, help=_for("seeds per method and link", "seeds"))
    parser.add_argument("--first-seed", type=int, metavar="K",
                        help=_for("the first seed (default 0; chaos: 1): --seeds N runs "
                                  "seeds K to K+N-1, so --first-seed 2 --seeds 1 adds a "
                                  "third seed to a run of two", "first_seed"))
    parser.add_argument("--sets", help="chaos: comma-separated modes and kinds of round, from "
                        "elastic, restart, blocking, hidden-int8 (default: all)")
    parser.add_argument("--mtbf", metavar="S,S,...",
                        help="chaos: comma-separated mean seconds of training between faults "
                             "(default 10,20,30; quick: a dozen faults in each run)")
    parser.add_argument("--repeats", type=int,
                        help="startup: times each variant is run (default 5)")
    parser.add_argument("--budget", type=float, help=_for("seconds of training per run", "budget"))
    parser.add_argument("--batch-size", type=int, metavar="B",
                        help=_for("images or text windows per worker and step (default: "
                                  "128 images, 16 windows)", "batch_size"))
    parser.add_argument("--target", type=float,
                        help="the center's target: a test accuracy, e.g. 0.88 "
                             "(time-to-accuracy, twelve-workers, scaling), or for "
                             "time-to-loss a validation loss in nats per byte, e.g. 2.0")
    parser.add_argument("--steps-from", metavar="RESULT.json",
                        help=_for("predict each time from these steps to the target (the "
                                  "same benchmark run in the simulator, e.g. with more "
                                  "seeds) and the pace measured here", "steps_from"))
    parser.add_argument("--eval-steps", type=int, metavar="N",
                        help=_for("evaluate the center every N steps (a grid in steps, off "
                                  "the training clock) and stop each run at the target, "
                                  "instead of every budget/12 seconds; scaling evaluates "
                                  "every 10 steps unless given", "eval_steps"))
    parser.add_argument("--methods", help=_for("comma-separated subset of the methods", "methods"))
    parser.add_argument("--backend", choices=("processes", "threads"),
                        help=_for("shaped links between processes (root) or the simulator's "
                                  "modeled links", "backend"))
    parser.add_argument("--step-seconds", type=float,
                        help="the seconds each local step costs on the modeled clock instead "
                             "of its measured compute, so that the results do not depend on "
                             "this machine's speed or load (twelve-workers, or "
                             "time-to-accuracy and time-to-loss with --backend threads; "
                             "scaling: default 0.05)")
    parser.add_argument("--jobs", type=int,
                        help="runs at once, each in a process of its own with a share of the "
                             f"cores (scaling; {_listed(*TIMED)} with --step-seconds)")
    parser.add_argument("--no-tune", action="store_true",
                        help=_for("skip the tuning runs; use each method's first knobs", "no_tune"))
    parser.add_argument("--knobs", action="append", metavar="METHOD:KEY=VALUE,...",
                        help=_for("a method's knobs, e.g. dpsgd:gossip_period=4 or "
                                  "lsgd-multi:period=4,global_period=16 (once per method); "
                                  "that method is not tuned", "knobs"))
    parser.add_argument("--reuse", action="store_true",
                        help=_for("read back a finished run already under --out with the same "
                                  "settings instead of training it again: continue a "
                                  "benchmark that was stopped, or rerun only the runs whose "
                                  "folders were removed", "reuse"))
    parser.add_argument("--reuse-only", action="store_true",
                        help="read every run back from --out (as --reuse) and train none: "
                             "re-derive the tables from stored records in seconds; a run "
                             "that is missing is an error")
    parser.set_defaults(handler=run_bench, parser=parser)
    return parser


def _options(args: argparse.Namespace) -> dict[str, Any]:
    links = _split(args.links) or None
    for link in links or ():
        try:
            parse_link(link)
        except ValueError as error:
            raise UsageError(f"--links: {error}") from None
    for name, (fits, hint) in NUMBERS.items():
        value = getattr(args, name)
        if value is not None and not fits(value):
            raise UsageError(f"--{name.replace('_', '-')} {value}: {hint}")
    from lsgd.bench.accuracy import METHODS
    from lsgd.bench.chaos_bench import MODES, ROUNDS

    sets = _names("--sets", args.sets, [*MODES, *(kind.replace(" ", "-") for kind in ROUNDS)])
    methods = _names("--methods", args.methods, METHODS)
    try:
        mtbfs = [float(text) for text in _split(args.mtbf)]
    except ValueError:
        mtbfs = [math.nan]
    if not all(0 < mtbf < math.inf for mtbf in mtbfs):
        raise UsageError(f"--mtbf {args.mtbf}: give positive seconds, comma-separated, "
                         "e.g. 10,20,30")
    given = {name: getattr(args, name) for name in (*NUMBERS, "steps_from", "backend")}
    return given | {"links": links, "methods": methods, "sets": sets, "mtbfs": mtbfs or None,
                    "knobs": _knobs(args.knobs or []) or None,
                    "tune": False if args.no_tune else None,
                    "reuse": "only" if args.reuse_only else (args.reuse or None)}


def _names(flag: str, text: str | None, known: Any) -> list[str] | None:
    """A comma-separated list of names, each one of ``known``; None when not given."""
    if not text:
        return None
    names = _split(text)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"{flag}: unknown {unknown}; choose from {', '.join(known)}")
    return names


def _split(text: str | None) -> list[str]:
    """The items of a comma-separated list."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _value(text: str) -> int | float | str:
    """A knob's value: a whole number, a fraction (``pull=0.25``) or a word
    (``compress=int8``); whether it fits the knob is checked where the method runs."""
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def _knobs(specs: list[str]) -> dict[str, dict[str, Any]]:
    """``--knobs`` values (``METHOD:KEY=VALUE,...``) as {method: {key: value}}; whether
    the method and its keys fit the benchmark is checked where it runs."""
    example = "e.g. --knobs dpsgd:gossip_period=4"
    given: dict[str, dict[str, int]] = {}
    for spec in specs:
        name, colon, pairs = spec.partition(":")
        name = name.strip()
        if not colon or not name:
            raise UsageError(f"--knobs {spec!r}: expected METHOD:KEY=VALUE,...; {example}")
        if name in given:
            raise UsageError(f"--knobs {name}: given twice; put all its knobs in one "
                             f"--knobs {name}:KEY=VALUE,KEY=VALUE")
        knobs: dict[str, Any] = {}
        for pair in _split(pairs):
            key, equals, value = pair.partition("=")
            if not equals or not key.strip() or not value.strip():
                raise UsageError(f"--knobs {spec!r}: {pair!r} is not KEY=VALUE; {example}")
            knobs[key.strip().replace("-", "_")] = _value(value.strip())
        given[name] = knobs
    return given


def parse(words: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The arguments of ``lsgd bench WORDS`` and the options its benchmarks are given
    (checked as the command line checks them)."""
    parser = argparse.ArgumentParser(prog="lsgd")
    add_bench_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", *words])
    return args, _options(args)


def run_bench(args: argparse.Namespace) -> int:
    names = list(NAMES) if "all" in args.names else list(dict.fromkeys(args.names))
    for name in (flag for flag in TAKES if getattr(args, flag, None) not in (None, False)):
        takers = [n for n in names if n in TAKES[name]]
        spelled = "--" + name.replace("_", "-")
        if not takers:
            raise UsageError(f"{spelled}: a flag of {_listed(*TAKES[name])}, not of "
                             f"{_listed(*names)}; drop it, or name one of those benchmarks")
        if len(takers) < len(names):
            print(f"note: {spelled} applies to {_listed(*takers)}; the others run without it",
                  file=sys.stderr)
    options = _options(args)
    from lsgd.bench.common import run_and_write

    for name in names:
        run_and_write(runner(name), Path(args.out), args.quick, options)
    return 0
