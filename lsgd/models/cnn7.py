"""EASGD's 7-layer CNN (Zhang, Choromanska & LeCun, 2015, arXiv:1412.6651)."""

from __future__ import annotations

import torch
from torch import nn

from lsgd.models.shared import _check_positive

CNN7_MIN_SIZE = 24


class CNN7(nn.Module):
    """The 7-layer CNN of EASGD, used by the Leader SGD papers: three unpadded convs (the
    first two max-pooled), a linear layer to 256, dropout 0.5, a linear layer to
    ``classes``; no BatchNorm, PyTorch's default initialization. The flatten width
    :attr:`flatten_features` is ``64 * s * s`` for the last map's side ``s`` (2 on
    28x28); inputs smaller than 24x24 leave no feature map and raise ``ValueError``.
    """

    def __init__(self, in_channels: int, classes: int, image_size: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes, image_size=image_size)
        # unpadded 5x5 conv, 2x2 max-pool, unpadded 5x5 conv, 2x2 max-pool, unpadded 3x3 conv
        side = ((image_size - 4) // 2 - 4) // 2 - 2
        if side < 1:
            raise ValueError(f"cnn7 needs inputs of at least {CNN7_MIN_SIZE}x{CNN7_MIN_SIZE} "
                             f"(two unpadded 5x5 convs, two 2x2 max-pools and an unpadded 3x3 "
                             f"conv), got {image_size}x{image_size}")
        self.flatten_features = 64 * side * side
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(128, 64, kernel_size=3), nn.ReLU(inplace=True))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(self.flatten_features, 256), nn.Dropout(0.5),
            nn.Linear(256, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


cnn7 = CNN7  # the catalogue's name
