"""Shapes, parameter counts and error messages of lsgd.models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lsgd.models import (
    CNN7,
    MODELS,
    ResNet50,
    build_model,
    cnn7,
    mlp,
    resnet20,
    resnet50,
    vgg16,
    wide_resnet,
)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def wrn_cifar10() -> nn.Module:
    return build_model("wrn-28-10", (3, 32, 32), 10)


@pytest.fixture(scope="module")
def resnet50_imagenet() -> nn.Module:
    return build_model("resnet50", (3, 224, 224), 1000)


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "name, shape, classes, batch",
    [
        ("cnn7", (1, 28, 28), 10, 4),  # Fashion-MNIST
        ("cnn7", (3, 28, 28), 10, 4),  # CIFAR-10, 28x28 crop
        ("resnet20", (3, 32, 32), 10, 4),
        ("resnet20", (3, 32, 32), 100, 4),
        ("resnet20", (3, 28, 28), 10, 4),  # CIFAR 28x28 crop
        ("vgg16", (3, 32, 32), 10, 2),
        ("vgg16", (3, 32, 32), 100, 2),
        ("vgg16", (3, 40, 40), 10, 2),  # adaptive pool: larger inputs work
        ("resnet50", (3, 32, 32), 10, 2),  # CIFAR stem
        ("resnet50", (3, 28, 28), 100, 2),  # CIFAR stem, 28x28 crop
        ("wrn-16-4", (3, 32, 32), 10, 2),
        ("wrn-16-4", (3, 32, 32), 100, 2),
        ("mlp", (1, 8, 8), 10, 4),  # scikit-learn digits
        ("mlp", (1, 28, 28), 10, 4),
    ],
)
def test_output_shape(name: str, shape: tuple[int, int, int], classes: int, batch: int) -> None:
    model = build_model(name, shape, classes)
    with torch.no_grad():
        out = model(torch.randn(batch, *shape))
    assert out.shape == (batch, classes)
    assert torch.isfinite(out).all()


def test_wrn_output_shape(wrn_cifar10: nn.Module) -> None:
    with torch.no_grad():
        out = wrn_cifar10(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    wrn100 = wide_resnet(3, 100)
    with torch.no_grad():
        assert wrn100(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def test_resnet50_output_shape(resnet50_imagenet: nn.Module) -> None:
    # Built for (3, 224, 224); adaptive pooling lets a 64x64 input through.
    with torch.no_grad():
        out = resnet50_imagenet(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 1000)
    small = resnet50(1, 10)
    with torch.no_grad():
        assert small(torch.randn(2, 1, 64, 64)).shape == (2, 10)


# ---------------------------------------------------------------- counts


def test_cnn7_param_count_by_hand() -> None:
    # 28x28 gray input, 10 classes:
    conv1 = 1 * 64 * 5 * 5 + 64  # 1,664
    conv2 = 64 * 128 * 5 * 5 + 128  # 204,928
    conv3 = 128 * 64 * 3 * 3 + 64  # 73,792
    fc1 = (64 * 2 * 2) * 256 + 256  # 65,792
    fc2 = 256 * 10 + 10  # 2,570
    expected = conv1 + conv2 + conv3 + fc1 + fc2
    assert expected == 348_746
    assert n_params(cnn7(1, 10, 28)) == expected
    # RGB only changes conv1: 3 * 64 * 25 + 64 = 4,864.
    assert n_params(cnn7(3, 10, 28)) == expected - conv1 + (3 * 64 * 25 + 64)


def test_resnet20_param_count() -> None:
    # Option-A shortcuts are parameter free: 269,722 for CIFAR-10 ("0.27M").
    model = resnet20(3, 10)
    assert n_params(model) == 269_722
    assert not any(
        isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) for m in model.modules()
    )
    # 100 classes adds 90 * (64 + 1) = 5,850.
    assert n_params(resnet20(3, 100)) == 269_722 + 90 * 65


def test_resnet50_param_count(resnet50_imagenet: nn.Module) -> None:
    assert n_params(resnet50_imagenet) == 25_557_032  # torchvision's resnet50


def test_wrn_28_10_param_count(wrn_cifar10: nn.Module) -> None:
    assert n_params(wrn_cifar10) == 36_479_194  # "36.5M"


def _wrn_params_by_hand(depth: int, widen: int, classes: int, channels: int = 3) -> int:
    # 3x3 stem conv to 16; per block BN-conv3x3-BN-conv3x3 (+ 1x1 conv shortcut where
    # the width changes); final BN and linear.
    n = (depth - 4) // 6
    total, c_in = channels * 16 * 9, 16
    for width in (16 * widen, 32 * widen, 64 * widen):
        for _ in range(n):
            total += 2 * c_in + c_in * width * 9 + 2 * width + width * width * 9
            if c_in != width:
                total += c_in * width
            c_in = width
    return total + 2 * c_in + c_in * classes + classes


def test_wrn_by_name_param_counts(wrn_cifar10: nn.Module) -> None:
    assert _wrn_params_by_hand(28, 10, 10) == 36_479_194
    wrn16 = build_model("wrn-16-4", (3, 32, 32), 10)
    assert n_params(wrn16) == _wrn_params_by_hand(16, 4, 10) == 2_748_890  # "2.7M"
    assert n_params(build_model("wrn-40-2", (3, 32, 32), 10)) == 2_243_546  # "2.2M"
    assert n_params(build_model("wrn-16-4", (3, 32, 32), 100)) == 2_748_890 + 90 * 257
    # wrn-D-K is the same network as wide_resnet(depth=D, widen=K)
    assert n_params(wide_resnet(3, 10, depth=16, widen=4)) == 2_748_890
    blocks = [m for m in wrn16.modules() if type(m).__name__ == "_WideBlock"]
    assert len(blocks) == 3 * 2 and blocks[-1].conv2.out_channels == 64 * 4


@pytest.mark.parametrize("name, depth", [("wrn-30-2", 30), ("wrn-4-1", 4), ("wrn-27-10", 27)])
def test_wrn_bad_depth_is_a_clear_error(name: str, depth: int) -> None:
    with pytest.raises(ValueError) as info:
        build_model(name, (3, 32, 32), 10)
    assert str(info.value) == f"wrn depth must be 6n+4, e.g. 16, 22, 28, 40; got {depth}"


def test_wrn_bad_width_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"wrn width .* at least 1; got 0"):
        build_model("wrn-28-0", (3, 32, 32), 10)


# ---------------------------------------------------------------- resnet50 stems


def test_resnet50_cifar_stem_on_32x32() -> None:
    model = build_model("resnet50", (3, 32, 32), 10)
    assert isinstance(model, ResNet50) and model.stem == "cifar"
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert model.conv1.padding == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    model.eval()
    with torch.no_grad():
        # 32 -> 32 (stem) -> 32, 16, 8, 4 (stages 1-4): a 4x4 map, not 1x1
        assert model.features(torch.randn(2, 3, 32, 32)).shape == (2, 2048, 4, 4)
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_resnet50_imagenet_stem_on_224x224(resnet50_imagenet: nn.Module) -> None:
    assert isinstance(resnet50_imagenet, ResNet50) and resnet50_imagenet.stem == "imagenet"
    assert resnet50_imagenet.conv1.kernel_size == (7, 7)
    assert resnet50_imagenet.conv1.stride == (2, 2)
    assert isinstance(resnet50_imagenet.maxpool, nn.MaxPool2d)
    resnet50_imagenet.eval()
    with torch.no_grad():
        # 224 -> 112 (conv) -> 56 (max-pool) -> 56, 28, 14, 7
        assert resnet50_imagenet.features(torch.randn(1, 3, 224, 224)).shape == (1, 2048, 7, 7)


@pytest.mark.parametrize(
    "shape, stem",
    [((3, 28, 28), "cifar"), ((3, 32, 32), "cifar"), ((3, 64, 64), "cifar"),
     ((3, 65, 65), "imagenet"), ((3, 224, 224), "imagenet"), ((1, 32, 32), "cifar")],
)
def test_resnet50_stem_follows_input_size(shape: tuple[int, int, int], stem: str) -> None:
    with torch.device("meta"):
        model = build_model("resnet50", shape, 10)
    assert model.stem == stem  # type: ignore[union-attr]


def test_resnet50_cifar_param_count() -> None:
    model = build_model("resnet50", (3, 32, 32), 10)
    # The standard CIFAR ResNet-50 (e.g. kuangliu/pytorch-cifar): 23,520,842 ("23.5M").
    assert n_params(model) == 23_520_842
    # = torchvision's 25,557,032 with a 3x3 instead of a 7x7 stem conv and 10 classes
    assert 25_557_032 - (7 * 7 - 3 * 3) * 3 * 64 - (1000 - 10) * (2048 + 1) == 23_520_842
    assert n_params(resnet50(3, 10, stem="cifar")) == 23_520_842
    assert n_params(build_model("resnet50", (3, 32, 32), 100)) == 23_520_842 + 90 * 2049


def test_resnet50_unknown_stem_raises() -> None:
    with pytest.raises(ValueError, match=r"stem must be one of imagenet, cifar, got 'tiny'"):
        resnet50(3, 10, stem="tiny")


def test_vgg16_and_mlp_param_counts() -> None:
    # 13 padded 3x3 convs (weights + bias) each with a BatchNorm (2 * width),
    # then 512 -> 512 -> 512 -> classes.
    widths = [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    convs, c_in = 0, 3
    for w in widths:
        convs += c_in * w * 9 + w + 2 * w
        c_in = w
    assert convs == 14_723_136
    assert n_params(vgg16(3, 10)) == convs + 2 * (512 * 512 + 512) + (512 * 10 + 10)
    assert n_params(mlp(64, 10)) == (64 * 256 + 256) + (256 * 128 + 128) + (128 * 10 + 10)
    assert n_params(mlp(64, 10, hidden=())) == 64 * 10 + 10


# ---------------------------------------------------------------- cnn7 details


def test_cnn7_flatten_is_64x2x2_on_28x28() -> None:
    model = cnn7(1, 10, 28)
    assert isinstance(model, CNN7)
    assert model.flatten_features == 64 * 2 * 2
    with torch.no_grad():
        feats = model.features(torch.randn(3, 1, 28, 28))
    assert feats.shape == (3, 64, 2, 2)
    first_linear = next(m for m in model.modules() if isinstance(m, nn.Linear))
    assert first_linear.in_features == 64 * 2 * 2
    # The architecture as written: no padding, no BatchNorm, dropout 0.5.
    assert all(m.padding == (0, 0) for m in model.modules() if isinstance(m, nn.Conv2d))
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == [0.5]


def test_cnn7_flatten_follows_image_size() -> None:
    assert cnn7(3, 10, 32).flatten_features == 64 * 3 * 3
    assert cnn7(1, 10, 24).flatten_features == 64 * 1 * 1  # the minimum
    with torch.no_grad():
        assert cnn7(1, 10, 24)(torch.randn(2, 1, 24, 24)).shape == (2, 10)


def test_cnn7_too_small_raises() -> None:
    with pytest.raises(ValueError, match=r"at least 24x24.*got 23x23"):
        cnn7(1, 10, 23)
    with pytest.raises(ValueError, match=r"cnn7 needs inputs of at least 24x24"):
        build_model("cnn7", (1, 8, 8), 10)


def test_vgg16_too_small_raises() -> None:
    with pytest.raises(ValueError, match=r"vgg16 needs inputs of at least 32x32"):
        build_model("vgg16", (3, 28, 28), 10)


# ---------------------------------------------------------------- registry


def test_registry_names() -> None:
    assert set(MODELS) == {"cnn7", "resnet20", "vgg16", "wrn-28-10", "resnet50", "mlp"}


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        build_model("resnet18", (3, 32, 32), 10)
    assert str(info.value) == (
        "unknown model 'resnet18'; choose one of "
        "cnn7, mlp, resnet20, resnet50, vgg16, wrn-28-10, or wrn-D-K (D = 6n+4, K >= 1)"
    )


@pytest.mark.parametrize("shape", [(3, 32), (0, 32, 32), (3, 32, 32, 1)])
def test_bad_input_shape_raises(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="input_shape"):
        build_model("resnet20", shape, 10)  # type: ignore[arg-type]


# ---------------------------------------------------------------- training


@pytest.mark.parametrize(
    "name, shape", [("cnn7", (1, 28, 28)), ("resnet20", (3, 32, 32))]
)
def test_backward_reaches_every_parameter(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, shape, 10)
    model.train()
    x = torch.randn(4, *shape)
    y = torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
    assert any(p.grad.abs().sum() > 0 for p in model.parameters())
