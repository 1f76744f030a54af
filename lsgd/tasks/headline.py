"""A task's headline figure, as every table, progress line and figure shows it: the
center's test accuracy (image classification; higher is better) or validation loss in
nats per byte (language modelling; lower is better), each described once as a
:class:`Headline` that callers ask instead of branching on the metric's name.
Torch-free, like :mod:`lsgd.names`: the command line reads it before it has accepted its
arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lsgd.names import TEXT_DATASETS

__all__ = ["ACCURACY", "HEADLINES", "LOSS", "Headline", "best",
           "from_dataset", "is_language", "of_metric", "reaches", "shared"]


@dataclass(frozen=True)
class Headline:
    """The headline figure of the center of one kind of task (see the module docstring)."""

    #: ``"accuracy"`` or ``"loss"``: what summary.json calls it (``metric``).
    metric: str
    #: The metrics.csv column of the center's value.
    column: str
    higher_is_better: bool
    #: A value is a fraction shown as a percent (else nats per byte, shown as they are).
    percent: bool
    #: The progress bar's name of the center's value: ``center acc``, ``val loss``.
    label: str
    #: A table column's word: ``acc`` (center acc, best acc), ``val loss``.
    short: str
    #: The benchmark tables' column of the best value: ``best acc``, ``best loss``.
    best_label: str
    #: What the benchmarks' notes call the center's value.
    what: str
    #: :func:`lsgd.train.run_plots.plot_runs`' default figure of such runs: ``error`` or ``loss``.
    figure: str
    #: The y-axis label of each figure of such runs (``error``, ``loss``).
    axis_labels: Mapping[str, str]
    #: A run folder's own figures of the headline: file name -> figure.
    run_figures: Mapping[str, str]
    #: Whether a benchmark's figure also draws it against the MB each worker sent.
    by_bytes: bool
    #: A valid ``--target``, in words (after ``--target VALUE: ``).
    target_text: str
    #: A benchmark's title: ``{target}`` is the target as :meth:`show` writes it.
    time_to: str
    #: The comparison table's common value: the one every method reached.
    common_text: str

    @property
    def axis(self) -> str:
        """The y-axis label of the default figure (:attr:`figure`)."""
        return self.axis_labels[self.figure]

    @property
    def scale(self) -> int:
        """What a value is multiplied by where it is drawn: 100 for a percent."""
        return 100 if self.percent else 1

    def show(self, value: float, places: int | None = None) -> str:
        """``value`` as the tables write it: an accuracy as a percent with ``places``
        decimals, a loss with three (a thousandth of a nat); with ``places`` None, the
        shortest form of either (``86%``, ``2.1``)."""
        if self.percent:
            return f"{100 * value:g}%" if places is None else f"{100 * value:.{places}f}%"
        return f"{value:g}" if places is None else f"{value:.3f}"

    def falling(self, value: float) -> float:
        """``value`` as a curve that falls as a run improves: an accuracy's error
        (``1 - value``), a loss itself."""
        return 1 - value if self.higher_is_better else value

    def sentence(self, row: Mapping[str, Any]) -> str:
        """The center's value in an evaluation ``row`` (of metrics.csv), as a line of
        the run's progress says it."""
        if self.percent:
            return f"center test accuracy {self.show(row[self.column], 2)}"
        return (f"center validation loss {row[self.column]:.4f} nats/byte "
                f"({row['center_bits_per_byte']:.3f} bits/byte)")

    def target_ok(self, target: float) -> bool:
        """Whether ``target`` is a valid target of the center: an accuracy in (0, 1],
        a finite loss above 0."""
        if isinstance(target, bool) or not isinstance(target, (int, float)):
            return False
        return 0 < target <= 1 if self.percent else 0 < target < math.inf


ACCURACY = Headline(
    metric="accuracy", column="center_accuracy", higher_is_better=True, percent=True,
    label="center acc", short="acc", best_label="best acc",
    what="center accuracy", figure="error",
    axis_labels={"error": "test error of the center (%)", "loss": "test loss of the center"},
    run_figures={"test_error.png": "error", "test_loss.png": "loss"}, by_bytes=False,
    target_text="a test accuracy in (0, 1], e.g. 0.88",
    time_to="Time to {target} test accuracy of the center",
    common_text="the lowest of the methods' best accuracies")
LOSS = Headline(
    metric="loss", column="center_loss", higher_is_better=False, percent=False,
    label="val loss", short="val loss", best_label="best loss",
    what="validation loss of the center", figure="loss",
    axis_labels={"error": "next-byte error of the center (%)",
                 "loss": "validation loss of the center (nats/byte)"},
    run_figures={"validation_loss.png": "loss"}, by_bytes=True,
    target_text="a validation loss in nats per byte, a finite number > 0 (e.g. 1.5)",
    time_to="Time to a validation loss of {target} nats per byte (the center)",
    common_text="the highest of the methods' lowest validation losses (nats per byte)")

_BY_METRIC = {headline.metric: headline for headline in (ACCURACY, LOSS)}
#: What a task's headline is: metrics.csv's column (of the center), and its direction.
HEADLINES = {name: (h.column, h.higher_is_better) for name, h in _BY_METRIC.items()}


def of_metric(metric: str | None) -> Headline:
    """The headline called ``metric`` (a task's, a summary's ``metric``); ``None`` (a
    summary written before runs said) is the test accuracy."""
    if metric is None:
        return ACCURACY
    try:
        return _BY_METRIC[metric]
    except KeyError:
        raise ValueError(f"unknown headline metric {metric!r}; choose one of "
                         f"{', '.join(_BY_METRIC)}") from None


def is_language(dataset: str) -> bool:
    """Whether ``dataset`` trains a language model (a text dataset: byte tokens)."""
    return str(dataset).lower() in TEXT_DATASETS


def from_dataset(dataset: str) -> Headline:
    """The headline of the runs on ``dataset``: the validation loss of a text dataset's
    language model, else the test accuracy."""
    return LOSS if is_language(dataset) else ACCURACY


def shared(metrics: Iterable[str | None]) -> Headline:
    """The headline to draw several runs by, from their summaries' ``metric``: the
    validation loss if any of them is a language model's, else the test accuracy."""
    return LOSS if any(metric == LOSS.metric for metric in metrics) else ACCURACY


def reaches(metric: str, value: float, target: float) -> bool:
    """Whether ``value`` of the headline ``metric`` is at ``target`` or better (never
    for NaN)."""
    if math.isnan(value):
        return False
    return value >= target if of_metric(metric).higher_is_better else value <= target


def best(metric: str, values: list[float]) -> float:
    """The best of ``values`` for the headline ``metric`` (NaN left out; NaN if none)."""
    pick = max if of_metric(metric).higher_is_better else min
    return pick((v for v in values if not math.isnan(v)), default=math.nan)
