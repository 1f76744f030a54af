"""ImageNet-style image folders, decoded lazily with Pillow (``lsgd[imagenet]``)."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from lsgd.data.dataset import normalize

#: The usual ImageNet normalization, on the [0, 1] pixel scale.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".ppm", ".bmp", ".webp")


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("Image-folder datasets (ImageNet) decode images with Pillow, which is "
                          "not installed: pip install 'lsgd[imagenet]' (or pip install "
                          "pillow).") from err
    return Image


def _list_split(folder: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    names = sorted(d.name for d in folder.iterdir() if d.is_dir())
    samples = [(path, label) for label, name in enumerate(names)
               for path in sorted((folder / name).iterdir())
               if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()]
    return names, samples


# uniforms per image of the training transform: 10 tries x 2, the crop's place, the flip
_RRC_TRIES = 10
_UNIFORMS = 2 * _RRC_TRIES + 3


class ImageFolder:
    """An image-folder dataset (ImageNet layout) decoded lazily with Pillow.

    ``root`` (or its ``imagenet/``) holds ``train/<class>/*.JPEG`` and
    ``val/<class>/*.JPEG``; :meth:`load` decodes a batch with the papers' ResNet-50
    transforms (so ``augment`` is ``"none"``): for training torchvision's random-resized
    crop resized to ``size`` and a flip with probability 1/2; for evaluation the
    shorter side resized to ``resize``, then the central ``size`` crop.
    """

    augment = "none"

    def __init__(self, root: str | os.PathLike[str], size: int = 224, resize: int = 256,
                 threads: int = 0, name: str = "imagenet") -> None:
        _pil()
        self.root = base = imagenet_dir(root)
        self.name, self.size, self.resize, self.threads = name, int(size), int(resize), int(threads)
        self.class_names, self.train_samples = _list_split(base / "train")
        index = {n: i for i, n in enumerate(self.class_names)}
        val_names, val_samples = _list_split(base / "val")
        unknown = sorted(set(val_names) - set(index))
        if unknown:
            raise ValueError(f"{base}/val has classes not in train/: {unknown[:5]}")
        self.test_samples = [(p, index[val_names[label]]) for p, label in val_samples]
        if not self.train_samples:
            raise FileNotFoundError(f"no images under {base}/train/<class>/")
        self.train_y = torch.tensor([label for _, label in self.train_samples], dtype=torch.int64)
        self.test_y = torch.tensor([label for _, label in self.test_samples], dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.train_samples)

    def __repr__(self) -> str:
        return (f"ImageFolder({str(self.root)!r}, {len(self.train_samples)} train, "
                f"{len(self.test_samples)} val, {self.classes} classes, size={self.size})")

    @property
    def classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (3, self.size, self.size)

    def num_samples(self, train: bool = True) -> int:
        return len(self.train_samples if train else self.test_samples)

    def load(self, indices: Sequence[int] | torch.Tensor, train: bool = True,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``indices`` of the training (``train``) or val split, decoded and
        transformed (float32 ``[len(indices), 3, size, size]``), and their int64 labels.
        The training transform's uniforms are drawn from ``generator`` up front, so
        the result is the same with or without ``threads``."""
        idx = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor) else indices)]
        samples = self.train_samples if train else self.test_samples
        draws = (torch.rand(len(idx), _UNIFORMS, generator=generator, dtype=torch.float64).tolist()
                 if train else [None] * len(idx))
        jobs = [(samples[i][0], u) for i, u in zip(idx, draws)]
        if self.threads > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(self.threads) as pool:
                arrays = list(pool.map(self._decode, jobs))
        else:
            arrays = [self._decode(job) for job in jobs]
        pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)
        x = normalize(pixels, IMAGENET_MEAN, IMAGENET_STD).contiguous()
        return x, torch.tensor([samples[i][1] for i in idx], dtype=torch.int64)

    def _decode(self, job: tuple[Path, list[float] | None]) -> np.ndarray:
        Image = _pil()
        bilinear = getattr(Image, "Resampling", Image).BILINEAR
        mirror = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT
        path, u = job
        with Image.open(path) as img:
            img = img.convert("RGB")
            width, height = img.size
            if u is not None:
                top, left, h, w = random_resized_crop_params(height, width, u)
                img = img.resize((self.size, self.size), bilinear,
                                 box=(left, top, left + w, top + h))
                if u[-1] < 0.5:
                    img = img.transpose(mirror)
            else:
                new = ((self.resize, int(self.resize * height / width)) if width <= height
                       else (int(self.resize * width / height), self.resize))
                img = img.resize(new, bilinear)
                top = int(round((new[1] - self.size) / 2.0))
                left = int(round((new[0] - self.size) / 2.0))
                img = img.crop((left, top, left + self.size, top + self.size))
            return np.asarray(img, dtype=np.uint8)


def random_resized_crop_params(height: int, width: int, u: Sequence[float],
                               scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3)
                               ) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` as ``(top, left, h, w)`` from the
    uniforms ``u``: (area fraction, log aspect ratio) for each of 10 tries, then the
    crop's position; after 10 failed tries, a central crop clamped to ``ratio``."""
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for t in range(_RRC_TRIES):
        target = area * (scale[0] + (scale[1] - scale[0]) * u[2 * t])
        aspect = math.exp(log_lo + (log_hi - log_lo) * u[2 * t + 1])
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = min(int(u[2 * _RRC_TRIES] * (height - h + 1)), height - h)
            left = min(int(u[2 * _RRC_TRIES + 1] * (width - w + 1)), width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def imagenet_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding ImageNet's ``train/`` and ``val/``, found without reading it:
    ``root`` (default ``$LSGD_DATA``) or its ``imagenet/``; else ``FileNotFoundError``."""
    given = root if root is not None else os.environ.get("LSGD_DATA")
    if given is None:
        raise FileNotFoundError("ImageNet needs a folder holding train/<class>/*.JPEG and "
                                "val/<class>/*.JPEG: lsgd cannot download it; pass --data-dir "
                                "(or set $LSGD_DATA).")
    base = Path(given)
    if not (base / "train").is_dir() and (base / "imagenet" / "train").is_dir():
        base = base / "imagenet"
    missing = [s for s in ("train", "val") if not (base / s).is_dir()]
    if missing:
        raise FileNotFoundError(f"Image folder {base} lacks "
                                f"{' and '.join(s + '/' for s in missing)}: expected "
                                f"{base}/train/<class>/*.JPEG and {base}/val/<class>/*.JPEG. "
                                "lsgd cannot download ImageNet: get it from image-net.org, "
                                "sort val/ into class folders, and pass --data-dir pointing "
                                "at the folder holding train/ and val/.")
    return base


def imagenet(root: str | os.PathLike[str] | None = None, **kwargs: Any) -> ImageFolder:
    """ImageNet as a lazily decoded :class:`ImageFolder` (``root`` default ``$LSGD_DATA``)."""
    return ImageFolder(imagenet_dir(root), **kwargs)
