"""WideResNet, pre-activation (Zagoruyko & Komodakis, arXiv:1605.07146)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from lsgd import _validate
from lsgd.models.shared import _check_positive, _init_conv_bn, _stages


class _WideBlock(nn.Module):
    """Pre-activation wide basic block: BN-ReLU-conv3x3, [dropout],
    BN-ReLU-conv3x3, plus an identity or 1x1-conv shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        # With a projection the shortcut sees the pre-activated input, as in
        # the authors' code; an identity shortcut carries the raw input.
        residual = x if self.shortcut is None else self.shortcut(pre)
        out = self.dropout(F.relu(self.bn2(self.conv1(pre))))
        return self.conv2(out) + residual


class WideResNet(nn.Module):
    """Wide Residual Network WRN-depth-widen: a 3x3 conv to 16 channels, three stages of
    ``(depth - 4) / 6`` pre-activation wide blocks with 16k, 32k and 64k channels
    (k = ``widen``; stride 2 at the start of stages 2 and 3), BN, ReLU, global average
    pool, linear. Kaiming-normal convs: WRN-28-10 has 36,479,194 parameters for 10 classes.
    """

    def __init__(self, in_channels: int, classes: int, depth: int = 28, widen: int = 10,
                 dropout: float = 0.0) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        if not _validate.is_int(depth) or depth < 10 or (depth - 4) % 6 != 0:
            raise ValueError(f"wrn depth must be 6n+4, e.g. 16, 22, 28, 40; got {depth}")
        if not _validate.is_int(widen) or widen < 1:
            raise ValueError(f"wrn width (widening factor) must be at least 1; got {widen}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        blocks = (depth - 4) // 6
        stages = _stages(partial(_WideBlock, dropout=dropout), 16,
                         [(width * widen, blocks) for width in (16, 32, 64)])
        self.layers = nn.Sequential(*(block for stage in stages for block in stage))
        self.bn = nn.BatchNorm2d(64 * widen)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64 * widen, classes)
        _init_conv_bn(self, mode="fan_out")
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.layers(self.conv1(x))))
        return self.fc(torch.flatten(self.pool(out), 1))


wide_resnet = WideResNet  # the catalogue's name
