"""The tables of the documentation and the records behind them.

Every benchmark table of the docs (:data:`PAGES`: the README's headline, the
current headline tables of docs/benchmarks.md, the record of past studies in
docs/studies.md, and those of the other pages) is marked with the command that
produced it, a benchmark of ``lsgd bench`` or a study of studies/::

    <!-- records: lsgd bench NAME ARGS --out records/NAME -->
    | ... the table ... |
    <!-- end records -->

    <!-- records: python studies/SCRIPT.py [STUDY] ARGS --out records/NAME -->
    ...

(``headline:`` instead of ``records:`` for the README's summary, ``claims:`` for
the verdicts of :mod:`studies.aldsgd_claims`). A block whose records are not
there yet (:func:`pending`) shows :func:`placeholder` until they are.
:func:`derive` computes such a table again from the records under
``records/``, training nothing (``--reuse-only``, or the stored ``NAME.json``
of a benchmark that only times); ``python scripts/tables.py`` rewrites them.
A figure shown on a page (``![caption](figures/NAME.png)``) is drawn from the
marked tables since the previous heading or figure (a figure right after
another shares its tables): for times to a target (:data:`CURVES`), the
center's test error or validation loss against time, one line per method and
link (its median seed's run); one named after its benchmark (``scaling.png``)
is the one that benchmark draws. :func:`draw_figures` draws them all
(``python scripts/figures.py``).

A page's choice of method (docs/benchmarks.md, "Choose a method") cites the
marked tables instead of holding one: each citation (:data:`CITATION`) names a
records folder, the cells that pick a row of its tables, a column and the
number that row shows there; :func:`cited` reads that number back from the
marked tables whose command writes to that folder, on every page.
"""

from __future__ import annotations

import importlib
import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from lsgd.bench import Runner, command, ranking, runner
from lsgd.bench.common import Result, read_result
from lsgd.train.outputs import cell
from studies.common import script

#: Benchmarks and studies whose tables come from training runs kept as records.
TRAINED = {"time-to-accuracy", "twelve-workers", "scaling", "stragglers", "time-to-loss",
           "fidelity", "aldsgd", "equal-steps", "equal-tokens", "diloco-screen", "replicas",
           "replicas-time", "regime", "plan-check", "plan-crossing"}
#: The commands a block may name: a benchmark of lsgd bench, or a study's script.
COMMAND = r"(?:lsgd bench|python studies/\w+\.py) [^\n]+?"
# A table never spans another block's marker (an empty block is left as it is).
BLOCK = re.compile(rf"(<!-- (records|headline|tuning|claims): ({COMMAND}) -->\n)"
                   r"((?:(?!<!-- (?:records|headline|tuning|claims):).)*?)(\n<!-- end \2 -->)",
                   re.S)
ROOT = Path(__file__).resolve().parents[1]
#: Every page whose marked tables are re-derived: the README and every page of docs/.
PAGES = ("README.md", *sorted(f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")))
#: Benchmarks whose tables are times to a target, with every run's curve in their data.
CURVES = {"time-to-accuracy", "time-to-loss", "twelve-workers", "scaling"}
FIGURE = re.compile(r"!\[[^\]]*\]\((?:docs/)?figures/([^)\s]+)\)")
#: A citation of a marked table: `records/FOLDER` · CELL · ... · COLUMN: **NUMBER**
#: (the cells pick the rows, each one of the row's cells; COLUMN is a header).
CITATION = re.compile(r"`(records/[\w./-]+)`((?: · [^·:*|`]+)+): \*\*([^*]+)\*\*")
#: Where a page's choice of method is, between these two lines.
CHOOSE = re.compile(r"<!-- choose:[^\n]*-->\n(.*?)\n<!-- end choose -->", re.S)
HEADING = re.compile(r"^#+ ", re.M)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """The marked tables of a page: (kind, the command, the table)."""
    return [(kind, said, table) for _, kind, said, table, _ in BLOCK.findall(text)]


def parse(command_text: str) -> tuple[str, Runner, dict[str, Any], Path, bool]:
    """What a block's command runs: the benchmark's or study's name, its run, its options,
    its ``--out`` folder and whether it is quick."""
    words = shlex.split(command_text)
    if words[:2] == ["lsgd", "bench"]:
        args, options = command.parse(words[2:])
        (name,) = args.names
        return name, runner(name), options, Path(args.out), args.quick
    study = script(importlib.import_module(f"studies.{Path(words[1]).stem}"))
    name, run, args, options = study.parse(words[2:])
    return name, run, options, Path(args.out), args.quick


def name_of(command_text: str) -> str:
    """The benchmark or study a block's command runs (``time-to-loss``, ``tuning``)."""
    return parse(command_text)[0]


def derive(command_text: str, root: Path, scratch: Path) -> Result:
    """The result of a block's command from the records under ``root`` (the repository);
    ``scratch`` is a folder to work in (figures are drawn where runs are read)."""
    name, run, options, out, quick = parse(command_text)
    records = root / out
    if name not in TRAINED:
        return read_result(records / f"{name}.json")
    copy = scratch / "records"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(records, copy)
    return run(copy, quick, options | {"reuse": "only"})


def pending(command_text: str, root: Path) -> bool:
    """Whether the records of a block's command (its ``--out`` folder under ``root``)
    are not there yet: a study whose code is in but whose runs are still to be made."""
    return not (root / out_of(command_text)).exists()


def out_of(command_text: str) -> str:
    """A block's ``--out`` folder (``records/NAME``; ``bench-results`` without one)."""
    words = shlex.split(command_text)
    return words[words.index("--out") + 1] if "--out" in words else "bench-results"


def placeholder(command_text: str) -> str:
    """What a block shows until its records exist (see :func:`pending`)."""
    return (f"*Not yet measured: `{command_text}` writes the records this "
            "table is derived from.*")


def as_markdown(result: Result) -> str:
    """A result's table as Markdown (the cells as printed), as docs/benchmarks.md shows it."""
    lines = ["| " + " | ".join(result.columns) + " |", "|" + "---|" * len(result.columns)]
    percent = ["acc" in column for column in result.columns]
    lines += ["| " + " | ".join(
        f"{100 * v:.2f}%" if share and isinstance(v, float) and not math.isnan(v)
        else cell(v) for v, share in zip(row, percent)) + " |" for row in result.rows]
    return "\n".join(lines)


def table(kind: str, result: Result) -> str:
    """A block's table: the result's Markdown, its headline (README), its tuning runs,
    or the claims it judges (the aldsgd study)."""
    if kind == "claims":
        from studies.aldsgd_claims import markdown

        return markdown(result.data)
    if kind == "headline":
        return ranking.headline(result)
    return ranking.tuning(result) if kind == "tuning" else as_markdown(result)


def refresh(page: Path, root: Path, scratch: Path) -> int:
    """Rewrite every marked table of ``page`` from the records; the number of tables
    that changed."""
    text = page.read_text()
    changed = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal changed
        derived = (placeholder(match.group(3)) if pending(match.group(3), root)
                   else table(match.group(2), derive(match.group(3), root, scratch)))
        changed += derived != match.group(4)
        return match.group(1) + derived + match.group(5)

    page.write_text(BLOCK.sub(replace, text))
    return changed


def figure_pages(root: Path) -> list[Path]:
    """The pages that may show figures: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def shown(root: Path) -> dict[str, list[str]]:
    """Every figure a page shows (its file name under docs/figures), with the pages."""
    names: dict[str, list[str]] = {}
    for page in figure_pages(root):
        for name in FIGURE.findall(page.read_text()):
            names.setdefault(name, []).append(str(page.relative_to(root)))
    return names


def owned(text: str) -> dict[str, list[str]]:
    """The figures of a page drawn from its marked tables: each figure's name, with the
    commands of the ``records`` tables it belongs to (see the module's text)."""
    events = sorted([(m.start(), "heading", "") for m in HEADING.finditer(text)]
                    + [(m.start(), "table", m.group(3)) for m in BLOCK.finditer(text)
                       if m.group(2) == "records"]
                    + [(m.start(), "figure", m.group(1)) for m in FIGURE.finditer(text)])
    figures: dict[str, list[str]] = {}
    pending: list[str] = []
    last: list[str] = []
    for _, event, value in events:
        if event == "heading":
            pending, last = [], []
        elif event == "table":
            pending.append(value)
        elif pending or last:
            last = pending or last
            figures[value] = last
            pending = []
    return figures


def draw_figures(root: Path, out: Path, scratch: Path) -> dict[str, list[str]]:
    """Draw every figure the pages of ``root`` own (:func:`owned`) from the records under
    ``root`` into ``out``; each figure's name with the labels of its lines (none for a
    benchmark's own figure)."""
    drawn: dict[str, list[str]] = {}
    for page in figure_pages(root):
        for name, tables in owned(page.read_text()).items():
            if name in drawn:
                raise ValueError(f"{page.name}: figures/{name} is drawn twice")
            drawn[name] = _draw(name, tables, root, out, scratch / name)
    return drawn


def _draw(name: str, tables: list[str], root: Path, out: Path, scratch: Path) -> list[str]:
    results = []
    for k, command_text in enumerate(tables):
        result = derive(command_text, root, scratch / str(k))
        own = [f for f in result.figures if Path(f).name == name == f"{result.name}.png"]
        if own:  # the benchmark's own figure
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(own[0], out / name)
            return []
        if result.name not in CURVES:
            raise ValueError(f"figures/{name}: {command_text} draws no such figure")
        results.append(result)
    from lsgd.bench.ranking import headline_of
    from studies.curves import draw_curves

    opts = results[0].data["options"]
    headline = headline_of(opts)
    main = opts["links"][0]
    panels: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
    for result in results:
        for run in result.data["runs"]:
            size = re.search(r"/(\d+)-workers/", run["run"])
            panel = f"{size.group(1)} workers" if size else ""
            panels.setdefault(panel, {}).setdefault((run["link"], run["method"]), []).append(run)
    higher = headline.higher_is_better
    drawn = [(title, [(method if link == main else f"{method}, {link}",
                       [(x, headline.scale * y) for x, y in _median_run(runs, higher)["curve"]],
                       link != main) for (link, method), runs in lines.items()
                      if _median_run(runs, higher)["curve"]])  # an evaluated run
             for title, lines in panels.items()]
    seeds = max(len(runs) for lines in panels.values() for runs in lines.values())
    what = ("one seed" if seeds == 1 else "the faster run of 2 seeds" if seeds == 2
            else f"the median run of {seeds} seeds")
    where = (f"{opts['model']} on {opts['dataset']}, {main} links, {what}" if "sizes" not in opts
             else f"{opts['model']}, {main} between nodes of {opts['node']}")
    if len(drawn) == 1:
        drawn = [(where, drawn[0][1])]
    else:
        drawn = [(f"{title} ({where})" if i == 0 else title, curves)
                 for i, (title, curves) in enumerate(drawn)]
    draw_curves(drawn, out / name,
                xlabel="training time (s" + (")" if opts["backend"] == "processes"
                                             else ", modeled)"),
                ylabel=headline.axis,
                target=headline.scale * headline.falling(opts["target"]))
    return [label for _, curves in drawn for label, _, _ in curves]


def _median_run(runs: list[dict[str, Any]], higher_is_better: bool) -> dict[str, Any]:
    """The run of the median seed by time to the target (a miss counts as slowest, then
    by its best value); of an even number, the faster of the middle two."""
    ordered = sorted(runs, key=lambda run: (math.inf if run["time"] is None else run["time"],
                                            -run["best"] if higher_is_better else run["best"]))
    return ordered[(len(ordered) - 1) // 2]


def citations(text: str) -> list[tuple[str, list[str], str, str]]:
    """The citations of a page's choice of method (:data:`CHOOSE`): (the records folder,
    the cells that pick the row, the column, the number cited)."""
    found = []
    for choice in CHOOSE.findall(text):
        for folder, path, number in CITATION.findall(choice):
            *cells, column = [part.strip() for part in path.split(" · ")[1:]]
            found.append((folder, cells, column, number.strip()))
    return found


def cited(folder: str, cells: list[str], column: str, root: Path,
          pages: tuple[str, ...] = PAGES) -> list[str]:
    """What the rows holding every one of ``cells`` show in ``column``, in the ``records``
    tables of every page (of ``pages``, under ``root``) whose command writes to
    ``folder``."""
    shown = []
    for page in pages:
        for kind, command_text, markdown in blocks((root / page).read_text()):
            if kind != "records" or out_of(command_text) != folder:
                continue
            header, _, *rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
                                for line in markdown.splitlines()]
            if column not in header:
                continue
            shown += [row[header.index(column)] for row in rows
                      if all(cell in row for cell in cells)]
    return shown
