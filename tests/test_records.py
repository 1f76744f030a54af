"""Every table of docs/benchmarks.md (and the README's headline) is what its command
gives, re-derived from the records in records/ (nothing is trained): see
:mod:`lsgd.bench.records`."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsgd.bench import records

ROOT = Path(__file__).resolve().parents[1]


def _blocks() -> list[tuple[str, str, str, str]]:
    return [(page, *block) for page in records.PAGES
            for block in records.blocks((ROOT / page).read_text())]


def test_the_documented_tables_are_marked() -> None:
    blocks = _blocks()
    assert any(page == "README.md" and kind == "headline" for page, kind, _, _ in blocks)
    assert sum(page == "docs/benchmarks.md" for page, *_ in blocks) >= 5


@pytest.mark.parametrize("page,kind,args,table", _blocks(),
                         ids=[f"{b[0]}:{b[2].split()[0]}" for b in _blocks()])
def test_a_documented_table_is_re_derived_from_the_records(page: str, kind: str, args: str,
                                                           table: str, tmp_path: Path) -> None:
    derived = records.table(kind, records.derive(args, ROOT, tmp_path))
    assert derived == table, f"{page}: the table differs from lsgd bench {args}:\n{derived}"


def test_a_marked_table_is_rewritten_from_its_records(tmp_path: Path) -> None:
    (tmp_path / "records" / "volume").mkdir(parents=True)
    (tmp_path / "records" / "volume" / "volume.json").write_text(
        '{"name": "volume", "title": "t", "columns": ["method", "bytes"], '
        '"rows": [["lsgd", 2.5]], "notes": [], "data": {}, "figures": [], "seconds": 1}')
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- records: lsgd bench volume --out records/volume -->\n"
                    "| old |\n<!-- end records -->\nmore\n")
    assert records.refresh(page, tmp_path, tmp_path / "scratch") == 1
    assert page.read_text() == ("text\n<!-- records: lsgd bench volume --out records/volume -->\n"
                                "| method | bytes |\n|---|---|\n| lsgd | 2.5 |\n"
                                "<!-- end records -->\nmore\n")
    assert records.refresh(page, tmp_path, tmp_path / "scratch") == 0
