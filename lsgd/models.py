"""The papers' models as plain ``torch.nn`` modules.

Every constructor takes the number of input channels and classes, so one
architecture serves gray (Fashion-MNIST, digits) and colour (CIFAR, ImageNet)
data. ``build_model(name, (C, H, W), classes)`` picks one by name from
:data:`MODELS`:

=============  ==============================================================
``cnn7``       EASGD's 7-layer CNN (Zhang, Choromanska & LeCun, 2015)
``resnet20``   CIFAR ResNet-20, option-A shortcuts (He et al., 2016)
``vgg16``      VGG-16 with BatchNorm, CIFAR variant (Simonyan & Zisserman 2015)
``wrn-28-10``  WideResNet-28-10, pre-activation (Zagoruyko & Komodakis, 2016)
``resnet50``   ImageNet ResNet-50, bottlenecks 3-4-6-3 (He et al., 2016)
``mlp``        a small fully connected network (flatten, Linear/ReLU, Linear)
=============  ==============================================================

No torchvision is needed: everything is written here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CNN7",
    "MLP",
    "MODELS",
    "ResNet20",
    "ResNet50",
    "VGG16",
    "WideResNet",
    "build_model",
    "cnn7",
    "mlp",
    "model_names",
    "resnet20",
    "resnet50",
    "vgg16",
    "wide_resnet",
]


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
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


# --------------------------------------------------------------------------
# CNN7 (EASGD)
# --------------------------------------------------------------------------

CNN7_MIN_SIZE = 24


def _cnn7_feature_size(image_size: int) -> int:
    """Side of cnn7's last feature map for a square ``image_size`` input."""
    s = image_size - 4  # conv 5x5, no padding
    s //= 2  # maxpool 2
    s -= 4  # conv 5x5
    s //= 2  # maxpool 2
    s -= 2  # conv 3x3
    return s


class CNN7(nn.Module):
    """The 7-layer CNN of EASGD (Zhang, Choromanska & LeCun, "Deep learning
    with Elastic Averaging SGD", NeurIPS 2015), used by the Leader SGD papers
    (Teng et al., "Leader Stochastic Gradient Descent", 2019/2020).

    conv 5x5 -> 64, ReLU, maxpool 2; conv 5x5 -> 128, ReLU, maxpool 2;
    conv 3x3 -> 64, ReLU; flatten; linear -> 256; dropout 0.5; linear ->
    classes. No padding, no BatchNorm, PyTorch's default initialization.

    The flatten width is ``64 * s * s`` with ``s`` computed from
    ``image_size`` (``s = 2`` on 28x28, so 256 features); it is kept in
    :attr:`flatten_features`. Inputs smaller than 24x24 leave no feature map
    and raise :class:`ValueError`.
    """

    def __init__(self, in_channels: int, classes: int, image_size: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes, image_size=image_size)
        side = _cnn7_feature_size(image_size)
        if side < 1:
            raise ValueError(
                f"cnn7 needs inputs of at least {CNN7_MIN_SIZE}x{CNN7_MIN_SIZE} "
                f"(two unpadded 5x5 convs, two 2x2 max-pools and an unpadded 3x3 "
                f"conv), got {image_size}x{image_size}"
            )
        self.image_size = image_size
        self.feature_side = side
        self.flatten_features = 64 * side * side
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(128, 64, kernel_size=3),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(self.flatten_features, 256),
            nn.Dropout(0.5),
            nn.Linear(256, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def cnn7(in_channels: int, classes: int, image_size: int) -> CNN7:
    """EASGD's 7-layer CNN (see :class:`CNN7`) for ``image_size`` square inputs."""
    return CNN7(in_channels, classes, image_size)


# --------------------------------------------------------------------------
# ResNet-20 (CIFAR)
# --------------------------------------------------------------------------


class _ShortcutA(nn.Module):
    """Option-A shortcut: stride-2 subsampling and zero-padded channels."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        extra = planes - in_planes
        self.pad_front = extra // 2
        self.pad_back = extra - extra // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad_front, self.pad_back))


class _BasicBlock(nn.Module):
    """Post-activation basic block: conv-BN-ReLU-conv-BN, add, ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module
        if stride != 1 or in_planes != planes:
            self.shortcut = _ShortcutA(in_planes, planes, stride)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for CIFAR (He, Zhang, Ren & Sun, "Deep Residual Learning for
    Image Recognition", CVPR 2016, section 4.2, n = 3).

    3x3 conv -> 16, BN, ReLU; three stages of 3 basic blocks with 16, 32 and
    64 channels (stride 2 at the start of stages 2 and 3); global average
    pool; linear -> classes. Shortcuts are option A (parameter free):
    identity, or stride-2 subsampling with zero-padded channels where the
    shape changes. Kaiming-normal convs. 269,722 parameters for 10 classes.
    Any input size works (padded convs, adaptive pooling).
    """

    def __init__(self, in_channels: int, classes: int, blocks_per_stage: int = 3) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes, blocks_per_stage=blocks_per_stage)
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        in_planes = 16
        for stage, planes in enumerate((16, 32, 64)):
            for i in range(blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(_BasicBlock(in_planes, planes, stride))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)
        _init_conv_bn(self, mode="fan_in")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        return self.fc(torch.flatten(self.pool(out), 1))


def resnet20(in_channels: int, classes: int) -> ResNet20:
    """CIFAR ResNet-20 with option-A shortcuts (see :class:`ResNet20`)."""
    return ResNet20(in_channels, classes)


# --------------------------------------------------------------------------
# VGG-16 (BatchNorm, CIFAR variant)
# --------------------------------------------------------------------------

VGG16_CONFIG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)
VGG16_MIN_SIZE = 32


class VGG16(nn.Module):
    """VGG-16 with BatchNorm, CIFAR variant (Simonyan & Zisserman, "Very Deep
    Convolutional Networks for Large-Scale Image Recognition", ICLR 2015;
    BatchNorm from Ioffe & Szegedy 2015; CIFAR head as in the common
    ``pytorch-vgg-cifar10`` recipe).

    Thirteen 3x3 padded convs, each followed by BN and ReLU, in the stack
    64, 64, M, 128, 128, M, 256 x3, M, 512 x3, M, 512 x3, M (M = 2x2 max-pool);
    adaptive average pool to 1x1 (a no-op on 32x32 inputs, whose feature map
    is already 1x1x512); classifier dropout 0.5, linear 512 -> 512, ReLU,
    dropout 0.5, linear 512 -> 512, ReLU, linear 512 -> classes.
    Kaiming-normal convs. Inputs need to be at least 32x32 (five pools).
    """

    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        layers: list[nn.Module] = []
        channels = in_channels
        for v in VGG16_CONFIG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                assert isinstance(v, int)
                layers += [
                    nn.Conv2d(channels, v, 3, padding=1),
                    nn.BatchNorm2d(v),
                    nn.ReLU(inplace=True),
                ]
                channels = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(512, 512),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(512, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, classes),
        )
        _init_conv_bn(self, mode="fan_out")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] < VGG16_MIN_SIZE or x.shape[-2] < VGG16_MIN_SIZE:
            raise ValueError(
                f"vgg16 needs inputs of at least {VGG16_MIN_SIZE}x{VGG16_MIN_SIZE} "
                f"(five 2x2 max-pools), got {x.shape[-2]}x{x.shape[-1]}"
            )
        out = self.pool(self.features(x))
        return self.classifier(torch.flatten(out, 1))


def vgg16(in_channels: int, classes: int) -> VGG16:
    """VGG-16 with BatchNorm, CIFAR variant (see :class:`VGG16`)."""
    return VGG16(in_channels, classes)


# --------------------------------------------------------------------------
# WideResNet (pre-activation)
# --------------------------------------------------------------------------


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
        out = self.conv1(pre)
        out = self.dropout(F.relu(self.bn2(out)))
        out = self.conv2(out)
        return out + residual


class WideResNet(nn.Module):
    """Wide Residual Network WRN-depth-widen (Zagoruyko & Komodakis, "Wide
    Residual Networks", BMVC 2016), pre-activation blocks.

    3x3 conv -> 16; three stages of ``(depth - 4) / 6`` wide basic blocks
    with 16k, 32k and 64k channels (k = ``widen``; stride 2 at the start of
    stages 2 and 3; 1x1-conv shortcut where the shape changes; optional
    dropout between the two convs); BN, ReLU, global average pool, linear.
    Kaiming-normal convs. WRN-28-10 has 36,479,194 parameters for 10 classes.
    """

    def __init__(
        self,
        in_channels: int,
        classes: int,
        depth: int = 28,
        widen: int = 10,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes, depth=depth, widen=widen)
        if (depth - 4) % 6 != 0 or depth < 10:
            raise ValueError(f"WideResNet depth must be 6n + 4 with n >= 1, got {depth}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        n = (depth - 4) // 6
        widths = (16, 16 * widen, 32 * widen, 64 * widen)
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for stage, planes in enumerate(widths[1:]):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(_WideBlock(in_planes, planes, stride, dropout))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(in_planes)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, classes)
        _init_conv_bn(self, mode="fan_out")
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(self.conv1(x))
        out = F.relu(self.bn(out))
        return self.fc(torch.flatten(self.pool(out), 1))


def wide_resnet(
    in_channels: int,
    classes: int,
    depth: int = 28,
    widen: int = 10,
    dropout: float = 0.0,
) -> WideResNet:
    """WideResNet-depth-widen, pre-activation (see :class:`WideResNet`)."""
    return WideResNet(in_channels, classes, depth=depth, widen=widen, dropout=dropout)


# --------------------------------------------------------------------------
# ResNet-50 (ImageNet)
# --------------------------------------------------------------------------


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
                nn.BatchNorm2d(out_planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 for ImageNet (He, Zhang, Ren & Sun, "Deep Residual Learning
    for Image Recognition", CVPR 2016, table 1), the same layout as
    torchvision's ``resnet50`` (stride on the 3x3 conv, "v1.5").

    7x7 conv stride 2 -> 64, BN, ReLU, 3x3 max-pool stride 2; four stages of
    3, 4, 6, 3 bottleneck blocks (widths 64, 128, 256, 512, expansion 4;
    stride 2 at the start of stages 2-4; 1x1-conv + BN projection
    shortcuts); global average pool; linear 2048 -> classes.
    Kaiming-normal convs. 25,557,032 parameters for 3 channels, 1000 classes.
    """

    def __init__(self, in_channels: int, classes: int) -> None:
        super().__init__()
        _check_positive(in_channels=in_channels, classes=classes)
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages: list[nn.Module] = []
        in_planes = 64
        for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            layer: list[nn.Module] = []
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                layer.append(_Bottleneck(in_planes, planes, stride))
                in_planes = planes * _Bottleneck.expansion
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, classes)
        _init_conv_bn(self, mode="fan_out")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(torch.flatten(self.pool(out), 1))


def resnet50(in_channels: int, classes: int) -> ResNet50:
    """ImageNet ResNet-50 (see :class:`ResNet50`)."""
    return ResNet50(in_channels, classes)


# --------------------------------------------------------------------------
# MLP
# --------------------------------------------------------------------------


class MLP(nn.Module):
    """A multilayer perceptron (Rumelhart, Hinton & Williams, 1986): flatten,
    then ``Linear -> ReLU`` for each width in ``hidden``, then a linear layer
    to ``classes``. PyTorch's default initialization.
    """

    def __init__(self, in_features: int, classes: int, hidden: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        _check_positive(in_features=in_features, classes=classes)
        for h in hidden:
            _check_positive(hidden=h)
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
            width = h
        layers.append(nn.Linear(width, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def mlp(in_features: int, classes: int, hidden: Sequence[int] = (256, 128)) -> MLP:
    """Flatten, ``Linear/ReLU`` per hidden width, Linear (see :class:`MLP`)."""
    return MLP(in_features, classes, hidden)


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------

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


def _build_wrn_28_10(input_shape: InputShape, classes: int) -> nn.Module:
    return wide_resnet(input_shape[0], classes, depth=28, widen=10)


def _build_resnet50(input_shape: InputShape, classes: int) -> nn.Module:
    return resnet50(input_shape[0], classes)


def _build_mlp(input_shape: InputShape, classes: int) -> nn.Module:
    c, h, w = input_shape
    return mlp(c * h * w, classes)


#: Model name -> factory ``(input_shape, classes) -> nn.Module``, with
#: ``input_shape`` = (C, H, W). Use :func:`build_model` to look names up.
MODELS: dict[str, ModelFactory] = {
    "cnn7": _build_cnn7,
    "resnet20": _build_resnet20,
    "vgg16": _build_vgg16,
    "wrn-28-10": _build_wrn_28_10,
    "resnet50": _build_resnet50,
    "mlp": _build_mlp,
}


def model_names() -> list[str]:
    """The registered model names, sorted."""
    return sorted(MODELS)


def build_model(name: str, input_shape: tuple[int, int, int], classes: int) -> nn.Module:
    """Build the model ``name`` for inputs of shape ``(C, H, W)`` and
    ``classes`` outputs.

    Raises :class:`ValueError` for an unknown name (listing the valid ones),
    a malformed shape, or an input too small for the architecture.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(model_names())}")
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape
    ):
        raise ValueError(
            f"input_shape must be three positive ints (C, H, W), got {input_shape!r}"
        )
    _check_positive(classes=classes)
    return MODELS[name]((shape[0], shape[1], shape[2]), classes)
