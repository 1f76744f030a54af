"""What the models share: weight initialization and argument checks."""

from __future__ import annotations

from torch import nn

from lsgd import _validate


def _init_conv_bn(module: nn.Module, mode: str = "fan_out") -> None:
    """Kaiming-normal convs (ReLU gain), BatchNorm weight 1 and bias 0."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not _validate.is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
