"""A task: what a batch is, the loss, the model, and how a model is measured.

Image classification and language modelling are both next-label prediction: a model
maps inputs to logits ``[..., classes]`` and the targets are ``[...]`` class indices
(an image's label; the next byte at every position of a text window). So one loss and
one evaluation serve both; a task says which figure is its headline and what else its
rows carry.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from lsgd.tasks.headline import Headline, best, of_metric

__all__ = ["Batch", "Sums", "Task", "bits_per_byte", "perplexity"]

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class Sums:
    """An evaluation's totals: summed cross-entropy (nats), correct argmax predictions,
    and predictions made."""

    loss: float = 0.0
    correct: float = 0.0
    count: float = 0.0


class Task(ABC):
    """What is trained and how it is measured (see the module docstring).

    A task holds its data and knows each worker's share of it: batch ``index``
    of ``epoch`` on worker ``rank`` of ``world`` is the same whichever process
    asks, so a worker that restarts or joins reads what it would have read.
    """

    #: ``"classification"`` or ``"language"``.
    kind: str = ""
    #: The headline figure of the center: ``"accuracy"`` (higher is better) or ``"loss"``.
    metric: str = "accuracy"
    #: Batches per epoch of one worker (its shard once through).
    steps_per_epoch: int

    @property
    def headline(self) -> Headline:
        """How the headline figure reads (:mod:`lsgd.tasks.headline`)."""
        return of_metric(self.metric)

    @property
    def higher_is_better(self) -> bool:
        return self.headline.higher_is_better

    @property
    def column(self) -> str:
        """The metrics.csv column of the headline figure of the center."""
        return self.headline.column

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A new model for this task (seed torch first: the same model on every worker)."""

    @abstractmethod
    def train_batch(self, rank: int, world: int, epoch: int, index: int,
                    generator: torch.Generator) -> Batch:
        """Worker ``rank``'s batch ``index`` of ``epoch``, on the task's device;
        ``generator`` draws its randomness (augmentation, text windows)."""

    @abstractmethod
    def eval_batches(self, part: int = 0, parts: int = 1) -> Iterator[Batch]:
        """The evaluation set, or its ``part``-th of ``parts`` interleaved slices."""

    @abstractmethod
    def describe(self) -> str:
        """One line for the run's notes: the data, its split, the model's size."""

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy over every prediction of the batch."""
        return F.cross_entropy(output.flatten(0, -2), target.flatten())

    @torch.no_grad()
    def evaluate(self, model: nn.Module, part: int = 0, parts: int = 1) -> Sums:
        """``model``'s sums on a slice of the evaluation set, in eval mode (the mode it
        had is restored)."""
        was_training = model.training
        model.eval()
        sums = Sums()
        for x, y in self.eval_batches(part, parts):
            out = model(x).flatten(0, -2)
            y = y.flatten()
            sums.loss += float(F.cross_entropy(out, y, reduction="sum"))
            sums.correct += int((out.argmax(-1) == y).sum())
            sums.count += y.numel()
        model.train(was_training)
        return sums

    def columns(self, who: str, loss: float, accuracy: float) -> dict[str, float]:
        """A model's row entries (``who``: center, leader, worker3) from its mean loss and
        accuracy; a task may add figures derived from them."""
        return {f"{who}_loss": loss, f"{who}_accuracy": accuracy}

    def summary(self, rows: list[dict[str, float]]) -> dict[str, object]:
        """What summary.json says of the task: its kind, the headline metric, and the
        center's best value of it over the evaluation ``rows``."""
        return {"task": self.kind, "metric": self.metric,
                "best": best(self.metric, [row[self.column] for row in rows])}


def bits_per_byte(nats: float) -> float:
    """A byte-level loss in nats per byte as bits per byte."""
    return nats / math.log(2)


def perplexity(nats: float) -> float:
    """``exp(loss)``; infinite past what a float holds, NaN for NaN (nothing evaluated)."""
    return math.inf if nats >= 700 else math.exp(nats)
