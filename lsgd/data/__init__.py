"""Datasets by name (:func:`load_dataset`), and exclusive per-worker shards.

In memory, normalized (a :class:`Dataset`): Fashion-MNIST, CIFAR-10 / CIFAR-100,
scikit-learn's 8x8 digits and :func:`synthetic`. Text as byte tokens (a
:class:`TextData`): the King James Bible (``kjv``) or any UTF-8 ``text``. Decoded
lazily (an :class:`ImageFolder`): ImageNet. Nothing is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from lsgd.data.cifar import (CIFAR100_MEAN, CIFAR100_STD, CIFAR_MEAN, CIFAR_NORMALIZATION,
                             CIFAR_STD, cifar, cifar_dir)
from lsgd.data.dataset import Dataset, shard
from lsgd.data.imagenet import (IMAGENET_MEAN, IMAGENET_STD, ImageFolder, imagenet,
                                imagenet_dir, random_resized_crop_params)
from lsgd.data.mnist import (DEBIAN_FASHION_MNIST, digits, fashion_mnist, fashion_mnist_dir,
                             read_idx)
from lsgd.data.synthetic import synthetic
from lsgd.data.text import TextData, bible_program, kjv, kjv_cached, text_files, user_text
from lsgd.names import TEXT_DATASETS  # byte tokens, for language models

__all__ = [
    "CIFAR100_MEAN", "CIFAR100_STD", "CIFAR_MEAN", "CIFAR_NORMALIZATION", "CIFAR_STD",
    "DATASETS", "DEBIAN_FASHION_MNIST", "FACTS", "IMAGENET_MEAN", "IMAGENET_STD", "TEXT_DATASETS",
    "Dataset", "ImageFolder", "TextData", "cifar", "cifar_dir", "digits", "fashion_mnist",
    "fashion_mnist_dir", "imagenet", "imagenet_dir", "kjv", "load_dataset", "locate",
    "random_resized_crop_params", "read_idx", "shard", "synthetic", "user_text"]


#: Each image dataset without reading it: an image's shape before augmentation, the classes
#: (ImageNet's from its folder: 1000 stands in) and the training examples (or None).
FACTS: dict[str, tuple[tuple[int, int, int], int, int | None]] = {
    "fashion-mnist": ((1, 28, 28), 10, 60_000),
    "cifar10": ((3, 32, 32), 10, 50_000),
    "cifar100": ((3, 32, 32), 100, 50_000),
    "imagenet": ((3, 224, 224), 1000, None),
    "digits": ((1, 8, 8), 10, 1347),
    "synthetic": ((1, 28, 28), 10, 2048)}

#: The dataset names :func:`load_dataset` knows: images, then text.
DATASETS = (*FACTS, *TEXT_DATASETS)


def locate(name: str, data_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Why :func:`load_dataset` would not find ``name``'s files (looked for, never
    read), or None when they are where it looks (or it needs none)."""
    looks: dict[str, Callable[[], object]] = {
        "fashion-mnist": lambda: fashion_mnist_dir(data_dir),
        "cifar10": lambda: cifar_dir(data_dir, 10), "cifar100": lambda: cifar_dir(data_dir, 100),
        "imagenet": lambda: imagenet_dir(data_dir), "text": lambda: text_files(data_dir),
        "kjv": lambda: kjv_cached() or bible_program()}
    try:
        looks.get(name.lower(), lambda: None)()
    except (FileNotFoundError, ValueError) as error:
        return str(error)
    return None


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None
                 ) -> Dataset | ImageFolder | TextData:
    """The dataset called ``name`` (one of :data:`DATASETS`), read from ``data_dir`` (default
    ``$LSGD_DATA``): the dataset's own folder or a folder holding it."""
    loaders: dict[str, Callable[[], Dataset | ImageFolder | TextData]] = {
        "fashion-mnist": lambda: fashion_mnist(data_dir), "cifar10": lambda: cifar(data_dir, 10),
        "cifar100": lambda: cifar(data_dir, 100), "imagenet": lambda: imagenet(data_dir),
        "digits": digits, "synthetic": synthetic, "kjv": kjv, "text": lambda: user_text(data_dir)}
    if name.lower() not in loaders:
        raise ValueError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    return loaders[name.lower()]()
