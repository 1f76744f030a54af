"""A learnable Gaussian-prototype task for quick runs."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from lsgd.data.dataset import Dataset


def synthetic(n_train: int = 2048, n_test: int = 512, shape: Sequence[int] = (1, 28, 28),
              classes: int = 10, seed: int = 0, separation: float = 6.0) -> Dataset:
    """A learnable synthetic classification task: class prototypes plus Gaussian noise.

    Each class has a random prototype image (smooth for ``[C, H, W]`` shapes: noise on
    a 1/4-resolution grid, upsampled), two prototypes about ``separation`` noise
    standard deviations apart; an example is its prototype plus standard Gaussian
    noise. Labels are balanced. Deterministic in ``seed``.
    """
    shape = tuple(int(s) for s in shape)
    g = torch.Generator().manual_seed(seed)
    numel = math.prod(shape)
    if len(shape) == 3 and shape[1] >= 4 and shape[2] >= 4:
        c, h, w = shape
        coarse = torch.randn(classes, c, h // 4, w // 4, generator=g)
        protos = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear",
                                                 align_corners=False)
    else:
        protos = torch.randn(classes, *shape, generator=g)
    flat = protos.reshape(classes, -1)
    flat = flat - flat.mean(dim=1, keepdim=True)
    flat = flat / flat.pow(2).mean(dim=1, keepdim=True).sqrt()  # unit RMS per pixel
    # two independent unit-RMS prototypes are ~sqrt(2 * numel) apart
    protos = (flat * (separation / math.sqrt(2 * numel))).reshape(classes, *shape)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = (torch.arange(n) % classes)[torch.randperm(n, generator=g)]
        return protos[y] + torch.randn(n, *shape, generator=g), y

    return Dataset("synthetic", *split(n_train), *split(n_test), num_classes=classes)
