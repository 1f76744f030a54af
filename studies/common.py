"""What the study scripts share: their command line and how a study is run.

A study pins its settings to answer one question and fill one folder of records/
(studies/README.md lists them). A study script (``python studies/NAME.py [STUDY]
[--quick] [--out DIR] ...``) declares ``STUDIES`` (each study's name and its
``run(out, quick, options) -> Result``, as lsgd bench's benchmarks are), ``FLAGS``
(its own flags: argparse's keywords by flag, each flag's value given to the runs
under its name) and, for a study that trains no runs, ``TRAINS = False``.
:func:`script` builds its command line from these and its docstring (the first
paragraph says what it measures, the indented lines are the commands that made its
records); :meth:`Script.main` runs one study, prints its table and writes
``STUDY.json``, ``STUDY.txt`` and its figures under ``--out``; :mod:`studies.records`
parses the same command (:meth:`Script.parse`) to re-derive a documented table.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from lsgd.bench.common import Result, run_and_write
from lsgd.links import parse_link
from lsgd.train.errors import UsageError

Runner = Callable[[Path, bool, dict[str, Any]], Result]
#: What the command line's own arguments are, beside the options of the runs.
OWN = ("study", "quick", "out", "reuse", "reuse_only")


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give at least 1")
    return value


def above_zero(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, a target)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{value}: give a finite number above 0")
    return value


def link(text: str) -> str:
    """An argparse type: a link as ``RATE[,LATENCY]`` (``lsgd train --link``)."""
    try:
        parse_link(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def listed(known: Sequence[str], default: str) -> dict[str, Any]:
    """A flag's keywords: a comma-separated list of names, each one of ``known``
    (``default`` says which are taken without it)."""
    def parse(text: str) -> list[str]:
        given = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in given if name not in known]
        if unknown or not given:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from "
                                             f"{', '.join(known)}")
        return given
    return {"type": parse, "metavar": "A,B,...",
            "help": f"comma-separated, from {', '.join(known)} (default: {default})"}


#: ``--device``: where a study's simulated workers compute.
DEVICE = {"choices": ("auto", "cpu", "cuda"),
          "help": "where the simulated workers compute (as lsgd train --device; default: "
                  "lsgd train's, auto)"}


def parser(script: str, doc: str, studies: Sequence[str],
           trains: bool = True) -> argparse.ArgumentParser:
    """The parser of the study script at ``script`` (its ``__file__``; ``doc``, its
    docstring, gives the description and the commands of its records) with the flags
    every study takes: the study's name first where the script holds several,
    ``--quick`` and ``--out``; for studies that train runs (``trains``) also
    ``--seeds``, ``--jobs``, ``--reuse`` and ``--reuse-only``."""
    first, *rest = doc.split("\n\n")
    commands = [line.strip() for part in rest for line in part.splitlines()
                if line.startswith("    python studies/")]
    parser = argparse.ArgumentParser(
        prog=f"python studies/{Path(script).name}", description=_plain(first),
        epilog="The documented runs:\n" + "\n".join(f"  {c}" for c in commands)
        if commands else None, formatter_class=argparse.RawDescriptionHelpFormatter)
    if len(studies) > 1:
        parser.add_argument("study", choices=studies, metavar="STUDY",
                            help=f"which study: {', '.join(studies)}")
    parser.add_argument("--quick", action="store_true",
                        help="a seconds-long version (a small model, a few steps)")
    parser.add_argument("--out", default="bench-results",
                        help="folder for the results (default: bench-results)")
    if trains:
        parser.add_argument("--seeds", type=positive, metavar="N",
                            help="seeds 0 to N-1 (default: the study's)")
        parser.add_argument("--jobs", type=positive, metavar="N",
                            help="runs at once, each in a process of its own with a share "
                                 "of the cores")
        parser.add_argument("--reuse", action="store_true",
                            help="read back a finished run already under --out with the same "
                                 "settings instead of training it again (a stopped study "
                                 "continues where it was)")
        parser.add_argument("--reuse-only", action="store_true",
                            help="read every run back from --out (as --reuse) and train none: "
                                 "re-derive the table from stored records in seconds; a run "
                                 "that is missing is an error")
    return parser


def _plain(text: str) -> str:
    """A docstring's text without its markup (``code``, :mod:`name`)."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")


def script(module: ModuleType) -> Script:
    """The command line of a study module (see the module text): its ``STUDIES``, the
    shared flags (:func:`parser`) and its own ``FLAGS``."""
    parse = parser(module.__file__ or "", module.__doc__ or "", list(module.STUDIES),
                   getattr(module, "TRAINS", True))
    for flag, keywords in getattr(module, "FLAGS", {}).items():
        parse.add_argument(flag, **keywords)
    return Script(module.STUDIES, parse)


@dataclasses.dataclass(frozen=True)
class Script:
    """A study script: its studies by name (the first is the default of a script that
    holds one) and its parser."""

    studies: dict[str, Runner]
    parser: argparse.ArgumentParser

    def parse(self, argv: Sequence[str]
              ) -> tuple[str, Runner, argparse.Namespace, dict[str, Any]]:
        """The study that ``argv`` runs: its name, its run, the arguments and the options
        it is given (every flag's value by its name, ``None`` for the study's default;
        ``reuse``: ``"only"``, ``True`` or ``None``)."""
        args = self.parser.parse_args(list(argv))
        name = getattr(args, "study", None) or next(iter(self.studies))
        options = {key: value for key, value in vars(args).items() if key not in OWN}
        reuse = "only" if getattr(args, "reuse_only", False) else getattr(args, "reuse", None)
        return name, self.studies[name], args, options | {"reuse": reuse or None}

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run the study ``argv`` names; the exit code (2 for bad usage, with the message
        and no traceback)."""
        try:
            _, run, args, options = self.parse(sys.argv[1:] if argv is None else argv)
            run_and_write(run, Path(args.out), args.quick, options)
        except UsageError as error:
            print(f"{self.parser.prog}: error: {error}", file=sys.stderr)
            return 2
        except SystemExit as exit_:  # argparse's --help and usage errors
            return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        return 0
