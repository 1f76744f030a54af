"""The tables of the documentation and the records behind them.

Every benchmark table in docs/benchmarks.md (and the README's headline) is
marked with the command that produced it::

    <!-- records: lsgd bench NAME ARGS --out records/NAME -->
    | ... the table ... |
    <!-- end records -->

(``headline:`` instead of ``records:`` for the README's summary of a
time-to-accuracy result). :func:`derive` computes such a table again from the
records under the repository's ``records/`` folder, training nothing: a
benchmark that trains reads every run back (``--reuse-only``), one that only
times (volume, overhead, simulator, startup) reads its stored ``NAME.json``.
``python scripts/tables.py`` rewrites every marked table from the records;
the test suite checks that each one is what its records give.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from lsgd.bench import ranking, runner
from lsgd.bench.common import Result, read_result

#: Benchmarks whose tables come from training runs kept as records.
TRAINED = {"time-to-accuracy", "twelve-workers", "scaling", "stragglers", "decentralized", "fidelity",
           "equal-steps", "time-to-loss", "equal-tokens"}
BLOCK = re.compile(r"(<!-- (records|headline|tuning): lsgd bench (.+?) -->\n)(.*?)"
                   r"(\n<!-- end \2 -->)",
                   re.S)
PAGES = ("README.md", "docs/benchmarks.md")


def blocks(text: str) -> list[tuple[str, str, str]]:
    """The marked tables of a page: (kind, the command's arguments, the table)."""
    return [(kind, args, table) for _, kind, args, table, _ in BLOCK.findall(text)]


def derive(args_text: str, root: Path, scratch: Path) -> Result:
    """The result of ``lsgd bench ARGS`` from the records under ``root`` (the repository);
    ``scratch`` is a folder to work in (figures are drawn where runs are read)."""
    import argparse

    from lsgd.bench.command import _options, add_bench_parser

    parser = argparse.ArgumentParser(prog="lsgd")
    add_bench_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", *shlex.split(args_text)])
    (name,) = args.names
    records = root / args.out
    if name not in TRAINED:
        return read_result(records / f"{name}.json")
    out = scratch / "records"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(records, out)
    return runner(name)(out, args.quick, _options(args) | {"reuse": "only"})


def table(kind: str, result: Result) -> str:
    """A block's table: the result's Markdown, its headline (README), or its tuning runs."""
    if kind == "headline":
        return ranking.headline(result)
    return ranking.tuning(result) if kind == "tuning" else result.markdown()


def refresh(page: Path, root: Path, scratch: Path) -> int:
    """Rewrite every marked table of ``page`` from the records; the number of tables
    that changed."""
    text = page.read_text()
    changed = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal changed
        derived = table(match.group(2), derive(match.group(3), root, scratch))
        changed += derived != match.group(4)
        return match.group(1) + derived + match.group(5)

    page.write_text(BLOCK.sub(replace, text))
    return changed
