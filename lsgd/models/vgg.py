"""VGG-16 with BatchNorm, CIFAR variant (Simonyan & Zisserman, arXiv:1409.1556)."""

from __future__ import annotations

import torch
from torch import nn

from lsgd.models.shared import _check_positive, _init_conv_bn

VGG16_CONFIG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                       512, 512, 512, "M", 512, 512, 512, "M")
VGG16_MIN_SIZE = 32


def check_vgg16_size(height: int, width: int) -> None:
    """``ValueError`` for inputs smaller than :data:`VGG16_MIN_SIZE` on a side."""
    if min(height, width) < VGG16_MIN_SIZE:
        raise ValueError(f"vgg16 needs inputs of at least {VGG16_MIN_SIZE}x{VGG16_MIN_SIZE} "
                         f"(five 2x2 max-pools), got {height}x{width}")


class VGG16(nn.Module):
    """VGG-16 with BatchNorm (Ioffe & Szegedy, arXiv:1502.03167) and the CIFAR head of
    the common ``pytorch-vgg-cifar10`` recipe: thirteen padded 3x3 conv-BN-ReLU in the
    stack :data:`VGG16_CONFIG` (M = 2x2 max-pool), an adaptive average pool to 1x1 (a
    no-op on 32x32 inputs), then dropout 0.5 and linear-ReLU twice and a linear layer.
    Kaiming-normal convs. Inputs need to be at least 32x32 (five pools).
    """

    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        layers: list[nn.Module] = []
        channels = in_channels
        for v in VGG16_CONFIG:
            if isinstance(v, str):  # "M"
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.BatchNorm2d(v),
                           nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(512, 512), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(512, 512), nn.ReLU(inplace=True),
            nn.Linear(512, classes))
        _init_conv_bn(self, mode="fan_out")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_vgg16_size(x.shape[-2], x.shape[-1])
        out = self.pool(self.features(x))
        return self.classifier(torch.flatten(out, 1))


vgg16 = VGG16  # the catalogue's name
