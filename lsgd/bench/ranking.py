"""What a time-to-target result shows: its table, its figures and the README's headline,
read as the runs' task reads it (:mod:`lsgd.tasks.headline`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lsgd.bench.common import Result, median, read_result
from lsgd.plots import pyplot, save
from lsgd.tasks.headline import Headline, from_dataset
from lsgd.train.errors import UsageError


def headline_of(opts: dict[str, Any]) -> Headline:
    """The headline the runs are ranked by: their dataset's task's (validation loss for
    text, else test accuracy)."""
    return from_dataset(opts["dataset"])


def simulated_steps(path: str | None) -> dict[str, float]:
    """``--steps-from RESULT.json`` (a result of the same benchmark run in the simulator,
    ``--backend threads``, typically with more seeds): each method's median steps to the
    target, over the runs that reached it."""
    if not path:
        return {}
    try:
        stored = read_result(Path(path))
    except (OSError, ValueError, KeyError) as error:
        raise UsageError(f"--steps-from {path}: not a benchmark result ({error})") from None
    steps: dict[str, list[float]] = {}
    for run in stored.data.get("runs", []):
        if run.get("steps") is not None:
            steps.setdefault(run["method"], []).append(run["steps"])
    return {name: median(values) for name, values in steps.items()}


def table(runs: list[dict[str, Any]], methods: list[str], opts: dict[str, Any],
           simulated: dict[str, float] | None = None) -> tuple[list[list[Any]], dict[str, Any]]:
    """The rows of :mod:`lsgd.bench.accuracy`'s table (its columns: medians over the seeds
    and their spread, LSGD's time over each method's, :func:`_predicted`), link by link,
    and a summary by ``link/method``."""
    rows: list[list[Any]] = []
    summary: dict[str, Any] = {}
    # Ratios are LSGD's time over each method's (its plain form, else its hidden family);
    # without LSGD in the run there are none.
    reference = next((m for m in ("lsgd", "lsgd-multi", "lsgd-hidden", "lsgd-multi-hidden")
                      if m in methods), None)
    for link in opts["links"]:
        times: dict[str, float | None] = {}
        for name in methods:
            mine = [r for r in runs if r["link"] == link and r["method"] == name]
            reached = [r["time"] for r in mine if r["time"] is not None]
            # The median counts runs that missed the target as infinitely slow.
            mid = median([math.inf if r["time"] is None else r["time"] for r in mine])
            times[name] = mid if math.isfinite(mid) else None
            steps = [r["steps"] for r in mine if r["steps"] is not None]
            spread = f"{min(reached):.0f}-{max(reached):.0f}" if len(reached) > 1 else None
            step_spread = f"{min(steps):.0f}-{max(steps):.0f}" if len(steps) > 1 else None
            best = median([r["best"] for r in mine])
            summary[f"{link}/{name}"] = {"time": times[name], "reached": len(reached),
                                         "runs": len(mine), "best": best, "spread": spread}
            sent = [r["bytes_per_worker"] for r in mine if r.get("bytes_per_worker") is not None]
            pace = [r["steps_done"] / r["seconds"] for r in mine if r.get("seconds")]
            rate = median(pace) if pace else None
            rows.append([link, name, times[name], spread,
                         median(steps) if len(steps) == len(mine) else None, best, None,
                         median(sent) / 1e6 if sent else None, rate, step_spread,
                         _predicted(runs, name, link, rate, (simulated or {}).get(name))])
        ref = times[reference] if reference is not None else None
        for row in rows[-len(methods):]:
            row[6] = ref / times[row[1]] if times[row[1]] and ref else None
            summary[f"{link}/{row[1]}"]["ratio"] = row[6]
    return rows, summary


def _predicted(runs: list[dict[str, Any]], name: str, link: str, pace: float | None,
               simulated: float | None = None) -> float | str | None:
    """The time the method's steps to the target and its pace on ``link`` predict. The steps
    are the simulator's (``simulated``, from ``--steps-from``) where given, else the runs'
    own; where every run on ``link`` missed the target, those of the method on another link
    (the same seed takes the same steps whatever the link), the value then ending in ``*``."""
    if not pace:
        return None
    if simulated is not None:
        return simulated / pace
    here = [r for r in runs if r["method"] == name and r["link"] == link]
    steps = [r["steps"] for r in here if r["steps"] is not None]
    if steps and len(steps) == len(here):
        return median(steps) / pace
    elsewhere = [r["steps"] for r in runs if r["method"] == name and r["link"] != link
                 and r["steps"] is not None]
    return f"{median(elsewhere) / pace:.0f}*" if elsewhere and not steps else None


def figures(out: Path, setting: str, runs: list[dict[str, Any]], opts: dict[str, Any]
             ) -> list[str]:
    """The center's test error (a language model's validation loss, also against MB sent)
    against time, one figure per link."""
    plt = pyplot()
    if plt is None:
        return []
    paths = []
    first = min((run["seed"] for run in runs), default=0)  # one seed per figure
    headline = headline_of(opts)
    for link in opts["links"]:
        fig, axes = plt.subplots(1, 2 if headline.by_bytes else 1, squeeze=False,
                                 figsize=(13 if headline.by_bytes else 7, 4.5))
        ax = axes[0][0]
        shown = [run for run in runs
                 if run["link"] == link and run["seed"] == first and run["curve"]]
        for i, run in enumerate(shown):
            # Ten colours, then the same ten dashed: no two methods look alike.
            style = {"marker": ".", "label": run["method"], "color": f"C{i % 10}",
                     "linestyle": "-" if i < 10 else "--"}
            xs, ys = zip(*run["curve"])
            ax.plot(xs, [headline.scale * y for y in ys], **style)
            if headline.by_bytes and run.get("sent_curve"):
                sent, losses = zip(*run["sent_curve"])
                axes[0][1].plot([b / 1e6 for b in sent], losses, **style)
        for panel in axes[0]:
            panel.axhline(headline.scale * headline.falling(opts["target"]),
                          color="grey", linestyle=":", linewidth=1)
            panel.set_ylabel(headline.axis)
            panel.legend(fontsize=8)
            panel.grid(alpha=0.3)
        ax.set(xlabel="training time (s)" + ("" if opts["backend"] == "processes"
                                             else ", simulated"),
               title=f"{setting}: {opts['model']}, link {link}")
        if headline.by_bytes:
            axes[0][1].set(xscale="log", xlabel="MB sent per worker (log scale)",
                           title="against the bytes sent")
        paths.append(str(save(fig, out / f"{setting}-{link}.png")))
    return paths


def headline(result: Result) -> str:
    """The time to the target of every method (rows) on every link (columns), as a
    Markdown table: the README's summary of a time-to-accuracy result."""
    opts, summary = result.data["options"], result.data["summary"]
    headline = headline_of(opts)
    links = list(opts["links"])
    lines = ["| method | " + " | ".join(links) + " |", "|---|" + "---|" * len(links)]
    for name in dict.fromkeys(row[1] for row in result.rows):  # the methods, in order
        cells = [_reached(summary[f"{link}/{name}"], headline) for link in links]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _reached(entry: dict[str, Any], headline: Headline) -> str:
    """A method's cell of :func:`headline`: its time (and spread), or how many seeds reached
    the target, or its best value."""
    if entry["time"] is not None:
        spread = f" [{entry['spread']}]" if entry.get("spread") and entry["runs"] > 2 else ""
        return f"{entry['time']:.0f} s{spread}"
    if entry["reached"]:
        return f"{entry['reached']} of {entry['runs']} seeds"
    return f"never (best {headline.show(entry['best'], 1)})"


def tuning(result: Result) -> str:
    """The tuning runs of a time-to-accuracy result (one seed, the first link), as a
    Markdown table: each method's grid point, its time and steps to the target, its
    best value, steps per second, and which point was chosen."""
    headline = headline_of(result.data["options"])
    lines = ["| method | knobs | time s | steps | best | steps/s | chosen |",
             "|---|---|---|---|---|---|---|"]
    for run in result.data["tuning"]:
        pace = run["steps_done"] / run["seconds"] if run.get("seconds") else math.nan
        cells = [run["method"], ", ".join(f"{key} {value}" for key, value in run["knobs"].items()),
                 "-" if run["time"] is None else f"{run['time']:.1f}",
                 "-" if run["steps"] is None else str(int(run["steps"])),
                 headline.show(run["best"], 2), f"{pace:.2f}",
                 "yes" if result.data["chosen"].get(run["method"]) == run["knobs"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
