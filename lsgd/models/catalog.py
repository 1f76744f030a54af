"""Models by name: ``build_model(name, (C, H, W), classes)``."""

from __future__ import annotations

import re
from collections.abc import Callable

from torch import nn

from lsgd import _validate
from lsgd.models.cnn7 import cnn7
from lsgd.models.shared import _check_positive
from lsgd.models.mlp import mlp
from lsgd.models.resnet20 import resnet20
from lsgd.models.resnet50 import resnet50, stem_for
from lsgd.models.vgg import VGG16_MIN_SIZE, vgg16
from lsgd.models.wide_resnet import wide_resnet

InputShape = tuple[int, int, int]
ModelFactory = Callable[[InputShape, int], nn.Module]


def _square_side(name: str, input_shape: InputShape, minimum: int = 1) -> int:
    _, h, w = input_shape
    if h != w:
        raise ValueError(f"{name} expects square inputs, got {h}x{w}")
    if h < minimum:
        raise ValueError(
            f"{name} needs inputs of at least {minimum}x{minimum}, got {h}x{w}"
        )
    return h


def _build_cnn7(input_shape: InputShape, classes: int) -> nn.Module:
    return cnn7(input_shape[0], classes, _square_side("cnn7", input_shape))


def _build_resnet20(input_shape: InputShape, classes: int) -> nn.Module:
    return resnet20(input_shape[0], classes)


def _build_vgg16(input_shape: InputShape, classes: int) -> nn.Module:
    _, h, w = input_shape
    if min(h, w) < VGG16_MIN_SIZE:
        raise ValueError(
            f"vgg16 needs inputs of at least {VGG16_MIN_SIZE}x{VGG16_MIN_SIZE} "
            f"(five 2x2 max-pools), got {h}x{w}"
        )
    return vgg16(input_shape[0], classes)


#: ``wrn-D-K``: WideResNet of depth D (6n + 4) and widening factor K.
WRN_PATTERN = re.compile(r"wrn-(\d+)-(\d+)")

#: How the WideResNet family is named, for error messages.
WRN_FAMILY = "wrn-D-K (D = 6n+4, K >= 1)"


def parse_wrn(name: str) -> tuple[int, int] | None:
    """``(depth, widen)`` of a ``wrn-D-K`` name, or None when ``name`` is not of
    that form. Raises :class:`ValueError` for a depth that is not 6n + 4 or a
    widening factor below 1."""
    match = WRN_PATTERN.fullmatch(name)
    if match is None:
        return None
    depth, widen = int(match.group(1)), int(match.group(2))
    if depth < 10 or (depth - 4) % 6 != 0:
        raise ValueError(f"wrn depth must be 6n+4, e.g. 16, 22, 28, 40; got {depth}")
    if widen < 1:
        raise ValueError(f"wrn width (widening factor) must be at least 1; got {widen}")
    return depth, widen


def _wrn_factory(depth: int, widen: int) -> ModelFactory:
    def build(input_shape: InputShape, classes: int) -> nn.Module:
        return wide_resnet(input_shape[0], classes, depth=depth, widen=widen)

    return build


def _build_resnet50(input_shape: InputShape, classes: int) -> nn.Module:
    # The CIFAR stem (3x3 stride 1, no max-pool) on small images, ImageNet's on large.
    c, h, w = input_shape
    return resnet50(c, classes, stem=stem_for(h, w))


def _build_mlp(input_shape: InputShape, classes: int) -> nn.Module:
    c, h, w = input_shape
    return mlp(c * h * w, classes)


#: Model name -> factory ``(input_shape, classes) -> nn.Module``, with
#: ``input_shape`` = (C, H, W). Use :func:`build_model` to look names up: it
#: also takes any ``wrn-D-K`` (:data:`WRN_FAMILY`), of which ``wrn-28-10`` is
#: the one listed here.
MODELS: dict[str, ModelFactory] = {
    "cnn7": _build_cnn7,
    "resnet20": _build_resnet20,
    "vgg16": _build_vgg16,
    "wrn-28-10": _wrn_factory(28, 10),
    "resnet50": _build_resnet50,
    "mlp": _build_mlp,
}


def model_names() -> list[str]:
    """The registered model names, sorted."""
    return sorted(MODELS)


def build_model(name: str, input_shape: tuple[int, int, int], classes: int) -> nn.Module:
    """Build the model ``name`` for inputs of shape ``(C, H, W)`` and
    ``classes`` outputs.

    ``name`` is one of :data:`MODELS` or any ``wrn-D-K``: WideResNet-D-K with
    D = 6n + 4 (16, 22, 28, 40, ...) and K >= 1. ``resnet50`` takes the CIFAR
    stem on inputs of at most 64x64 and the ImageNet stem on larger ones.

    Raises :class:`ValueError` for an unknown name (listing the valid ones),
    a ``wrn-D-K`` with a bad depth or width, a malformed shape, or an input too
    small for the architecture.
    """
    factory = MODELS.get(name)
    if factory is None:
        wrn = parse_wrn(name)
        if wrn is None:
            raise ValueError(f"unknown model {name!r}; choose one of "
                             f"{', '.join(model_names())}, or {WRN_FAMILY}")
        factory = _wrn_factory(*wrn)
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(
        _validate.is_int(v) and v >= 1 for v in shape
    ):
        raise ValueError(
            f"input_shape must be three positive ints (C, H, W), got {input_shape!r}"
        )
    _check_positive(classes=classes)
    return factory((shape[0], shape[1], shape[2]), classes)
