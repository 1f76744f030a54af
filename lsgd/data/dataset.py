"""The in-memory dataset, normalization, and exclusive per-worker shards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Dataset:
    """A train/test split held in memory; ``augment``: the papers' :mod:`lsgd.augment`
    preset for it; ``num_classes``: its classes (else the largest training label + 1)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    augment: str = "none"
    num_classes: int | None = None

    @property
    def classes(self) -> int:
        return self.num_classes or int(self.train_y.max()) + 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


def normalize(pixels: torch.Tensor, mean: Sequence[float], std: Sequence[float]
              ) -> torch.Tensor:
    """uint8 ``[N, C, H, W]`` pixels as float32 on the [0, 1] scale, normalized per channel."""
    x = pixels.to(torch.float32).div_(255.0)
    x.sub_(torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
    return x.div_(torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))


def _normalized(name: str, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                test_y: np.ndarray, augment: str = "none",
                num_classes: int | None = None) -> Dataset:
    tx = torch.from_numpy(np.array(train_x, dtype=np.float32))  # a copy of its own
    vx = torch.from_numpy(np.array(test_x, dtype=np.float32))
    mean, std = tx.mean(), tx.std()
    ty, vy = (torch.from_numpy(np.asarray(y, dtype=np.int64)) for y in (train_y, test_y))
    # in place: the same values as (x - mean) / std
    return Dataset(name, tx.sub_(mean).div_(std), ty, vx.sub_(mean).div_(std), vy,
                   augment=augment, num_classes=num_classes)


def shard(n: int, rank: int, world_size: int, epoch: int, seed: int = 0) -> torch.Tensor:
    """This worker's exclusive share of ``range(n)`` for ``epoch``: one permutation per
    epoch (the same on every worker, from ``seed`` and ``epoch``) cut into ``world_size``
    equal parts, the remainder dropped, like ``DistributedSampler(drop_last=True)``."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=generator)
    per_worker = n // world_size
    return order[rank * per_worker : (rank + 1) * per_worker]
