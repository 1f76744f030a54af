"""Shapes, parameter counts and error messages of lsgd.models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lsgd.models import (
    CNN7,
    MODELS,
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
        "cnn7, mlp, resnet20, resnet50, vgg16, wrn-28-10"
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
