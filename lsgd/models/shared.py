"""What the models share: weight initialization, residual stages and argument checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import nn

from lsgd import _validate


def _init_conv_bn(module: nn.Module, mode: str = "fan_out") -> None:
    """Kaiming-normal convs (ReLU gain) with zero biases; BatchNorm keeps PyTorch's
    weight 1 and bias 0."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def _stages(block: Callable[[int, int, int], nn.Module], in_planes: int,
            stages: Iterable[tuple[int, int]], expansion: int = 1) -> list[list[nn.Module]]:
    """The residual blocks ``block(in_planes, planes, stride)`` of each stage ``(planes,
    blocks)``: stride 2 at the start of every stage after the first; a block puts out
    ``planes * expansion`` channels."""
    out: list[list[nn.Module]] = []
    for stage, (planes, blocks) in enumerate(stages):
        out.append([])
        for i in range(blocks):
            out[-1].append(block(in_planes, planes, 2 if stage > 0 and i == 0 else 1))
            in_planes = planes * expansion
    return out


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not _validate.is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
