"""A small fully connected network: flatten, Linear/ReLU layers, Linear."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lsgd.models.shared import _check_positive


class MLP(nn.Module):
    """A multilayer perceptron (Rumelhart, Hinton & Williams, 1986): flatten,
    then ``Linear -> ReLU`` for each width in ``hidden``, then a linear layer
    to ``classes``. PyTorch's default initialization.
    """

    def __init__(self, in_features: int, classes: int, hidden: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        _check_positive(in_features=in_features, classes=classes)
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            _check_positive(hidden=h)
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
            width = h
        layers.append(nn.Linear(width, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


mlp = MLP  # the catalogue's name
