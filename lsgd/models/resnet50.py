"""ResNet-50, bottlenecks 3-4-6-3 (He et al., arXiv:1512.03385): ImageNet or CIFAR stem."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lsgd.models.shared import _check_positive, _init_conv_bn, _stages

STEMS = ("imagenet", "cifar")
CIFAR_STEM_MAX_SIZE = 64


def stem_for(height: int, width: int) -> str:
    """The stem for ``height`` x ``width`` inputs: ``"cifar"`` when both sides are
    at most :data:`CIFAR_STEM_MAX_SIZE` (32x32 CIFAR, 64x64 Tiny ImageNet), else
    ``"imagenet"`` (224x224)."""
    return "cifar" if max(height, width) <= CIFAR_STEM_MAX_SIZE else "imagenet"


class _Bottleneck(nn.Module):
    """Bottleneck block: 1x1 reduce, 3x3 (carries the stride), 1x1 expand x4."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != out_planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 (the paper's table 1) laid out as torchvision's ``resnet50`` (stride on
    the 3x3 conv, "v1.5").

    Stem ``"imagenet"``: 7x7 conv stride 2 and 3x3 max-pool stride 2 (224x224 -> 56x56).
    Stem ``"cifar"``: 3x3 conv stride 1, no max-pool, the CIFAR ResNet-50 of e.g.
    kuangliu/pytorch-cifar. Then four stages of 3, 4, 6, 3 bottlenecks (stride 2 at the
    start of stages 2-4; projection shortcuts), global average pool, linear 2048 ->
    classes. Kaiming-normal convs: 25,557,032 parameters for 3 channels, 1000 classes,
    ImageNet stem; 23,520,842 for 3 channels, 10 classes, CIFAR stem.
    """

    def __init__(self, in_channels: int, classes: int, stem: str = "imagenet") -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        if stem not in STEMS:
            raise ValueError(f"ResNet-50 stem must be one of {', '.join(STEMS)}, got {stem!r}")
        self.stem = stem
        imagenet = stem == "imagenet"
        self.conv1 = (nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False) if imagenet
                      else nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False))
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if imagenet else nn.Identity()
        self.bn1 = nn.BatchNorm2d(64)
        stages = _stages(_Bottleneck, 64, [(64, 3), (128, 4), (256, 6), (512, 3)],
                         _Bottleneck.expansion)
        self.layer1, self.layer2, self.layer3, self.layer4 = (
            nn.Sequential(*blocks) for blocks in stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * _Bottleneck.expansion, classes)
        _init_conv_bn(self, mode="fan_out")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last feature map before the pooling, ``[B, 2048, h, w]``."""
        out = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(out))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


resnet50 = ResNet50  # the catalogue's name
