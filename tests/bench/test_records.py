"""Every marked table of the docs (the README's headline, docs/benchmarks.md's current
headline tables, docs/studies.md's record of past studies, and the other pages') is
what its command gives, re-derived from the records in records/ (nothing is trained),
and every number docs/benchmarks.md's choice of method cites is one of those tables':
see :mod:`studies.records`."""

from __future__ import annotations

from pathlib import Path

import pytest

from studies import records

ROOT = Path(__file__).resolve().parents[2]


def _blocks() -> list[tuple[str, str, str, str]]:
    return [(page, *block) for page in records.PAGES
            for block in records.blocks((ROOT / page).read_text())]


def test_the_documented_tables_are_marked() -> None:
    blocks = _blocks()
    assert any(page == "README.md" and kind == "headline" for page, kind, _, _ in blocks)
    assert sum(page == "docs/benchmarks.md" for page, *_ in blocks) >= 5  # the headline
    assert sum(page == "docs/studies.md" for page, *_ in blocks) >= 5  # the record
    assert set(records.PAGES) == {"README.md", *(f"docs/{page.name}" for page in
                                                  (ROOT / "docs").glob("*.md"))}
    for page in records.PAGES:  # an empty block would match no pattern, and go unchecked
        text = (ROOT / page).read_text()
        opened = sum(text.count(f"<!-- {kind}: {program}")
                     for kind in ("records", "headline", "tuning", "claims")
                     for program in ("lsgd bench ", "python studies/"))
        assert opened == len(records.blocks(text)), page


@pytest.mark.parametrize("page,kind,command,table", _blocks(),
                         ids=[f"{b[0]}:{records.name_of(b[2])}" for b in _blocks()])
def test_a_documented_table_is_re_derived_from_the_records(page: str, kind: str, command: str,
                                                           table: str, tmp_path: Path) -> None:
    if records.pending(command, ROOT):  # a study still to be run shows that it is
        assert table == records.placeholder(command), f"{page}: no records for {command}"
        return
    derived = records.table(kind, records.derive(command, ROOT, tmp_path))
    assert derived == table, f"{page}: the table differs from {command}:\n{derived}"


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


# The figures: every PNG under docs/figures is shown by a page, and those a page's
# marked tables own are drawn again from the records (python scripts/figures.py).

FIGURES = ROOT / "docs" / "figures"


def test_every_figure_is_shown_by_a_page_and_small() -> None:
    shown = records.shown(ROOT)
    for path in sorted(FIGURES.iterdir()):
        assert path.suffix == ".png", f"docs/figures/{path.name}: not a PNG"
        assert path.name in shown, f"docs/figures/{path.name}: shown by no page"
        assert path.stat().st_size <= 110_000, f"docs/figures/{path.name}: over 110 KB"


def test_every_figure_a_page_shows_exists() -> None:
    for name, pages in records.shown(ROOT).items():
        assert (FIGURES / name).is_file(), f"{', '.join(pages)}: figures/{name} is missing"


def test_every_time_to_target_table_has_its_figure() -> None:
    timed = {}
    for page in records.PAGES:  # on the page where the table is
        text = (ROOT / page).read_text()
        owned = {command for tables in records.owned(text).values() for command in tables}
        timed[page] = [command for kind, command, _ in records.blocks(text)
                       if kind == "records" and records.name_of(command) in records.CURVES]
        for command in timed[page]:
            assert command in owned, f"{page}: {command}: no figure under its table"
    assert sum(map(len, timed.values())) >= 20
    assert len(timed["docs/benchmarks.md"]) >= 5 and len(timed["docs/studies.md"]) >= 5


def test_figures_belong_to_the_tables_above_them() -> None:
    text = ("# A\n<!-- records: lsgd bench x --out a -->\n|t|\n<!-- end records -->\n"
            "<!-- records: lsgd bench x --out b -->\n|t|\n<!-- end records -->\n"
            "![a](figures/ab.png)\n\n![b](figures/ab-too.png)\n"
            "<!-- records: lsgd bench x --out c -->\n|t|\n<!-- end records -->\n"
            "![c](figures/c.png)\n## B\n![d](figures/d.png)\n"
            "<!-- tuning: lsgd bench x --out e -->\n|t|\n<!-- end tuning -->\n"
            "![e](figures/e.png)\n")
    a, b, c = (f"lsgd bench x --out {out}" for out in "abc")
    assert records.owned(text) == {"ab.png": [a, b], "ab-too.png": [a, b], "c.png": [c]}


def test_the_figures_are_drawn_again_from_the_records(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    drawn = records.draw_figures(ROOT, tmp_path / "figures", tmp_path / "scratch")
    owned = {name: tables for page in records.figure_pages(ROOT)
             for name, tables in records.owned(page.read_text()).items()}
    tables = {command: table for _, kind, command, table in _blocks() if kind == "records"}
    owners = {name: {str(page.relative_to(ROOT)) for page in records.figure_pages(ROOT)
                     if name in records.owned(page.read_text())} for name in owned}
    assert set(drawn) == set(owned) and {"scaling.png", "hidden-20mbit.png"} <= set(owned)
    for name, labels in drawn.items():
        path = tmp_path / "figures" / name
        assert path.is_file() and path.stat().st_size > 0, name
        assert set(records.shown(ROOT)[name]) & owners[name], name  # shown under its tables
        if not labels:  # the benchmark's own figure
            continue
        for command in owned[name]:  # a line for every method of its tables
            header, _, *rows = [line.strip("|").split(" | ") for line in
                                tables[command].splitlines()]
            column = [cell.strip() for cell in header].index("method")
            methods = {row[column].strip() for row in rows}
            assert methods <= {label.split(",")[0] for label in labels}, (name, command)


def test_an_empty_marked_block_is_left_alone_and_eats_no_text() -> None:
    text = ("<!-- records: lsgd bench a --out x -->\n<!-- end records -->\nkeep me\n"
            "<!-- records: lsgd bench b --out y -->\n| t |\n<!-- end records -->\n")
    assert records.blocks(text) == [("records", "lsgd bench b --out y", "| t |")]


def test_a_study_marks_its_table_with_its_own_command(tmp_path: Path) -> None:
    (tmp_path / "records" / "lab").mkdir(parents=True)
    (tmp_path / "records" / "lab" / "replicas-lab.json").write_text(
        '{"name": "replicas-lab", "title": "t", "columns": ["round", "MB"], '
        '"rows": [["ring", 6.5]], "notes": [], "data": {}, "figures": [], "seconds": 1}')
    command = "python studies/replica_lab.py --link 20mbit --out records/lab"
    page = tmp_path / "page.md"
    page.write_text(f"<!-- records: {command} -->\n| old |\n<!-- end records -->\n")
    assert records.blocks(page.read_text()) == [("records", command, "| old |")]
    assert records.name_of(command) == "replicas-lab"
    assert records.refresh(page, tmp_path, tmp_path / "scratch") == 1
    assert "| ring | 6.5 |" in page.read_text()


# The choice of method (docs/benchmarks.md): every cell backed by a marked table's number.

CHOICE = ROOT / "docs" / "benchmarks.md"


def test_every_number_the_choice_of_method_cites_is_its_records() -> None:
    """Each citation names a records folder, the cells of a row, a column and a number:
    the folder exists, and the marked tables written to it (re-derived from it above)
    show that number there, in every row those cells pick."""
    text = CHOICE.read_text()
    cited = records.citations(text)
    assert len(cited) >= 10
    for folder, cells, column, number in cited:
        assert (ROOT / folder).is_dir(), f"{folder}: no such records"
        shown = records.cited(folder, cells, column, ROOT)
        assert shown, f"{folder} · {' · '.join(cells)}: no such row with a {column!r} column"
        assert set(shown) == {number}, f"{folder} · {' · '.join(cells)} · {column}: {shown}"


def test_every_row_of_the_choice_of_method_is_backed_or_says_not_measured() -> None:
    (choice,) = records.CHOOSE.findall(CHOICE.read_text())
    header, _, *rows = choice.splitlines()
    assert header.startswith("| link between nodes | model | faults | pick |")
    assert len(rows) >= 8
    for row in rows:
        evidence = row.strip().strip("|").split(" | ")[-1].strip()
        assert records.CITATION.search(evidence) or evidence == "not measured", row
    speeds = {row.split(" | ")[0].strip("| ").split(",")[0] for row in rows}
    assert {"fast LAN (1 Gbit/s)", "100 Mbit/s", "20 Mbit/s"} <= speeds
    assert any(" | none | " not in row for row in rows)  # faults


def test_a_citation_reads_its_number_from_the_marked_tables(tmp_path: Path) -> None:
    (tmp_path / "records" / "x").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("")
    (tmp_path / "docs" / "a.md").write_text(
        "<!-- records: lsgd bench volume --out records/x -->\n"
        "| link | method | time s |\n|---|---|---|\n| 20mbit | diloco, node | 4.5 |\n"
        "| 1gbit | diloco, node | 3 |\n<!-- end records -->\n")
    text = ("<!-- choose: x -->\n| a | b |\n|---|---|\n"
            "| 20 | `records/x` · 20mbit · diloco, node · time s: **4.5**; "
            "`records/x` · diloco, node · time s: **3** |\n<!-- end choose -->\n")
    assert records.citations(text) == [
        ("records/x", ["20mbit", "diloco, node"], "time s", "4.5"),
        ("records/x", ["diloco, node"], "time s", "3")]
    pages = ("README.md", "docs/a.md")
    assert records.cited("records/x", ["20mbit", "diloco, node"], "time s", tmp_path,
                         pages) == ["4.5"]
    assert records.cited("records/x", ["diloco, node"], "time s", tmp_path, pages) == ["4.5", "3"]
    assert records.cited("records/y", ["diloco, node"], "time s", tmp_path, pages) == []
