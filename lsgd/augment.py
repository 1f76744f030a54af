"""Batched data augmentation on ``[B, C, H, W]`` tensors, one vectorized operation per
batch, reproducible per worker (randomness from an explicit ``torch.Generator``).
The papers' pipelines are presets, applied after the dataset's normalization:

``"cifar-28"``        CNN7, ResNet20 on CIFAR: random 28x28 crop and flip (p=1/2);
                      test on the center 28x28 crop.
``"cifar-32-pad"``    VGG16 on CIFAR: pad 4 with black (``-mean/std`` per channel,
                      as torchvision's pad-before-normalize), random 32x32 crop
                      and flip; test as is.
``"cifar100-32-pad"`` the same with CIFAR-100's black.
``"fashion"``         Fashion-MNIST: identity (the papers state no augmentation).
``"fashion-crop"``    pad 2 with the batch's smallest value, random 28x28 crop.
``"none"``            identity.

ImageNet is augmented while decoding (:class:`lsgd.data.ImageFolder`).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import torch

from lsgd.data import CIFAR100_MEAN, CIFAR100_STD, CIFAR_MEAN, CIFAR_STD

Transform = Callable[..., torch.Tensor]
"""A preset: ``transform(x, generator=None) -> x`` on a ``[B, C, H, W]`` batch."""

#: The preset names :func:`train_transform` and :func:`test_transform` know.
PRESETS = ("cifar-28", "cifar-32-pad", "cifar100-32-pad", "fashion", "fashion-crop", "none")

#: Normalized value of a black CIFAR-10 pixel, per channel.
CIFAR_BLACK = tuple(-m / s for m, s in zip(CIFAR_MEAN, CIFAR_STD))
#: Normalized value of a black CIFAR-100 pixel, per channel.
CIFAR100_BLACK = tuple(-m / s for m, s in zip(CIFAR100_MEAN, CIFAR100_STD))


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else size
    return int(h), int(w)


def _check(x: torch.Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(f"expected a [B, C, H, W] batch, got shape {tuple(x.shape)}")


def _window(x: torch.Tensor, size: int | Sequence[int],
            padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """``(h, w, ph, pw)`` of a ``size`` window in the images padded by ``padding``, if it fits."""
    _check(x)
    (h, w), (ph, pw) = _pair(size), _pair(padding)
    height, width = x.shape[2] + 2 * ph, x.shape[3] + 2 * pw
    if h > height or w > width:
        images = "padded images" if ph or pw else "images"
        raise ValueError(f"crop {h}x{w} larger than the {images} ({height}x{width})")
    return h, w, ph, pw


def _randint(high: int, n: int, generator: torch.Generator | None,
             device: torch.device) -> torch.Tensor:
    """``n`` integers in ``[0, high)`` from ``generator`` (on its own device), on ``device``."""
    where = generator.device if generator is not None else device
    return torch.randint(high, (n,), generator=generator, device=where).to(device)


def _coin(n: int, p: float, generator: torch.Generator | None,
          device: torch.device) -> torch.Tensor:
    where = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=where).to(device) < p


def pad(x: torch.Tensor, padding: int | Sequence[int],
        fill: float | Sequence[float] = 0.0) -> torch.Tensor:
    """Pad a batch's images by ``padding`` (an int or ``(vertical, horizontal)``) with
    ``fill`` (a constant or one value per channel): a :func:`crop` of the whole padded image."""
    _check(x)
    ph, pw = _pair(padding)
    if ph < 0 or pw < 0:
        raise ValueError(f"padding must be non-negative, got {padding}")
    zeros = torch.zeros(x.shape[0], dtype=torch.long)
    return crop(x, zeros, zeros, (x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), padding=(ph, pw),
                fill=fill)


def crop(x: torch.Tensor, top: torch.Tensor, left: torch.Tensor, size: int | Sequence[int],
         flip: torch.Tensor | None = None, padding: int | Sequence[int] = 0,
         fill: float | Sequence[float] = 0.0) -> torch.Tensor:
    """Image ``i`` of the batch cut to ``x[i, :, top[i]:top[i]+h, left[i]:left[i]+w]``,
    mirrored left-right where ``flip[i]``. With ``padding``, ``top``/``left`` are
    coordinates in the padded image, which is never built: one gather for the whole
    batch, the pixels that fall in the border then set to ``fill``."""
    h, w, ph, pw = _window(x, size, padding)
    b, c, height, width = x.shape
    device = x.device
    j = torch.arange(w, device=device).view(1, 1, w)
    if flip is not None:
        j = torch.where(flip.to(device).view(b, 1, 1), (w - 1) - j, j)
    rows = top.to(device).view(b, 1, 1) + torch.arange(h, device=device).view(1, h, 1) - ph
    cols = left.to(device).view(b, 1, 1) + j - pw
    flat = rows.clamp(0, height - 1) * width + cols.clamp(0, width - 1)
    index = flat.view(b, 1, h * w).expand(b, c, h * w)
    out = x.reshape(b, c, height * width).gather(2, index).view(b, c, h, w)
    if ph == 0 and pw == 0:
        return out
    values = torch.as_tensor(fill, dtype=x.dtype, device=device)
    if values.numel() not in (1, c):
        raise ValueError(f"fill has {values.numel()} values for {c} channels")
    inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    return torch.where(inside.view(b, 1, h, w), out, values.view(1, -1, 1, 1))


def random_crop(x: torch.Tensor, size: int | Sequence[int], padding: int | Sequence[int] = 0,
                generator: torch.Generator | None = None,
                fill: float | Sequence[float] = 0.0, flip: float = 0.0) -> torch.Tensor:
    """A random ``size`` window of each image (after :func:`pad` by ``padding``/``fill``),
    uniform over all windows (the rows drawn first). ``flip`` > 0 also mirrors each
    window with that probability in the same gather, drawing exactly what a following
    :func:`random_flip` would."""
    h, w, ph, pw = _window(x, size, padding)
    b, _, height, width = x.shape
    top = _randint(height + 2 * ph - h + 1, b, generator, x.device)
    left = _randint(width + 2 * pw - w + 1, b, generator, x.device)
    mirror = _coin(b, flip, generator, x.device) if flip > 0 else None
    return crop(x, top, left, (h, w), mirror, (ph, pw), fill)


def center_crop(x: torch.Tensor, size: int | Sequence[int]) -> torch.Tensor:
    """The central ``size`` window of every image (offsets rounded as torchvision does)."""
    h, w, _, _ = _window(x, size, 0)
    height, width = x.shape[-2:]
    top = int(round((height - h) / 2.0))
    left = int(round((width - w) / 2.0))
    return x[:, :, top : top + h, left : left + w]


def random_flip(x: torch.Tensor, p: float = 0.5,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Mirror each image left-right with probability ``p`` (one draw per image)."""
    _check(x)
    flip = _coin(x.shape[0], p, generator, x.device)
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def _identity(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return x


def _fashion_crop_train(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    background = float(x.min()) if x.numel() else 0.0
    return random_crop(x, x.shape[-2:], padding=2, generator=generator, fill=background)


def _cifar_32_pad_train(x: torch.Tensor, generator: torch.Generator | None = None,
                        black: Sequence[float] = CIFAR_BLACK) -> torch.Tensor:
    return random_crop(x, 32, padding=4, generator=generator, fill=tuple(black), flip=0.5)


_TRAIN: dict[str, Transform] = {
    "cifar-28": lambda x, generator=None: random_crop(x, 28, generator=generator, flip=0.5),
    "cifar-32-pad": _cifar_32_pad_train,
    "cifar100-32-pad": partial(_cifar_32_pad_train, black=CIFAR100_BLACK),
    "fashion": _identity,
    "fashion-crop": _fashion_crop_train,
    "none": _identity}
_TEST: dict[str, Transform] = {**dict.fromkeys(PRESETS, _identity),
                               "cifar-28": lambda x, generator=None: center_crop(x, 28)}


def _preset(table: dict[str, Transform], name: str) -> Transform:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown augmentation {name!r}: choose one of "
                         f"{', '.join(PRESETS)}") from None


def train_transform(name: str) -> Transform:
    """The training pipeline of preset ``name``: ``f(x, generator=None) -> x``."""
    return _preset(_TRAIN, name)


def test_transform(name: str) -> Transform:
    """The evaluation pipeline of preset ``name`` (deterministic): ``f(x) -> x``."""
    return _preset(_TEST, name)


#: Dataset -> the papers' preset for it: for most models, and for VGG.
_PAPER = {"cifar10": ("cifar-28", "cifar-32-pad"), "cifar100": ("cifar-28", "cifar100-32-pad"),
          "fashion-mnist": ("fashion", "fashion")}


def paper_preset(dataset: str, model: str | None = None) -> str:
    """The preset the papers use for ``dataset`` (a :data:`lsgd.data.DATASETS` name) and
    ``model`` (the module's table); ``"none"`` where they use none or, as for ImageNet,
    the dataset augments itself."""
    plain, vgg = _PAPER.get(dataset.lower(), ("none", "none"))
    return vgg if model is not None and model.lower().startswith("vgg") else plain
