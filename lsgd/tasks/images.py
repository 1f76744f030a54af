"""Image classification: images and labels, a model of :mod:`lsgd.models`, test accuracy."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from lsgd import augment
from lsgd import data as datasets
from lsgd.models import build_model
from lsgd.tasks.task import Batch, Task

EVAL_BATCH = 1000


class ImageClassification(Task):
    """Labelled images (in memory, or an ImageNet-style folder decoded lazily).

    Each epoch every worker takes its exclusive share of one permutation of the training
    examples (:func:`lsgd.data.shard`), in batches of ``batch_size`` (drop-last), each
    augmented with the preset ``augment_preset`` (``"auto"``: the papers' choice for the
    dataset and model).
    """

    kind = "classification"
    metric = "accuracy"

    def __init__(self, data: datasets.Dataset | datasets.ImageFolder, *, dataset: str,
                 model: str, augment_preset: str = "auto", batch_size: int = 128,
                 workers: int = 1, seed: int = 0, device: torch.device | None = None) -> None:
        self.data, self.model_name = data, model
        self.device = device or torch.device("cpu")
        self.in_memory = isinstance(data, datasets.Dataset)
        self.preset = (augment.paper_preset(dataset, model) if augment_preset == "auto"
                       else augment_preset)
        self.train_fn = augment.train_transform(self.preset)
        self.test_fn = augment.test_transform(self.preset)
        self.batch_size, self.seed = batch_size, seed
        self.n_train, self.n_test = len(data.train_y), len(data.test_y)
        self.classes: int = data.classes
        self.steps_per_epoch = image_steps_per_epoch(self.n_train, workers, batch_size)
        self._order: tuple[tuple[int, int, int], torch.Tensor] | None = None

    def input_shape(self) -> tuple[int, int, int]:
        """The shape of an image as the model sees it (after the test transform)."""
        if not self.in_memory:
            return tuple(self.data.input_shape)  # type: ignore[return-value]
        return tuple(self.test_fn(self.data.test_x[:1]).shape[1:])  # type: ignore[return-value]

    def build_model(self) -> nn.Module:
        return build_model(self.model_name, self.input_shape(), self.classes)

    def order(self, rank: int, world: int, epoch: int) -> torch.Tensor:
        """Worker ``rank``'s examples of ``epoch`` in the order it reads them (kept for
        the epoch)."""
        key = (rank, world, epoch)
        if self._order is None or self._order[0] != key:
            self._order = (key, datasets.shard(self.n_train, rank, world, epoch, self.seed))
        return self._order[1]

    def train_batch(self, rank: int, world: int, epoch: int, index: int,
                    generator: torch.Generator) -> Batch:
        idx = self.order(rank, world, epoch)[index * self.batch_size:
                                             (index + 1) * self.batch_size]
        if not self.in_memory:
            x, y = self.data.load(idx, train=True, generator=generator)
        else:
            x, y = self.train_fn(self.data.train_x[idx], generator), self.data.train_y[idx]
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def eval_batches(self, part: int = 0, parts: int = 1) -> Iterator[Batch]:
        for idx in torch.arange(part, self.n_test, parts).split(EVAL_BATCH):
            if not self.in_memory:
                x, y = self.data.load(idx, train=False)
            else:
                x, y = self.test_fn(self.data.test_x[idx]), self.data.test_y[idx]
            yield x.to(self.device), y.to(self.device)

    def describe(self) -> str:
        return (f"{self.n_train} training and {self.n_test} test images of shape "
                f"{self.input_shape()}, {self.classes} classes")


def image_steps_per_epoch(n_train: int, workers: int, batch_size: int) -> int:
    """Batches in one worker's shard (drop-last); ``ValueError`` if there are none."""
    steps = n_train // workers // batch_size
    if steps == 0:
        raise ValueError(f"batch_size={batch_size} is larger than a worker's shard "
                         f"({n_train // workers} examples); lower it or use fewer workers")
    return steps
