"""CIFAR ResNet-20 with option-A shortcuts (He et al., arXiv:1512.03385)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lsgd.models.shared import _check_positive, _init_conv_bn, _stages


class _ShortcutA(nn.Module):
    """Option-A shortcut: stride-2 subsampling and zero-padded channels."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        extra = planes - in_planes
        self.channel_pad = (0, 0, 0, 0, extra // 2, extra - extra // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, :: self.stride, :: self.stride], self.channel_pad)


class _BasicBlock(nn.Module):
    """Post-activation basic block: conv-BN-ReLU-conv-BN, add, ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        reshapes = stride != 1 or in_planes != planes
        self.shortcut = _ShortcutA(in_planes, planes, stride) if reshapes else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for CIFAR (the paper's section 4.2, n = 3): a 3x3 conv to 16 channels,
    three stages of 3 basic blocks with 16, 32 and 64 channels (stride 2 at the start of
    stages 2 and 3), global average pool, linear. Option-A shortcuts (parameter free),
    Kaiming-normal convs: 269,722 parameters for 10 classes. Any input size works."""

    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages = _stages(_BasicBlock, 16, [(16, 3), (32, 3), (64, 3)])
        self.layers = nn.Sequential(*(block for stage in stages for block in stage))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)
        _init_conv_bn(self, mode="fan_in")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.pool(out), 1))


resnet20 = ResNet20  # the catalogue's name
