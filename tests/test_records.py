"""Every table of docs/benchmarks.md (and the README's headline) is what its command
gives, re-derived from the records in records/ (nothing is trained).

A table is marked in the Markdown as

    <!-- records: lsgd bench NAME ARGS --out records/NAME -->
    | ... the table ... |
    <!-- end records -->

(``headline:`` instead of ``records:`` for the README's summary). The test runs
the command's benchmark with ``--reuse-only``, which reads every run back from
its record, or, for a benchmark that trains nothing, reads its stored
``NAME.json``; and compares the tables cell for cell.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from lsgd.bench import accuracy, runner
from lsgd.bench.command import _options
from lsgd.bench.common import Result, read_result
from lsgd.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
TRAINED = {"time-to-accuracy", "twelve-workers", "stragglers", "decentralized", "fidelity"}
BLOCK = re.compile(r"<!-- (records|headline): lsgd bench (.+?) -->\n(.*?)\n<!-- end \1 -->",
                   re.S)


def _blocks() -> list[tuple[str, str, str, str]]:
    found = []
    for page in ("README.md", "docs/benchmarks.md"):
        text = (ROOT / page).read_text()
        found += [(page, kind, args, table) for kind, args, table in BLOCK.findall(text)]
    return found


def _result(args_text: str, scratch: Path) -> Result:
    args = build_parser().parse_args(["bench", *shlex.split(args_text)])
    (name,) = args.names
    records = ROOT / args.out
    if name not in TRAINED:
        return read_result(records / f"{name}.json")
    out = scratch / "records"  # a copy: the benchmark draws its figures where it reads
    shutil.copytree(records, out)
    options = _options(args) | {"reuse": "only"}
    return runner(name)(out, args.quick, options)


def test_the_documented_tables_are_marked() -> None:
    blocks = _blocks()
    assert any(page == "README.md" and kind == "headline" for page, kind, _, _ in blocks)
    assert sum(page == "docs/benchmarks.md" for page, *_ in blocks) >= 5


@pytest.mark.parametrize("page,kind,args,table", _blocks(),
                         ids=[f"{b[0]}:{b[2].split()[0]}" for b in _blocks()])
def test_a_documented_table_is_re_derived_from_the_records(page: str, kind: str, args: str,
                                                           table: str, tmp_path: Path) -> None:
    result = _result(args, tmp_path)
    derived = accuracy.headline(result) if kind == "headline" else result.markdown()
    assert derived == table, f"{page}: the table differs from lsgd bench {args}:\n{derived}"
