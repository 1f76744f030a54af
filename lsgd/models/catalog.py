"""Models by name: ``build_model(name, (C, H, W), classes)``."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from torch import nn

from lsgd import _validate
from lsgd.models.cnn7 import CNN7
from lsgd.models.mlp import MLP
from lsgd.models.resnet20 import ResNet20
from lsgd.models.resnet50 import ResNet50, stem_for
from lsgd.models.shared import _check_positive
from lsgd.models.vgg import VGG16, check_vgg16_size
from lsgd.models.wide_resnet import WideResNet

InputShape = tuple[int, int, int]
ModelFactory = Callable[[InputShape, int], nn.Module]

#: ``wrn-D-K``: WideResNet of depth D (6n + 4) and widening factor K.
WRN_PATTERN = re.compile(r"wrn-(\d+)-(\d+)")

#: How the WideResNet family is named, for error messages.
WRN_FAMILY = "wrn-D-K (D = 6n+4, K >= 1)"


def _build_cnn7(input_shape: InputShape, classes: int) -> nn.Module:
    channels, height, width = input_shape
    if height != width:
        raise ValueError(f"cnn7 expects square inputs, got {height}x{width}")
    return CNN7(channels, classes, height)


def _build_vgg16(input_shape: InputShape, classes: int) -> nn.Module:
    check_vgg16_size(input_shape[1], input_shape[2])
    return VGG16(input_shape[0], classes)


def _build_wrn(input_shape: InputShape, classes: int, depth: int, widen: int) -> nn.Module:
    return WideResNet(input_shape[0], classes, depth=depth, widen=widen)


#: Model name -> factory ``(input_shape (C, H, W), classes) -> nn.Module``; look names
#: up with :func:`build_model`, which also takes any ``wrn-D-K`` (:data:`WRN_FAMILY`).
MODELS: dict[str, ModelFactory] = {
    "cnn7": _build_cnn7,
    "resnet20": lambda shape, classes: ResNet20(shape[0], classes),
    "vgg16": _build_vgg16,
    "wrn-28-10": partial(_build_wrn, depth=28, widen=10),
    "resnet50": lambda shape, classes: ResNet50(shape[0], classes, stem=stem_for(*shape[1:])),
    "mlp": lambda shape, classes: MLP(shape[0] * shape[1] * shape[2], classes)}


def build_model(name: str, input_shape: tuple[int, int, int], classes: int) -> nn.Module:
    """The model ``name`` (one of :data:`MODELS`, or any ``wrn-D-K``: WideResNet-D-K with
    D = 6n + 4 and K >= 1) for inputs of shape ``(C, H, W)`` and ``classes`` outputs.

    Raises :class:`ValueError` for an unknown name (listing the valid ones), a
    ``wrn-D-K`` with a bad depth or width, a malformed shape, or an input too small
    for the architecture.
    """
    factory = MODELS.get(name)
    if factory is None:
        wrn = WRN_PATTERN.fullmatch(name)
        if wrn is None:
            raise ValueError(f"unknown model {name!r}; choose one of "
                             f"{', '.join(sorted(MODELS))}, or {WRN_FAMILY}")
        factory = partial(_build_wrn, depth=int(wrn[1]), widen=int(wrn[2]))
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(_validate.is_int(v) and v >= 1 for v in shape):
        raise ValueError(f"input_shape must be three positive ints (C, H, W), got {input_shape!r}")
    _check_positive(classes=classes)
    return factory((shape[0], shape[1], shape[2]), classes)
